"""Writing many memories as one durable batch: ``append_many``.

A batch, under the writer lock: recover; read every partition it touches once and check it
against the ledgers; decide each memory (new, already stored, conflict), within the batch
too; check the capacity for what is new; then, for two or more new memories:

1. the **batch journal** (``migration.json``, version 2: the ledger count before the batch
   and after it, and every log segment it appends to with its sizes before and after it)
   is written durably;
2. all intents in one write, then each partition's records in one write per segment, none
   fsynced;
3. **one barrier** fsyncs the ledger, every segment and every folder that got a new entry
   from a small thread pool;
4. the journal is removed durably: **the commit**, after which the batch is acknowledged.

A crash (``kill -9`` or power loss) before the commit leaves the journal, and the next
writer undoes the batch exactly (``journal.py``: segments cut back, new ones deleted, the
ledger cut back): all or nothing. Readers meanwhile excuse the intents after the journal's
mark, as they do for a migration batch. The journal's batch checkpoints first (every intent
durable, the unsynced marker emptied: ``unsynced.py``), since its intents are of partitions
the marker does not name.

Two modes: **atomic** (``append_many``): any conflict, damaged partition or capacity
shortfall raises and nothing is written; **independent** (the group commit of concurrent
appends, ``group_commit.py``): each memory gets its own outcome, and the accepted ones are
written as one group commit (``group_writes.py``: no journal; one fsync per log touched),
which fails every accepted memory if it fails. A batch of one new memory is a group commit
of one in either mode.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import CapacityExceededError
from game_memory.model import GameMemory
from game_memory.model.conflicts import memory_conflict
from game_memory.store.appends import plan_segments, write_planned
from game_memory.store.capacity import RAISE_THE_BOUND, full_message
from game_memory.store.digests import encoded_digests
from game_memory.store.engine import StoreEngine
from game_memory.store.group_writes import Held
from game_memory.store.ledger import MAXIMUM_GROUP, RECORD_BYTES, LedgerEntry
from game_memory.store.partitions import PartitionState, identity_hash, partition_hash
from game_memory.store.records import HEADER_BYTES

__all__ = ["Outcome", "write_batch"]

Outcome = bool | BaseException


@dataclass(slots=True)
class _Partition:
    state: PartitionState | None
    error: BaseException | None = None
    pending: dict[str, GameMemory] = field(default_factory=dict)
    records: list[bytes] = field(default_factory=list)
    memories: list[GameMemory] = field(default_factory=list)


def write_batch(
    engine: StoreEngine, memories: Sequence[GameMemory], *, atomic: bool
) -> list[Outcome]:
    """Durably add ``memories`` as one batch; one outcome per memory, in order.

    An outcome is ``True`` (added), ``False`` (an equivalent memory is stored, or came
    earlier in the batch) or, in independent mode only, the exception for that memory.
    In atomic mode the first problem is raised and nothing is written.

    Raises:
        MemoryConflictError: (atomic) an id holds, or is given in the batch, other content.
        CapacityExceededError: (atomic) the new memories do not fit, or a record is too large.
        PersistenceError: (atomic) a partition is damaged; (both) the write itself failed.
    """
    outcomes: list[Outcome | None] = [None] * len(memories)
    records: list[bytes | None] = []
    for position, memory in enumerate(memories):
        try:
            records.append(engine.encode(memory))
        except CapacityExceededError as exc:
            if atomic:
                raise
            records.append(None)
            outcomes[position] = exc
    # For the index's write and the read files of the same objects (``digests.py``); the
    # ``sha256(memory_id)`` of each is its ledger intent's too.
    hashed = encoded_digests.remember_many(memories, records, HEADER_BYTES)
    engine.layout.guard()  # before the lock, whose file is in the data folder
    with engine.locked():
        engine.layout.guard()
        held = engine.recover(checkpoint=False)
        marks = engine.refresh(held)
        partitions: dict[tuple[str, str], _Partition] = {}
        accepted: list[tuple[int, tuple[str, str]]] = []
        for position, memory in enumerate(memories):
            record = records[position]
            if record is None:
                continue
            key = (partition_hash(memory.session_id), partition_hash(memory.owner_id))
            partition = partitions.get(key)
            if partition is None:
                partition = _Partition(None)
                try:
                    state = engine.read_partition(*key)
                    engine.verify_partition(
                        state,
                        marks,
                        locked=True,
                        session_id=memory.session_id,
                        owner_id=memory.owner_id,
                    )
                    partition.state = state
                except Exception as exc:
                    if atomic:
                        raise
                    partition.error = exc
                partitions[key] = partition
            if partition.error is not None:
                outcomes[position] = partition.error
                continue
            assert partition.state is not None
            existing = partition.state.find(memory.memory_id)
            in_batch = existing is None
            if in_batch:
                existing = partition.pending.get(memory.memory_id)
            if existing is not None:
                if existing == memory:
                    outcomes[position] = False
                    continue
                if atomic:
                    raise memory_conflict(memory, in_batch=in_batch)
                outcomes[position] = memory_conflict(memory, in_batch=in_batch)
                continue
            partition.pending[memory.memory_id] = memory
            accepted.append((position, key))
        count = 0 if held.ledger is None else held.ledger.st_size // RECORD_BYTES
        room = engine.maximum_entries - count
        if len(accepted) > room:
            error = CapacityExceededError(
                full_message(engine.intents, engine.read_partition, count)
                if room <= 0
                else f"the batch adds {len(accepted):,} memories but the store has room for "
                f"{room:,} (maximum_entries {engine.maximum_entries:,}); split the batch, "
                f"erase memories, or {RAISE_THE_BOUND}",
                bound="maximum_entries",
            )
            if atomic:
                raise error
            for position, _key in accepted[max(room, 0) :]:
                outcomes[position] = error
            accepted = accepted[: max(room, 0)]
        if any(memories[position].consolidates for position, _ in accepted):
            engine.layout.require_format(3)
        elif any(memories[position].belief_key is not None for position, _ in accepted):
            engine.layout.require_format(2)
        if accepted and (len(accepted) == 1 or not atomic):
            _group(engine, memories, records, accepted, partitions, outcomes, held, atomic=atomic)
        elif accepted:
            engine.checkpoint()  # the journal's batch writes intents the marker does not name
            _commit(engine, memories, records, hashed, accepted, partitions, count)
            for position, _key in accepted:
                outcomes[position] = True
    return [False if outcome is None else outcome for outcome in outcomes]


def _group(
    engine: StoreEngine,
    memories: Sequence[GameMemory],
    records: list[bytes | None],
    accepted: list[tuple[int, tuple[str, str]]],
    partitions: dict[tuple[str, str], _Partition],
    outcomes: list[Outcome | None],
    held: Held,
    *,
    atomic: bool,
) -> None:
    """Group-commit the accepted memories (``group_writes.py``), in as few groups as the
    rule allows that a group writes one log segment per partition. ``held``: the ledgers
    and the marker as recovery left them.

    A group never appends to a segment *and* starts the next one of the same partition:
    after a power loss the new segment could then survive while the old one's unsynced
    end did not (a damaged segment before the last). A memory that would roll a
    partition over after the group already wrote to it starts the next group, written
    after this one's commit on the partition as it is then. A failed group fails its own
    memories (in independent mode, as their outcomes) and every later one.
    """
    states = {key: partitions[key].state for _, key in accepted}
    ends: dict[tuple[str, str], int] = {}  # each partition's last segment, as planned so far
    chunks: list[list[tuple[int, tuple[str, str]]]] = [[]]
    written: set[tuple[str, str]] = set()  # the partitions the last chunk writes to
    for position, key in accepted:
        record = records[position]
        assert record is not None
        if key not in ends:
            state = states[key]
            tail = state.tail if state is not None else None
            ends[key] = tail.end if tail is not None else 0
        rolls = ends[key] > 0 and ends[key] + len(record) > engine.maximum_file_bytes
        if len(chunks[-1]) >= MAXIMUM_GROUP or (rolls and key in written):
            chunks.append([])
            written = set()
        chunks[-1].append((position, key))
        written.add(key)
        ends[key] = len(record) if rolls else ends[key] + len(record)
    for number, part in enumerate(chunks):
        items = []
        for position, key in part:
            state, record = states[key], records[position]
            if number:
                state = engine.read_partition(*key)  # as the previous group left it
            assert state is not None and record is not None
            entry = LedgerEntry(key[0], key[1], identity_hash(memories[position].memory_id))
            items.append((entry, record, state))
        try:
            held = engine.write_new(items, held)
        except Exception as exc:
            if atomic:
                raise
            for later in chunks[number:]:
                for position, _key in later:
                    outcomes[position] = exc
            return
        for position, _key in part:
            outcomes[position] = True
        grown_by: dict[tuple[str, str], tuple[PartitionState, list[bytes], list[GameMemory]]] = {}
        for (_entry, record, state), (position, key) in zip(items, part, strict=True):
            grown = grown_by.setdefault(key, (state, [], []))
            grown[1].append(record)
            grown[2].append(memories[position])
        for state, written_records, written_memories in grown_by.values():
            engine.install_written(state, written_records, written_memories)


def _commit(
    engine: StoreEngine,
    memories: Sequence[GameMemory],
    records: list[bytes | None],
    hashed: list[bytes | None],
    accepted: list[tuple[int, tuple[str, str]]],
    partitions: dict[tuple[str, str], _Partition],
    count: int,
) -> None:
    """Journal, intents, records, one barrier, commit (see the module docstring).

    ``hashed``: each memory's ``sha256(memory_id)`` where the encoding computed it."""
    digests: list[tuple[bytes, bytes, bytes]] = []
    raw: dict[tuple[str, str], tuple[bytes, bytes]] = {}
    for position, key in accepted:
        partition = partitions[key]
        record = records[position]
        assert record is not None
        partition.records.append(record)
        memory = memories[position]
        partition.memories.append(memory)
        names = raw.get(key)
        if names is None:
            names = raw[key] = (bytes.fromhex(key[0]), bytes.fromhex(key[1]))
        memory_hash = hashed[position]
        if memory_hash is None:
            memory_hash = hashlib.sha256(memory.memory_id.encode("utf-8")).digest()
        digests.append((*names, memory_hash))
    intents = engine.ledger.encode_digests(digests, count)
    plans: list[tuple[PartitionState, list[tuple[str, int, list[bytes]]]]] = []
    journaled: list[tuple[str, int]] = []
    for (session_hash, _owner_hash), partition in partitions.items():
        if not partition.records or partition.state is None:
            continue
        plan = plan_segments(
            engine.session_directory(session_hash),
            partition.state,
            partition.records,
            maximum_file_bytes=engine.maximum_file_bytes,
        )
        plans.append((partition.state, plan))
        journaled.extend((path, before) for path, before, _ in plan)
    folders: set[Path] = set()
    if engine.ledger.stat() is None:
        folders.add(engine.data)  # the ledger file is new: its name must last too
    ends = [
        max(before, 0) + sum(map(len, written)) for _, plan in plans for _, before, written in plan
    ]
    engine.journal.write(count, [], journaled, ledger_after=count + len(digests), ends=ends)
    engine.ledger.append_encoded(intents, durable=False)
    for state, plan in plans:
        directory = engine.session_directory(state.session_hash)
        if fs.ensure_directory(directory, durable=False):
            folders.add(directory.parent)
        if any(before < 0 for _, before, _ in plan):
            folders.add(directory)
        write_planned(state, plan)
    files = [engine.ledger.path] + [Path(path) for _, plan in plans for path, _, _ in plan]
    fs.sync_all(files, sorted(folders))
    engine.journal.commit()
    # The intents just written are what the next refresh would read: index them now.
    engine.intents.absorb(count, intents, engine.note_verified(engine.ledger))
    # As after a group: the next batch (a bulk ingest's next 10,000) reads nothing back.
    for state, plan in plans:
        partition = partitions[(state.session_hash, state.owner_hash)]
        engine.install_plan(state, plan, partition.memories)
