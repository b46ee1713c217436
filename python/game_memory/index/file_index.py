"""The public face of the derived vector index (see index.py for the format)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from game_memory.errors import InvalidArgumentError, StoreClosedError
from game_memory.index.engine import IndexEngine, check_capacity
from game_memory.index.entries import EntryRecord
from game_memory.index.legacy import has_legacy_index, migrate_legacy_index

__all__ = ["FileVectorMemoryIndex"]


class FileVectorMemoryIndex:
    """The derived vector index of one save, in a folder of its own.

    Derived data: it may be deleted at any time and rebuilt from the save with
    ``VectorMemoryStore.rebuild``. Keep it outside the save folder (the hybrid store
    refuses an index inside it). A reference (C#) flat index found in the folder is
    migrated on first use.

    Args:
        directory: The index folder (created if missing; no symbolic links).
        capacity: Most entries one owner partition may hold, 1..1,000,000.
        lock_timeout: Seconds to wait for another writer before ``StoreBusyError``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        capacity: int = 100_000,
        lock_timeout: float = 30.0,
    ) -> None:
        if isinstance(capacity, bool) or not 1 <= capacity <= 1_000_000:
            raise InvalidArgumentError("capacity must be an integer from 1 to 1,000,000")
        self.directory = Path(os.path.abspath(os.fspath(directory)))
        self.capacity = capacity
        self._engine = IndexEngine(self.directory, capacity=capacity, lock_timeout=lock_timeout)
        self._open_lock = threading.Lock()
        self._opened = False
        self._closed = False

    def __repr__(self) -> str:
        return f"FileVectorMemoryIndex({str(self.directory)!r})"

    @property
    def engine(self) -> IndexEngine:
        """The blocking engine, opened (and legacy-migrated) on first use. Blocks."""
        if self._closed:
            raise StoreClosedError(f"the vector index at {self.directory} is closed")
        if not self._opened:
            with self._open_lock:
                if not self._opened:
                    self._engine.open()
                    if has_legacy_index(self.directory):
                        migrate_legacy_index(self._engine)
                    self._opened = True
        return self._engine

    def check_capacity(
        self, session_hash: str, owner_hash: str, records: list[EntryRecord]
    ) -> None:
        """Raise ``CapacityExceededError`` if ``records`` add too many memories (blocking)."""
        partition = self.engine.partition(session_hash, owner_hash)
        new = sum(
            1 for r in records if partition is None or r.memory_hash not in partition.position
        )
        check_capacity(partition, new, self.capacity)

    async def migrate_legacy_index(self) -> int:
        """Migrate a reference flat index found in the folder; return how many records.

        Also done on first use. Idempotent: the migrated files are removed, so a second
        call finds nothing and returns 0.

        Raises:
            DerivedIndexError: a reference record is invalid (nothing is migrated then).
            StoreClosedError: the index was closed.
        """
        if self._closed:
            raise StoreClosedError(f"the vector index at {self.directory} is closed")

        def migrate() -> int:
            with self._open_lock:
                self._engine.open()
            return migrate_legacy_index(self._engine)

        return await asyncio.to_thread(migrate)

    async def aclose(self) -> None:
        """Close the index; idempotent."""
        self._closed = True
