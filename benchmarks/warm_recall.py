"""Warm hybrid recall of one NPC, alone: its time, its CPU, and a digest of every result.

The NPC workload's save and queries (``npc_sides.py``: memories of one NPC, 12 words each,
fixed random 384-dim vectors, the 16 queries, RRF and the game-aware reranker), without
the peer and the other figures of ``npc_workload.py``, so one build's warm recall can be
measured against another's in turns on the same save, and counted by ``valgrind``:

* ``--seed``: build the save under ``--root`` (a folder per size), then exit;
* default: open it, recall every query twice (warm-up), wait until the int8 copies of the
  rows stop growing (made while no recall runs), then ``--rounds`` times each query,
  and print the medians of the wall time (excluding the query embedding, as
  ``npc_workload.py``), of the process's CPU time (all threads) and of each stage, and a
  SHA-256 over every hit of the first pass (memory, both ranks, both scores and the fused
  score as float hex, age, stage counts): equal digests mean bit-identical results;
* ``--recalls N``: after the warm-up, make ``N`` recalls and no measurement: run it with
  ``N`` and with 0 under ``valgrind --tool=callgrind`` and divide the difference by ``N``
  for the instructions of one warm recall, which the machine's load cannot move.

Run it with ``PYTHONPATH`` at a build's ``python/`` folder to measure that build.
Single-threaded BLAS unless the caller chose (as ``npc_workload.py``). Prints JSON.
Usage: ``python benchmarks/warm_recall.py --root DIR [--size 10000] [--seed | --rounds 6
| --recalls N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from npc_sides import (
    LIMIT,
    SESSION,
    TARGET,
    FakeProvider,
    Json,
    gm_ingest,
    gm_memory,
    gm_open,
    memory_records,
    queries,
)


def request(query: Json) -> Any:
    from game_memory import GameMemoryQuery, GameMoment

    return GameMemoryQuery(
        session_id=SESSION,
        owner_id=TARGET,
        limit=LIMIT,
        text=query["text"],
        at_or_before=GameMoment(timeline_id="main", tick=query["tick"]),
    )


def fingerprint(result: Any) -> bytes:
    """Every hit of a recall, floats by their bits, and the stages' counts (not times)."""

    def bits(value: float | None) -> str | None:
        return None if value is None else float(value).hex()

    hits = [
        (hit.memory.memory_id, hit.lexical_rank, hit.vector_rank, bits(hit.lexical_score),
         bits(hit.vector_score), bits(hit.fused_score), hit.age_ticks)
        for hit in result.hits
    ]  # fmt: skip
    stages = [
        (stage.stage.name, stage.scanned_count, stage.candidate_count, stage.reused)
        for stage in result.snapshot.stages
    ]
    facts = (len(result.snapshot.authoritative_memories), result.fallback)
    return repr((hits, [m.memory_id for m in result.memories], stages, facts)).encode()


async def seed(folder: Path, size: int) -> Json:
    """Build the save, then open it twice (2 s apart, as ``npc_workload.py`` settles): the
    derived files and their stamps are written then, not during a measurement."""
    folder.mkdir(parents=True)
    store = gm_open(folder, size + 10_000, FakeProvider())
    started = time.perf_counter()
    await gm_ingest(store, [gm_memory(record) for record in memory_records(size, 1)])
    await store.aclose()
    seconds = time.perf_counter() - started
    for pause in (2.1, 0.0):
        await measure(folder, size, 1, 0)
        await asyncio.sleep(pause)
    return {"seeded": size, "seconds": round(seconds, 2)}


async def settled() -> None:
    """Wait (at most 5 s) until the int8 copies of the rows, which a build from the tenth
    session makes after an NPC's 4th recall while no recall runs, stop growing: a game
    asks between frames, so its warm recalls find them made (``index/quantized.py``)."""
    try:
        from game_memory.index.quantized import held_bytes
    except ImportError:  # an earlier build: nothing to wait for
        return
    last = -1
    for _ in range(50):
        await asyncio.sleep(0.1)
        if held_bytes() == last:
            return
        last = held_bytes()


async def measure(folder: Path, size: int, rounds: int, recalls: int | None) -> Json:
    provider = FakeProvider()
    store = gm_open(folder, size + 10_000, provider)
    work = queries(size)
    # The query vectors are drawn before the clock: embedding is excluded, as in the workload.
    provider.known.update((query["text"], provider.vector(query["text"])) for query in work)
    asked = [request(query) for query in work]
    digest = hashlib.sha256()
    for query in asked:
        result = await store.recall(query)
        if result.fallback:
            raise RuntimeError("recall fell back to lexical: the vectors are not used")
        digest.update(fingerprint(result))
    for query in asked:
        await store.recall(query)
    await settled()
    if recalls is not None:
        for number in range(recalls):
            await store.recall(asked[number % len(asked)])
        await store.aclose()
        return {"recalls": recalls, "digest": digest.hexdigest()[:16]}
    walls: list[float] = []
    cpus: list[float] = []
    stages: list[dict[str, float]] = []
    for _ in range(rounds):
        for query in asked:
            started, cpu = time.perf_counter(), time.process_time()
            result = await store.recall(query)
            wall = time.perf_counter() - started
            cpus.append(time.process_time() - cpu)
            timed = {stage.stage.name: stage.duration_ms for stage in result.snapshot.stages}
            walls.append(wall - timed.get("EMBEDDING", 0.0) / 1000)
            stages.append(timed)
    await store.aclose()
    names = sorted({name for timed in stages for name in timed})
    return {
        "size": size,
        "recalls": len(walls),
        "wall_median_ms": round(statistics.median(walls) * 1000, 3),
        "cpu_median_ms": round(statistics.median(cpus) * 1000, 3),
        "wall_min_ms": round(min(walls) * 1000, 3),
        "stage_medians_ms": {
            name: round(statistics.median(timed.get(name, 0.0) for timed in stages), 3)
            for name in names
        },
        "digest": digest.hexdigest()[:16],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--root", required=True, help="folder of the saves (one per size)")
    parser.add_argument("--size", type=int, default=10_000, help="memories of the one NPC")
    parser.add_argument("--rounds", type=int, default=6, help="passes over the 16 queries")
    parser.add_argument("--seed", action="store_true", help="build the save, then exit")
    parser.add_argument("--recalls", type=int, default=None, help="recalls, no timing")
    args = parser.parse_args(argv)
    if not 100 <= args.size <= 500_000 or not 1 <= args.rounds <= 1_000:
        parser.error("--size 100..500,000, --rounds 1..1,000")
    folder = Path(args.root) / str(args.size)
    seeding = f"warm_recall.py --root {shlex.quote(args.root)} --size {args.size} --seed"
    # Measuring opens the save, and an open creates one: a folder never seeded would be
    # timed empty (recalls over nothing), so it is refused, as append_after_open.py does.
    if not args.seed and not (folder / "save").is_dir():
        parser.error(f"no seeded save in {folder}: run {seeding} first")
    if args.seed and folder.exists():
        parser.error(f"{folder} is seeded already: measure it, or remove it to run {seeding}")
    if args.seed:
        report = asyncio.run(seed(folder, args.size))
    else:
        report = asyncio.run(measure(folder, args.size, args.rounds, args.recalls))
    json.dump(report, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    from npc_workload import single_threaded_blas

    single_threaded_blas()
    sys.exit(main())
