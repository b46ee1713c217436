"""Group commit: concurrent appends share fsyncs, a failed fsync fails its whole group, and
recovery reconciles what a kill or a power loss left (``store/group_writes.py``,
``store/reconcile.py``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, PersistenceError
from game_memory.durable import fs
from game_memory.durable.names import identity_hash, partition_hash
from game_memory.store.batches import write_batch
from game_memory.store.engine import StoreEngine
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry, group_start

from .helpers import DATA, MemoryFactory, StoreFactory


def _fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counted(fd: Any) -> None:
        calls.append(1)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def _engine(folder: Path) -> StoreEngine:
    engine = StoreEngine(
        folder,
        maximum_entries=1_000,
        maximum_file_bytes=4_000_000,
        lock_timeout=5.0,
        cache_entries=1_000,
    )
    engine.open_layout()
    return engine


async def test_concurrent_appends_share_fsyncs_and_all_land(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    for owner in range(8):  # every partition exists and is named by the marker already
        assert await store.append(make_memory(f"first-{owner}", owner_id=f"npc-{owner}"))
    calls = _fsyncs(monkeypatch)
    memories = [
        make_memory(f"m-{owner}-{n}", owner_id=f"npc-{owner}")
        for n in range(4)
        for owner in range(8)
    ]
    assert all(await asyncio.gather(*(store.append(memory) for memory in memories)))
    assert len(calls) < len(memories)  # one per log a group touches, not two per append
    found = await store.enumerate("session")
    assert await store.count() == len(found) == 40
    assert (await store.check()).ok


async def test_a_single_append_to_a_named_partition_costs_one_fsync(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    assert await store.append(make_memory("m0"))
    calls = _fsyncs(monkeypatch)
    for number in range(1, 6):
        assert await store.append(make_memory(f"m{number}"))
    assert len(calls) == 5


async def test_a_failed_fsync_fails_every_append_of_its_group_and_leaves_none(
    tmp_path: Path, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(tmp_path / "save")
    memories = [make_memory(f"m{n}", owner_id=f"npc-{n % 3}") for n in range(6)]

    def failing(files: list[Path], folders: list[Path]) -> None:
        raise PersistenceError("could not flush: EIO")

    monkeypatch.setattr(fs, "sync_all", failing)
    outcomes = write_batch(engine, memories, atomic=False)
    assert all(isinstance(outcome, PersistenceError) for outcome in outcomes)
    monkeypatch.undo()
    async with FileGameMemoryStore(tmp_path / "save") as store:
        assert await store.count() == 0
        assert await store.enumerate("session") == []
        assert all(await store.append_many(memories))  # nothing half there: all new
        assert (await store.check()).ok


async def test_a_failed_fsync_fails_concurrent_appends_through_the_store(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    assert await store.append(make_memory("m0"))

    def failing(files: list[Path], folders: list[Path]) -> None:
        raise PersistenceError("could not flush: EIO")

    monkeypatch.setattr(fs, "sync_all", failing)
    results = await asyncio.gather(
        *(store.append(make_memory(f"m{n}", owner_id=f"npc-{n}")) for n in range(1, 5)),
        return_exceptions=True,
    )
    assert all(isinstance(result, PersistenceError) for result in results)
    monkeypatch.undo()
    assert await store.count() == len(await store.enumerate("session")) == 1
    assert await store.append(make_memory("m1", owner_id="npc-1")) is True


async def test_intents_a_power_loss_took_are_written_again_when_the_save_opens(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    for number in range(4):
        assert await store.append(make_memory(f"m{number}"))
    ledger = tmp_path / "save" / DATA / "ledger.log"
    # A power loss: the records were fsynced, the intents after the first were not.
    with ledger.open("r+b") as handle:
        handle.truncate(RECORD_BYTES)
    with ledger.open("ab") as handle:
        handle.write(bytes(RECORD_BYTES))  # ... one of them persisted as zeros
    reopened = make_store()
    assert await reopened.count() == len(await reopened.enumerate("session")) == 4
    assert (await reopened.check()).ok


async def test_the_newest_groups_intents_without_records_are_pending_not_lost(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    for number in range(3):
        assert await store.append(make_memory(f"m{number}", owner_id=f"npc-{number}"))
    # A writer killed after writing a group's intents, before any of its records.
    engine = _engine(tmp_path / "save")
    count = engine.ledger.count()
    entries = [
        LedgerEntry(partition_hash("session"), partition_hash(f"npc-{n}"), identity_hash(f"x{n}"))
        for n in range(3)
    ]
    engine.ledger.append_encoded(engine.ledger.encode_group(entries, count), durable=False)
    # A reader meanwhile excuses the newest group: it does not fail closed.
    views = engine.views("session", None, 100)
    assert sum(len(view) for view in views) == 3
    reopened = make_store()
    assert await reopened.count() == len(await reopened.enumerate("session")) == 3
    assert (await reopened.check()).ok


async def test_a_record_lost_before_the_newest_group_fails_closed_and_keeps_its_intent(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    for number in range(3):
        assert await store.append(make_memory(f"m{number}"))
    assert await store.append(make_memory("other", owner_id="npc-2"))
    log = next((tmp_path / "save" / DATA).glob(f"s-*/o-{partition_hash('owner')}.log"))
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 3])  # damage: acknowledged records cut off
    reopened = make_store()
    with pytest.raises(PersistenceError, match="lost"):
        await reopened.enumerate("session", "owner")
    assert await reopened.count() == 4  # nothing acknowledged was dropped silently


def test_a_group_names_its_first_position_and_older_intents_name_none(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 100)
    entry = LedgerEntry("a" * 64, "b" * 64, "c" * 64)
    group = ledger.encode_group([entry, entry, entry], 10)
    assert [group_start(group[n * 128 : (n + 1) * 128], 10 + n) for n in range(3)] == [10] * 3
    single = ledger.encode([entry], 12)
    assert group_start(single, 12) == 12  # zero bytes: a group of its own
    damaged = group[:120] + bytes(8)
    assert group_start(damaged, 10) == 10


async def test_closing_the_store_checkpoints_so_the_save_needs_no_reconciling(
    make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    async with FileGameMemoryStore(save) as store:
        for number in range(3):
            assert await store.append(make_memory(f"m{number}", owner_id=f"npc-{number}"))
        assert (save / DATA / "unsynced.log").stat().st_size > 0
    assert (save / DATA / "unsynced.log").stat().st_size == 0
    ledger = Ledger(save / DATA / "ledger.log", 100)
    # What a release before group commit reads of each intent is unchanged.
    assert [entry.memory_hash for entry in ledger.read()] == [
        identity_hash(f"m{number}") for number in range(3)
    ]


async def test_an_appended_partition_is_cached_as_written_and_equals_a_fresh_read(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a group commits, its partitions are cached grown (PartitionCache.install_parts), so
    # the next append or snapshot reads and decodes nothing back; the state is the one a
    # read of the files builds.
    from game_memory.store import partitions

    store = make_store()
    assert await store.append(make_memory("m0"))
    assert await store.append(make_memory("m1"))
    engine = store._engine
    key = (partition_hash("session"), partition_hash("owner"))
    engine.read_partition(*key)  # current after the appends above
    reads: list[str] = []
    original = partitions.fs.read_file

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.path.basename(os.fspath(path)).startswith("o-"):
            reads.append(os.fspath(path))  # a memory log segment
        return original(path, *args, **kwargs)

    monkeypatch.setattr(partitions.fs, "read_file", counted)
    for number in range(2, 5):
        assert await store.append(make_memory(f"m{number}", text=f"word{number}"))
    state = engine.read_partition(*key)
    assert reads == []  # nothing was read back from the log
    fresh = partitions.PartitionCache(4_000_000, 1_000).read(engine.session_folder(key[0]), *key)
    assert state.view is not None and fresh.view is not None
    assert list(state.view.memories) == list(fresh.view.memories)
    assert dict(state.view.positions) == dict(fresh.view.positions)
    assert state.probes == fresh.probes and state.absent == fresh.absent
    for mine, theirs in zip(state.segments, fresh.segments, strict=True):
        assert (mine.path, mine.inode, mine.size, mine.end, mine.torn_bytes) == (
            theirs.path, theirs.inode, theirs.size, theirs.end, theirs.torn_bytes
        )  # fmt: skip
        assert mine.starts.tolist() == theirs.starts.tolist()
    snapshot = await store.enumerate("session", "owner")
    assert [memory.memory_id for memory in snapshot] == [f"m{number}" for number in range(5)]


@pytest.mark.parametrize("retractions", [False, True])
async def test_a_batch_that_rolls_into_new_segments_is_cached_as_written_and_equals_a_fresh_read(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    retractions: bool,
) -> None:
    # An atomic append_many writes the tail segment and new ones after it (small segments
    # here); the cache then holds what a read of the files builds (install_parts), so the
    # next batch of a bulk ingest reads and decodes nothing back.
    from game_memory import GameMoment
    from game_memory.store import partitions

    store = make_store(maximum_file_bytes=2_048)
    assert await store.append(make_memory("m0"))
    if retractions:  # a retraction log too: the new segments' probes go before its own
        await store.forget("session", "owner", "m0", GameMoment(timeline_id="world", tick=5))
    engine = store._engine
    key = (partition_hash("session"), partition_hash("owner"))
    engine.read_partition(*key)
    reads: list[str] = []
    original = partitions.fs.read_file

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.path.basename(os.fspath(path)).startswith("o-"):
            reads.append(os.fspath(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(partitions.fs, "read_file", counted)
    batch = [make_memory(f"b{number}", text=f"word{number} " * 20) for number in range(12)]
    assert await store.append_many(batch) == [True] * 12
    state = engine.read_partition(*key)
    assert reads == []  # nothing read back
    assert len(state.segments) > 2  # the batch rolled over, more than once
    fresh = partitions.PartitionCache(4_000_000, 1_000).read(engine.session_folder(key[0]), *key)
    assert state.view is not None and fresh.view is not None
    assert list(state.view.memories) == list(fresh.view.memories)
    assert dict(state.view.positions) == dict(fresh.view.positions)
    assert state.probes == fresh.probes and state.absent == fresh.absent
    assert len(state.segments) == len(fresh.segments)
    for mine, theirs in zip(state.segments, fresh.segments, strict=True):
        assert (mine.path, mine.inode, mine.size, mine.end, mine.torn_bytes) == (
            theirs.path, theirs.inode, theirs.size, theirs.end, theirs.torn_bytes
        )  # fmt: skip
        assert mine.starts.tolist() == theirs.starts.tolist()
        assert list(mine.items) == list(theirs.items)
    assert partitions.is_current(state)
    found = await store.enumerate("session", "owner")
    assert sorted(m.memory_id for m in found) == sorted(["m0", *(f"b{n}" for n in range(12))])


def _counted_log_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every read of a memory log segment (``o-*``) by the partition cache."""
    from game_memory.store import partitions

    reads: list[str] = []
    original = partitions.fs.read_file

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        if os.path.basename(os.fspath(path)).startswith("o-"):
            reads.append(os.fspath(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr(partitions.fs, "read_file", counted)
    return reads


async def test_a_first_batch_into_an_empty_partition_is_cached_as_written(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty partition has no view yet; its first batch is installed all the same (the
    # view a read of the new files builds), so a bulk ingest's second batch reads nothing
    # back, and closing the store finds the partition cached (its read file is written).
    from game_memory.store import partitions

    store = make_store(maximum_file_bytes=2_048)
    engine = store._engine
    key = (partition_hash("session"), partition_hash("owner"))
    reads = _counted_log_reads(monkeypatch)
    batch = [make_memory(f"b{number}", text=f"word{number} " * 20) for number in range(12)]
    assert await store.append_many(batch) == [True] * 12
    state = engine.read_partition(*key)
    assert reads == []  # installed: nothing read back
    assert state.folder is not None and partitions.is_current(state)
    fresh = partitions.PartitionCache(4_000_000, 1_000).read(engine.session_folder(key[0]), *key)
    assert state.view is not None and fresh.view is not None
    assert list(state.view.memories) == list(fresh.view.memories)
    assert state.probes == fresh.probes and state.absent == fresh.absent
    assert state.folder == fresh.folder
    reads.clear()  # the fresh read above
    second = [make_memory(f"c{number}", text=f"more{number}") for number in range(5)]
    assert await store.append_many(second) == [True] * 5
    assert reads == []


async def test_a_read_file_written_meanwhile_does_not_make_the_next_batch_read_back(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The read-file thread marks the cached state covered by replacing it with a copy; a
    # batch that read the partition before that still installs what it wrote on top of
    # the copy (keeping the coverage), instead of leaving its bytes to be read back.
    from game_memory.store import partitions, read_path

    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)
    store = make_store()
    engine = store._engine
    queued: list[Any] = []
    engine.cache.background = queued.append
    key = (partition_hash("session"), partition_hash("owner"))
    first = [make_memory(f"a{number}", text=f"word{number}") for number in range(20)]
    assert await store.append_many(first) == [True] * 20
    assert len(queued) == 1  # the read file of the first batch, not written yet
    install = engine.install_plan

    def written_meanwhile(*args: Any, **kwargs: Any) -> None:
        while queued:  # the read-file thread finishes between the batch's read and install
            queued.pop()()
        install(*args, **kwargs)

    monkeypatch.setattr(engine, "install_plan", written_meanwhile)
    reads = _counted_log_reads(monkeypatch)
    second = [make_memory(f"b{number}", text=f"word{number}") for number in range(20)]
    assert await store.append_many(second) == [True] * 20
    state = engine.read_partition(*key)
    assert reads == []
    assert state.memory_count == 40 and state.read_file_count == 20
    assert partitions.is_current(state)


async def test_a_single_append_whose_fsync_fails_is_not_acknowledged_and_leaves_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    assert await store.append(make_memory("m0"))  # the partition is named by the marker

    def failing(fd: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(PersistenceError):
        await store.append(make_memory("m1"))
    monkeypatch.undo()
    assert await store.count() == len(await store.enumerate("session")) == 1
    assert await store.append(make_memory("m1")) is True
    assert (await store.check()).ok


async def test_an_append_after_its_own_reads_back_no_ledger_record(
    tmp_path: Path, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from game_memory.store.intents import LedgerIndex

    engine = _engine(tmp_path / "save")
    for number in range(2):  # the first creates the ledger, the second reads it once
        assert write_batch(engine, [make_memory(f"m{number}")], atomic=False) == [True]
    reads: list[str] = []
    real_tail, real_read = Ledger.unwritten_tail, LedgerIndex._read

    def tail(ledger: Ledger, info: Any = None) -> int:
        reads.append("unwritten_tail")
        return real_tail(ledger, info)

    def read(index: LedgerIndex, start: int, stop: int) -> bytes:
        reads.append(f"read {start}..{stop}")
        return real_read(index, start, stop)

    monkeypatch.setattr(Ledger, "unwritten_tail", tail)
    monkeypatch.setattr(LedgerIndex, "_read", read)
    for number in range(2, 5):
        assert write_batch(engine, [make_memory(f"m{number}")], atomic=False) == [True]
    assert reads == []  # the ledger is what this process wrote: nothing to read back
    mark = engine.refresh()
    assert mark[0].count == 5
    assert engine.intents.intents(identity_hash("session"), identity_hash("owner"), mark[0]) == 5


async def test_another_writers_appends_between_two_of_ours_are_read_and_counted(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    ours, theirs = _engine(tmp_path / "save"), _engine(tmp_path / "save")
    assert write_batch(ours, [make_memory("a0")], atomic=False) == [True]
    assert write_batch(theirs, [make_memory("b0", owner_id="guard")], atomic=False) == [True]
    assert write_batch(theirs, [make_memory("b1")], atomic=False) == [True]
    assert write_batch(ours, [make_memory("a1")], atomic=False) == [True]
    marks = ours.refresh()
    session = identity_hash("session")
    assert marks[0].count == 4
    assert ours.intents.intents(session, identity_hash("owner"), marks[0]) == 3
    assert ours.intents.intents(session, identity_hash("guard"), marks[0]) == 1
    async with FileGameMemoryStore(tmp_path / "save") as store:
        assert await store.count() == len(await store.enumerate("session")) == 4
        assert (await store.check()).ok


async def test_zeros_after_the_intents_a_writer_verified_are_still_cut(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    engine = _engine(tmp_path / "save")
    assert write_batch(engine, [make_memory("m0")], atomic=False) == [True]
    ledger = tmp_path / "save" / DATA / "ledger.log"
    with open(ledger, "ab") as zeros:  # what a power loss leaves after an unsynced append
        zeros.write(bytes(2 * RECORD_BYTES))
    assert write_batch(engine, [make_memory("m1")], atomic=False) == [True]
    assert ledger.stat().st_size == 2 * RECORD_BYTES
    records = Ledger(ledger, 1_000).read()
    assert [record.memory_hash for record in records] == [
        identity_hash("m0"),
        identity_hash("m1"),
    ]
