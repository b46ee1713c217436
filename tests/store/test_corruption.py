"""Mayhem: damage a save on purpose and assert the documented outcome.

Damage to anything acknowledged fails closed with PersistenceError; a torn tail (the mark of
a writer that died mid-append) is ignored by readers and cut by the next writer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from game_memory import GameMemoryQuery, PersistenceError
from game_memory.store.documents import encode_document
from game_memory.store.records import HEADER_BYTES, encode_record
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, log_path, session_folder, write_legacy


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x20
    path.write_bytes(bytes(data))


async def three_memories(make_store: StoreFactory, make_memory: MemoryFactory) -> Path:
    store = make_store()
    await store.append(make_memory("elsewhere", owner_id="other-owner"))
    for index in range(3):  # m2 is the newest append of the store
        await store.append(make_memory(f"m{index}", text=f"memory number {index}"))
    await store.aclose()
    return Path(store.directory)


def record_offsets(path: Path) -> list[int]:
    data, offsets, position = path.read_bytes(), [], 0
    while position < len(data):
        offsets.append(position)
        position += HEADER_BYTES + int.from_bytes(data[position + 4 : position + 8], "little")
    return offsets


@pytest.mark.parametrize("record", [1, 2], ids=["middle record", "last record"])
@pytest.mark.parametrize("field", [0, 5, 9, 13, HEADER_BYTES + 3], ids=lambda f: f"byte {f}")
async def test_a_flipped_byte_in_a_log_record_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, record: int, field: int
) -> None:
    save = await three_memories(make_store, make_memory)
    log = log_path(save, "session", "owner")
    flip(log, record_offsets(log)[record] + field)
    store = make_store(save)
    with pytest.raises(PersistenceError, match="corrupt"):
        await store.enumerate("session", "owner")
    with pytest.raises(PersistenceError, match="corrupt"):
        await store.append(make_memory("m9"))
    # Another owner's partition is never read for this one, so it still answers.
    assert [m.memory_id for m in await store.enumerate("session", "other-owner")] == ["elsewhere"]
    assert not (await store.check()).ok


async def test_a_torn_tail_is_invisible_then_cut_by_the_next_append(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    log = log_path(save, "session", "owner")
    last = record_offsets(log)[2]
    with log.open("r+b") as file:  # a writer died half-way through m2
        file.truncate(last + 20)
    store = make_store(save)
    assert [m.memory_id for m in await store.enumerate("session", "owner")] == ["m0", "m1"]
    assert await store.append(make_memory("m3")) is True
    assert log.stat().st_size == last + len(encode_record(encode_document(make_memory("m3"))))
    assert [m.memory_id for m in await store.enumerate("session", "owner")] == ["m0", "m1", "m3"]
    # m2's intent was the newest one, so it was recognised as a pending append and dropped.
    assert await store.count() == 4
    assert (await store.check()).ok


async def test_check_reports_a_torn_tail_and_fix_repairs_it(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    log = log_path(save, "session", "owner")
    last = record_offsets(log)[2]
    with log.open("r+b") as file:  # the writer of m2 died mid-append
        file.truncate(log.stat().st_size - 7)
    store = make_store(save)
    report = await store.check()
    assert not report.ok
    assert any("torn" in problem for problem in report.problems)
    fixed = await store.check(fix=True)
    assert fixed.ok, fixed.problems
    assert any("torn tail" in repair for repair in fixed.repairs)
    assert any("pending" in repair for repair in fixed.repairs)
    assert log.stat().st_size == last
    assert (fixed.memories, fixed.ledger_entries, await store.count()) == (3, 3, 3)


async def test_a_flipped_byte_in_the_newest_ledger_intent_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    flip(save / DATA / "ledger.log", 3 * 128 + 40)
    with pytest.raises(PersistenceError, match=r"ledger\.log is corrupt"):
        await make_store(save).append(make_memory("m9"))


async def test_a_flipped_byte_in_an_older_ledger_intent_is_reported_by_check(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    flip(save / DATA / "ledger.log", 128 + 40)
    store = make_store(save)
    report = await store.check(fix=True)
    assert not report.ok and report.repairs == ()
    assert any("corrupt at record 1:" in problem for problem in report.problems)


async def test_a_flipped_byte_in_a_pack_index_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    for index in range(4):
        write_legacy(save, make_memory(f"m{index}", owner_id=f"o{index % 2}"))
    store = make_store(save)
    assert (await store.migrate_legacy_layout()).migrated_entries == 4
    await store.aclose()
    pack = session_folder(save, "session") / "p-1.pack"
    flip(pack, pack.stat().st_size - 24 - 10)  # inside the owner index
    store = make_store(save)
    with pytest.raises(PersistenceError, match="corrupt"):
        await search(store, GameMemoryQuery(session_id="session", owner_id="o1", limit=5))
    assert not (await store.check()).ok


async def test_an_unknown_store_format_version_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    (save / DATA / "format.json").write_text(
        json.dumps({"format": "game-memory-store", "format_version": 4})
    )
    with pytest.raises(PersistenceError, match="format 4"):
        await make_store(save).count()


@pytest.mark.parametrize("content", ["not json", "[]", '{"format": "other", "format_version": 1}'])
async def test_a_damaged_format_file_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, content: str
) -> None:
    save = await three_memories(make_store, make_memory)
    (save / DATA / "format.json").write_text(content)
    with pytest.raises(PersistenceError, match="format"):
        await make_store(save).enumerate("session")


async def test_a_missing_format_file_with_data_present_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    (save / DATA / "format.json").unlink()
    with pytest.raises(PersistenceError, match=r"format\.json is missing"):
        await make_store(save).append(make_memory("m9"))


async def test_a_record_copied_into_another_partition_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    stray = encode_record(encode_document(make_memory("intruder", owner_id="someone-else")))
    with log_path(save, "session", "owner").open("ab") as file:
        file.write(stray)
    with pytest.raises(PersistenceError, match="another session or owner"):
        await make_store(save).enumerate("session", "owner")


async def test_two_different_records_with_one_id_fail_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    twin = encode_record(encode_document(make_memory("m1", text="a different m1")))
    with log_path(save, "session", "owner").open("ab") as file:
        file.write(twin)
    with pytest.raises(PersistenceError, match="two different memories"):
        await make_store(save).enumerate("session", "owner")


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"format_version": 2, "memory": {}}',
        b'{"format_version": 1}',
        b'{"format_version": 1, "memory": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"format_version": 1, "memory": {"importance": ' + b"9" * 400 + b"}}",
    ],
    ids=["not json", "not an object", "version 2", "no memory", "too deep", "huge number"],
)
async def test_a_well_framed_record_with_an_unreadable_payload_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, payload: bytes
) -> None:
    save = await three_memories(make_store, make_memory)
    with log_path(save, "session", "owner").open("ab") as file:
        file.write(encode_record(payload))
    with pytest.raises(PersistenceError, match="unreadable record"):
        await make_store(save).enumerate("session", "owner")


async def test_a_damaged_migration_journal_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    for journal in (
        "garbage",
        json.dumps({"format_version": 1, "ledger_records_before": 1, "packs": ["../../x"]}),
        json.dumps({"format_version": 1, "ledger_records_before": 99, "packs": []}),
    ):
        (save / DATA / "migration.json").write_text(journal)
        with pytest.raises(PersistenceError, match=r"migration\.json"):
            await make_store(save).append(make_memory("m9"))


async def test_a_partition_file_that_is_a_folder_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await three_memories(make_store, make_memory)
    log_path(save, "session", "owner", 1).mkdir()
    with pytest.raises(PersistenceError, match="regular file"):
        await make_store(save).enumerate("session", "owner")
