"""Cache bounds: does the memory a process holds stay within the caches' documented bounds?

A world of many small NPCs (``--npcs`` of ``--per-npc`` memories each, below the read-file
minimum of 128, so each partition a recall reads is parsed whole) is seeded once; then, per
setting, a fresh process opens it with the file store's ``cache_entries`` and the file
index's ``digest_cache_entries`` given, asks one hybrid recall of every NPC in turn (the
hashing-free fixed vectors of ``npc_sides``: no model), and reports what it holds after a
full collection:

- ``memories_alive``: ``GameMemory`` objects still referenced (the parsed memories kept);
- ``rss_anon_added_mb``: the private memory the recalls added (``RssAnon`` after minus
  before the first recall);
- ``joins_kept`` and ``join_memories``: the vector index's join cache.

The parsed memories kept should be at most the larger of the two bounds (the partition
cache's and the joins', which ``digest_cache_entries`` sets); before 6 December 2026 the
join cache kept 4,096 views whatever their size, and so every memory of such a world.

Prints one JSON object. Usage: ``python benchmarks/cache_bounds.py [--npcs 1000]
[--per-npc 100] [--settings 5000:5000,20000:20000,5000:200000] [--out FILE]`` (each
setting ``cache_entries:digest_cache_entries``). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report_out import emit
from script_support import int_range, worker_failed

Json = dict[str, Any]


def rss_anon_mb() -> float:
    """This process's private resident memory (``RssAnon``), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no RssAnon in /proc/self/status")


def open_store(
    root: Path, bound: int, cache: int | None, digests: int, provider: Any = None
) -> Any:
    """``npc_sides.gm_open`` with the two cache bounds given (fixed vectors: ``provider``,
    else fresh ones)."""
    import npc_sides

    vectors = npc_sides.FakeProvider() if provider is None else provider
    return npc_sides.gm_open(root, bound, vectors, cache, digests)


async def seed(root: Path, npcs: int, per_npc: int) -> float:
    """Seed ``npcs`` × ``per_npc`` memories; return the seconds it took."""
    import npc_sides

    records = npc_sides.memory_records(npcs * per_npc, npcs)
    provider = npc_sides.FakeProvider()
    provider.draw([npc_sides.projected(record) for record in records], seed=len(records))
    started = time.perf_counter()
    store = open_store(root, len(records) + 1_000, None, 200_000, provider)
    await npc_sides.gm_ingest(store, [npc_sides.gm_memory(record) for record in records])
    await store.aclose()
    return time.perf_counter() - started


async def worker(root: Path, npcs: int, per_npc: int, cache: int, digests: int) -> Json:
    """One setting in this fresh process."""
    import npc_sides

    from game_memory import GameMemory, GameMemoryQuery, GameMoment

    store = open_store(root, npcs * per_npc + 1_000, cache, digests)
    before = rss_anon_mb()
    for number in range(npcs):
        owner = f"npc-{number:03d}"
        await store.recall(
            GameMemoryQuery(
                session_id=npc_sides.SESSION,
                owner_id=owner,
                limit=npc_sides.LIMIT,
                text="the old mill by the river",
                at_or_before=GameMoment(timeline_id="main", tick=npcs * per_npc),
            )
        )
    gc.collect()
    alive = sum(1 for thing in gc.get_objects() if isinstance(thing, GameMemory))
    joins = store.index._joins  # the figure this benchmark is about
    figures = {
        "cache_entries": cache,
        "digest_cache_entries": digests,
        "memories_alive": alive,
        "rss_anon_added_mb": round(rss_anon_mb() - before, 1),
        "joins_kept": len(joins),
        "join_memories": joins.memories,
        "within_bounds": alive <= max(cache, digests) + npc_sides.LIMIT * 8,
    }
    await store.aclose()
    return figures


def setting_pairs(text: str) -> list[tuple[int, int]]:
    """``--settings``: ``cache_entries:digest_cache_entries`` pairs separated by commas; a
    value that is not one is a usage error (the bounds' ranges are the library's to check)."""
    pairs = []
    for pair in text.split(","):
        parts = pair.split(":")
        if len(parts) != 2 or not all(part.strip().isdigit() for part in parts):
            raise argparse.ArgumentTypeError(
                f"{pair!r} is not cache_entries:digest_cache_entries (two whole numbers)"
            )
        pairs.append((int(parts[0]), int(parts[1])))
    return pairs


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npcs", type=int_range(1), default=1_000, help="NPCs in the world")
    parser.add_argument("--per-npc", type=int_range(1), default=100, help="memories per NPC")
    parser.add_argument(
        "--settings",
        type=setting_pairs,
        default="5000:5000,20000:20000,5000:200000",
        help="cache_entries:digest_cache_entries pairs, comma separated",
    )
    parser.add_argument("--out", default=None, help="also write the JSON to this file")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker is not None:
        root, cache, digests = args.worker.split(",")
        figures = asyncio.run(worker(Path(root), args.npcs, args.per_npc, int(cache), int(digests)))
        print(json.dumps(figures))
        return 0
    settings: list[tuple[int, int]] = args.settings
    with tempfile.TemporaryDirectory(prefix="cache-bounds-") as folder:
        root = Path(folder) / "world"
        root.mkdir()
        seconds = asyncio.run(seed(root, args.npcs, args.per_npc))
        runs = []
        for cache, digests in settings:
            command = [sys.executable, __file__, "--worker", f"{root},{cache},{digests}"]
            command += ["--npcs", str(args.npcs), "--per-npc", str(args.per_npc)]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt
                worker_failed(done, f"the worker of setting {cache}:{digests}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return emit(
        {
            "benchmark": "cache_bounds",
            "npcs": args.npcs,
            "memories_per_npc": args.per_npc,
            "seed_seconds": round(seconds, 1),
            "runs": runs,
        },
        args.out,
    )


if __name__ == "__main__":
    sys.exit(main())
