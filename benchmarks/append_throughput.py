"""Durable appends and bulk ingest into the file store, two builds side by side (issue 12).

For each build (``--code DIR``: a folder holding the ``game_memory`` package, e.g. a checkout's
``python/``; default: this checkout), every figure is measured in a fresh process on the same
disk (``--directory``, default the temporary folder), the builds alternating:

* **durable single append**: ``--appends`` sequential ``FileGameMemoryStore.append`` calls into
  an NPC that holds ``--seed`` memories; median and p99 in ms;
* **fsyncs per append**: the same appends counted by ``strace -f -c -e trace=fsync,fdatasync``
  (a run with the appends minus one without, divided by their number);
* **concurrent appenders**: ``--tasks`` coroutines through one store, each appending
  ``--per-task`` memories of its own NPC at once (``asyncio.gather``): appends/s, and fsyncs
  per append under strace (with group commit, concurrent appends share a group's fsyncs:
  one per log the group touches; before it, each append was written on its own);
* **concurrent appenders into one NPC**: the same, every task appending to one NPC (a
  group then touches one log: one fsync for the whole group);
* **bulk ingest**: ``append_many`` of 10,000 and 100,000 memories (one NPC, the store alone,
  no embedding: the lexical mode's cost), memories/s; a build without ``append_many`` runs
  the loop of ``append`` over ``--loop-bulk`` memories instead (and says so).

With ``--rounds N`` the builds alternate N times and each figure is also given as the
median of its rounds (the machine is shared: compare the builds round by round);
``--no-bulk`` skips the bulk rows. Prints one JSON object: per build, the figures, plus the
machine's bare fsync latency at the start and the end.
``python benchmarks/append_throughput.py --code /path/to/old/python --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

Json = dict[str, Any]

WORKER = r"""
import asyncio, json, statistics, sys, time
from game_memory import FileGameMemoryStore, GameMemory, GameMemoryKind, GameMoment

def memory(n, owner="npc-000", prefix="m"):
    return GameMemory(memory_id=f"{prefix}-{n:07d}", session_id="bench", owner_id=owner,
        scope="personal", kind=GameMemoryKind.EVENT, payload_json='{"n":%d}' % n,
        moment=GameMoment(timeline_id="main", tick=n), importance=0.5,
        searchable_text=f"w{n % 997} w{n % 89} the blacksmith sold a sword at the river {n}")

async def seed(store, count):
    if hasattr(store, "append_many"):
        for start in range(0, count, 10_000):
            await store.append_many([memory(n) for n in range(start, min(count, start + 10_000))])
    else:
        for n in range(count):
            await store.append(memory(n))

async def main(kind, folder, number, seed_count, tasks):
    store = FileGameMemoryStore(folder, maximum_entries=200_000)
    await store.count()
    result = {}
    if kind == "single":
        await seed(store, seed_count)
        times = []
        for n in range(number):
            started = time.perf_counter()
            await store.append(memory(seed_count + n, prefix="a"))
            times.append(time.perf_counter() - started)
        result["times"] = times
    elif kind in ("concurrent", "together"):
        await seed(store, seed_count)
        async def worker(t):
            owner = f"npc-{t + 1:03d}" if kind == "concurrent" else "npc-000"
            for n in range(number):
                await store.append(memory(n, owner=owner, prefix=f"t{t}"))
        started = time.perf_counter()
        await asyncio.gather(*(worker(t) for t in range(tasks)))
        result["seconds"] = time.perf_counter() - started
    elif kind == "bulk":
        if not hasattr(store, "append_many"):
            number = tasks  # the loop of append over --loop-bulk memories only
        memories = [memory(n) for n in range(number)]
        started = time.perf_counter()
        if hasattr(store, "append_many"):
            await store.append_many(memories)
            result["api"] = "append_many"
        else:
            for item in memories:
                await store.append(item)
            result["api"] = "loop of append"
        result["seconds"] = time.perf_counter() - started
        result["memories"] = number
    await store.aclose()
    print(json.dumps(result))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
"""


def run(code: str, kind: str, folder: Path, number: int, seed: int, tasks: int,
        trace: Path | None = None) -> Json:  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": code}
    command = [sys.executable, "-c", WORKER, kind, str(folder), str(number), str(seed), str(tasks)]
    if trace is not None:
        command = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(trace), *command]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, check=True)
    result: Json = json.loads(done.stdout.splitlines()[-1])
    return result


def fsync_calls(trace: Path) -> int:
    total = 0
    for line in trace.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] in {"fsync", "fdatasync"}:
            total += int(parts[3])  # % time, seconds, usecs/call, calls, [errors,] syscall
    return total


def counted(code: str, kind: str, root: Path, number: int, seed: int, tasks: int) -> float:
    """fsync calls per append: a run with ``number`` appends minus one with none."""
    calls = []
    for appends in (number, 0):
        folder = root / f"trace-{kind}-{appends}-{time.monotonic_ns()}"
        trace = folder.with_suffix(".strace")
        run(code, kind, folder, appends, seed, tasks, trace)
        calls.append(fsync_calls(trace))
    total = number * (tasks if kind in ("concurrent", "together") else 1)
    return round((calls[0] - calls[1]) / total, 2)


def bare_fsync_ms(root: Path) -> float:
    probe = root / "fsync.probe"
    times = []
    with open(probe, "ab") as handle:
        for _ in range(30):
            handle.write(b"x" * 256)
            handle.flush()
            started = time.perf_counter()
            os.fsync(handle.fileno())
            times.append(time.perf_counter() - started)
    probe.unlink()
    return round(statistics.median(times) * 1000, 3)


def measure(code: str, root: Path, args: argparse.Namespace) -> Json:
    figures: Json = {}
    single = run(code, "single", root / "single", args.appends, args.seed, 1)["times"]
    ordered = sorted(single)
    figures["append_median_ms"] = round(statistics.median(single) * 1000, 3)
    figures["append_p99_ms"] = round(ordered[int(0.99 * (len(ordered) - 1))] * 1000, 3)
    figures["fsyncs_per_append"] = counted(code, "single", root, 20, 100, 1)
    concurrent = run(code, "concurrent", root / "concurrent", args.per_task, args.seed, args.tasks)
    figures["concurrent_appends_per_s"] = round(args.tasks * args.per_task / concurrent["seconds"])
    figures["concurrent_fsyncs_per_append"] = counted(code, "concurrent", root, 10, 100, args.tasks)
    together = run(code, "together", root / "together", args.per_task, args.seed, args.tasks)
    figures["one_npc_concurrent_appends_per_s"] = round(
        args.tasks * args.per_task / together["seconds"]
    )
    figures["one_npc_concurrent_fsyncs_per_append"] = counted(
        code, "together", root, 10, 100, args.tasks
    )
    for size in () if args.no_bulk else (10_000, 100_000):
        bulk = run(code, "bulk", root / f"bulk-{size}", size, 0, args.loop_bulk)
        figures[f"bulk_{size}"] = {"api": bulk["api"], "memories": bulk["memories"],
                                   "per_s": round(bulk["memories"] / bulk["seconds"])}  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = str(Path(__file__).resolve().parents[1] / "python")
    parser.add_argument("--code", action="append", help="a folder holding game_memory")
    parser.add_argument("--directory", default=tempfile.gettempdir())
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1_000, help="memories in the NPC first")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--per-task", type=int, default=40)
    parser.add_argument("--loop-bulk", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=1, help="builds alternate, per round")
    parser.add_argument("--no-bulk", action="store_true", help="skip the bulk ingest rows")
    args = parser.parse_args()
    builds = [here, *(code for code in args.code or [] if os.path.abspath(code) != here)]
    base = Path(tempfile.mkdtemp(prefix="append-throughput-", dir=args.directory))
    try:  # the stores and traces of this run: removed whatever happens (a Ctrl-C too)
        report = run_builds(builds, base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(report, indent=1))


def run_builds(builds: list[str], base: Path, args: argparse.Namespace) -> Json:
    """Measure every build in turns, ``args.rounds`` times, in folders under ``base``."""
    report: Json = {"machine": {"bare_fsync_ms_at_start": bare_fsync_ms(base)}, "builds": {}}
    rounds: dict[str, list[Json]] = {code: [] for code in builds}
    for round_number in range(args.rounds):
        for number, code in enumerate(builds):
            print(f"[append_throughput] round {round_number + 1}: {code}", file=sys.stderr)
            folder = base / f"build-{number}-round-{round_number}"
            rounds[code].append(measure(code, folder, args))
    for code, measured in rounds.items():
        medians: Json = {}
        for key, value in measured[0].items():
            if isinstance(value, (int, float)):
                medians[key] = statistics.median(figures[key] for figures in measured)
        report["builds"][code] = {"median_of_rounds": medians, "rounds": measured}
    report["machine"]["bare_fsync_ms_at_end"] = bare_fsync_ms(base)
    return report


if __name__ == "__main__":
    main()
