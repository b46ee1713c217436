"""The appends right after loading a save: the first one, and the tail of the next ones.

The NPC workload's save (``warm_recall.py --seed``: one NPC, fixed random 384-dim vectors,
its read files written and stamped), copied afresh for every measurement, opened in a fresh
process, asked its first hybrid recall, then given ``--appends`` durable appends through the
front door (each timed alone, the vector drawn before the clock, as ``npc_workload.py``
does). What a game sees when it loads a save and its NPCs start to remember: before 4
December 2026 the first append of a large partition built the id → position dictionary of
its lazily read view on its own path (10 to 25 ms per 100k ids); now the ids are found by
their hashes and the dictionary is built on the store's read-file thread
(``store/lazy.py``, ``LazyPositions``).

Prints JSON: per copy, the first append, the median, p99 and maximum of the rest; and the
medians over the copies. Run it with ``PYTHONPATH`` at a build's ``python/`` folder to
measure that build (the save is the same for both: seed it with the newer build).
Usage: ``python benchmarks/append_after_open.py --root DIR [--size 100000] [--copies 3]
[--appends 200]`` after ``python benchmarks/warm_recall.py --root DIR --size N --seed``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from npc_sides import Json, Side, memory_records, queries


async def worker(folder: Path, size: int, appends: int) -> Json:
    """One fresh process: open the copy, first recall, then the appends, each timed."""
    side = Side("game_memory", folder, size + 10_000 + appends)
    await side.open()
    await side.recall(queries(size)[0])
    records = memory_records(appends, 1, f"after-open-{uuid.uuid4().hex[:8]}", size)
    times = [await side.append(record) for record in records]
    await side.close()
    rest = sorted(seconds * 1000 for seconds in times[1:])
    return {
        "first_ms": round(times[0] * 1000, 3),
        "rest_median_ms": round(statistics.median(rest), 3),
        "rest_p99_ms": round(rest[max(0, -(-len(rest) * 99 // 100) - 1)], 3),
        "rest_max_ms": round(rest[-1], 3),
        "all_p99_ms": round(
            sorted(s * 1000 for s in times)[max(0, -(-len(times) * 99 // 100) - 1)], 3
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", required=True, help="the folder warm_recall.py --seed used")
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--copies", type=int, default=3, help="fresh copies, one process each")
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.appends < 2 or args.copies < 1:
        parser.error("--appends must be at least 2 and --copies at least 1")
    if args.worker:
        print(json.dumps(asyncio.run(worker(Path(args.worker), args.size, args.appends))))
        return 0
    seeded = Path(args.root) / str(args.size)
    if not (seeded / "save").is_dir():
        parser.error(f"no seeded save in {seeded}: run warm_recall.py --root ... --seed first")
    runs: list[dict[str, Any]] = []
    for number in range(args.copies):
        copy = Path(args.root) / f"after-open-{number}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(seeded, copy)
        os.sync()  # the copy's writes must not be charged to the first append's fsync
        time.sleep(2.1)  # the copy's files settle, as a save loaded later would have
        command = [sys.executable, __file__, "--root", args.root, "--worker", str(copy)]
        command += ["--size", str(args.size)]
        command += ["--appends", str(args.appends)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        shutil.rmtree(copy, ignore_errors=True)
        if done.returncode != 0:
            raise SystemExit(f"the worker failed:\n{done.stderr[-4000:]}")
        runs.append(json.loads(done.stdout))
    print(
        json.dumps(
            {
                "benchmark": "append_after_open",
                "size": args.size,
                "appends": args.appends,
                "runs": runs,
                "medians": {
                    name: round(statistics.median(run[name] for run in runs), 3) for name in runs[0]
                },
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
