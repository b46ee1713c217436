"""Damage named, and its salvage: lost acknowledged memories fail closed, never vanish quietly.

The ledger knows every acknowledged memory, so a partition whose files lost records (cut
short, deleted, damaged) fails closed on every read and append. ``check`` tells a pending
append (only the newest intent can be one) from acknowledged memories that are lost, and
names the partition and the count. ``check(fix=True)`` drops nothing acknowledged and says
so; ``check(accept_loss=True)`` keeps every intact record before and after the damage,
moves the damaged bytes aside, records the lost ids and leaves a consistent store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from game_memory import GameMemoryQuery, PersistenceError, open_memory
from game_memory.durable.names import identity_hash
from game_memory.store.ledger import RECORD_BYTES
from game_memory.store.records import HEADER_BYTES
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, log_path, session_folder, write_legacy


def offsets(path: Path) -> list[int]:
    """The offset of every record of a log (read from the length fields)."""
    data, found, position = path.read_bytes(), [], 0
    while position + HEADER_BYTES <= len(data):
        found.append(position)
        position += HEADER_BYTES + int.from_bytes(data[position + 4 : position + 8], "little")
    return found


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x20
    path.write_bytes(bytes(data))


async def ten_memories(make_store: StoreFactory, make_memory: MemoryFactory) -> Path:
    """``m0`` ... ``m9`` of owner ``mira``, then one of ``jory`` (the store's newest)."""
    store = make_store()
    for index in range(10):
        await store.append(make_memory(f"m{index}", owner_id="mira", text=f"memory {index}"))
    await store.append(make_memory("j0", owner_id="jory"))
    await store.aclose()
    return Path(store.directory)


def ids(memories: list[object]) -> list[str]:
    return sorted(memory.memory_id for memory in memories)  # type: ignore[attr-defined]


async def test_a_log_cut_short_fails_closed_on_every_read_and_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "mira")
    log.write_bytes(log.read_bytes()[: offsets(log)[6] + 30])  # m6 cut, m7..m9 gone
    store = make_store(save)
    with pytest.raises(PersistenceError, match="lost 4 acknowledged memories of owner 'mira'"):
        await store.enumerate("session", "mira")
    with pytest.raises(PersistenceError, match="check --fix --accept-loss"):
        await search(store, GameMemoryQuery(session_id="session", text="memory", limit=5))
    with pytest.raises(PersistenceError, match="lost 4"):
        await store.append(make_memory("m10", owner_id="mira"))
    assert log.stat().st_size == offsets(log)[6] + 30  # the writer cut nothing
    # Other partitions still answer and take appends.
    assert ids(await store.enumerate("session", "jory")) == ["j0"]
    assert await store.append(make_memory("j1", owner_id="jory")) is True


async def test_a_deleted_log_fails_closed_for_the_session_too(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log_path(save, "session", "mira").unlink()
    store = make_store(save)
    with pytest.raises(PersistenceError, match="lost 10 acknowledged memories"):
        await store.enumerate("session")
    with pytest.raises(PersistenceError, match="lost 10"):
        await store.enumerate("session", "mira")


async def test_check_names_the_partition_and_count_of_lost_memories_and_fix_drops_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "mira")
    log.write_bytes(log.read_bytes()[: offsets(log)[6] + 30])
    store = make_store(save)
    report = await store.check()
    assert not report.ok
    (lost,) = [p for p in report.problems if "lost or unreadable" in p]
    assert "session 'session', owner 'mira': 4 acknowledged memories are lost" in lost
    assert "6 intact" in lost and "ends in the middle of a record" in lost
    assert not any("pending append" in p or "torn record" in p for p in report.problems)
    assert "memory 6" not in " ".join(report.problems)  # never a memory's text
    fixed = await store.check(fix=True)
    assert fixed.repairs == ()
    assert any("repaired none of the damage" in p for p in fixed.problems)
    assert await store.count() == 11


async def test_a_flipped_byte_is_named_as_damage_not_as_a_pending_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "mira")
    flip(log, offsets(log)[3] + HEADER_BYTES + 5)
    store = make_store(save)
    with pytest.raises(PersistenceError, match="corrupt"):
        await store.enumerate("session", "mira")
    report = await store.check(list_ids=True)
    (problem,) = [p for p in report.problems if "lost or unreadable" in p]
    assert "1 acknowledged memory is lost" in problem and "9 intact" in problem
    assert "checksum mismatch" in problem
    assert "lost ids: 'm3'" in problem  # read out of the damaged record, checked by hash
    assert not any("pending" in p for p in report.problems)


async def test_accept_loss_keeps_every_intact_record_before_and_after_the_damage(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "mira")
    damaged_at = offsets(log)[3]
    flip(log, damaged_at + 1)  # m3's magic: the scan resynchronizes on m4's header
    flip(log, offsets(log)[6] + HEADER_BYTES + 9)  # m6's payload
    before = log.read_bytes()
    store = make_store(save)
    report = await store.check(accept_loss=True)
    assert report.ok, report.problems
    assert any("gave up 2 acknowledged memories" in r for r in report.repairs)
    expected = [f"m{i}" for i in range(10) if i not in (3, 6)]
    assert ids(await store.enumerate("session", "mira")) == expected
    assert await store.count() == report.memories == report.ledger_entries == 9
    # The damaged original is kept, byte for byte, with a report of what was lost.
    (folder,) = (save / DATA / "damaged").iterdir()
    originals = [p for p in folder.iterdir() if p.name.endswith(".log")]
    assert [p.read_bytes() for p in originals] == [before]
    written = json.loads((folder / "report.json").read_text())
    lost = {entry["memory_hash"]: entry for entry in written["lost_memories"]}
    assert set(lost) == {identity_hash("m3"), identity_hash("m6")}
    assert lost[identity_hash("m6")]["memory_id"] == "m6"
    assert lost[identity_hash("m6")]["owner_id"] == "mira"
    assert (await store.check()).ok
    assert await store.append(make_memory("m10", owner_id="mira")) is True


async def test_accept_loss_refills_a_missing_segment_so_later_segments_are_read(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store(maximum_file_bytes=1_024)
    for index in range(6):
        await store.append(make_memory(f"m{index}", text="x" * 300))
    await store.aclose()
    save = Path(store.directory)
    second = log_path(save, "session", "owner", 1)
    assert log_path(save, "session", "owner", 2).exists()
    lost = len(offsets(second))
    second.unlink()
    store = make_store(save, maximum_file_bytes=1_024)
    with pytest.raises(PersistenceError, match="acknowledged memor"):
        await store.enumerate("session")
    report = await store.check(accept_loss=True)
    assert report.ok, report.problems
    assert second.exists() and second.stat().st_size == 0
    remaining = ids(await store.enumerate("session"))
    assert len(remaining) == 6 - lost and {"m0", "m5"} <= set(remaining)


async def test_accept_loss_rebuilds_a_damaged_pack_from_its_intact_records(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = Path(make_store().directory)
    for index in range(6):
        write_legacy(save, make_memory(f"m{index}", owner_id=f"o{index % 2}"))
    store = make_store(save)
    assert (await store.migrate_legacy_layout()).migrated_entries == 6
    await store.aclose()
    pack = session_folder(save, "session") / "p-1.pack"
    flip(pack, 8 + HEADER_BYTES + 10)  # inside the first record's payload
    store = make_store(save)
    report = await store.check(accept_loss=True)
    assert report.ok, report.problems
    assert len(await store.enumerate("session")) == 5
    assert await store.count() == 5


async def test_a_damaged_ledger_record_is_rebuilt_from_the_partitions(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    flip(save / DATA / "ledger.log", 3 * RECORD_BYTES + 40)
    store = make_store(save)
    assert len(await store.enumerate("session", "mira")) == 10  # reads go on
    report = await store.check(fix=True)
    assert any("corrupt at record 3" in p for p in report.problems)
    salvaged = await store.check(accept_loss=True)
    assert salvaged.ok, salvaged.problems
    assert await store.count() == 11


async def test_a_pending_intent_is_only_ever_the_newest_one(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "jory")
    log.write_bytes(b"")  # the newest memory's record never landed: a pending append
    store = make_store(save)
    report = await store.check()
    assert [p for p in report.problems if "pending append" in p]
    assert not [p for p in report.problems if "lost" in p]
    fixed = await store.check(fix=True)
    assert fixed.ok and await store.count() == 10


async def test_zeros_where_the_newest_intent_should_be_are_an_unwritten_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    with (save / DATA / "ledger.log").open("ab") as ledger:
        ledger.write(bytes(RECORD_BYTES))  # a power loss kept the size, not the data
    store = make_store(save)
    assert await store.append(make_memory("j1", owner_id="jory")) is True
    assert (await store.check()).ok
    assert await store.count() == 12


async def test_zeros_in_the_ledger_are_cut_by_check_fix(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    with (save / DATA / "ledger.log").open("ab") as ledger:
        ledger.write(bytes(RECORD_BYTES + 40))
    store = make_store(save)
    report = await store.check()
    assert any("torn record" in p for p in report.problems)
    fixed = await store.check(fix=True)
    assert fixed.ok, fixed.problems
    assert (save / DATA / "ledger.log").stat().st_size == 11 * RECORD_BYTES


async def test_a_damaged_partition_holding_the_newest_intent_blocks_no_other_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "jory")
    flip(log, HEADER_BYTES + 3)
    store = make_store(save)
    assert await store.append(make_memory("m10", owner_id="mira")) is True
    with pytest.raises(PersistenceError, match="corrupt"):
        await store.append(make_memory("j1", owner_id="jory"))


@pytest.mark.parametrize("model", ["lexical", "hashing"])
async def test_recall_through_the_front_door_fails_closed_and_says_what_to_do(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, model: str
) -> None:
    save = await ten_memories(make_store, make_memory)
    log = log_path(save, "session", "mira")
    log.write_bytes(log.read_bytes()[: offsets(log)[8]])  # m8 and m9 gone, cleanly
    async with await open_memory(save, index=tmp_path / "index", model=model) as memory:
        query = GameMemoryQuery(session_id="session", text="memory", limit=5)
        with pytest.raises(PersistenceError, match=r"lost 2 acknowledged memories.*accept-loss"):
            await memory.recall(query)
        with pytest.raises(PersistenceError, match="lost 2"):
            await memory.get_status("session")


async def test_a_file_over_the_bound_is_reported_and_never_salvaged_away(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await ten_memories(make_store, make_memory)  # written with the default bound
    store = make_store(save, maximum_file_bytes=1_024)  # opened with a smaller one
    log = log_path(save, "session", "mira")
    before = log.read_bytes()
    assert len(before) > 1_024
    report = await store.check(accept_loss=True)
    assert not report.ok and report.repairs == ()
    assert any("maximum_file_bytes" in problem for problem in report.problems)
    assert log.read_bytes() == before
    assert len(await make_store(save).enumerate("session", "mira")) == 10
