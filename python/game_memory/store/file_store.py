"""``FileGameMemoryStore``: the authoritative save of memories, partitioned by session and owner.

Guarantees (see ``docs/storage-format.md`` for the format):

* **Durable**: when ``append`` returns, the memory is on disk (fsynced, including new folder
  entries); it survives a ``kill -9`` or power loss at any later instant.
* **Atomic**: an append interrupted at any instant is either wholly present or absent
  afterwards, and the store always reopens.
* **Safe across processes and tasks**: appends are serialized by a cross-process lock;
  reads take no lock and see only complete records.
* **Fail closed**: corruption, a symbolic link, or a file from a newer format raises
  ``PersistenceError``; nothing is guessed.
* **Bounded**: capacity is enforced from the ledger count without rescanning; every
  snapshot is bounded; the parsed-partition cache is bounded.
* **Forget and erase**: a retraction is written like an append (durable, atomic); an erase
  is committed by its journal and finished by whoever comes next if it is interrupted, so
  after a crash it is wholly done or not at all, and no byte of what it erased is left.

Blocking file work runs in a small thread pool owned by the store, never on the event loop.
Cancelling an awaiting task does not interrupt an append already running: it completes (or
not) atomically in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from game_memory.durable import fs
from game_memory.durable.folder_paths import folder_path
from game_memory.durable.lock import check_lock_timeout
from game_memory.errors import (
    CapacityExceededError,
    GameMemoryError,
    InvalidArgumentError,
    StoreClosedError,
)
from game_memory.model import (
    CompactionReport,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    MigrationReport,
    StoreCheckReport,
)
from game_memory.model.memory import memory_list
from game_memory.store.batches import write_batch
from game_memory.store.capacity import RAISE_THE_BOUND
from game_memory.store.check import check_store
from game_memory.store.digests import encoded_digests
from game_memory.store.engine import StoreEngine
from game_memory.store.erasing import compact, erase, erase_surplus
from game_memory.store.group_commit import GroupCommitter
from game_memory.store.lexical import lexical_search
from game_memory.store.migration import has_legacy_layout, migrate_legacy_layout
from game_memory.store.pool import run_in_pool
from game_memory.store.protocol import StoreSnapshot
from game_memory.store.retracting import consolidate, forget
from game_memory.store.upkeep import Upkeep
from game_memory.store.view import PartitionView

__all__ = ["FileGameMemoryStore"]

_T = TypeVar("_T")
MAXIMUM_ENTRIES_LIMIT = 1_000_000
MAXIMUM_SNAPSHOT_LIMIT = 1_000_000

#: An owner query whose partition is cached, unchanged and holds at most this many memories
#: is read and ranked on the calling thread (``StoreReader.cached_views``), not in the pool:
#: the hop into a pool thread and back costs 20 to 120 µs of waking threads, more than the
#: whole read of a few hundred memories, and an NPC's recall is that size. The bound keeps
#: the caller's event loop from being held longer than about 0.3 ms (the lexical ranking of
#: 16k memories); a larger owner, a partition to read or to check, goes through the pool.
INLINE_MEMORIES = 16_384


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


def _check_range(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an integer from {low:,} to {high:,}")
    return value


def _nothing(report: MigrationReport | None, ready: float) -> None:
    """What :meth:`FileGameMemoryStore._ensure_ready` does once ready: nothing more."""


class FileGameMemoryStore:
    """The authoritative file store of one save.

    Args:
        directory: The save folder. Created if missing; it and its ancestors must not be
            symbolic links. Legacy (reference v1) documents found in it are migrated on
            first use.
        maximum_entries: Store-wide capacity, 1..1,000,000.
        maximum_file_bytes: Largest file the store writes or reads (one memory must fit;
            partition logs roll over to a new segment at this size), 1,024..1,000,000,000.
        lock_timeout: Seconds to wait for another writer before ``StoreBusyError``.
        cache_entries: Parsed memories kept in memory across partitions (default: the
            smaller of ``maximum_entries`` and 200,000).
        max_workers: Threads of the store's I/O pool.
        create: Create the save folder (and its parents) on first use when it does not
            exist. ``False`` (read-only tools) refuses a missing folder, or a folder
            without a save, with ``PersistenceError`` and creates nothing.

    After the first operation, :attr:`created` tells whether it created a new save.

    Raises:
        PersistenceError: the folder (or an ancestor) is a symbolic link.
        InvalidArgumentError: ``directory`` is not a folder's path (not a ``str`` or
            ``os.PathLike``, empty, or holding a NUL character), or an option is out of
            range or of the wrong type.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        maximum_entries: int = 100_000,
        maximum_file_bytes: int = 4_000_000,
        lock_timeout: float = 30.0,
        cache_entries: int | None = None,
        max_workers: int = 4,
        create: bool = True,
    ) -> None:
        _check_range("maximum_entries", maximum_entries, 1, MAXIMUM_ENTRIES_LIMIT)
        _check_range("maximum_file_bytes", maximum_file_bytes, 1_024, 1_000_000_000)
        _check_range("max_workers", max_workers, 1, 64)
        check_lock_timeout(lock_timeout)
        if cache_entries is None:
            cache_entries = min(maximum_entries, 200_000)
        _check_range("cache_entries", cache_entries, 1, 10_000_000)
        self.directory = folder_path(
            directory, "directory", "the save folder's path (str or os.PathLike)"
        )
        self.maximum_entries = maximum_entries
        self._engine = StoreEngine(
            self.directory,
            maximum_entries=maximum_entries,
            maximum_file_bytes=maximum_file_bytes,
            lock_timeout=lock_timeout,
            cache_entries=cache_entries,
        )
        fs.check_no_symlinks(self.directory)
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="game-memory-store")
        # Read files (the derived copy of a large partition a start reads instead of its
        # logs) are written by one thread of their own, so no append or recall waits for one.
        self._background = ThreadPoolExecutor(1, thread_name_prefix="game-memory-read-file")
        self._engine.cache.background = self._background.submit
        self._engine.cache.upkeep = Upkeep(self._background.submit)
        self._engine.intents.background = self._background.submit
        self._engine.retraction_intents.background = self._background.submit
        self._appends = GroupCommitter(
            lambda group: write_batch(self._engine, group, atomic=False),
            self._executor.submit,
            self._closed,
        )
        self._state = _State.OPEN
        self._create = create
        self._ready = False
        self._ready_lock = asyncio.Lock()
        self.created = False

    def __repr__(self) -> str:
        return f"FileGameMemoryStore({str(self.directory)!r}, state={self._state.value})"

    @property
    def folder(self) -> Path:
        """The save folder (absolute)."""
        return self.directory

    async def __aenter__(self) -> FileGameMemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------

    async def _run(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` in the store's thread pool and await its result (``pool.py``:
        lighter than ``run_in_executor`` on the hot read path). If the awaiting task is
        cancelled, ``function`` still runs to completion in the background."""
        if self._state is _State.CLOSED:
            raise self._closed()
        return await run_in_pool(self._executor, function, self._closed)

    def _closed(self) -> StoreClosedError:
        return StoreClosedError(f"the memory store at {self.directory} is closed; open a new one")

    async def _ensure_ready(self) -> MigrationReport | None:
        """Open the layout and migrate legacy documents, once per store object.

        Returns what the first call did (its migration result), ``None`` afterwards.
        """
        if self._ready:
            return None
        first, _ = await self._ready_then(_nothing)
        return first

    async def _ready_then(
        self, then: Callable[[MigrationReport | None, float], _T]
    ) -> tuple[MigrationReport | None, _T]:
        """:meth:`_ensure_ready`, then ``then(first use, when it was ready)`` in the pool.

        When the store was not ready yet (the first read of an opened save) both run in one
        job: one hop into a new thread and back instead of two (about 0.25 ms). Returns the
        first use's report (``None`` afterwards) and what ``then`` returned. The store is
        ready once the layout opened, even when ``then`` raised.
        """
        if not self._ready:
            async with self._ready_lock:
                if not self._ready:

                    def job() -> tuple[MigrationReport, Callable[[], _T]]:
                        report = self._prepare()
                        try:
                            result = then(report, time.perf_counter())
                        except BaseException as exc:  # raised once the store is marked ready
                            error = exc

                            def fail() -> _T:
                                raise error

                            return report, fail
                        return report, lambda: result

                    report, outcome = await self._run(job)
                    self._ready = True
                    return report, outcome()
        ready = time.perf_counter()
        return None, await self._run(lambda: then(None, ready))

    def _prepare(self) -> MigrationReport:
        """Open the layout, reconcile what a crashed group commit left (before the first
        read, so count() and enumerate agree from the start: ``store/reconcile.py``) and
        migrate a legacy layout (blocking)."""
        self.created = self._engine.open_layout(create=self._create)
        self._engine.settle(checkpoint=False)
        if has_legacy_layout(self.directory):
            return migrate_legacy_layout(self._engine)
        return MigrationReport(migrated_entries=0, partitioned_entries=self._engine.ledger.count())

    # -- public API ---------------------------------------------------------------------

    async def append(self, memory: GameMemory) -> bool:
        """Durably add ``memory`` to its owner's partition.

        Idempotent: appending an equivalent memory again returns ``False`` and writes
        nothing. Atomic and durable (see the class docstring). Concurrent appends of this
        store object share a group commit (``store/group_commit.py``): one fsync per log
        the group touches; each returns only after the fsync covering it, and a failed
        write fails every append of its group.

        Returns:
            ``True`` if the memory was added, ``False`` if it was already there.

        Raises:
            MemoryConflictError: the id already holds different content (nothing changes).
            CapacityExceededError: ``maximum_entries`` or ``maximum_file_bytes`` reached.
            PersistenceError: the save is corrupt or unsafe.
            StoreBusyError: another writer held the lock longer than ``lock_timeout``.
            StoreClosedError: the store was closed.
        """
        if not isinstance(memory, GameMemory):
            raise InvalidArgumentError("append takes a GameMemory")
        await self._ensure_ready()
        if self._state is _State.CLOSED:
            raise self._closed()
        return await self._appends.append(memory)

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Durably add ``memories`` as one atomic batch; one result per memory, in order.

        All or nothing: a crash at any instant leaves the whole batch present or none of it
        (``store/batches.py``); when it returns, every memory is durable. Results follow
        :meth:`append`: ``True`` added, ``False`` an equivalent memory was stored already
        (or came earlier in the batch). Costs a handful of fsyncs per batch, not per
        memory. Readers running meanwhile may see part of the batch before it returns.

        Raises:
            MemoryConflictError: an id holds (or is given in the batch) other content;
                nothing is written.
            CapacityExceededError: the new memories do not fit ``maximum_entries``, or a
                record is larger than ``maximum_file_bytes``; nothing is written.
            PersistenceError: a partition is damaged or unsafe; nothing is written.
            StoreBusyError: another writer held the lock longer than ``lock_timeout``.
            InvalidArgumentError: ``memories`` is not a list, or an element is not a
                ``GameMemory``; nothing is written.
        """
        batch = memory_list(memories)
        await self._ensure_ready()
        if not batch:
            return []
        outcomes = await self._run(lambda: write_batch(self._engine, batch, atomic=True))
        return [outcome is True for outcome in outcomes]

    async def snapshot(
        self, query: GameMemoryQuery, *, maximum_entries: int | None = None
    ) -> StoreSnapshot:
        """Read the query's partitions once and rank them lexically (BM25 + importance).

        Reads only the query owner's partition when ``owner_id`` is set, else only the
        query session's partitions. Visibility follows ``memory_matches_query``: memories
        after ``query.at_or_before`` (game time), on another timeline, or expired at that
        moment are never ranked. Stages: STORAGE_MIGRATION, AUTHORITATIVE_SNAPSHOT,
        LEXICAL_SEARCH. Takes no lock; sees only acknowledged (whole) records.

        Raises:
            CapacityExceededError: the partitions hold more than ``maximum_entries`` (or
                ``maximum_entries`` of the store) memories.
            PersistenceError: a partition is corrupt or unsafe.
        """
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError("snapshot takes a GameMemoryQuery")
        bound = self.maximum_entries
        if maximum_entries is not None:
            _check_range("maximum_entries", maximum_entries, 1, MAXIMUM_SNAPSHOT_LIMIT)
            bound = min(bound, maximum_entries)
        started = time.perf_counter()

        def read(
            first_use: MigrationReport | None,
            ready: float,
            views: list[PartitionView] | None = None,
        ) -> StoreSnapshot:
            if first_use is not None:
                migrated, partitioned = first_use.migrated_entries, first_use.partitioned_entries
            else:
                migrated, partitioned = 0, self._engine.ledger.count()
            begun = time.perf_counter() if views is None else ready
            if views is None:
                views = self._engine.views(query.session_id, query.owner_id, bound)
            snapshot_size = sum(len(view) for view in views)
            snapshot_done = time.perf_counter()
            hits, visible = lexical_search(views, query, query.limit)
            lexical_done = time.perf_counter()
            stages = (
                GameMemorySearchStage.measured(
                    GameMemorySearchStageKind.STORAGE_MIGRATION,
                    ready - started,
                    migrated,
                    partitioned,
                ),
                GameMemorySearchStage.measured(
                    GameMemorySearchStageKind.AUTHORITATIVE_SNAPSHOT,
                    snapshot_done - begun,
                    snapshot_size,
                    snapshot_size,
                ),
                GameMemorySearchStage.measured(
                    GameMemorySearchStageKind.LEXICAL_SEARCH,
                    lexical_done - snapshot_done,
                    snapshot_size,
                    len(hits),
                ),
            )
            return StoreSnapshot(tuple(views), tuple(hits), visible, stages)

        if self._ready and query.owner_id is not None and self._state is _State.OPEN:
            # An owner whose partition is cached and unchanged, and small, is answered here:
            # the read is pure CPU then (tens of microseconds for a few hundred memories),
            # less than the hop into the pool and back (see INLINE_MEMORIES).
            ready = time.perf_counter()  # the snapshot stage includes the cache's checks
            cached = self._engine.cached_views(
                query.session_id, query.owner_id, min(bound, INLINE_MEMORIES)
            )
            if cached is not None:
                return read(None, ready, cached)
        try:
            _, snapshot = await self._ready_then(read)
        except CapacityExceededError as exc:
            if bound < self.maximum_entries:
                raise  # the caller's bound: its message is the caller's to word
            # The store's own bound: a save that holds more than the bound it was opened
            # with (grown under a larger one), which a smaller snapshot cannot fix.
            where = f"owner {query.owner_id!r} of " if query.owner_id is not None else ""
            raise CapacityExceededError(
                f"{where}session {query.session_id!r} holds more than {bound:,} memories, "
                f"the maximum_entries this store was opened with: the save was grown under a "
                f"larger bound; {RAISE_THE_BOUND}",
                bound="maximum_entries",
            ) from exc
        return snapshot

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or of one owner), ordered by owner then memory id.

        Raises:
            CapacityExceededError: more than ``maximum_entries`` memories.
        """
        await self._ensure_ready()
        views = await self._run(
            lambda: self._engine.views(session_id, owner_id, self.maximum_entries)
        )
        return [memory for view in views for memory in view.ordered]

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of the game moment ``at``: durable and atomic like an append.

        Recall as of ``at`` or later on ``at``'s timeline, and recall without
        ``at_or_before``, no longer sees it; earlier moments and other timelines do.

        Returns:
            ``False`` when a retraction already hides it from ``at`` on (nothing written).

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
            CapacityExceededError: ``maximum_entries`` retractions are stored already.
            PersistenceError: the partition is damaged or unsafe.
            StoreBusyError: another writer held the lock longer than ``lock_timeout``.
        """
        await self._ensure_ready()
        return await self._run(lambda: forget(self._engine, session_id, owner_id, memory_id, at))

    async def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Remove memories for good: a session, one owner, or listed ids of one owner.

        Their records, retractions, ledger intents and copies (legacy backups, damaged
        files set aside) leave the save before this returns, and the partition is
        rewritten compactly. A crash at any instant leaves the erase wholly done (the
        next writer, or reader, finishes it) or not begun; running it again completes it.
        Safe beside concurrent readers, which wait for it and never see it half done.

        Returns:
            How many memories were erased (ids the owner does not hold are ignored).

        Raises:
            InvalidArgumentError: ``memory_ids`` without ``owner_id``, or a bad id.
            PersistenceError: a partition to erase from is damaged (salvage it first).
            StoreBusyError: another writer held the lock longer than ``lock_timeout``.
        """
        await self._ensure_ready()
        return await self._run(lambda: erase(self._engine, session_id, owner_id, memory_ids))

    async def erase_surplus(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], keep: int
    ) -> list[str]:
        """Erase the first of ``memory_ids`` the owner holds, only as many as take it down
        to ``keep`` memories, counted under the writer lock: the retention policy's erase,
        safe beside another process's (``store.protocol.SurplusErasing``). As :meth:`erase`
        otherwise.

        Returns:
            The ids erased, in the order given.
        """
        await self._ensure_ready()
        return await self._run(
            lambda: erase_surplus(self._engine, session_id, owner_id, memory_ids, keep)
        )

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append ``summary`` retracting ``memory_ids`` as of its moment: one append, so
        both or neither, with an append's durability.

        Returns:
            ``False`` when the same summary was already there.

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: the summary is of another owner or not a reflection.
            MemoryConflictError: the summary's id holds other content.
            CapacityExceededError: the store is full.
        """
        await self._ensure_ready()
        return await self._run(
            lambda: consolidate(self._engine, session_id, owner_id, memory_ids, summary)
        )

    async def compact(self) -> CompactionReport:
        """Rewrite what needs it: partitions whose files could be fewer, redundant
        retractions, leftovers of interrupted writes, empty packs and session folders.

        Holds the writer lock while it runs; crash-safe (journaled like an erase).
        """
        await self._ensure_ready()
        return await self._run(lambda: compact(self._engine))

    async def count(self) -> int:
        """How many memories the store holds (the ledger's size; no scan).

        Includes an append in flight, or one whose writer died, until the next writer's
        recovery drops it.
        """
        await self._ensure_ready()
        return await self._run(self._engine.count)

    async def migrate_legacy_layout(self) -> MigrationReport:
        """Migrate legacy documents now (idempotent; also done on first use).

        Serialized across processes; every document is validated before anything moves;
        a corrupt or conflicting document fails closed with the legacy files untouched; a
        crash or cancellation is resumed by running it again.
        """
        first_use = await self._ensure_ready()
        if first_use is not None:
            return first_use
        return await self._run(lambda: migrate_legacy_layout(self._engine))

    async def check(
        self, *, fix: bool = False, accept_loss: bool = False, list_ids: bool = False
    ) -> StoreCheckReport:
        """Verify the whole save against its ledger (reads every record, bypassing caches).

        Holds the writer lock while it runs, so the report is of one consistent state. It
        tells an append that was never acknowledged (only the newest intent can be one)
        from acknowledged memories that are lost or unreadable, and names the partition,
        the count and the cause; never a memory's text. Opening the store (its first use,
        this check's included) rolls back a batch a killed writer never committed before
        anything reads it: what that did is named among the repairs, ``fix`` or not.

        Args:
            fix: Apply the repairs that cannot lose an acknowledged memory: cut torn tails
                and torn ledger records, drop a pending intent whose record never landed,
                roll back an uncommitted migration batch, add missing intents. Damage is
                reported, never "repaired", and the report says so.
            accept_loss: Also salvage damage (implies ``fix``): keep every intact record,
                move the damaged files aside into ``.game-memory/damaged/<time>/`` with a
                ``report.json`` of what was lost, and rewrite the ledger without the lost
                memories, leaving a store that checks consistent.
            list_ids: Name the lost memories' ids (their hashes where the ids cannot be
                read) in the problems.
        """
        await self._ensure_ready()
        return await self._run(
            lambda: check_store(
                self._engine, fix=fix or accept_loss, accept_loss=accept_loss, list_ids=list_ids
            )
        )

    async def aclose(self) -> None:
        """Close the store; idempotent. Waits for running operations to finish, then writes
        the derived files the next open reads (the read files' part for the memories they
        do not cover, the intent files), so it costs what those files miss, not the save's
        size."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        # A read-file or intent-file job still queued is dropped (closing writes what the
        # derived files do not cover, without merging: bounded by what they miss); one
        # already running is waited for.
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: self._background.shutdown(wait=True, cancel_futures=True)
        )
        if self._ready:

            def close_out() -> None:
                # Every intent durable and the unsynced marker emptied: a save closed
                # cleanly needs no reconciling when it is opened next.
                with contextlib.suppress(GameMemoryError):
                    self._engine.settle(checkpoint=True)
                # The next open decodes nothing the read files do not cover, and reads no
                # ledger record the intent files do not.
                self._engine.persist_derived()
                # The digests kept for the derived files hold memory objects: not past close.
                encoded_digests.clear()

            await asyncio.get_running_loop().run_in_executor(None, close_out)
        self._engine.counts.close()
