"""Several processes on one save: appends serialize, readers never see partial records."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, StoreBusyError

from .helpers import MemoryFactory, write_legacy
from .workers import expected_memory

pytestmark = pytest.mark.slow

WORKER = str(Path(__file__).with_name("workers.py"))


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> str:
    output, errors = process.communicate(timeout=240)
    assert process.returncode == 0, errors
    return output


async def test_two_writer_processes_and_a_reader_lose_and_tear_nothing(tmp_path: Path) -> None:
    save = tmp_path / "save"
    async with FileGameMemoryStore(save) as store:  # the layout exists before they race
        await store.append(expected_memory("seed-0"))
    writers = [start("append", str(save), prefix, "150") for prefix in ("a", "b")]
    reader = start("read", str(save), "4")
    outputs = [finish(writer) for writer in writers]
    seen = finish(reader)
    assert seen.startswith("seen "), seen
    for prefix, output in zip(("a", "b"), outputs, strict=True):
        assert output.splitlines() == [f"ack {prefix}-{n}" for n in range(150)]

    async with FileGameMemoryStore(save) as store:
        assert await store.count() == 301
        memories = await store.enumerate("session-0") + await store.enumerate("session-1")
        assert len(memories) == 301
        assert all(memory == expected_memory(memory.memory_id) for memory in memories)
        # Both writers appended to the same partitions (ids spread over 2 sessions x 3 owners).
        owners = {(m.session_id, m.owner_id, m.memory_id[0]) for m in memories}
        assert len(owners) == 13
        report = await store.check()
        assert report.ok, report.problems
        assert report.memories == report.ledger_entries == 301


async def test_two_processes_migrating_one_save_migrate_it_once(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    save = tmp_path / "save"
    for index in range(40):
        write_legacy(save, make_memory(f"m{index}", owner_id=f"o{index % 4}"))
    results = [finish(process) for process in [start("migrate", str(save)) for _ in range(2)]]
    migrated = sorted(int(output.split()[1]) for output in results)
    assert migrated == [0, 40]
    assert all(output.split()[2] == "40" for output in results)
    async with FileGameMemoryStore(save) as store:
        assert len(await store.enumerate("session")) == 40
        report = await store.check()
        assert report.ok and report.memories == report.ledger_entries == 40


async def test_a_writer_waits_for_the_lock_at_most_lock_timeout(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    save = tmp_path / "save"
    async with FileGameMemoryStore(save, lock_timeout=0.3) as store:
        await store.append(make_memory("m1"))
        # Another process holding the lock looks like this: an flock on another descriptor.
        holder = os.open(save / ".game-memory" / "lock", os.O_RDWR)
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)
            started = time.monotonic()
            with pytest.raises(StoreBusyError, match="locked by another writer"):
                await store.append(make_memory("m2"))
            assert time.monotonic() - started >= 0.3
            assert [m.memory_id for m in await store.enumerate("session")] == ["m1"]  # reads go on
        finally:
            os.close(holder)
        assert await store.append(make_memory("m2")) is True
