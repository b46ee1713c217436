"""Reading one store folder: its layout, its ledgers and partitions, reads checked against them.

:class:`StoreReader` holds everything a store folder has (layout, both ledgers and their
indexes, the journals, the partition cache) and the read path; the engine
(``engine.py``) adds the writes. Every read of a partition is checked against the ledgers
(``verification.py``): a partition that holds fewer memories (or retractions) than its
intents lost acknowledged records (a cut log, a deleted segment), and the read fails closed
with a ``PersistenceError`` that says what to do, instead of answering without them. A read
that finds an unfinished erase or compaction (``rewrite.json``), or whose ledger was
rewritten while it read, reads again under the writer lock, after finishing the rewrite if
its writer died: readers never see a partition half rewritten.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from game_memory.durable.lock import ProcessLock
from game_memory.durable.names import segment_path
from game_memory.errors import InvalidArgumentError, PersistenceError
from game_memory.model import check_bounded_id, ordinal_key
from game_memory.store.group_writes import Held
from game_memory.store.intents import LedgerIndex, LedgerMark
from game_memory.store.journal import MigrationJournal
from game_memory.store.layout import SaveLayout, damage_advice
from game_memory.store.ledger import KIND_RETRACT, Ledger
from game_memory.store.memory_partitions import snapshot_too_large
from game_memory.store.partitions import PartitionCache, PartitionState, partition_hash
from game_memory.store.rewrite_counts import RewriteCounts
from game_memory.store.rewrite_journal import RewriteJournal
from game_memory.store.rewriting import RewriteContext, finish_rewrite
from game_memory.store.verification import missing_memories, missing_retractions, partition_name
from game_memory.store.view import PartitionView

__all__ = ["Marks", "StoreReader", "damage_advice", "validated_id"]

#: The two ledgers as one refresh saw them: adds, retractions.
Marks = tuple[LedgerMark, LedgerMark]


def validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


def _series_gap(directory: Path, owner_hash: str, read: int, series: str) -> str | None:
    """The segment a read of ``read`` segments stopped at, if a later one of the series
    exists (a file deleted from the middle), else ``None``. On the error path only."""
    if any(
        os.path.lexists(segment_path(directory, owner_hash, later, series))
        for later in range(read + 1, read + 65)
    ):
        return segment_path(directory, owner_hash, read, series)
    return None


class StoreReader:
    """The folders, files and read path of one store; thread-safe (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        maximum_entries: int,
        maximum_file_bytes: int,
        lock_timeout: float,
        cache_entries: int,
    ) -> None:
        self.root = root
        self.layout = SaveLayout(root)
        self.data = self.layout.data
        self._data_prefix = os.path.join(self.data, "")
        self.maximum_entries = maximum_entries
        self.maximum_file_bytes = maximum_file_bytes
        self.ledger = Ledger(self.data / "ledger.log", maximum_entries)
        self.intents = LedgerIndex(self.ledger)
        self.retraction_ledger = Ledger(
            self.data / "retraction-ledger.log", maximum_entries, KIND_RETRACT
        )
        self.retraction_intents = LedgerIndex(self.retraction_ledger)
        self.journal = MigrationJournal(self.data, self.ledger)
        self.journal_path = self.journal.path
        self.rewrites = RewriteJournal(self.data)
        self.cache = PartitionCache(maximum_file_bytes, cache_entries)
        #: What tells this process's cache that another one rewrote a partition
        #: (``rewrite_counts.py``); mapped by :meth:`open_layout`.
        self.counts = RewriteCounts(self.data)
        self.cache.counts = self.counts
        self.rewrite_context = RewriteContext(
            root,
            self.data,
            self.ledger,
            self.retraction_ledger,
            self.rewrites,
            self.cache,
            maximum_file_bytes,
            self.counts,
        )
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._verified: dict[int, tuple[int, int] | None] = {}  # ledger kind -> (inode, size)

    # -- layout -------------------------------------------------------------------------

    def open_layout(self, *, create: bool = True) -> bool:
        """Check the folders for links, create the layout if allowed, verify its format.

        Returns:
            Whether a new save was created.

        Raises:
            PersistenceError: see :meth:`SaveLayout.open_folders`; a missing format file
                beside data; another format version.
        """
        created = self.layout.open_folders(create=create)
        if self.layout.read_format() is None:
            with self.locked():
                if self.layout.read_format() is None:
                    if self.ledger.stat() is not None:
                        raise PersistenceError(
                            f"{self.data / 'format.json'} is missing but the store holds data; "
                            "the save is damaged. Restore it from a backup."
                        )
                    self.layout.write_format()
        self.counts.open()
        if not self.counts.usable and create:
            with self.locked():
                self.counts.open()  # another process may have written it
                if not self.counts.usable:
                    self.counts.write()
        self.layout.remember()
        return created

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cross-process writer lock."""
        with self._lock:
            yield

    def session_directory(self, session_hash: str) -> Path:
        return self.data / f"s-{session_hash}"

    def count(self) -> int:
        """The ledger's count (checks the save folder first)."""
        self.layout.guard()
        return self.ledger.count()

    # -- reads --------------------------------------------------------------------------

    def session_folder(self, session_hash: str) -> str:
        """``session_directory`` as a string (the hot read path avoids ``pathlib``)."""
        return f"{self._data_prefix}s-{session_hash}"

    def read_partition(self, session_hash: str, owner_hash: str) -> PartitionState:
        """Read one owner partition (through the cache), unchecked against the ledger."""
        return self.cache.read(self.session_folder(session_hash), session_hash, owner_hash)

    def refresh(self, held: Held | None = None) -> Marks:
        """Bring both ledger indexes up to date (before reading partitions). ``held``: the
        ledgers as this hold of the writer lock knows them (``StoreEngine.recover``)."""
        if held is None:
            return self.intents.refresh(), self.retraction_intents.refresh()
        return (
            self.intents.refresh(held.ledger, stated=True),
            self.retraction_intents.refresh(held.retractions, stated=True),
        )

    def views(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionView]:
        """The partition views of a session (or one owner), in owner order.

        Every partition read is checked against the ledgers; the session's partitions are
        those with files *and* those the ledger names, so a deleted log is noticed too. A
        read that meets an unfinished rewrite, or a ledger rewritten under it, is done
        again under the writer lock (see the module docstring).

        Raises:
            CapacityExceededError: more than ``bound`` memories (:func:`snapshot_too_large`).
            PersistenceError: a partition is corrupt, or lost acknowledged memories.
        """
        session_hash = partition_hash(validated_id(session_id, "session_id"))
        owner_hash = None
        if owner_id is not None:
            owner_hash = partition_hash(validated_id(owner_id, "owner_id"))
        self.layout.guard()
        if self.rewrites.current() is None:
            ledger = self.ledger.stat()
            try:
                views = self._views(session_id, owner_id, session_hash, owner_hash, bound, False)
            except PersistenceError:
                views = None  # perhaps a file replaced under the read: read again, locked
            if views is not None and self.rewrites.current() is None:
                now = self.ledger.stat()
                if (ledger is None) == (now is None) and (
                    ledger is None or now is None or ledger.st_ino == now.st_ino
                ):
                    return views
        self.layout.guard()
        with self.locked():
            self.layout.guard()
            self.finish_rewrite()
            return self._views(session_id, owner_id, session_hash, owner_hash, bound, True)

    def cached_views(self, session_id: str, owner_id: str, most: int) -> list[PartitionView] | None:
        """:meth:`views` of one owner, answered from memory alone, or ``None``.

        For a caller that should not wait on the disk or on another writer (the event loop,
        for a small read: a hop into the thread pool and back costs more than the read). It
        answers only when :meth:`views` would read nothing and take no lock: no rewrite in
        progress, both ledgers as their indexes last saw them, the partition cached and
        current, its counts at least its intents (the check :meth:`verify_partition` makes
        first), and at most ``most`` memories. Every other case, errors included, is
        ``None``: the caller then calls :meth:`views` (in the pool), which reads, checks
        again under the writer lock, or raises, as always. A few ``lstat`` calls; never
        reads a file, never blocks on the writer lock.
        """
        try:
            session_hash = partition_hash(validated_id(session_id, "session_id"))
            owner_hash = partition_hash(validated_id(owner_id, "owner_id"))
            self.layout.guard()
            if self.rewrites.current() is not None:
                return None
            mark = self.intents.unchanged()
            retraction_mark = self.retraction_intents.unchanged()
            if mark is None or retraction_mark is None:
                return None
            state = self.cache.current(session_hash, owner_hash)
            if state is None or not self._counts_cover(state, (mark, retraction_mark)):
                return None
        except (InvalidArgumentError, PersistenceError):
            return None
        view = state.view
        if view is None:
            return []
        return [view] if len(view) <= most else None

    def _views(
        self,
        session_id: str,
        owner_id: str | None,
        session_hash: str,
        owner_hash: str | None,
        bound: int,
        locked: bool,
    ) -> list[PartitionView]:
        marks = self.refresh()  # before the partitions: see verify_partition
        if owner_hash is not None:
            hashes = [owner_hash]
        else:
            folder = self.session_folder(session_hash)
            hashes = sorted(
                set(self.cache.owner_hashes(folder))
                | set(self.intents.owner_hashes(session_hash))
                | set(self.retraction_intents.owner_hashes(session_hash))
            )
        views: list[PartitionView] = []
        total = 0
        for owner in hashes:
            state = self.read_partition(session_hash, owner)
            self.verify_partition(
                state, marks, locked=locked, session_id=session_id, owner_id=owner_id
            )
            view = state.view
            if view is None:
                continue
            total += len(view)
            if total > bound:
                raise snapshot_too_large(session_id, owner_id, bound)
            views.append(view)
        if len(views) > 1:
            views.sort(key=lambda view: ordinal_key(view.owner_id))
        return views

    def verify_partition(
        self,
        state: PartitionState,
        marks: Marks,
        *,
        locked: bool = False,
        session_id: str | None = None,
        owner_id: str | None = None,
    ) -> None:
        """Fail closed if ``state`` lacks acknowledged memories or retractions.

        ``marks`` must come from a refresh made *before* ``state`` was read: every intent
        before them then has its record on disk (writers append the intent, then the
        record, one writer at a time), except the newest of each ledger and the intents
        of an uncommitted migration batch (``verification.py``). A shortfall those do not
        explain is checked again under the writer lock (when ``locked`` is false), where
        nothing is in flight, before it is reported.

        Raises:
            PersistenceError: acknowledged memories or retractions of the partition are
                missing.
        """
        if self._counts_cover(state, marks):
            return
        mark, retraction_mark = marks
        session, owner = state.session_hash, state.owner_hash
        memories_ok = state.memory_count >= self.intents.intents(session, owner, mark)
        batch = None
        if not memories_ok:
            journal = self.journal.read()
            batch = None if journal is None else journal[0]
        missing = [] if memories_ok else missing_memories(self.intents, state, mark, batch)
        lost = missing_retractions(self.retraction_intents, state, retraction_mark)
        if not missing and not lost:
            return
        if not locked:
            with self.locked():
                marks = self.refresh()
                state = self.read_partition(session, owner)
                self.verify_partition(
                    state, marks, locked=True, session_id=session_id, owner_id=owner_id
                )
            return
        where = partition_name(state, session_id, owner_id)
        directory = self.session_directory(session)
        gaps = [
            gap
            for gap in (
                _series_gap(directory, owner, len(state.segments), "o") if missing else None,
                _series_gap(directory, owner, len(state.retraction_segments), "r")
                if lost
                else None,
            )
            if gap is not None
        ]
        # A segment missing from the middle of a series stops the read there: the memories
        # of the segments after it are counted as lost too, so the count is an upper bound.
        bound = "up to " if gaps else ""
        parts = []
        if missing:
            count = len(missing)
            parts.append(f"{bound}{count} acknowledged memor{'y' if count == 1 else 'ies'}")
        if lost:
            parts.append(
                f"{bound}{lost} acknowledged retraction{'' if lost == 1 else 's'} (forget)"
            )
        cause = (
            f"{' and '.join(os.path.basename(gap) for gap in gaps)} "
            f"{'is' if len(gaps) == 1 else 'are'} missing from the middle of "
            f"{'its series' if len(gaps) == 1 else 'their series'} (deleted), so the segments "
            "after it are not read; check counts exactly which are lost"
            if gaps
            else "the partition's files were cut short, deleted or damaged"
        )
        raise PersistenceError(
            f"the save has lost {' and '.join(parts)} of {where}: {cause}. It fails closed "
            f"rather than answer without them. {damage_advice(self.root)}."
        )

    def _counts_cover(self, state: PartitionState, marks: Marks) -> bool:
        """Whether ``state`` holds at least as many memories and retractions as the ledgers
        have intents for its partition before ``marks`` (the usual case: nothing lost)."""
        session, owner = state.session_hash, state.owner_hash
        return state.memory_count >= self.intents.intents(
            session, owner, marks[0]
        ) and state.retraction_count >= self.retraction_intents.intents(session, owner, marks[1])

    def finish_rewrite(self) -> bool:
        """Finish an erase or compaction a dead writer left (under the lock); whether one was."""
        rewrite = self.rewrites.read()
        if rewrite is None:
            return False
        finish_rewrite(self.rewrite_context, rewrite)
        return True
