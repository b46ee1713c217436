"""The synchronous core of one store folder: appends, reads checked against the ledger, recovery.

Everything here blocks; :class:`~game_memory.store.file_store.FileGameMemoryStore` runs it
in a bounded thread pool. Layout of ``<save>/.game-memory/`` (format version 1, described
in full in ``docs/storage-format.md``)::

    format.json          {"format": "game-memory-store", "format_version": 2}  (1: read too)
    lock                 the cross-process writer lock (flock)
    ledger.log           one 128-byte intent per memory (see ledger.py)
    migration.json       present only while a legacy migration batch is uncommitted
    s-<sha256(session)>/o-<sha256(owner)>[.N].log   the partition log segments
    s-<sha256(session)>/p-N.pack                    packs written by migrations
    legacy/              legacy documents moved here after their migration
    damaged/             what ``check --fix --accept-loss`` moved aside (never read)

An append, under the lock: recover; read the partition and check it against the ledger;
return if an equivalent memory is there (or raise on a conflict); check capacity with the
ledger count; append+fsync the intent; append+fsync the record (fsyncing new files'
folders). Acknowledged appends are durable; a crash leaves at most one pending intent,
which the next writer resolves.

Every read of a partition is checked against the ledger (``intents.py``): a partition that
holds fewer memories than it has intents lost acknowledged records (a cut log, a deleted
segment), and the read fails closed with a ``PersistenceError`` that says what to do,
instead of answering without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.lock import ProcessLock
from game_memory.errors import (
    CapacityExceededError,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
)
from game_memory.model import GameMemory, check_bounded_id, ordinal_key
from game_memory.store.appends import append_records, cut_tail
from game_memory.store.documents import encode_document
from game_memory.store.intents import LedgerIndex, LedgerMark
from game_memory.store.journal import MigrationJournal
from game_memory.store.layout import DATA_FOLDER, STORE_FORMAT_VERSION, SaveLayout
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.packs import plan_packs
from game_memory.store.partitions import (
    PartitionCache,
    PartitionState,
    identity_hash,
    partition_hash,
)
from game_memory.store.records import encode_record
from game_memory.store.view import PartitionView

__all__ = ["DATA_FOLDER", "STORE_FORMAT_VERSION", "StoreEngine", "damage_advice"]


def _validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


def damage_advice(root: Path) -> str:
    """What a user can do about damage to the save at ``root``."""
    return (
        f"Run 'game-memory check --save-dir {root}' to see the damage, then "
        "'game-memory check --fix --accept-loss' to keep every intact memory and give up "
        "the lost ones, or restore the save from a backup"
    )


class StoreEngine:
    """Blocking operations on one store folder; thread-safe; shared by one store object."""

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
        self.journal = MigrationJournal(self.data, self.ledger)
        self.journal_path = self.journal.path
        self.cache = PartitionCache(maximum_file_bytes, cache_entries)
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._verified: tuple[int, int] | None = None

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

    def views(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionView]:
        """The partition views of a session (or one owner), in owner order.

        Every partition read is checked against the ledger; the session's partitions are
        those with files *and* those the ledger names, so a deleted log is noticed too.

        Raises:
            CapacityExceededError: more than ``bound`` memories (``maximum_snapshot_entries``).
            PersistenceError: a partition is corrupt, or lost acknowledged memories.
        """
        session_hash = partition_hash(_validated_id(session_id, "session_id"))
        owner_hash = None
        if owner_id is not None:
            owner_hash = partition_hash(_validated_id(owner_id, "owner_id"))
        self.layout.guard()
        mark = self.intents.refresh()  # before the partitions: see verify_partition
        if owner_hash is not None:
            hashes = [owner_hash]
        else:
            folder = self.session_folder(session_hash)
            hashes = sorted(
                set(self.cache.owner_hashes(folder)) | set(self.intents.owner_hashes(session_hash))
            )
        views: list[PartitionView] = []
        total = 0
        for owner in hashes:
            state = self.read_partition(session_hash, owner)
            self.verify_partition(state, mark, session_id=session_id, owner_id=owner_id)
            view = state.view
            if view is None:
                continue
            total += len(view)
            if total > bound:
                raise CapacityExceededError(
                    f"the snapshot of session {session_id!r} holds more than {bound:,} memories "
                    "(maximum_snapshot_entries); query one owner, or raise the bound",
                    bound="maximum_snapshot_entries",
                )
            views.append(view)
        if len(views) > 1:
            views.sort(key=lambda view: ordinal_key(view.owner_id))
        return views

    def verify_partition(
        self,
        state: PartitionState,
        mark: LedgerMark,
        *,
        locked: bool = False,
        session_id: str | None = None,
        owner_id: str | None = None,
    ) -> None:
        """Fail closed if ``state`` lacks acknowledged memories the ledger promises.

        ``mark`` must come from a ledger refresh made *before* ``state`` was read: every
        intent before it then has its record on disk (writers append the intent, then the
        record, one writer at a time), except the newest intent (an append in flight, or
        one whose writer died) and the intents of an uncommitted migration batch. A
        shortfall that those do not explain is checked again under the writer lock (when
        ``locked`` is false), where nothing is in flight, before it is reported.

        Raises:
            PersistenceError: acknowledged memories of the partition are missing.
        """
        expected = self.intents.intents(state.session_hash, state.owner_hash, mark)
        if state.memory_count >= expected:
            return
        missing = self._unexplained(state, mark)
        if not missing:
            return
        if not locked:
            with self.locked():
                mark = self.intents.refresh()
                state = self.read_partition(state.session_hash, state.owner_hash)
                self.verify_partition(
                    state, mark, locked=True, session_id=session_id, owner_id=owner_id
                )
            return
        view = state.view
        owner = repr(owner_id if owner_id is not None else view.owner_id) if view else None
        session = repr(session_id if session_id is not None else view.session_id) if view else None
        where = (
            f"owner {owner or 'o-' + state.owner_hash[:12] + '…'} in session "
            f"{session or 's-' + state.session_hash[:12] + '…'}"
        )
        count = len(missing)
        raise PersistenceError(
            f"the save has lost {count} acknowledged memor{'y' if count == 1 else 'ies'} of "
            f"{where}: the partition's files were cut short, deleted or damaged. It fails "
            f"closed rather than answer without {'it' if count == 1 else 'them'}. "
            f"{damage_advice(self.root)}."
        )

    def _unexplained(self, state: PartitionState, mark: LedgerMark) -> list[int]:
        """The partition's intents before ``mark`` without a record, less the excusable."""
        positions = self.intents.positions(state.session_hash, state.owner_hash, mark)
        named = self.intents.memory_hashes(positions)
        present = (
            {identity_hash(memory.memory_id) for memory in state.view.memories}
            if state.view is not None
            else set()
        )
        missing = [p for p in positions if named.get(p) not in present and p != mark.count - 1]
        if missing:
            journal = self.journal.read()
            if journal is not None:
                missing = [p for p in missing if p < journal[0]]
        return missing

    # -- writes -------------------------------------------------------------------------

    def append(self, memory: GameMemory) -> bool:
        """Durably add ``memory``; ``False`` if an equivalent memory is already stored.

        Raises:
            MemoryConflictError: the id holds different content (nothing written).
            CapacityExceededError: the store is full or the record is too large.
            PersistenceError: the partition is damaged (nothing written).
        """
        record = encode_record(encode_document(memory))
        if len(record) > self.maximum_file_bytes:
            raise CapacityExceededError(
                f"memory {memory.memory_id!r} takes {len(record):,} bytes on disk, more than "
                f"maximum_file_bytes ({self.maximum_file_bytes:,}); shorten its payload or text",
                bound="maximum_file_bytes",
            )
        session_hash = partition_hash(memory.session_id)
        owner_hash = partition_hash(memory.owner_id)
        with self.locked():
            self.layout.guard()
            self.recover()
            mark = self.intents.refresh()
            state = self.read_partition(session_hash, owner_hash)
            self.verify_partition(
                state, mark, locked=True, session_id=memory.session_id, owner_id=memory.owner_id
            )
            existing = state.find(memory.memory_id)
            if existing is not None:
                if existing == memory:
                    return False
                raise MemoryConflictError(
                    f"memory id {memory.memory_id!r} of owner {memory.owner_id!r} in session "
                    f"{memory.session_id!r} already holds different content; an id cannot be "
                    "reused. Use a new id (derive_memory_id gives stable ones)."
                )
            if memory.belief_key is not None or memory.consolidates:
                self.layout.require_format(2)
            count = self.ledger.count()
            if count >= self.maximum_entries:
                raise CapacityExceededError(
                    f"the store holds {count:,} memories, its maximum_entries; open it with a "
                    "larger maximum_entries to add more",
                    bound="maximum_entries",
                )
            entry = LedgerEntry(session_hash, owner_hash, identity_hash(memory.memory_id))
            self.ledger.append([entry], first_index=count)
            fs.ensure_directory(self.session_directory(session_hash))
            self.write_records(state, [record], durable=True)
            self._note_verified()
            return True

    def write_records(
        self, state: PartitionState, records: list[bytes], *, durable: bool
    ) -> list[str]:
        """Append framed ``records`` to a partition's log (see ``appends.append_records``)."""
        return append_records(
            self.session_directory(state.session_hash),
            state,
            records,
            maximum_file_bytes=self.maximum_file_bytes,
            durable=durable,
        )

    def cut_tail(self, path: str, end: int) -> None:
        """Durably cut a segment back to ``end`` (dropping a torn tail). Call under the lock."""
        cut_tail(path, end)

    # -- recovery -----------------------------------------------------------------------

    def recover(self, *, force: bool = False) -> None:
        """Resolve what a crashed writer left behind. Call under the lock.

        Cuts a torn ledger record (or zeros a power loss left for one); rolls back an
        uncommitted migration batch; drops the newest intent if its record never landed.
        The newest intent is re-checked only when the ledger changed since this process
        last verified it (or with ``force``). When the newest intent's partition cannot be
        read (it is damaged) the intent is kept: it may have been acknowledged, and
        ``check`` names it with the damage.

        Raises:
            PersistenceError: the newest intent itself, or the journal, is corrupt.
        """
        if force:
            self._verified = None
        unwritten = self.ledger.unwritten_tail()
        if unwritten:
            info = self.ledger.stat()
            if info is not None:
                self.ledger.truncate((info.st_size - unwritten) // RECORD_BYTES)
        if self.journal.roll_back():
            self._verified = None
        info = self.ledger.stat()
        if info is None or (info.st_ino, info.st_size) == self._verified:
            return
        count = info.st_size // RECORD_BYTES
        if count:
            newest = self.ledger.read(count - 1, count)[0]
            try:
                present = self.is_present(newest, newest=True)
            except PersistenceError:
                present = True  # damaged: never drop what may have been acknowledged
            if not present:
                self.ledger.truncate(count - 1)
        self._note_verified()

    def is_present(self, entry: LedgerEntry, *, newest: bool = False) -> bool:
        """Whether the memory an intent names has its record in its partition."""
        state = self.read_partition(entry.session_hash, entry.owner_hash)
        tail = state.tail
        # The newest intent's record, if it landed, is its partition's last record.
        if (
            newest
            and tail is not None
            and tail.memories
            and identity_hash(tail.memories[-1].memory_id) == entry.memory_hash
        ):
            return True
        return state.has_memory_hash(entry.memory_hash)

    def write_journal(self, ledger_count: int, packs: list[str]) -> None:
        """Mark the start of a bulk batch: the ledger count before it and the packs it adds."""
        self.journal.write(ledger_count, packs)

    def commit_journal(self) -> None:
        """Mark the bulk batch committed (all its records durable)."""
        self.journal.commit()

    def plan_packs(
        self, session_hash: str, groups: list[tuple[str, list[bytes]]]
    ) -> list[tuple[str, list[tuple[str, list[bytes]]]]]:
        """Split one session's ``(owner_hash, records)`` into the session's next packs."""
        directory = self.session_directory(session_hash)
        first = len(self.cache.pack_indexes(directory)) + 1
        return plan_packs(directory, first, groups, self.maximum_file_bytes)

    def _note_verified(self) -> None:
        info = self.ledger.stat()
        self._verified = None if info is None else (info.st_ino, info.st_size)
