"""Fixtures shared by every test folder: a memory factory and a temporary store factory.

Keep this file small and generic; fixtures for one area live in that area's conftest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from support.vectors import diagnostics, make_vector_store, provider

__all__ = ["diagnostics", "make_vector_store", "provider"]  # fixtures for every folder

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def default_model_home() -> Path:
    """A model cache folder holding the prepared default model (prepared here if needed).

    ``$GAME_MEMORY_HOME`` when set (CI sets it, so the model is prepared once per run).
    """
    import os

    from game_memory.onnx import prepare_default_model

    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    home = Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"
    prepare_default_model(home)
    return home


MemoryFactory = Callable[..., GameMemory]
StoreFactory = Callable[..., FileGameMemoryStore]


def build_memory(
    memory_id: str = "memory-1",
    *,
    session_id: str = "session",
    owner_id: str = "owner",
    text: str | None = "a memory",
    tick: int = 1,
    timeline_id: str = "world",
    **fields: Any,
) -> GameMemory:
    """A valid memory with sensible defaults; any field can be overridden by name."""
    values: dict[str, Any] = {
        "memory_id": memory_id,
        "session_id": session_id,
        "owner_id": owner_id,
        "scope": "personal",
        "kind": "fact",
        "payload_json": "{}",
        "moment": GameMoment(timeline_id=timeline_id, tick=tick),
        "searchable_text": text,
    }
    values.update(fields)
    return GameMemory(**values)


@pytest.fixture
def make_memory() -> MemoryFactory:
    """``make_memory("id", owner_id=..., tick=..., text=..., <any GameMemory field>)``."""
    return build_memory


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """``make_store(folder=None, **options)``: open a store (default folder ``tmp/save``).

    Every store opened through the factory is closed when the test ends.
    """
    opened: list[FileGameMemoryStore] = []

    def factory(folder: Path | None = None, **options: Any) -> FileGameMemoryStore:
        store = FileGameMemoryStore(folder if folder is not None else tmp_path / "save", **options)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.aclose()
