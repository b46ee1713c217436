"""The synchronous core of one store folder: reads checked against the ledgers, appends, recovery.

Everything here blocks; :class:`~game_memory.store.file_store.FileGameMemoryStore` runs it
in a bounded thread pool. Layout of ``<save>/.game-memory/`` (format version 3, described
in full in ``docs/storage-format.md``)::

    format.json          {"format": "game-memory-store", "format_version": 3}  (1, 2: read too)
    lock                 the cross-process writer lock (flock)
    ledger.log           one 128-byte intent per memory (see ledger.py)
    unsynced.log         partitions whose records may outlive unsynced intents (unsynced.py)
    rewrite-counts       counters each rewrite moves: other processes re-read (rewrite_counts.py)
    retraction-ledger.log  one 128-byte intent per retraction (forget)
    migration.json       present only while a legacy migration batch is uncommitted
    rewrite.json         present only while an erase or a compaction is unfinished
    s-<sha256(session)>/o-<sha256(owner)>[.N].log   the partition log segments
    s-<sha256(session)>/r-<sha256(owner)>[.N].log   the partition's retraction log
    s-<sha256(session)>/p-N.pack                    packs written by migrations
    legacy/              legacy documents moved here after their migration
    damaged/             what ``check --fix --accept-loss`` moved aside (never read)

An append, under the lock: recover; read the partition and check it against the ledgers;
return if an equivalent memory is there (or raise on a conflict); check capacity with the
ledger count; then a group commit of one (``group_writes.py``: the partition named in the
unsynced marker, the intent written, the record written and fsynced: the commit). Concurrent
appends of one store object share a group (``group_commit.py``). Acknowledged appends are
durable; a kill leaves at most the newest group's intents pending and a power loss may take
intents of durable records, which the next writer (or the next open) reconciles
(``reconcile.py``). A retraction (``forget``) is written with its intent fsynced first, in
the retraction ledger, and its record in the retraction log.

The read path, checked against the ledgers, is :class:`~game_memory.store.reader.StoreReader`'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from game_memory.errors import CapacityExceededError, PersistenceError
from game_memory.model import GameMemory
from game_memory.model.conflicts import memory_conflict
from game_memory.store.appends import append_records, cut_tail
from game_memory.store.capacity import full_message
from game_memory.store.documents import encode_document
from game_memory.store.group_writes import Held, write_group
from game_memory.store.journal import RolledBack
from game_memory.store.layout import DATA_FOLDER, STORE_FORMAT_VERSION
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.packs import plan_packs
from game_memory.store.partitions import PartitionState, identity_hash, partition_hash
from game_memory.store.reader import Marks, StoreReader, damage_advice, validated_id
from game_memory.store.reconcile import reconcile
from game_memory.store.records import encode_record
from game_memory.store.unsynced import Unsynced, UnsyncedMarker

__all__ = [
    "DATA_FOLDER",
    "STORE_FORMAT_VERSION",
    "Marks",
    "Settled",
    "StoreEngine",
    "damage_advice",
    "validated_id",
]

_log = logging.getLogger("game_memory.store")


@dataclass
class Settled:
    """What :meth:`StoreEngine.settle` resolved of a dead writer's leftovers when the save
    was opened, not yet reported: ``check`` names it (opening the save changed it before
    the check looked) and takes it (:meth:`StoreEngine.take_settled`)."""

    #: The batches that never committed, rolled back.
    batches: list[RolledBack] = field(default_factory=list)
    #: Pending intents of a killed group commit dropped, and intents a power loss took
    #: written again (``reconcile.py``).
    dropped: int = 0
    added: int = 0


class StoreEngine(StoreReader):
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
        super().__init__(
            root,
            maximum_entries=maximum_entries,
            maximum_file_bytes=maximum_file_bytes,
            lock_timeout=lock_timeout,
            cache_entries=cache_entries,
        )
        #: The unsynced-intents marker (``unsynced.py``).
        self.unsynced = UnsyncedMarker(self.data / "unsynced.log")
        #: Intents dropped and added by reconciling so far (``check`` reports them).
        self.reconciled = (0, 0)
        #: What opening the save resolved, until ``check`` reports it (:class:`Settled`).
        self.settled = Settled()

    def prepare(
        self, session_hash: str, owner_hash: str, memory: GameMemory | None = None
    ) -> tuple[PartitionState, Marks]:
        """Under the lock: recover, then read a partition checked against the ledgers."""
        self.layout.guard()
        marks = self.refresh(self.recover(checkpoint=False))
        state = self.read_partition(session_hash, owner_hash)
        session_id = owner_id = None
        if memory is not None:
            session_id, owner_id = memory.session_id, memory.owner_id
        self.verify_partition(state, marks, locked=True, session_id=session_id, owner_id=owner_id)
        return state, marks

    # -- writes -------------------------------------------------------------------------

    def append(self, memory: GameMemory) -> bool:
        """Durably add ``memory``; ``False`` if an equivalent memory is already stored.

        Raises:
            MemoryConflictError: the id holds different content (nothing written).
            CapacityExceededError: the store is full or the record is too large.
            PersistenceError: the partition is damaged (nothing written).
        """
        record = self.encode(memory)
        session_hash = partition_hash(memory.session_id)
        owner_hash = partition_hash(memory.owner_id)
        self.layout.guard()  # before the lock, whose file is in the data folder
        with self.locked():
            state, _marks = self.prepare(session_hash, owner_hash, memory)
            return self.add_locked(memory, record, state)

    def encode(self, memory: GameMemory) -> bytes:
        """The framed record of ``memory``, refused if larger than a file may be."""
        record = encode_record(encode_document(memory))
        if len(record) > self.maximum_file_bytes:
            raise CapacityExceededError(
                f"memory {memory.memory_id!r} takes {len(record):,} bytes on disk, more than "
                f"maximum_file_bytes ({self.maximum_file_bytes:,}); shorten its payload or text",
                bound="maximum_file_bytes",
            )
        return record

    def add_locked(self, memory: GameMemory, record: bytes, state: PartitionState) -> bool:
        """The append itself, under the lock, on ``state`` as :meth:`prepare` read it."""
        existing = state.find(memory.memory_id)
        if existing is not None:
            if existing == memory:
                return False
            raise memory_conflict(memory)
        count = self.ledger.count()
        if count >= self.maximum_entries:
            raise CapacityExceededError(
                full_message(self.intents, self.read_partition, count), bound="maximum_entries"
            )
        # Only once the append will be written: a refused one writes nothing, and a format
        # raised for nothing would lock older releases out of a save with no newer record.
        if memory.consolidates:
            self.layout.require_format(3)
        elif memory.belief_key is not None:
            self.layout.require_format(2)
        entry = LedgerEntry(state.session_hash, state.owner_hash, identity_hash(memory.memory_id))
        self.write_new([(entry, record, state)])
        return True

    def write_new(
        self,
        items: Sequence[tuple[LedgerEntry, bytes, PartitionState]],
        held: Held | None = None,
    ) -> Held:
        """Group-commit new memories, decided and counted (``group_writes.py``); under the lock.

        ``held``: the ledgers and the marker as this hold of the lock knows them (from
        :meth:`recover`, or the previous group's return); ``None`` reads them.

        Returns:
            The ledgers and the marker after the group, for the next group of this hold.

        Raises:
            PersistenceError: a write or fsync failed: none of ``items`` was acknowledged.
        """
        try:
            written = write_group(
                self.ledger,
                self.unsynced,
                items,
                directory=self.session_directory,
                maximum_file_bytes=self.maximum_file_bytes,
                checkpoint=self.checkpoint,
                held=held,
            )
        except BaseException:
            self._verified.pop(self.ledger.kind, None)  # the next recovery reconciles
            raise
        after = self.note_verified(self.ledger)
        # The intents just written are what the next refresh would read: index them now.
        self.intents.absorb(written.first, written.intents, after)
        retractions = held.retractions if held is not None else self.retraction_ledger.stat()
        return Held(after, retractions, written.unsynced)

    def install_written(
        self, state: PartitionState, records: Sequence[bytes], memories: Sequence[GameMemory]
    ) -> None:
        """Cache the partition grown by a group just committed (``PartitionCache.install_parts``),
        so the next append or snapshot reads nothing back. Never raises: the memories are
        durable already, and a partition not installed is read as before."""
        tail = state.tail
        if tail is not None:
            self.install_plan(state, [(tail.path, tail.end, records)], memories)

    def install_plan(
        self,
        state: PartitionState,
        plan: Sequence[tuple[str, int, Sequence[bytes]]],
        memories: Sequence[GameMemory],
    ) -> None:
        """Cache the partition grown by a write plan just committed (a group's or a batch's:
        ``(path, size before, records)`` per segment written, ``memories`` those records'
        in order; ``PartitionCache.install_parts``). Never raises: the memories are durable
        already, and a partition not installed is read as before."""
        if any(type(memory) is not GameMemory for memory in memories):
            return  # the cache holds what a read decodes: plain memories only
        if sum(len(records) for _, _, records in plan) != len(memories):
            return
        parts = []
        start = 0
        for path, before, records in plan:
            parts.append((path, before, records, memories[start : start + len(records)]))
            start += len(records)
        try:
            self.cache.install_parts(self.session_folder(state.session_hash), state, parts)
        except Exception:  # an optimisation: forget the partition, the next read rebuilds it
            self.cache.forget(state.session_hash, state.owner_hash)

    def persist_derived(self) -> None:
        """Write the derived files the next open reads instead of the save, for everything
        they do not cover yet: the read file of every cached partition
        (``PartitionCache.persist_all``) and both ledgers' intent files
        (``LedgerIndex.persist``). At close, after the background writes are done; never
        raises (they are optimisations, rebuilt from the save when missing). The stamps
        loads handed off and the read-file thread did not write come first, for the files
        as those loads checked them (``upkeep.py``)."""
        if self.cache.upkeep is not None:
            self.cache.upkeep.drain()
        self.cache.persist_all()
        self.intents.persist()
        self.retraction_intents.persist()

    def checkpoint(self) -> None:
        """Make every intent durable and end the unsynced marker's generation (under the
        lock, in a consistent state: after recovery)."""
        if self.unsynced.read() is None:
            return
        self.ledger.sync()
        self.unsynced.clear()

    def settle(self, *, checkpoint: bool) -> None:
        """Reconcile what a crashed writer's group commit or batch may have left (only while
        the unsynced marker is not empty or a batch journal is there; nothing else of the
        recovery): at open, so ``count()`` agrees with ``enumerate`` and no read sees a
        batch that never committed, from the first read after a crash; with
        ``checkpoint``, also end the marker's generation (at close).

        A batch journal found under the writer lock is a dead writer's (a batch commits
        before its writer lets the lock go): it is rolled back. A corrupt one is left to
        the reads, which fail closed on it, and to ``check``, which names it. What was
        rolled back or reconciled is kept in :attr:`settled` for ``check`` to report: it
        changed the save before any check could look."""
        if self.unsynced.read() is None and not os.path.lexists(self.journal.path):
            return
        self.layout.guard()
        with self.locked():
            self.layout.guard()
            try:
                rolled = self.journal.roll_back()
            except PersistenceError as exc:
                _log.warning("a batch journal was not rolled back at open: %s", exc)
                rolled = None
            if rolled is not None:
                self._verified.clear()
                self.settled.batches.append(rolled)
                _log.info(
                    "rolled back a batch that never committed (%d intents) at open", rolled.intents
                )
            unsynced = self.unsynced.read()
            if unsynced is None:
                return
            unwritten = self.ledger.unwritten_tail()
            info = self.ledger.stat()
            if unwritten and info is not None:
                self.ledger.truncate((info.st_size - unwritten) // RECORD_BYTES)
            dropped, added = self.reconciled
            self._reconcile(unsynced, force=False)
            self.settled.dropped += self.reconciled[0] - dropped
            self.settled.added += self.reconciled[1] - added
            if checkpoint:
                self.checkpoint()

    def take_settled(self) -> Settled:
        """What :meth:`settle` resolved and no check reported yet; reported once (under the
        writer lock, as ``check`` calls it)."""
        settled, self.settled = self.settled, Settled()
        return settled

    def _reconcile(
        self, unsynced: Unsynced, *, force: bool, info: os.stat_result | None = None
    ) -> bool:
        """Reconcile the add ledger with the marker's partitions, if it changed since this
        process last verified it (``reconcile.py``); whether it was looked at (the ledger
        may have changed then). ``info``: the ledger's stat just taken, if the caller has
        it."""
        if info is None:
            info = self.ledger.stat()
        if (
            not force
            and info is not None
            and ((info.st_ino, info.st_size) == self._verified.get(self.ledger.kind))
        ):
            return False
        dropped, added = reconcile(self.ledger, self.intents, self.read_partition, unsynced)
        self.reconciled = (self.reconciled[0] + dropped, self.reconciled[1] + added)
        self.note_verified(self.ledger)
        return True

    def write_records(
        self, state: PartitionState, records: list[bytes], *, durable: bool, series: str = "o"
    ) -> list[str]:
        """Append framed ``records`` to a partition's log (see ``appends.append_records``)."""
        return append_records(
            self.session_directory(state.session_hash),
            state,
            records,
            maximum_file_bytes=self.maximum_file_bytes,
            durable=durable,
            series=series,
        )

    def cut_tail(self, path: str, end: int) -> None:
        """Durably cut a segment back to ``end`` (dropping a torn tail). Call under the lock."""
        cut_tail(path, end)

    # -- recovery -----------------------------------------------------------------------

    def recover(self, *, force: bool = False, checkpoint: bool = True) -> Held:
        """Resolve what a crashed writer left behind. Call under the lock.

        Cuts a torn record (or zeros a power loss left for one) off either ledger; rolls
        back an uncommitted migration batch; finishes an unfinished erase or compaction;
        while the unsynced marker names partitions, reconciles the intents after its
        watermark with their records (``reconcile.py``: the newest group's intents
        without records dropped, intents a power loss took written again); otherwise
        drops the newest intent of the add ledger if its record never landed; the same
        for the retraction ledger. This is re-checked only when a ledger changed since
        this process last verified it (or with ``force``). When a partition cannot be
        read (it is damaged) its intents are kept: they may have been acknowledged, and
        ``check`` names them with the damage. With ``checkpoint`` (every writer but an
        append, which keeps the marker's generation going) it then makes every intent
        durable and empties the marker.

        Returns:
            The ledgers and the marker as recovery left them (``group_writes.Held``), for the
            rest of this hold of the lock: nothing else writes them meanwhile.

        Raises:
            PersistenceError: the newest intent itself, or a journal, is corrupt.
        """
        if force:
            self._verified.clear()
        ledgers = (self.ledger, self.retraction_ledger)
        infos = [ledger.stat() for ledger in ledgers]
        for number, ledger in enumerate(ledgers):
            info = infos[number]
            if info is None:
                continue
            if (info.st_ino, info.st_size) == self._verified.get(ledger.kind):
                # Unchanged since this process verified its newest intent (its own write
                # or a recovery): its end holds that intent. Zeros at the end are what a
                # power loss leaves, and a power loss ends this process too.
                continue
            unwritten = ledger.unwritten_tail(info)
            if unwritten:
                ledger.truncate((info.st_size - unwritten) // RECORD_BYTES)
                infos[number] = ledger.stat()
        if self.journal.roll_back():
            self._verified.clear()
            infos = [ledger.stat() for ledger in ledgers]
        if self.finish_rewrite():
            self._verified.clear()
            infos = [ledger.stat() for ledger in ledgers]
        unsynced = self.unsynced.read()
        for number, ledger in enumerate(ledgers):
            info = infos[number]
            verified = self._verified.get(ledger.kind)
            if ledger is self.ledger and unsynced is not None:
                if self._reconcile(unsynced, force=info is None, info=info):
                    infos[number] = ledger.stat()
                continue
            if info is None or (info.st_ino, info.st_size) == verified:
                continue
            count = info.st_size // RECORD_BYTES
            if count:
                newest = ledger.newest(count)  # damaged: its message names the repair
                try:
                    present = self.is_present(newest, ledger, newest=True)
                except PersistenceError:
                    present = True  # damaged: never drop what may have been acknowledged
                if not present:
                    ledger.truncate(count - 1)
            infos[number] = self.note_verified(ledger)
        if checkpoint and unsynced is not None:
            self.checkpoint()
            unsynced = None
        return Held(infos[0], infos[1], unsynced)

    def is_present(self, entry: LedgerEntry, ledger: Ledger, *, newest: bool = False) -> bool:
        """Whether the record an intent of ``ledger`` promises is in its partition."""
        state = self.read_partition(entry.session_hash, entry.owner_hash)
        if ledger is self.retraction_ledger:
            # Retractions are counted, not named: the newest one landed if the partition
            # holds as many as its intents. Two or more short is damage, not an append in
            # flight: never drop an intent then (reads and check name the loss).
            mark = self.retraction_intents.refresh()
            expected = self.retraction_intents.intents(entry.session_hash, entry.owner_hash, mark)
            return state.retraction_count != expected - 1
        tail = state.tail
        mark = self.intents.refresh()
        if (
            state.memory_count
            < self.intents.intents(entry.session_hash, entry.owner_hash, mark) - 1
        ):
            # Two or more short is damage (a log cut inside an acknowledged record reads like
            # a torn tail), not an append in flight: never drop the intent then.
            return True
        # The newest intent's record, if it landed, is its partition's last record.
        if (
            newest
            and tail is not None
            and tail.items
            and identity_hash(tail.items[-1].memory_id) == entry.memory_hash
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

    def note_verified(
        self, ledger: Ledger, info: os.stat_result | None = None
    ) -> os.stat_result | None:
        """Remember the ledger as verified (its newest intent has its record); its stat.

        ``info``: the ledger's stat just taken under the lock, if the caller has it."""
        if info is None:
            info = ledger.stat()
        self._verified[ledger.kind] = None if info is None else (info.st_ino, info.st_size)
        return info
