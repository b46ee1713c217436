"""``InMemoryGameMemoryStore``: an authoritative store that lives exactly as long as the process.

It implements :class:`~game_memory.store.protocol.GameMemoryStore` with the file store's
observable behaviour (the conformance suite in ``tests/conformance/`` runs both) and none of
its durability, for tests, tools and ephemeral NPCs:

* **Not durable, by design**: nothing is written anywhere. A crash, ``kill -9`` or
  :meth:`~InMemoryGameMemoryStore.aclose` loses every memory; there is nothing to recover.
* **Atomic**: an append either adds the memory whole or changes nothing; a read sees the
  store as it was at one instant. State is touched only in short critical sections under a
  ``threading.Lock`` (no ``await`` inside), so the store is safe for many tasks of one event
  loop and for threads.
* **The same rules as the save**: idempotent appends, ``MemoryConflictError`` for a reused
  id, a store-wide ``maximum_entries``, owner partitions inside sessions, snapshots built
  from :class:`~game_memory.store.view.PartitionView` objects (the same object while a
  partition is unchanged, a grown view built from the previous one) and ranked by the shared
  :func:`~game_memory.store.lexical.lexical_search`.
* **Bounded work on the loop**: a call touching more than ``SMALL_SNAPSHOT`` memories does
  its view building, ranking or sorting in a small thread pool owned by the store, so one
  event loop serving a game is never held for long.

Its state, and every atomic change to it, is ``memory_partitions.py``; this module is the
store protocol over it. What it does not have: a folder (``folder`` is ``None``), a
per-record byte bound (the file store's ``maximum_file_bytes``; a memory is bounded by its
own field limits), legacy layouts to migrate, cross-process sharing, anything to compact.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from game_memory.errors import InvalidArgumentError, StoreClosedError
from game_memory.model import (
    CompactionReport,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    MigrationReport,
    StoreCheckReport,
    check_bounded_id,
)
from game_memory.model.memory import memory_list
from game_memory.store.lexical import SMALL_SNAPSHOT, lexical_search
from game_memory.store.lifecycle import checked_ids, checked_keep
from game_memory.store.memory_partitions import MemoryPartitions, build_view
from game_memory.store.protocol import StoreSnapshot
from game_memory.store.view import PartitionView

__all__ = ["InMemoryGameMemoryStore"]

_T = TypeVar("_T")
MAXIMUM_ENTRIES_LIMIT = 1_000_000
MAXIMUM_SNAPSHOT_LIMIT = 1_000_000
Stage = GameMemorySearchStageKind


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


def _check_range(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an integer from {low:,} to {high:,}")
    return value


def _validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


class InMemoryGameMemoryStore:
    """An authoritative store held in this process's memory (see the module docstring).

    Args:
        maximum_entries: Store-wide capacity, 1..1,000,000 (as the file store).
        max_workers: Threads of the pool that ranks and sorts large reads, 1..64.

    Raises:
        InvalidArgumentError: an option is out of range.
    """

    def __init__(self, *, maximum_entries: int = 100_000, max_workers: int = 2) -> None:
        _check_range("maximum_entries", maximum_entries, 1, MAXIMUM_ENTRIES_LIMIT)
        _check_range("max_workers", max_workers, 1, 64)
        self.maximum_entries = maximum_entries
        self._partitions = MemoryPartitions(maximum_entries)
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="game-memory-ram")
        self._state = _State.OPEN

    def __repr__(self) -> str:
        count = self._partitions.count
        return f"InMemoryGameMemoryStore(memories={count}, state={self._state.value})"

    @property
    def folder(self) -> Path | None:
        """Always ``None``: nothing of this store is on disk."""
        return None

    async def __aenter__(self) -> InMemoryGameMemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state is _State.CLOSED:
            raise StoreClosedError("the in-memory store is closed (its memories are gone)")

    async def _offload(self, size: int, function: Callable[[], _T]) -> _T:
        """Run ``function`` inline when it touches few memories, else in the store's pool.

        The function only reads immutable data taken under the lock, so a task cancelled
        while it runs in the pool leaves nothing half done.
        """
        if size <= SMALL_SNAPSHOT:
            return function()
        try:
            future = self._executor.submit(function)
        except RuntimeError as exc:  # the pool was shut down by a concurrent aclose()
            self._check_open()
            raise StoreClosedError("the in-memory store is closed") from exc
        return await asyncio.wrap_future(future)

    # -- public API ---------------------------------------------------------------------

    async def append(self, memory: GameMemory) -> bool:
        """Add ``memory`` to its owner's partition, in memory only (lost with the process).

        Idempotent: an equivalent memory (``==``) returns ``False`` and changes nothing.
        Atomic: one critical section; other tasks see the memory whole or not at all.

        Raises:
            MemoryConflictError: the id already holds different content (nothing changes).
            CapacityExceededError: the store holds ``maximum_entries`` memories.
            StoreClosedError: the store was closed.
            InvalidArgumentError: ``memory`` is not a ``GameMemory``.
        """
        if not isinstance(memory, GameMemory):
            raise InvalidArgumentError("append takes a GameMemory")
        self._check_open()
        return self._partitions.add(memory)

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Add a batch in one critical section, all or nothing; one result per memory.

        Results follow :meth:`append` (``False`` also for a repeat within the batch).
        Other tasks see the whole batch or none of it.

        Raises:
            MemoryConflictError: an id holds, or is given in the batch, other content
                (nothing changes).
            CapacityExceededError: the new memories do not fit ``maximum_entries``
                (nothing changes).
            StoreClosedError: the store was closed.
            InvalidArgumentError: ``memories`` is not a list, or an element is not a
                ``GameMemory``.
        """
        batch = memory_list(memories)
        self._check_open()
        return self._partitions.add_many(batch)

    async def snapshot(
        self, query: GameMemoryQuery, *, maximum_entries: int | None = None
    ) -> StoreSnapshot:
        """Read the query's partitions once and rank them lexically (BM25 + importance).

        Exactly the file store's read: only the query owner's partition when ``owner_id``
        is set, else the session's partitions by owner (ordinal); visibility follows
        ``memory_matches_query``; stages STORAGE_MIGRATION (0 migrated), AUTHORITATIVE_SNAPSHOT
        and LEXICAL_SEARCH. The read is consistent: appends that finish after it started
        are not in it.

        Raises:
            CapacityExceededError: the partitions hold more than ``maximum_entries`` (or
                ``maximum_entries`` of the store) memories.
            InvalidArgumentError: ``query`` is not a query, or ``maximum_entries`` is out of
                1..1,000,000.
            StoreClosedError: the store was closed.
        """
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError("snapshot takes a GameMemoryQuery")
        bound = self.maximum_entries
        if maximum_entries is not None:
            _check_range("maximum_entries", maximum_entries, 1, MAXIMUM_SNAPSHOT_LIMIT)
            bound = min(bound, maximum_entries)
        started = time.perf_counter()
        self._check_open()
        partitioned = self._partitions.count
        begun = time.perf_counter()
        reads = self._partitions.plan(query.session_id, query.owner_id, bound)
        size = sum(read.size for read in reads)

        def rank() -> tuple[list[PartitionView], StoreSnapshot]:
            views = [build_view(read) for read in reads]
            snapshot_done = time.perf_counter()
            hits, visible = lexical_search(views, query, query.limit)
            lexical_done = time.perf_counter()
            stages = (
                GameMemorySearchStage.measured(
                    Stage.STORAGE_MIGRATION, begun - started, 0, partitioned
                ),
                GameMemorySearchStage.measured(
                    Stage.AUTHORITATIVE_SNAPSHOT, snapshot_done - begun, size, size
                ),
                GameMemorySearchStage.measured(
                    Stage.LEXICAL_SEARCH, lexical_done - snapshot_done, size, len(hits)
                ),
            )
            return views, StoreSnapshot(tuple(views), tuple(hits), visible, stages)

        views, snapshot = await self._offload(size, rank)
        self._partitions.keep(views, reads)
        return snapshot

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or of one owner), ordered by owner then memory id.

        Raises:
            InvalidArgumentError: an id is not a valid id.
            StoreClosedError: the store was closed.
        """
        self._check_open()
        _validated_id(session_id, "session_id")
        if owner_id is not None:
            _validated_id(owner_id, "owner_id")
        reads = self._partitions.plan(session_id, owner_id, self.maximum_entries)

        def ordered() -> tuple[list[PartitionView], list[GameMemory]]:
            views = [build_view(read) for read in reads]
            return views, [memory for view in views for memory in view.ordered]

        size = sum(read.size for read in reads)
        views, memories = await self._offload(size, ordered)
        self._partitions.keep(views, reads)
        return memories

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of ``at`` (see ``GameMemoryStore.forget``); atomic, in memory.

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
            InvalidArgumentError: an id or ``at`` is invalid.
            StoreClosedError: the store was closed.
        """
        self._check_open()
        for value, what in ((session_id, "session_id"), (owner_id, "owner_id")):
            _validated_id(value, what)
        _validated_id(memory_id, "memory_id")
        if not isinstance(at, GameMoment):
            raise InvalidArgumentError("forget takes the game moment of the retraction")
        return self._partitions.retract(session_id, owner_id, memory_id, at)

    async def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Remove memories for good (see ``GameMemoryStore.erase``); atomic, in memory.

        Raises:
            InvalidArgumentError: ``memory_ids`` without ``owner_id``, or a bad id.
            StoreClosedError: the store was closed.
        """
        self._check_open()
        _validated_id(session_id, "session_id")
        if owner_id is not None:
            _validated_id(owner_id, "owner_id")
        wanted = None if memory_ids is None else set(checked_ids(memory_ids))
        if wanted is not None and owner_id is None:
            raise InvalidArgumentError("erase takes memory_ids only together with owner_id")
        return self._partitions.erase(session_id, owner_id, wanted)

    async def erase_surplus(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], keep: int
    ) -> list[str]:
        """Erase the first of ``memory_ids`` the owner holds, only as many as take it down
        to ``keep`` memories (``store.protocol.SurplusErasing``); the ids erased.

        Raises:
            InvalidArgumentError: a bad id, or ``keep`` below 0.
            StoreClosedError: the store was closed.
        """
        self._check_open()
        _validated_id(session_id, "session_id")
        _validated_id(owner_id, "owner_id")
        wanted = list(checked_ids(memory_ids))
        keep = checked_keep(keep)
        return self._partitions.erase_surplus(session_id, owner_id, wanted, keep)

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append a summary that retracts ``memory_ids`` as of its moment; atomic (one entry).

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: see ``GameMemoryStore.consolidate`` (a summary that is
                not a ``GameMemory`` included).
            MemoryConflictError: the summary's id holds other content.
            CapacityExceededError: the store is full.
        """
        self._check_open()
        _validated_id(session_id, "session_id")
        _validated_id(owner_id, "owner_id")
        return self._partitions.add_summary(session_id, owner_id, memory_ids, summary)

    async def compact(self) -> CompactionReport:
        """Nothing to compact: an erase frees its memory at once. A report of zeros."""
        self._check_open()
        return CompactionReport(bytes_before=0, bytes_after=0)

    async def count(self) -> int:
        """How many memories the store holds."""
        self._check_open()
        return self._partitions.count

    async def migrate_legacy_layout(self) -> MigrationReport:
        """Nothing to migrate: report 0 migrated and the memories held (idempotent)."""
        self._check_open()
        return MigrationReport(migrated_entries=0, partitioned_entries=self._partitions.count)

    async def check(self, *, fix: bool = False) -> StoreCheckReport:
        """Verify the store's own bookkeeping: partitions, id positions, the count.

        The state is copied under the lock (one consistent moment) and checked off the
        loop. There is nothing a repair could safely change, so ``fix`` applies none.
        """
        self._check_open()
        partitions, orders, count = self._partitions.copy()

        def audit() -> StoreCheckReport:
            problems: list[str] = []
            memories = 0
            for session_id, owner_id, session, owner, stored, positions in partitions:
                memories += len(stored)
                where = f"partition {owner!r} of session {session!r}"
                if (session_id, owner_id) != (session, owner) or owner not in orders.get(
                    session, []
                ):
                    problems.append(f"{where} is filed under the wrong key")
                if len(positions) != len(stored):
                    problems.append(
                        f"{where} has {len(stored)} memories but indexes {len(positions)}"
                    )
                for index, memory in enumerate(stored):
                    if (memory.session_id, memory.owner_id) != (session, owner):
                        problems.append(f"memory {memory.memory_id!r} escaped into {where}")
                    if positions.get(memory.memory_id) != index:
                        problems.append(f"memory {memory.memory_id!r} of {where} is mis-indexed")
            if memories != count:
                problems.append(f"the store counts {count:,} memories but holds {memories:,}")
            return StoreCheckReport(
                memories=memories, ledger_entries=count, problems=tuple(problems), repairs=()
            )

        return await self._offload(count, audit)

    async def aclose(self) -> None:
        """Close the store and drop its memories; idempotent. Waits for reads in the pool."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        self._partitions.clear()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
