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

What it does not have: a folder (``folder`` is ``None``), a per-record byte bound (the
file store's ``maximum_file_bytes``; a memory is bounded by its own field limits), legacy
layouts to migrate, cross-process sharing.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from game_memory.errors import (
    CapacityExceededError,
    InvalidArgumentError,
    MemoryConflictError,
    MemoryNotFoundError,
    StoreClosedError,
)
from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    MigrationReport,
    StoreCheckReport,
    check_bounded_id,
    ordinal_key,
)
from game_memory.store.lexical import SMALL_SNAPSHOT, lexical_search
from game_memory.store.lifecycle import checked_ids, checked_summary, covered
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


@dataclass(slots=True)
class _Partition:
    """One owner's memories in append order; ``memories`` and ``positions`` only grow."""

    session_id: str
    owner_id: str
    memories: list[GameMemory] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    retractions: list[tuple[str, GameMoment]] = field(default_factory=list)
    view: PartitionView | None = None  # the newest view built, of a prefix of ``memories``
    generation: int = 0  # bumped by an erase: earlier views are of other memories


@dataclass(frozen=True, slots=True)
class _Read:
    """What one read saw of a partition, taken under the lock: reused view or new memories."""

    partition: _Partition
    base: PartitionView | None
    memories: tuple[GameMemory, ...] | None  # None: ``base`` is current
    retractions: tuple[tuple[str, GameMoment], ...] = ()
    generation: int = 0

    @property
    def size(self) -> int:
        """How many memories the read holds."""
        if self.memories is not None:
            return len(self.memories)
        return len(self.base) if self.base is not None else 0


def _view(read: _Read) -> PartitionView:
    """The partition's view at the read's version, grown from the previous view."""
    base, memories = read.base, read.memories
    if memories is None:
        assert base is not None
        return base
    positions = dict(base.positions) if base is not None else {}
    for index in range(len(positions), len(memories)):
        positions[memories[index].memory_id] = index
    partition = read.partition
    return PartitionView(
        partition.session_id, partition.owner_id, memories, positions, base, read.retractions
    )


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
        self._sessions: dict[str, dict[str, _Partition]] = {}
        self._owner_order: dict[str, list[str]] = {}  # session -> owners, ordinal order
        self._count = 0
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="game-memory-ram")
        self._state = _State.OPEN

    def __repr__(self) -> str:
        return f"InMemoryGameMemoryStore(memories={self._count}, state={self._state.value})"

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

    def _plan(self, session_id: str, owner_id: str | None, bound: int) -> list[_Read]:
        """Under the lock: what to read of a session (or owner), in owner order.

        Raises:
            CapacityExceededError: more than ``bound`` memories.
        """
        with self._lock:
            partitions = self._sessions.get(session_id, {})
            if owner_id is not None:
                owners = [owner_id] if owner_id in partitions else []
            else:
                owners = self._owner_order.get(session_id, [])
            reads: list[_Read] = []
            total = 0
            for owner in owners:
                partition = partitions[owner]
                count = len(partition.memories)
                total += count
                if total > bound:
                    raise CapacityExceededError(
                        f"the snapshot of session {session_id!r} holds more than {bound:,} "
                        "memories (maximum_snapshot_entries); query one owner, or raise the bound",
                        bound="maximum_snapshot_entries",
                    )
                base = partition.view
                retractions = tuple(partition.retractions)
                if base is not None and len(base) == count and base.retractions == retractions:
                    reads.append(_Read(partition, base, None, retractions, partition.generation))
                else:
                    reads.append(
                        _Read(
                            partition,
                            base,
                            tuple(partition.memories),
                            retractions,
                            partition.generation,
                        )
                    )
            return reads

    def _keep(self, views: Sequence[PartitionView], reads: Sequence[_Read]) -> None:
        """Remember the newest view of each partition, so the next read reuses it."""
        with self._lock:
            for view, read in zip(views, reads, strict=True):
                partition = read.partition
                if partition.generation != read.generation:
                    continue  # erased since the read: the view is of memories gone
                current = partition.view
                if (
                    current is None
                    or len(current) < len(view)
                    or len(current.retractions) < len(view.retractions)
                ):
                    partition.view = view

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
        session_id, owner_id = memory.session_id, memory.owner_id
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)
            if partition is not None:
                position = partition.positions.get(memory.memory_id)
                if position is not None:
                    if partition.memories[position] == memory:
                        return False
                    raise MemoryConflictError(
                        f"memory id {memory.memory_id!r} of owner {owner_id!r} in session "
                        f"{session_id!r} already holds different content; an id cannot be "
                        "reused. Use a new id (derive_memory_id gives stable ones)."
                    )
            if self._count >= self.maximum_entries:
                raise CapacityExceededError(
                    f"the store holds {self._count:,} memories, its maximum_entries; open it "
                    "with a larger maximum_entries to add more",
                    bound="maximum_entries",
                )
            if partition is None:
                partition = _Partition(session_id, owner_id)
                self._sessions.setdefault(session_id, {})[owner_id] = partition
                owners = [*self._owner_order.get(session_id, []), owner_id]
                owners.sort(key=ordinal_key)
                self._owner_order[session_id] = owners
            partition.positions[memory.memory_id] = len(partition.memories)
            partition.memories.append(memory)
            self._count += 1
            return True

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
        partitioned = self._count
        begun = time.perf_counter()
        reads = self._plan(query.session_id, query.owner_id, bound)
        size = sum(read.size for read in reads)

        def rank() -> tuple[list[PartitionView], StoreSnapshot]:
            views = [_view(read) for read in reads]
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
        self._keep(views, reads)
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
        reads = self._plan(session_id, owner_id, self.maximum_entries)

        def ordered() -> tuple[list[PartitionView], list[GameMemory]]:
            views = [_view(read) for read in reads]
            return views, [memory for view in views for memory in view.ordered]

        size = sum(read.size for read in reads)
        views, memories = await self._offload(size, ordered)
        self._keep(views, reads)
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
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)
            if partition is None or memory_id not in partition.positions:
                raise MemoryNotFoundError(
                    f"owner {owner_id!r} of session {session_id!r} holds no memory "
                    f"{memory_id!r}; nothing was forgotten"
                )
            if covered((m for i, m in partition.retractions if i == memory_id), at):
                return False
            partition.retractions.append((memory_id, at))
            return True

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
        with self._lock:
            partitions = self._sessions.get(session_id, {})
            owners = list(partitions) if owner_id is None else [owner_id]
            erased = 0
            for owner in owners:
                partition = partitions.get(owner)
                if partition is None:
                    continue
                kept = [
                    m
                    for m in partition.memories
                    if wanted is not None and m.memory_id not in wanted
                ]
                gone = {m.memory_id for m in partition.memories} - {m.memory_id for m in kept}
                if not gone:
                    continue
                erased += len(gone)
                if not kept:
                    del partitions[owner]
                    self._owner_order[session_id].remove(owner)
                    continue
                partition.memories = kept
                partition.positions = {m.memory_id: i for i, m in enumerate(kept)}
                partition.retractions = [r for r in partition.retractions if r[0] not in gone]
                partition.view = None
                partition.generation += 1
            if not partitions:
                self._sessions.pop(session_id, None)
                self._owner_order.pop(session_id, None)
            self._count -= erased
            return erased

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append a summary that retracts ``memory_ids`` as of its moment; atomic (one entry).

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: see ``GameMemoryStore.consolidate``.
            MemoryConflictError: the summary's id holds other content.
            CapacityExceededError: the store is full.
        """
        self._check_open()
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)
            held = () if partition is None else tuple(partition.positions)
        checked = checked_summary(session_id, owner_id, memory_ids, summary, held)
        return await self.append(checked)

    async def count(self) -> int:
        """How many memories the store holds."""
        self._check_open()
        return self._count

    async def migrate_legacy_layout(self) -> MigrationReport:
        """Nothing to migrate: report 0 migrated and the memories held (idempotent)."""
        self._check_open()
        return MigrationReport(migrated_entries=0, partitioned_entries=self._count)

    async def check(self, *, fix: bool = False) -> StoreCheckReport:
        """Verify the store's own bookkeeping: partitions, id positions, the count.

        The state is copied under the lock (one consistent moment) and checked off the
        loop. There is nothing a repair could safely change, so ``fix`` applies none.
        """
        self._check_open()
        with self._lock:
            partitions = [
                (p.session_id, p.owner_id, session, owner, tuple(p.memories), dict(p.positions))
                for session, owners in self._sessions.items()
                for owner, p in owners.items()
            ]
            orders = {session: list(owners) for session, owners in self._owner_order.items()}
            count = self._count

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
        with self._lock:
            self._sessions.clear()
            self._owner_order.clear()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
