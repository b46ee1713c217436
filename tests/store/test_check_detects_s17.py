"""``check`` finds the damage that makes a save answer wrongly, and its repairs never confirm it.

From a damage audit: files moved between partitions or within one, which every read took
for intact, and ``check`` called consistent (or, for a copied retraction log, "a
retraction without intent", which ``check --fix`` then made permanent):

* retraction logs swapped between two NPCs, or one copied to another NPC (retraction
  records name no owner; the retraction ledger names their partition and memory);
* a pack copied into another session's folder (reads failed closed, ``check`` said
  consistent).

(Two log segments of one NPC swapped is not here: the ledger's order is not a faithful
record of the append order, since recovery after a power loss writes lost intents again
at its end, so it cannot tell such a swap from a healthy save.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, GameMoment
from game_memory.durable.names import identity_hash
from game_memory.errors import PersistenceError
from game_memory.store.ledger import RECORD_BYTES
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, session_folder, write_legacy

FOREIGN = "another owner's retraction log"


def at(tick: int) -> GameMoment:
    return GameMoment(timeline_id="world", tick=tick)


def retraction_log(save: Path, owner: str) -> Path:
    return session_folder(save, "session") / f"r-{identity_hash(owner)}.log"


def retraction_intents(save: Path) -> list[str]:
    """The memory hashes the retraction ledger's intents name, in order."""
    data = (save / DATA / "retraction-ledger.log").read_bytes()
    return [data[i + 80 : i + 112].hex() for i in range(0, len(data), RECORD_BYTES)]


async def recalled(store: FileGameMemoryStore, owner: str, tick: int | None = None) -> list[str]:
    query = GameMemoryQuery(
        session_id="session",
        owner_id=owner,
        limit=50,
        at_or_before=None if tick is None else at(tick),
    )
    return sorted(memory.memory_id for memory in await search(store, query))


async def two_npcs(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    """Guard and smith, each with an ``intro`` and three own memories, each forgetting two."""
    for owner in ("guard", "smith"):
        await store.append(make_memory("intro", owner_id=owner, tick=5))
        for number in range(3):
            await store.append(make_memory(f"{owner}{number}", owner_id=owner, tick=10 + number))
    await store.forget("session", "guard", "guard0", at(50))
    await store.forget("session", "guard", "intro", at(60))
    await store.forget("session", "smith", "smith1", at(50))
    await store.forget("session", "smith", "intro", at(20))
    await store.append(make_memory("later", owner_id="guard", tick=70))  # nothing in flight


# -- retraction logs moved between partitions --------------------------------------------------


async def test_swapped_retraction_logs_are_found_and_never_confirmed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await two_npcs(make_store(), make_memory)
    guard, smith = retraction_log(save, "guard"), retraction_log(save, "smith")
    guard_bytes, smith_bytes = guard.read_bytes(), smith.read_bytes()
    guard.write_bytes(smith_bytes)
    smith.write_bytes(guard_bytes)
    intents = retraction_intents(save)
    store = make_store()

    report = await store.check()
    foreign = [p for p in report.problems if FOREIGN in p]
    assert len(foreign) == 2, report.problems  # was: consistent
    assert any("owner 'guard'" in p for p in foreign) and any("owner 'smith'" in p for p in foreign)
    fixed = await store.check(fix=True)
    assert not fixed.ok and not any("retraction intent" in r for r in fixed.repairs)
    assert retraction_intents(save) == intents

    salvaged = await store.check(fix=True, accept_loss=True)
    assert salvaged.ok, salvaged.problems
    assert any("gave up 2 acknowledged retractions" in r for r in salvaged.repairs)
    # Neither NPC keeps the other's retractions: every memory is recalled again.
    assert await recalled(store, "guard") == ["guard0", "guard1", "guard2", "intro", "later"]
    assert await recalled(store, "smith") == ["intro", "smith0", "smith1", "smith2"]
    aside = next((save / DATA / "damaged").iterdir())
    assert sorted(p.name.split(".", 1)[1] for p in aside.glob("*.log")) == sorted(
        [guard.name, smith.name]
    )
    assert (await make_store().check()).ok


async def test_a_copied_retraction_log_is_not_made_permanent_by_fix(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store()
    for owner in ("guard", "smith"):
        await store.append(make_memory("intro", owner_id=owner, tick=5))
        await store.append(make_memory(f"{owner}1", owner_id=owner, tick=6))
    await store.forget("session", "guard", "intro", at(60))
    await store.append(make_memory("later", owner_id="guard", tick=70))
    shutil.copy(retraction_log(save, "guard"), retraction_log(save, "smith"))
    intents = retraction_intents(save)
    reader = make_store()

    report = await reader.check()
    assert any(FOREIGN in p and "owner 'smith'" in p for p in report.problems), report.problems
    assert not any("no intent in the retraction ledger" in p for p in report.problems)
    fixed = await reader.check(fix=True)  # was: "added 1 missing retraction intent", ok
    assert not fixed.ok and fixed.repairs == ()
    assert retraction_intents(save) == intents

    salvaged = await reader.check(fix=True, accept_loss=True)
    assert salvaged.ok, salvaged.problems
    assert await recalled(reader, "smith") == ["intro", "smith1"]
    assert await recalled(reader, "guard") == ["guard1", "later"]  # its own forget holds
    assert retraction_intents(save) == intents
    assert (await make_store().check()).ok


async def test_a_retraction_whose_intent_was_lost_still_gets_it_back_from_fix(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """The repair the identity check must keep: the ledger lost the newest intents."""
    save = tmp_path / "save"
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id="guard", tick=number))
    await store.forget("session", "guard", "m0", at(50))
    await store.forget("session", "guard", "m1", at(50))
    intents = retraction_intents(save)
    with (save / DATA / "retraction-ledger.log").open("r+b") as ledger:
        ledger.truncate(RECORD_BYTES)
    reader = make_store()
    report = await reader.check()
    assert any("1 retraction has no intent" in p for p in report.problems), report.problems
    fixed = await reader.check(fix=True)
    assert fixed.ok and fixed.repairs == ("added 1 missing retraction intent",)
    assert retraction_intents(save) == intents


async def test_the_salvage_keeps_the_retraction_intents_of_the_retractions_it_keeps(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """It kept the partition's first intents by count: those of the retraction it gave up."""
    save = tmp_path / "save"
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id="guard", tick=number))
    await store.forget("session", "guard", "m0", at(50))
    await store.forget("session", "guard", "m1", at(50))
    await store.append(make_memory("m3", owner_id="guard", tick=3))
    log = retraction_log(save, "guard")
    data = bytearray(log.read_bytes())
    data[20] ^= 0xFF  # inside the first retraction (m0)
    log.write_bytes(bytes(data))
    reader = make_store()
    salvaged = await reader.check(fix=True, accept_loss=True)
    assert salvaged.ok, salvaged.problems
    assert retraction_intents(save) == [identity_hash("m1")]
    assert await recalled(reader, "guard") == ["m0", "m2", "m3"]
    assert (await make_store().check()).ok


# -- a pack in another session's folder ------------------------------------------------------


async def test_a_pack_of_another_session_is_reported_and_the_salvage_moves_it_aside(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    save.mkdir()
    for number in range(3):
        write_legacy(save, make_memory(f"g{number}", session_id="s1", owner_id="guard"))
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"e{number}", session_id="s2", owner_id="elder"))
    copied = session_folder(save, "s2") / "p-1.pack"
    shutil.copy(session_folder(save, "s1") / "p-1.pack", copied)
    reader = make_store()
    with pytest.raises(PersistenceError, match="another session or owner"):
        await search(reader, GameMemoryQuery(session_id="s2", limit=10))

    report = await reader.check()
    named = [p for p in report.problems if "p-1.pack holds no intact record" in p]
    assert len(named) == 1, report.problems  # was: consistent
    assert "a memory of another session" in named[0] and "--accept-loss" in named[0]
    salvaged = await reader.check(fix=True, accept_loss=True)
    assert salvaged.ok, salvaged.problems
    found = await search(reader, GameMemoryQuery(session_id="s2", limit=10))
    assert sorted(memory.memory_id for memory in found) == ["e0", "e1", "e2"]
    assert (await make_store().check()).ok


async def test_a_partition_an_earlier_salvage_left_is_not_taken_for_another_npcs(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """Earlier releases repaired the retraction ledger by count: a salvage that lost m0's
    retraction record kept m0's intent and not m1's. Its own log was then taken for another
    NPC's (its intents name other retractions of its own), and ``--fix --accept-loss`` gave
    the intact forget of m1 up. Only an intent another partition lacks a record for makes a
    swap; one ``--accept-loss`` brings this save to consistent and keeps m1 forgotten."""
    from game_memory.store.records import encode_record, scan_records

    save = tmp_path / "save"
    store = make_store(save)
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id="guard", tick=number))
    await store.forget("session", "guard", "m0", at(10))
    await store.forget("session", "guard", "m1", at(10))
    await store.aclose()
    log = retraction_log(save, "guard")
    payloads = scan_records(log.read_bytes(), maximum_payload=1 << 20).payloads
    log.write_bytes(encode_record(payloads[1]))  # m0's record lost, m1's kept
    ledger = save / DATA / "retraction-ledger.log"
    ledger.write_bytes(ledger.read_bytes()[:RECORD_BYTES])  # m0's intent kept, m1's not

    report = await make_store(save).check()
    assert not any(FOREIGN in problem for problem in report.problems), report.problems
    repaired = await make_store(save).check(fix=True, accept_loss=True)
    assert repaired.ok, repaired.problems
    query = GameMemoryQuery(session_id="session", owner_id="guard", limit=10, at_or_before=at(20))
    recalled = sorted(m.memory_id for m in await search(make_store(save), query))
    assert recalled == ["m0", "m2"]  # m1's forget kept; m0's, lost long ago, stays lost
