"""Helpers shared by the store tests: factory types, legacy saves, store internals on disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from game_memory import FileGameMemoryStore, GameMemory
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

__all__ = [
    "DATA",
    "MemoryFactory",
    "StoreFactory",
    "files_under",
    "legacy_name",
    "log_path",
    "session_folder",
    "write_legacy",
]

StoreFactory = Callable[..., FileGameMemoryStore]
MemoryFactory = Callable[..., GameMemory]
DATA = ".game-memory"


def legacy_name(memory: GameMemory) -> str:
    """The reference's flat v1 file name: sha256(session \\n owner \\n id) + .memory.json."""
    key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
    return identity_hash(key) + ".memory.json"


def write_legacy(folder: Path, memory: GameMemory, data: bytes | None = None) -> Path:
    """Write one flat legacy document as the C# runtime does (or ``data`` under its name)."""
    path = folder / legacy_name(memory)
    folder.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_legacy_document(memory) if data is None else data)
    return path


def session_folder(save: Path, session_id: str) -> Path:
    """The store's folder of one session."""
    return save / DATA / f"s-{identity_hash(session_id)}"


def log_path(save: Path, session_id: str, owner_id: str, segment: int = 0) -> Path:
    """The path of one log segment of an owner partition."""
    suffix = "" if segment == 0 else f".{segment}"
    return session_folder(save, session_id) / f"o-{identity_hash(owner_id)}{suffix}.log"


def files_under(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` (relative path → bytes), for before/after checks."""
    found: dict[str, bytes] = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = Path(directory) / name
            found[str(path.relative_to(folder))] = path.read_bytes()
    return found
