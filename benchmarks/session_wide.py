"""Session-wide calls over a world of many small NPCs: a recall of every NPC at once
(``owner_id=None``: "who in the village saw the dragon?") and ``get_status`` of the slot.

Each of ``--npcs`` worlds (NPCs of ``--per-npc`` memories, the NPC workload's texts and
fixed random 384-dim vectors: no model) is seeded once; then a fresh process opens it and
times the first session-wide recall (cold: every partition read), ``--rounds`` warm ones,
and ``--rounds`` warm ``get_status`` calls, and reports its peak RSS and how many address
ranges it maps (``/proc/self/maps``).

Why: every such call reads every NPC's index partition, and the index kept 4,096 of them
(until 6 December 2026): past that many NPCs each call read them all again (a warm
session-wide recall over 5,000 NPCs 2.6 s against 0.57 s over 4,000), and each cached
partition mapped its row file (two address ranges an NPC, against the kernel's default
65,530).

Each world is seeded in ``world-<npcs>x<per-npc>`` under ``--directory`` and reused by
later runs given the same folder: only a world whose seeding completed (``seeded.json``,
written last, names its options) is reused; a world cut short is seeded again. Without
``--directory`` the worlds go in a fresh folder of ``/dev/shm`` (RAM), removed at the end
(also after an error or a Ctrl-C). The ``memories`` reported are counted in the save.

Prints one JSON object. Usage: ``python benchmarks/session_wide.py [--npcs 4000,5000]
[--per-npc 10] [--rounds 3] [--directory DIR] [--out FILE]``. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from npc_sides import SESSION, FakeProvider, gm_ingest, gm_memory, gm_open, log, memory_records
from report_out import emit
from script_support import worker_failed

Json = dict[str, Any]
TEXT = "w17 dragon river"
#: Written in a world's folder once its seeding completed: its options, as JSON.
SEEDED = "seeded.json"


async def seed(folder: Path, npcs: int, per_npc: int) -> None:
    size = npcs * per_npc
    store = gm_open(folder, size + 10_000, FakeProvider())
    try:
        await gm_ingest(store, [gm_memory(record) for record in memory_records(size, npcs)])
    finally:
        await store.aclose()


def world_folder(root: Path, npcs: int, per_npc: int) -> Path:
    """Where the world of ``npcs`` NPCs of ``per_npc`` memories is seeded: the name carries
    every option that shapes the world, so a world of other options is never reused."""
    return root / f"world-{npcs}x{per_npc}"


def seeded_shape(folder: Path) -> Json | None:
    """The options ``folder``'s world was seeded with (``SEEDED``); ``None`` when its
    seeding never completed (cut short, or another layout)."""
    try:
        shape = json.loads((folder / SEEDED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return shape if isinstance(shape, dict) else None


def ensure_world(folder: Path, npcs: int, per_npc: int) -> None:
    """Seed ``folder`` unless it holds a completed world of exactly these options.

    A folder without its ``SEEDED`` record (a seeding stopped by a Ctrl-C or an error) is
    removed and seeded from nothing; the record is written only after the seeding returned.
    """
    shape = {"npcs": npcs, "per_npc": per_npc}
    if seeded_shape(folder) == shape:
        return
    if folder.exists():
        log(f"session_wide: {folder} was not seeded to the end; seeding it again")
        shutil.rmtree(folder)
    log(f"session_wide: seeding {npcs:,} NPCs x {per_npc} in {folder}")
    folder.mkdir(parents=True)
    asyncio.run(seed(folder, npcs, per_npc))
    (folder / SEEDED).write_text(json.dumps(shape), encoding="utf-8")


async def measure(folder: Path, npcs: int, per_npc: int, rounds: int) -> Json:
    from game_memory import GameMemoryQuery

    provider = FakeProvider()
    provider.known[TEXT] = provider.vector(TEXT)
    store = gm_open(folder, npcs * per_npc + 10_000, provider)
    question = GameMemoryQuery(session_id=SESSION, owner_id=None, text=TEXT, limit=8)

    async def timed(call: Any) -> float:
        started = time.perf_counter()
        await call
        return (time.perf_counter() - started) * 1000

    try:
        cold = await timed(store.recall(question))
        recalls = [await timed(store.recall(question)) for _ in range(rounds)]
        statuses = [await timed(store.get_status(SESSION)) for _ in range(rounds)]
        memories = await store.authoritative.count()  # counted: what was measured
    finally:
        await store.aclose()
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        ranges = sum(1 for _ in maps)
    return {
        "npcs": npcs,
        "memories": memories,
        "session_recall_cold_ms": round(cold, 1),
        "session_recall_warm_ms": [round(value, 1) for value in recalls],
        "session_recall_warm_median_ms": round(statistics.median(recalls), 1),
        "get_status_warm_ms": [round(value, 1) for value in statuses],
        "get_status_warm_median_ms": round(statistics.median(statuses), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "mapped_ranges": ranges,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--npcs", default="4000,5000", help="NPCs of each world, by commas")
    parser.add_argument("--per-npc", type=int, default=10, help="memories of each NPC")
    parser.add_argument("--rounds", type=int, default=3, help="warm calls of each kind")
    parser.add_argument("--directory", default=None, help="where the worlds are seeded")
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # the child
    args = parser.parse_args(argv)
    try:
        worlds = [int(part) for part in args.npcs.split(",")]
    except ValueError:
        parser.error("--npcs takes whole numbers separated by commas")
    if not all(1 <= npcs <= 100_000 for npcs in worlds) or not 1 <= args.per_npc <= 1_000:
        parser.error("--npcs 1..100,000 each, --per-npc 1..1,000")
    if not 1 <= args.rounds <= 100:
        parser.error("--rounds 1..100")
    if args.measure:
        folder = Path(args.measure)
        shape = seeded_shape(folder)
        if shape is None:
            parser.error(f"--measure {folder}: no completed world there ({SEEDED} is missing)")
        report = asyncio.run(measure(folder, shape["npcs"], shape["per_npc"], args.rounds))
        print(json.dumps(report))
        return 0
    if args.directory:
        return emit(run(Path(args.directory), worlds, args), args.out)
    ram = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = Path(tempfile.mkdtemp(prefix="session-wide-", dir=ram))
    try:  # a folder of this run's own, in RAM: removed whatever happens
        report = run(root, worlds, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return emit(report, args.out)


def run(root: Path, worlds: list[int], args: argparse.Namespace) -> Json:
    """Seed (or reuse) each world under ``root`` and measure it in a fresh process."""
    results = []
    for npcs in worlds:
        folder = world_folder(root, npcs, args.per_npc)
        ensure_world(folder, npcs, args.per_npc)
        log(f"session_wide: measuring {npcs:,} NPCs in a fresh process")
        child = subprocess.run(
            [sys.executable, __file__, "--measure", str(folder), "--per-npc",
             str(args.per_npc), "--rounds", str(args.rounds)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if child.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt
            worker_failed(child, f"the measurement of {folder}")
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    return {"benchmark": "session_wide", "directory": str(root), "worlds": results}


if __name__ == "__main__":
    from npc_workload import single_threaded_blas

    single_threaded_blas()
    sys.exit(main())
