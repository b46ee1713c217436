"""Helpers and fixtures of the hybrid-memory tests: a diagnostic sink, queries, a store factory.

The fixtures are registered for every test folder by ``tests/conftest.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameMemory,
    GameMemoryQuery,
    HashingEmbeddingProvider,
    MemoryVectorDiagnostic,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.store.view import PartitionView
from support.providers import FaultyProvider

__all__ = [
    "Diagnostics",
    "MemoryFactory",
    "VectorStoreFactory",
    "file_hashes",
    "owner_view",
    "query",
    "unit_rows",
    "until",
]


class Diagnostics(list[MemoryVectorDiagnostic]):
    """A synchronous diagnostic sink that keeps what it receives."""

    def __call__(self, diagnostic: MemoryVectorDiagnostic) -> None:
        self.append(diagnostic)

    def codes(self) -> list[str]:
        """The codes received, in order."""
        return [diagnostic.code for diagnostic in self]


VectorStoreFactory = Callable[..., VectorMemoryStore]
MemoryFactory = Callable[..., GameMemory]


def query(text: str | None = None, *, limit: int = 10, **fields: Any) -> GameMemoryQuery:
    """A query of session ``"session"`` (the default of ``make_memory``)."""
    return GameMemoryQuery(
        session_id=fields.pop("session_id", "session"), limit=limit, text=text, **fields
    )


async def until(condition: Callable[[], bool], what: str) -> None:
    """Yield to the event loop until ``condition()`` holds (at most about two seconds)."""
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


def owner_view(memories: Sequence[GameMemory]) -> PartitionView:
    """The view a store would hand out for one owner's memories (in append order)."""
    first = memories[0]
    return PartitionView(
        first.session_id,
        first.owner_id,
        tuple(memories),
        {memory.memory_id: index for index, memory in enumerate(memories)},
    )


def unit_rows(
    memories: Sequence[GameMemory], provider: HashingEmbeddingProvider
) -> npt.NDArray[np.float32]:
    """The memories' vectors by ``provider`` (of their text, else their id), unit length."""
    rows = np.stack([provider.embed(m.searchable_text or m.memory_id) for m in memories])
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms == 0, 1, norms)).astype(np.float32)


def file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path → digest)."""
    found: dict[str, str] = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = Path(directory) / name
            found[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def provider() -> FaultyProvider:
    """A deterministic 256-dimension provider ("feline" = "cat"), healthy until told not to be."""
    return FaultyProvider()


@pytest.fixture
def diagnostics() -> Diagnostics:
    return Diagnostics()


@pytest.fixture
async def make_vector_store(
    tmp_path: Path, provider: FaultyProvider, diagnostics: Diagnostics
) -> AsyncIterator[VectorStoreFactory]:
    """``make_vector_store(provider=..., save=..., index=..., **store_options)``.

    Defaults: save ``tmp/save``, index ``tmp/index``, the ``provider`` fixture, the
    ``diagnostics`` sink, no reranker. Keyword ``options`` may be a dict of
    :class:`VectorMemoryStoreOptions` fields. Every store is closed when the test ends; the
    providers are not closed (``dispose_embedding_provider=False``) so a test can reuse one.
    """
    opened: list[VectorMemoryStore] = []

    def factory(
        provider: EmbeddingProvider = provider,
        *,
        save: Path | None = None,
        index: Path | None = None,
        options: dict[str, Any] | None = None,
        **keywords: Any,
    ) -> VectorMemoryStore:
        keywords.setdefault("diagnostics", diagnostics)
        settings = {"dispose_embedding_provider": False, **(options or {})}
        store = VectorMemoryStore(
            FileGameMemoryStore(save or tmp_path / "save"),
            FileVectorMemoryIndex(index or tmp_path / "index"),
            provider,
            options=VectorMemoryStoreOptions(**settings),
            **keywords,
        )
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.aclose()
