"""The consistency checker: what it reports, and the only repairs ``fix=True`` applies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_document
from game_memory.store.engine import StoreEngine
from game_memory.store.ledger import RECORD_BYTES, LedgerEntry
from game_memory.store.packs import write_pack
from game_memory.store.records import encode_record

from .helpers import DATA, MemoryFactory, StoreFactory, log_path, session_folder, write_legacy


def engine_of(store: object) -> StoreEngine:
    engine = store._engine  # type: ignore[attr-defined]
    assert isinstance(engine, StoreEngine)
    return engine


async def test_a_healthy_store_checks_clean_with_matching_counts(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    for index in range(5):
        write_legacy(save, make_memory(f"legacy{index}", owner_id=f"o{index % 2}"))
    store = make_store(save)
    for index in range(4):
        await store.append(make_memory(f"m{index}", session_id=f"s{index % 2}"))
    report = await store.check()
    assert report.ok, report.problems
    assert (report.memories, report.ledger_entries, report.repairs) == (9, 9, ())
    assert (await store.check(fix=True)).repairs == ()


async def test_a_pending_intent_is_reported_and_fix_drops_it(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    engine = engine_of(store)
    with engine.locked():  # what a writer killed between intent and record leaves
        engine.ledger.append(
            [LedgerEntry(identity_hash("session"), identity_hash("owner"), identity_hash("m2"))],
            first_index=1,
        )
    report = await store.check()
    assert [p for p in report.problems if "pending append" in p]
    assert report.ledger_entries == 2
    fixed = await store.check(fix=True)
    assert fixed.ok
    assert fixed.repairs == ("dropped 1 pending ledger intent (an append never acknowledged)",)
    assert await store.count() == 1


async def test_a_torn_ledger_record_is_reported_and_fix_cuts_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    ledger = tmp_path / "save" / DATA / "ledger.log"
    with ledger.open("ab") as file:
        file.write(b"GML\x01" + bytes(40))
    assert any("torn record" in p for p in (await store.check()).problems)
    fixed = await store.check(fix=True)
    assert fixed.ok and ledger.stat().st_size == RECORD_BYTES
    assert any("torn record" in repair for repair in fixed.repairs)


async def test_an_uncommitted_migration_batch_is_reported_and_fix_rolls_it_back(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("kept"))
    engine = engine_of(store)
    session_hash, owner_hash = identity_hash("batch"), identity_hash("owner")
    with engine.locked():  # a migration killed after its packs, before its commit
        engine.session_directory(session_hash).mkdir()
        record = encode_record(encode_document(make_memory("lost", session_id="batch")))
        plans = engine.plan_packs(session_hash, [(owner_hash, [record])])
        assert len(plans) == 1
        engine.write_journal(1, [path for path, _ in plans])
        engine.ledger.append(
            [LedgerEntry(session_hash, owner_hash, identity_hash("lost"))], first_index=1
        )
        for path, groups in plans:
            write_pack(path, groups)
    assert [m.memory_id for m in await store.enumerate("batch")] == ["lost"]
    report = await store.check()
    assert any("uncommitted migration batch" in p for p in report.problems)
    fixed = await store.check(fix=True)
    assert fixed.ok, fixed.problems
    assert not engine.journal_path.exists()
    assert not list(engine.session_directory(session_hash).glob("p-*.pack"))
    assert await store.count() == 1
    assert await store.enumerate("batch") == []


async def test_an_acknowledged_record_that_vanished_is_reported_and_never_repaired(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    await store.append(make_memory("m2", owner_id="other"))
    log_path(tmp_path / "save", "session", "owner").write_bytes(b"")  # m1 is gone
    fixed = await store.check(fix=True)
    assert not fixed.ok and fixed.repairs == ()
    lost = [p for p in fixed.problems if "1 acknowledged memory is lost" in p]
    assert lost and "session 'session'" in lost[0] and "Nothing was dropped" in lost[0]
    assert any("repaired none of the damage" in p for p in fixed.problems)
    assert await store.count() == 2


async def test_a_record_without_an_intent_is_reported_and_fix_adds_the_intent(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    await store.append(make_memory("m2"))
    with (tmp_path / "save" / DATA / "ledger.log").open("r+b") as file:
        file.truncate(RECORD_BYTES)
    report = await store.check()
    assert not report.ok
    assert any("no ledger intent" in p for p in report.problems)
    fixed = await store.check(fix=True)
    assert fixed.ok and fixed.repairs == ("added 1 missing ledger intent",)
    assert await store.count() == 2


async def test_a_corrupt_partition_is_reported_not_raised(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    log = log_path(tmp_path / "save", "session", "owner")
    log.write_bytes(log.read_bytes()[:-1] + b"!")
    report = await store.check()
    assert not report.ok and any("corrupt at bytes" in p for p in report.problems)
    assert session_folder(tmp_path / "save", "session").is_dir()


async def test_check_hashes_each_memory_id_a_bounded_number_of_times(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: object
) -> None:
    # The audit's set of a partition's id hashes was rebuilt for every ledger intent:
    # check was quadratic in one NPC's memories (11 s at 4,000, hours at 100,000).
    import game_memory.store.audit as audit

    store = make_store()
    count = 400
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(count)])
    calls = 0
    hash_id = audit.identity_hash

    def counted(value: str) -> str:
        nonlocal calls
        calls += 1
        return hash_id(value)

    monkeypatch.setattr(audit, "identity_hash", counted)  # type: ignore[attr-defined]
    report = await store.check()
    assert report.ok and report.memories == count
    assert calls <= 4 * count, calls


KILLED_BATCH = """
import asyncio, os, signal, sys
from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.store import journal

def memory(memory_id):
    return GameMemory(
        memory_id=memory_id, session_id="session", owner_id="owner", scope="personal",
        kind="event", payload_json="{}", moment=GameMoment(timeline_id="world", tick=1),
        searchable_text="a batch memory " + memory_id,
    )

def die(self):  # after the batch's barrier, before its commit
    os.kill(os.getpid(), signal.SIGKILL)

journal.MigrationJournal.commit = die

async def main():
    store = FileGameMemoryStore(sys.argv[1])
    await store.append_many([memory(f"b{n}") for n in range(5)])

asyncio.run(main())
"""


async def test_a_killed_append_many_is_named_as_such_and_rolled_back_at_the_next_open(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    before = make_store(save)  # opened before the crash: it reads what the batch left
    await before.append(make_memory("kept"))
    script = tmp_path / "killed_batch.py"
    script.write_text(KILLED_BATCH)
    done = subprocess.run([sys.executable, str(script), str(save)], check=False)
    assert done.returncode == -signal.SIGKILL
    report = await before.check()
    batch = [p for p in report.problems if "batch" in p]
    assert batch and "append_many batch that never committed" in batch[0], report.problems
    assert "migrates" not in batch[0] and "migration batch" not in batch[0]
    # A store object opened after the crash rolls the batch back before its first read:
    # no read ever sees the memories of a batch that was never acknowledged.
    after = make_store(save)
    assert [m.memory_id for m in await after.enumerate("session")] == ["kept"]
    assert await after.count() == 1
    assert (await after.check()).ok
