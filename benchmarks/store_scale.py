"""Scale benchmark of the authoritative store: lean scan vs. migration vs. partitioned query.

Seeds N legacy (reference v1, flat) documents across many session/owner pairs, 8 of them in
one target partition, then measures side by side, in each of ``--rounds`` rounds (a fresh
seed each round):

1. the **lean scan**: read and JSON-parse every top-level ``*.memory.json`` and count the
   target session/owner matches, with no validation (what a flat store does for every
   query; the yardstick of both ratios), the median of ``SCAN_RUNS`` runs;
2. the real migration into the partitioned layout (``migrate_legacy_layout`` on a new
   store object: layout creation, strict decoding and validation of every document, the
   file names checked, the crash-safe batch, the backup);
3. the median of 25 hot owner queries (after one warm-up) for the target owner, each a
   full ``snapshot`` through the async API (one thread-pool hop included).

The file-system journal is flushed (``os.sync``) before each timed phase, so neither pays
for the other's writes.

Prints JSON: the times, the counts scanned, and the two ratios against the lean scan,
``migration_over_scan`` (migration / lean scan, goal <= 3) and ``query_speedup`` (lean scan
/ median hot query, goal >= 1,000), as the median over the rounds of each round's own
ratio, with every round's figures under ``rounds``; also the migration's CPU time over the
scan's (``migration_over_scan_cpu``, steadier on a shared machine, blind to fsync waits).
Usage:
``python benchmarks/store_scale.py [--entries 100..100000] [--rounds 1..9]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from script_support import remove_if_empty

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

TARGET_ENTRIES = 8
QUERY_RUNS = 25
SCAN_RUNS = 3
GOAL_MIGRATION_OVER_SCAN = 3.0
GOAL_QUERY_SPEEDUP = 1_000.0


def legacy_memory(index: int) -> GameMemory:
    """The reference benchmark's seed record ``index``."""
    target = index < TARGET_ENTRIES
    return GameMemory(
        memory_id=f"memory-{index}",
        session_id="target-session" if target else f"session-{index % 100}",
        owner_id="target-owner" if target else f"owner-{(index // 100) % 100}",
        scope="fact",
        kind="fact",
        payload_json='{"target":true}' if target else '{"target":false}',
        moment=GameMoment(timeline_id="world", tick=index),
        importance=0.5,
        searchable_text="target" if target else "unrelated",
    )


def seed(root: Path, entries: int) -> None:
    def write(index: int) -> None:
        memory = legacy_memory(index)
        key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
        (root / f"{identity_hash(key)}.memory.json").write_bytes(encode_legacy_document(memory))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(entries)))


def legacy_scan(root: Path) -> int:
    """The lean scan: read and JSON-parse every document, count the matches, validate nothing.

    What a flat store must do to answer one owner query.
    """
    matches = 0
    for path in sorted(root.glob("*.memory.json")):
        document = json.loads(path.read_bytes())
        if document["SessionId"] == "target-session" and document["OwnerId"] == "target-owner":
            matches += 1
    return matches


def lean_scan_milliseconds(root: Path) -> tuple[float, float]:
    """The median wall and CPU time of ``SCAN_RUNS`` lean scans (each checked)."""
    timings: list[float] = []
    cpu: list[float] = []
    for _ in range(SCAN_RUNS):
        started, started_cpu = time.perf_counter(), time.process_time()
        found = legacy_scan(root)
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        if found != TARGET_ENTRIES:
            raise RuntimeError(f"the scan found {found} target records, expected {TARGET_ENTRIES}")
    return statistics.median(timings), statistics.median(cpu)


async def measure(root: Path, entries: int) -> dict[str, Any]:
    """One round on a seeded folder: lean scan, migration, hot queries; their ratios."""
    os.sync()  # the seeding's writes must not be charged to the scan
    scan_ms, scan_cpu_ms = lean_scan_milliseconds(root)

    store = FileGameMemoryStore(root, maximum_entries=max(entries, 100_000))
    try:
        os.sync()  # each timed phase starts with the file system's journal flushed
        started, started_cpu = time.perf_counter(), time.process_time()
        migration = await store.migrate_legacy_layout()
        migration_ms = (time.perf_counter() - started) * 1000
        migration_cpu_ms = (time.process_time() - started_cpu) * 1000  # every thread
        query = GameMemoryQuery(
            session_id="target-session", owner_id="target-owner", limit=8, text="target"
        )
        await store.snapshot(query, maximum_entries=entries)
        timings: list[float] = []
        for _ in range(QUERY_RUNS):
            started = time.perf_counter()
            snapshot = (await store.snapshot(query, maximum_entries=entries)).search_snapshot()
            timings.append((time.perf_counter() - started) * 1000)
        median_ms = statistics.median(timings)
        stage = next(s for s in snapshot.stages if s.stage.name == "AUTHORITATIVE_SNAPSHOT")
        checks = {
            "migrated": migration.migrated_entries == entries,
            "partitioned": migration.partitioned_entries == entries,
            "scanned": stage.scanned_count == TARGET_ENTRIES,
            "authoritative": len(snapshot.authoritative_memories) == TARGET_ENTRIES,
            "results": len(snapshot.memories) == TARGET_ENTRIES,
        }
        failed = [name for name, ok in checks.items() if not ok]
        if failed:
            raise RuntimeError(f"self-check failed: {failed}")
    finally:
        await store.aclose()
    return {
        "leanScanMilliseconds": round(scan_ms, 3),
        "migrationMilliseconds": round(migration_ms, 3),
        "hotQueryMedianMilliseconds": round(median_ms, 4),
        "migrationOverLeanScan": round(migration_ms / scan_ms, 2),
        "leanScanCpuMilliseconds": round(scan_cpu_ms, 3),
        "migrationCpuMilliseconds": round(migration_cpu_ms, 3),
        "migrationOverLeanScanCpu": round(migration_cpu_ms / scan_cpu_ms, 2),
        "hotQuerySpeedupOverLeanScan": round(scan_ms / median_ms, 1),
        "migratedEntries": migration.migrated_entries,
        "partitionedEntries": migration.partitioned_entries,
        "authoritativeScanned": stage.scanned_count,
        "resultCount": len(snapshot.memories),
    }


def summarize(entries: int, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The report: medians over the rounds (each ratio the median of the rounds' ratios)."""

    def median(name: str) -> float:
        return float(statistics.median(round_[name] for round_ in rounds))

    migration_ratio = median("migrationOverLeanScan")
    query_ratio = median("hotQuerySpeedupOverLeanScan")
    last = rounds[-1]
    return {
        "benchmark": "store_scale",
        "command": " ".join(sys.argv),
        "entries": entries,
        "targetEntries": TARGET_ENTRIES,
        "rounds": rounds,
        "leanScan": "read and JSON-parse every legacy file, count the matches, no validation",
        "leanScanMilliseconds": round(median("leanScanMilliseconds"), 3),
        "leanScanRuns": SCAN_RUNS,
        # The names of earlier releases, kept for readers of this report.
        "baselineFullDirectoryScanMilliseconds": round(median("leanScanMilliseconds"), 3),
        "baselineScannedDocuments": entries,
        "migrationMilliseconds": round(median("migrationMilliseconds"), 3),
        "migratedEntries": last["migratedEntries"],
        "partitionedEntries": last["partitionedEntries"],
        "partitionedHotQueryMedianMilliseconds": round(median("hotQueryMedianMilliseconds"), 4),
        "queryRuns": QUERY_RUNS,
        "authoritativeScanned": last["authoritativeScanned"],
        "resultCount": last["resultCount"],
        "query_speedup": round(query_ratio, 1),
        "migration_over_scan": round(migration_ratio, 2),
        # CPU time of the process (all threads): steadier than wall time on a shared
        # machine, but blind to the fsync waits the migration's batch makes.
        "migration_over_scan_cpu": round(median("migrationOverLeanScanCpu"), 2),
        "goals": {
            "migration_over_scan": f"<= {GOAL_MIGRATION_OVER_SCAN:g}",
            "query_speedup": f">= {GOAL_QUERY_SPEEDUP:,.0f}",
        },
        "migrationWithinGoal": migration_ratio <= GOAL_MIGRATION_OVER_SCAN,
        "queryWithinGoal": query_ratio >= GOAL_QUERY_SPEEDUP,
        "cpuCount": os.cpu_count(),
        "operatingSystem": platform.system(),
        "framework": f"CPython {platform.python_version()}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="fresh seeds measured (1..9)")
    args = parser.parse_args(argv)
    if not 100 <= args.entries <= 100_000 or not 1 <= args.rounds <= 9:
        parser.error("Usage: store_scale.py [--entries 100..100000] [--rounds 1..9]")
    base = Path(tempfile.gettempdir()) / "game-memory-benchmarks"
    rounds: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        root = base / uuid.uuid4().hex
        root.mkdir(parents=True)
        try:
            seed(root, args.entries)
            rounds.append(asyncio.run(measure(root, args.entries)))
        finally:
            if root.resolve().parent == base.resolve():
                shutil.rmtree(root)
            remove_if_empty(base)  # shared by runs: the last one out removes it
    json.dump(summarize(args.entries, rounds), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
