"""Batches and concurrent appends after a power loss or a kill: all or nothing, none lost.

``append_many`` writes one batch under the batch journal (``store/batches.py``); concurrent
appends share group commits (``store/group_commit.py``, ``store/group_writes.py``). Every
crash state of a recorded batch and of twelve concurrent appends (the strict POSIX model of
``states.py``: only fsynced data and names are sure to survive, unsynced appends may persist
in part or as zeros) must reopen with ``count()`` equal to what ``enumerate`` finds, check
consistent after ``check(fix=True)``, hold the whole batch or none of it, and hold every
acknowledged memory. Real kills at random instants do the same: of a writer running
batches, and of one running eight concurrent appenders (killed mid-group).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from game_memory import FileGameMemoryStore, GameMemory

from .explorer import record
from .recorder import Recorder
from .states import crash_states, materialize
from .workload import FILE_BYTES, expected

BATCH = [f"seg-{n}" for n in range(1, 9)]  # owner mira of both sessions; crosses a segment


def _trees(recorder: Recorder) -> list[tuple[set[str], dict[str, bytes | None]]]:
    """Every crash state, with the memory ids acknowledged before it."""
    states = crash_states(recorder.initial, recorder.ops, seed=7)
    found = []
    for state in states:
        acked: set[str] = set()
        for op in recorder.ops[: state.point]:
            if op.kind == "mark" and op.name == "ack":
                acked.update(op.data.decode().split(","))
        found.append((acked, state.tree))
    return found


async def _reopened(folder: Path, *, exact: bool = False) -> set[str]:
    async with FileGameMemoryStore(folder, maximum_file_bytes=FILE_BYTES) as store:
        if exact:
            # Opening reconciles what a group commit left: count() agrees from the first
            # read (an uncommitted append_many batch stays visible, and counted, until the
            # next writer undoes it: a documented caveat).
            before = [m for s in ("village", "keep") for m in await store.enumerate(s)]
            assert await store.count() == len(before)
        # The next writer (here check --fix) recovers first: an uncommitted batch is undone.
        report = await store.check(fix=True)
        assert report.ok, report.problems
        memories = [m for s in ("village", "keep") for m in await store.enumerate(s)]
        assert await store.count() == len(memories)
        assert (await store.check()).ok
        return {memory.memory_id for memory in memories}


def _states_hold(
    tmp_path: Path, recorder: Recorder, groups: list[set[str]], *, exact: bool = False
) -> int:
    """Check every crash state; ``groups`` are id sets that must be wholly present or absent."""
    checked = 0
    for number, (acked, tree) in enumerate(_trees(recorder)):
        folder = tmp_path / f"state-{number}"
        folder.mkdir()
        materialize(tree, str(folder))
        present = asyncio.run(_reopened(folder / "save", exact=exact))
        assert acked <= present, (number, sorted(acked - present))
        for group in groups:
            assert group <= present or not (group & present), (number, sorted(group & present))
        checked += 1
    return checked


def test_every_power_loss_state_of_a_batch_holds_all_of_it_or_none(tmp_path: Path) -> None:
    base = tmp_path / "run"
    base.mkdir()
    before = expected("seg-0")
    batch = [expected(memory_id) for memory_id in BATCH]

    async def workload(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(folder / "save", maximum_file_bytes=FILE_BYTES) as store:
            await store.append(before)
            recorder.mark("ack", before.memory_id)
            assert all(await store.append_many(batch))
            recorder.mark("ack", ",".join(BATCH))

    recorder = record(base, workload)
    assert _states_hold(tmp_path, recorder, [set(BATCH)]) > 20


def test_every_power_loss_state_of_concurrent_appends_keeps_what_it_acknowledged(
    tmp_path: Path,
) -> None:
    base = tmp_path / "run"
    base.mkdir()
    memories = [expected(f"seg-{n}") for n in range(12)]

    async def workload(folder: Path, recorder: Recorder) -> None:
        async with FileGameMemoryStore(
            folder / "save", maximum_file_bytes=FILE_BYTES, max_workers=4
        ) as store:

            async def one(memory: GameMemory) -> None:
                assert await store.append(memory)
                recorder.mark("ack", memory.memory_id)

            await asyncio.gather(*(one(memory) for memory in memories))

    recorder = record(base, workload)
    assert _states_hold(tmp_path, recorder, [], exact=True) > 20


_KILLED_WRITER = """
import asyncio, sys
from game_memory import FileGameMemoryStore
sys.path.insert(0, sys.argv[2])
from crash.workload import expected

async def main() -> None:
    async with FileGameMemoryStore(sys.argv[1], maximum_file_bytes=1_024) as store:
        for round in range(10_000):
            ids = [f"seg-{round * 5 + n}" for n in range(5)]
            await store.append_many([expected(i) for i in ids])
            print(",".join(ids), flush=True)

asyncio.run(main())
"""


def test_a_writer_killed_during_batches_leaves_each_batch_whole_or_absent(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    tests = str(Path(__file__).resolve().parents[1])
    acknowledged: list[set[str]] = []
    for kill in range(6):
        process = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, str(save), tests],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        first = process.stdout.readline()  # the writer is running batches now
        time.sleep(0.02 + 0.037 * kill)  # then it dies at some instant of a later batch
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(timeout=30)
        lines = [first, *out.splitlines()]
        acknowledged.extend(set(line.strip().split(",")) for line in lines if line.strip())
        present = asyncio.run(_reopened(save))
        for batch in acknowledged:
            assert batch <= present
        rounds: dict[int, set[str]] = {}
        for memory_id in present:
            rounds.setdefault(int(memory_id.rsplit("-", 1)[1]) // 5, set()).add(memory_id)
        assert all(len(ids) == 5 for ids in rounds.values()), json.dumps(
            {str(k): sorted(v) for k, v in rounds.items() if len(v) != 5}
        )
    assert acknowledged, "the writer never acknowledged a batch before it was killed"
    assert os.path.exists(save / ".game-memory" / "ledger.log")


_CONCURRENT_WRITER = """
import asyncio, sys
from game_memory import FileGameMemoryStore
sys.path.insert(0, sys.argv[2])
from crash.workload import expected

async def main() -> None:
    async with FileGameMemoryStore(sys.argv[1], maximum_file_bytes=1_024) as store:
        async def one(memory_id):
            assert await store.append(expected(memory_id))
            print(memory_id, flush=True)
        for round in range(10_000):
            await asyncio.gather(*(one(f"seg-{round * 8 + n}") for n in range(8)))

asyncio.run(main())
"""


def test_a_writer_killed_mid_group_loses_nothing_acknowledged_and_counts_agree(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    tests = str(Path(__file__).resolve().parents[1])
    acknowledged: set[str] = set()
    for kill in range(8):
        process = subprocess.Popen(
            [sys.executable, "-c", _CONCURRENT_WRITER, str(save), tests],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        first = process.stdout.readline()  # the appenders are running groups now
        time.sleep(0.01 + 0.029 * kill)  # then it dies at some instant of a later group
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(timeout=30)
        acknowledged.update(line.strip() for line in [first, *out.splitlines()] if line.strip())
        present = asyncio.run(_reopened(save, exact=True))
        assert acknowledged <= present, sorted(acknowledged - present)
    assert acknowledged, "the writer never acknowledged an append before it was killed"
