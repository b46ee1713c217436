"""Copy a save folder into PostgreSQL: ``game-memory migrate --to-database DSN --save-dir DIR``.

The folder is read partition by partition, without its lock (readers never need it), and
each partition is appended to the database in batches with ``append_many``: one
transaction per batch, equivalent memories already there skipped. So the copy is
**idempotent** (a second run adds nothing), **resumable** (after an interruption, a rerun
skips what landed and continues), and refuses an id the database holds with other content
(``MemoryConflictError``, naming it). A legacy (reference v1) folder is first brought into
the current layout, as opening it would, and an erase or compaction a crash left
unfinished is finished. The partitions' retractions (``forget``) are copied after their
memories (idempotent too). Only the authoritative memories are copied: vectors are derived
data, rebuilt on the database side (``game-memory rebuild``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from game_memory.errors import PersistenceError
from game_memory.model import GameMemory, GameMoment
from game_memory.postgres.store import PostgresGameMemoryStore
from game_memory.store.engine import StoreEngine
from game_memory.store.migration import has_legacy_layout, migrate_legacy_layout

__all__ = ["CopyReport", "copy_save"]

_SESSION = re.compile(r"^s-[0-9a-f]{64}$")
_BATCH = 1_000


@dataclass(frozen=True, slots=True)
class CopyReport:
    """What a copy did: memories read from the folder, added, and already in the database."""

    read: int
    added: int
    sessions: frozenset[str]

    @property
    def already_there(self) -> int:
        return self.read - self.added


def _open(folder: Path) -> StoreEngine:
    """The engine of the save in ``folder``, which must hold one (a current or a legacy
    save): a mistyped path is refused, never created as an empty save to copy.

    Raises:
        PersistenceError: no save there ("there is no save at ..."), or it is unsafe or
            damaged.
    """
    if not os.path.lexists(folder):  # a link is refused by open_layout, naming it
        raise PersistenceError(
            f"there is no save at {folder}: the folder does not exist. Check the path of the "
            "save to copy (--save-dir); the copy reads a save, it never creates one"
        )
    engine = StoreEngine(
        folder,
        maximum_entries=1_000_000,
        maximum_file_bytes=1_000_000_000,
        lock_timeout=30.0,
        cache_entries=_BATCH * 4,
    )
    engine.open_layout(create=False)
    if has_legacy_layout(folder):
        migrate_legacy_layout(engine)
    with engine.locked():
        engine.finish_rewrite()
    return engine


Batch = tuple[list[GameMemory], list[tuple[str, GameMoment]]]


def _batches(engine: StoreEngine) -> Iterator[Batch]:
    """The folder's memories, one partition at a time, in batches (append order); a
    partition's last batch carries its retractions."""
    with os.scandir(engine.data) as listing:
        sessions = sorted(entry.name[2:] for entry in listing if _SESSION.match(entry.name))
    for session_hash in sessions:
        for owner_hash in engine.cache.owner_hashes(engine.session_folder(session_hash)):
            view = engine.read_partition(session_hash, owner_hash).view
            engine.cache.forget(session_hash, owner_hash)  # bounded: one partition at a time
            if view is None:
                continue
            for start in range(0, len(view.memories), _BATCH):
                last = start + _BATCH >= len(view.memories)
                retractions = list(view.retractions) if last else []
                yield list(view.memories[start : start + _BATCH]), retractions


async def copy_save(
    folder: str | os.PathLike[str],
    store: PostgresGameMemoryStore,
    *,
    progress: Callable[[int, int], object] | None = None,
) -> CopyReport:
    """Copy every memory of the save ``folder`` into ``store``; see the module docstring.

    ``progress(done, total)`` is called before the first batch and after each (it may be
    async). The folder is not changed, except that a legacy layout is migrated first; a
    folder without a save is refused before ``store`` is used, and nothing is created.

    Raises:
        PersistenceError: there is no save in ``folder`` (or no folder), the folder is
            damaged or unsafe, or the database unreachable.
        MemoryConflictError: the database holds one of the ids with other content (the
            batches before it stay copied; rerun after resolving it).
    """
    root = Path(os.path.abspath(os.fspath(folder)))
    engine = await asyncio.to_thread(_open, root)
    total = await asyncio.to_thread(engine.ledger.count)
    batches = _batches(engine)
    done = added = 0
    sessions: set[str] = set()
    await _notify(progress, 0, total)
    while True:
        found = await asyncio.to_thread(next, batches, None)
        if found is None:
            break
        batch, retractions = found
        added += sum(await store.append_many(batch))
        for memory_id, at in retractions:
            await store.forget(batch[0].session_id, batch[0].owner_id, memory_id, at)
        done += len(batch)
        sessions.add(batch[0].session_id)
        await _notify(progress, done, max(total, done))
    return CopyReport(done, added, frozenset(sessions))


async def _notify(progress: Callable[[int, int], object] | None, done: int, total: int) -> None:
    if progress is not None:
        result = progress(done, total)
        if inspect.isawaitable(result):
            await result
