"""The file store's retractions (``forget``): durable like appends, checked like memories.

The rules of what a retraction hides are the conformance suite's (tests/conformance); here
is what only the file store has: the retraction log and the retraction ledger on disk,
their crash cases, ``check`` and its repairs, the salvage, and the format upgrade.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from game_memory import (
    CapacityExceededError,
    FileGameMemoryStore,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
    MemoryNotFoundError,
    PersistenceError,
)
from game_memory.durable.names import identity_hash
from game_memory.store.ledger import RECORD_BYTES
from game_memory.store.records import encode_record
from game_memory.store.retractions import decode_retraction, encode_retraction
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, session_folder

FORMAT2 = Path(__file__).parent / "fixtures" / "format2" / "save"


def at(tick: int, timeline: str = "world") -> GameMoment:
    return GameMoment(timeline_id=timeline, tick=tick)


def retraction_log(save: Path, owner: str = "owner", session: str = "session") -> Path:
    return session_folder(save, session) / f"r-{identity_hash(owner)}.log"


def retraction_ledger(save: Path) -> Path:
    return save / DATA / "retraction-ledger.log"


async def recalled(store: FileGameMemoryStore, tick: int | None) -> list[str]:
    query = GameMemoryQuery(
        session_id="session", limit=20, at_or_before=None if tick is None else at(tick)
    )
    return sorted(memory.memory_id for memory in await search(store, query))


async def three(make_store: StoreFactory, make_memory: MemoryFactory) -> FileGameMemoryStore:
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", tick=10 * number))
    return store


def test_a_retraction_record_round_trips_and_holds_no_text() -> None:
    payload = encode_retraction("m-é", at(5, "main"))
    assert json.loads(payload) == {
        "format_version": 1,
        "retraction": {
            "memory_id": "m-é",
            "at": {"timeline_id": "main", "tick": 5, "calendar_json": None},
        },
    }
    assert decode_retraction(payload) == ("m-é", at(5, "main"))


async def test_a_retraction_is_one_record_and_one_intent_and_survives_reopening(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    assert await store.forget("session", "owner", "m1", at(15)) is True
    assert await store.forget("session", "owner", "m1", at(20)) is False  # covered already
    log = retraction_log(tmp_path / "save").read_bytes()
    assert log == encode_record(encode_retraction("m1", at(15)))
    assert retraction_ledger(tmp_path / "save").stat().st_size == RECORD_BYTES
    reopened = make_store()
    assert await recalled(reopened, 14) == ["m0", "m1"]
    assert await recalled(reopened, 15) == ["m0"]
    assert await recalled(reopened, None) == ["m0", "m2"]
    assert await reopened.count() == 3  # a retraction is no memory
    report = await reopened.check()
    assert report.ok, report.problems


async def test_forgetting_an_unknown_memory_writes_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    with pytest.raises(MemoryNotFoundError, match="'m9'"):
        await store.forget("session", "owner", "m9", at(1))
    with pytest.raises(MemoryNotFoundError):
        await store.forget("session", "somebody else", "m1", at(1))
    assert not retraction_log(tmp_path / "save").exists()
    assert not retraction_ledger(tmp_path / "save").exists()


async def test_the_first_retraction_moves_an_older_save_to_format_3(tmp_path: Path) -> None:
    save = tmp_path / "save"
    shutil.copytree(FORMAT2, save)
    assert json.loads((save / DATA / "format.json").read_text())["format_version"] == 2
    async with FileGameMemoryStore(save) as store:
        assert await store.count() == 11
        assert (await store.check()).ok
        await store.append(
            (await store.enumerate("slot-2", "mira"))[0].model_copy(update={"memory_id": "new"})
        )
        assert json.loads((save / DATA / "format.json").read_text())["format_version"] == 2
        assert await store.forget("slot-2", "mira", "m3", at(1, "main")) is True
        assert json.loads((save / DATA / "format.json").read_text())["format_version"] == 3
        assert (await store.check()).ok


async def test_a_refused_consolidation_leaves_an_older_save_in_its_format(
    tmp_path: Path,
) -> None:
    # A call that writes nothing (the store is full) must not raise the save's format:
    # older releases refuse format 3, and the save would hold no record that needs it.
    save = tmp_path / "save"
    shutil.copytree(FORMAT2, save)
    async with FileGameMemoryStore(save, maximum_entries=11) as store:
        held = [memory.memory_id for memory in await store.enumerate("slot-2", "mira")]
        summary = (await store.enumerate("slot-2", "mira"))[0].model_copy(
            update={
                "memory_id": "summary",
                "kind": GameMemoryKind.REFLECTION,
                "moment": at(10**6, "main"),
            }
        )
        with pytest.raises(CapacityExceededError):
            await store.consolidate("slot-2", "mira", held[:2], summary)
        with pytest.raises(CapacityExceededError):
            await store.append(summary.model_copy(update={"consolidates": tuple(held[:2])}))
        assert await store.count() == 11
    assert json.loads((save / DATA / "format.json").read_text())["format_version"] == 2


async def test_a_torn_retraction_is_absent_and_the_next_writer_cuts_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    await store.forget("session", "owner", "m0", at(5))
    log = retraction_log(tmp_path / "save")
    torn = encode_record(encode_retraction("m1", at(15)))
    with log.open("ab") as handle:
        handle.write(torn[: len(torn) // 2])  # a forget killed while writing its record
    with retraction_ledger(tmp_path / "save").open("ab") as handle:
        handle.write(bytes(RECORD_BYTES // 2))  # ... and one killed writing its intent
    reader = make_store()
    assert await recalled(reader, 20) == ["m1", "m2"]
    report = await reader.check()
    assert any("torn record" in problem for problem in report.problems), report.problems
    fixed = await reader.check(fix=True)
    assert fixed.ok, fixed.problems
    assert log.read_bytes() == encode_record(encode_retraction("m0", at(5)))
    assert await reader.forget("session", "owner", "m1", at(15)) is True
    assert await recalled(reader, 20) == ["m2"]


async def test_a_forget_killed_after_its_intent_is_dropped_by_the_next_writer(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    save = tmp_path / "save"
    await store.forget("session", "owner", "m0", at(5))
    intents = retraction_ledger(save).read_bytes()
    await store.forget("session", "owner", "m1", at(15))
    # The second forget's record never landed: only its intent did.
    retraction_log(save).write_bytes(encode_record(encode_retraction("m0", at(5))))
    assert len(intents) == RECORD_BYTES
    reader = make_store()
    assert await recalled(reader, 20) == ["m1", "m2"]  # the newest intent may be in flight
    report = await reader.check()
    assert any("a forget that was never acknowledged" in p for p in report.problems)
    fixed = await reader.check(fix=True)
    assert fixed.ok and any("pending retraction intent" in r for r in fixed.repairs)
    assert retraction_ledger(save).read_bytes() == intents


async def test_a_cut_retraction_log_fails_closed_and_the_salvage_gives_the_loss_up(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    save = tmp_path / "save"
    for number in range(3):
        await store.forget("session", "owner", f"m{number}", at(100))
    await store.append(make_memory("m3", tick=1))  # the newest intent is not a retraction
    log = retraction_log(save)
    record = len(encode_record(encode_retraction("m0", at(100))))
    with log.open("r+b") as handle:
        handle.truncate(record + 7)  # one retraction whole, one cut, one gone
    reader = make_store()
    with pytest.raises(PersistenceError, match=r"acknowledged retractions? \(forget\)"):
        await recalled(reader, None)
    report = await reader.check()
    assert any("2 acknowledged retractions (forget) lost" in p for p in report.problems), (
        report.problems
    )
    fixed = await reader.check(fix=True)
    assert not fixed.ok and any("repaired none of the damage" in p for p in fixed.problems)
    salvaged = await reader.check(accept_loss=True)
    assert salvaged.ok, salvaged.problems
    assert any("gave up 2 acknowledged retractions" in r for r in salvaged.repairs)
    assert await recalled(reader, None) == ["m1", "m2", "m3"]
    damaged = next((save / DATA / "damaged").iterdir())
    report_json = json.loads((damaged / "report.json").read_text())
    assert report_json["lost_retractions"][0]["count"] == 2
    assert (await make_store().check()).ok


async def test_a_retraction_log_with_a_flipped_byte_is_named_by_check(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = await three(make_store, make_memory)
    await store.forget("session", "owner", "m0", at(5))
    await store.forget("session", "owner", "m1", at(5))
    log = retraction_log(tmp_path / "save")
    data = bytearray(log.read_bytes())
    data[-3] ^= 0xFF
    log.write_bytes(bytes(data))
    reader = make_store()
    with pytest.raises(PersistenceError, match="corrupt"):
        await recalled(reader, None)
    report = await reader.check()
    assert any("retraction" in problem for problem in report.problems), report.problems
    assert (await reader.check(accept_loss=True)).ok
    assert await recalled(reader, None) == ["m1", "m2"]
