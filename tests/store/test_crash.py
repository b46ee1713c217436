"""Crash safety: writers and migrations killed with SIGKILL, then the save checked.

Every acknowledged append must be present exactly once, nothing may be half there, the
store must reopen (``check`` clean, or clean after the documented repairs), and it must
accept new appends.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemory, StoreCheckReport

from .helpers import DATA, MemoryFactory, write_legacy
from .workers import expected_memory

pytestmark = pytest.mark.slow

WORKER = str(Path(__file__).with_name("workers.py"))
DOCUMENTED = ("torn record", "torn tail", "pending append", "pending ledger intent")
#: Appends each writer of the random-kill test attempts.
ROUND_APPENDS = 4_000


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def acked(output: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in output.splitlines() if line.startswith("ack ")]


async def stored(save: Path) -> list[GameMemory]:
    async with FileGameMemoryStore(save) as store:
        return await store.enumerate("session-0") + await store.enumerate("session-1")


async def checked(save: Path, *, fix: bool = False) -> StoreCheckReport:
    async with FileGameMemoryStore(save) as store:
        return await store.check(fix=fix)


def only_documented(report: StoreCheckReport) -> bool:
    return all(any(kind in problem for kind in DOCUMENTED) for problem in report.problems)


async def assert_sound(save: Path, acknowledged: set[str], attempted: set[str]) -> None:
    """Every ack present once, nothing half there or foreign, only documented problems."""
    async with FileGameMemoryStore(save) as store:
        memories = await store.enumerate("session-0") + await store.enumerate("session-1")
        report = await store.check()
    ids = [memory.memory_id for memory in memories]
    assert len(ids) == len(set(ids))
    assert acknowledged <= set(ids), sorted(acknowledged - set(ids))
    assert set(ids) <= attempted
    for memory in memories:
        assert memory == expected_memory(memory.memory_id)
    assert only_documented(report), report.problems
    assert report.memories == len(ids)


async def test_writers_killed_at_random_moments_lose_no_acknowledged_append(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    chooser = random.Random(int.from_bytes(os.urandom(4), "big"))
    acknowledged: set[str] = set()
    attempted: set[str] = set()
    kills = 0
    for round_number in range(32):
        prefix = f"r{round_number}"
        # More appends than a writer makes before its kill (0.6 s at most after its start,
        # 0.25 s after its first acknowledgement): 400 took about that long once appends
        # got faster, and a round that finished was a round without a kill.
        attempted.update(f"{prefix}-{n}" for n in range(ROUND_APPENDS))
        process = start("append", str(save), prefix, str(ROUND_APPENDS))
        assert process.stdout is not None
        if round_number % 8 == 7:
            # Kill during start-up or recovery, before any acknowledgement.
            delay = chooser.uniform(0.0, 0.6)
        else:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                assert selector.select(timeout=60), "the writer never acknowledged an append"
            delay = chooser.uniform(0.0, 0.25)
        try:
            process.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            kills += 1
        output, errors = process.communicate(timeout=60)
        assert process.returncode in (0, -signal.SIGKILL), errors
        acknowledged.update(acked(output))
        await assert_sound(save, acknowledged, attempted)
    assert kills >= 30
    assert len(acknowledged) > 0

    fixed = await checked(save, fix=True)
    assert fixed.ok, fixed.problems
    assert all(any(kind in repair for kind in DOCUMENTED) for repair in fixed.repairs)
    async with FileGameMemoryStore(save) as store:
        count = await store.count()
        assert count == fixed.memories == len(await stored(save))
        assert await store.append(expected_memory("after-0")) is True
        assert await store.count() == count + 1
    assert (await checked(save)).ok


@pytest.mark.parametrize(
    ("point", "landed"),
    [("intent", False), ("torn", False), ("record", True)],
    ids=["after the ledger intent", "half the record written", "after the record, before the ack"],
)
@pytest.mark.parametrize(
    "at",
    [3, 9],
    ids=["into a new partition", "onto a partition's tail (written and fsynced on one descriptor)"],
)
async def test_a_writer_killed_at_each_step_of_an_append_leaves_it_whole_or_absent(
    tmp_path: Path, point: str, landed: bool, at: int
) -> None:
    save = tmp_path / "save"
    process = start("append", str(save), "d", "12", point, str(at))
    output, errors = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, errors
    before = {f"d-{n}" for n in range(at - 1)}
    assert acked(output) == [f"d-{n}" for n in range(at - 1)]
    victim = f"d-{at - 1}"
    await assert_sound(save, before, before | {victim})
    ids = {memory.memory_id for memory in await stored(save)}
    assert (victim in ids) is landed
    async with FileGameMemoryStore(save) as store:
        # Retrying the interrupted append is safe either way; the next writer recovers first.
        assert await store.append(expected_memory(victim)) is (not landed)
        assert await store.append(expected_memory(f"d-{at}")) is True
        assert await store.count() == at + 1
        report = await store.check()
        assert report.ok, report.problems
        assert report.memories == report.ledger_entries == at + 1


@pytest.mark.parametrize("phase", ["journal", "ledger", "pack", "sync", "commit", "backup"])
async def test_a_migration_killed_at_each_phase_completes_when_run_again(
    tmp_path: Path, make_memory: MemoryFactory, phase: str
) -> None:
    save = tmp_path / "save"
    legacy = [
        make_memory(f"m{index}", session_id=f"s{index % 3}", owner_id=f"o{index % 4}")
        for index in range(24)
    ]
    originals = {write_legacy(save, memory).name for memory in legacy}
    process = start("migrate", str(save), phase)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == -signal.SIGKILL, errors

    process = start("migrate", str(save))
    output, errors = process.communicate(timeout=120)
    assert process.returncode == 0, errors
    migrated, count = (int(value) for value in output.split()[1:])
    assert count == 24
    # Before the commit the batch was rolled back and is redone whole; after it, the rerun
    # finds the documents not yet moved to the backup already migrated, and moves them.
    assert migrated == (12 if phase == "backup" else 24)
    async with FileGameMemoryStore(save) as store:
        found = [m for session in ("s0", "s1", "s2") for m in await store.enumerate(session)]
        assert sorted(found, key=lambda m: m.memory_id) == sorted(legacy, key=lambda m: m.memory_id)
        assert await store.count() == 24
        report = await store.check()
        assert report.ok, report.problems
        assert report.memories == report.ledger_entries == 24
    assert not list(save.glob("*.memory.json"))
    assert {p.name for p in (save / DATA / "legacy" / "v1").iterdir()} == originals
    assert not (save / DATA / "migration.json").exists()


async def test_migrations_killed_at_random_moments_complete_when_run_again(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    save = tmp_path / "save"
    legacy = [make_memory(f"m{i}", owner_id=f"o{i % 9}", text="q" * 400) for i in range(400)]
    for memory in legacy:
        write_legacy(save, memory)
    chooser = random.Random(int.from_bytes(os.urandom(4), "big"))
    for _ in range(5):
        process = start("migrate", str(save))
        try:
            process.wait(timeout=chooser.uniform(0.2, 1.5))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    async with FileGameMemoryStore(save) as store:
        await store.migrate_legacy_layout()
        assert sorted(await store.enumerate("session"), key=lambda m: m.memory_id) == sorted(
            legacy, key=lambda m: m.memory_id
        )
        report = await store.check()
        assert report.ok and report.memories == 400, report.problems
