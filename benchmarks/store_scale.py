"""Scale benchmark of the authoritative store: legacy scan vs. migration vs. partitioned query.

Seeds N legacy (reference v1, flat) documents across many session/owner pairs, 8 of them in
one target partition, then measures in one run:

1. the legacy full-directory scan: parse every top-level ``*.memory.json`` and count the
   target session/owner matches (what a flat store does for every query);
2. the real migration into the partitioned layout (``migrate_legacy_layout`` on a new
   store object: layout creation, validation of every document, the batch, the backup);
3. the median of 25 hot owner queries (after one warm-up) for the target owner, each a
   full ``snapshot`` through the async API (one thread-pool hop included).

The file-system journal is flushed (``os.sync``) before each timed phase, so neither pays
for the other's writes.

Prints JSON with the times, the counts scanned, and the ratios ``query_speedup`` (scan /
median query) and ``migration_over_scan``. Usage:
``python benchmarks/store_scale.py [--entries 100..100000]``.
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

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

TARGET_ENTRIES = 8
QUERY_RUNS = 25


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
    """What a flat store must do to answer one owner query: read and parse every document."""
    matches = 0
    for path in sorted(root.glob("*.memory.json")):
        document = json.loads(path.read_bytes())
        if document["SessionId"] == "target-session" and document["OwnerId"] == "target-owner":
            matches += 1
    return matches


async def measure(root: Path, entries: int) -> dict[str, object]:
    os.sync()  # the seeding's writes must not be charged to the scan
    started = time.perf_counter()
    baseline = legacy_scan(root)
    scan_ms = (time.perf_counter() - started) * 1000
    if baseline != TARGET_ENTRIES:
        raise RuntimeError(f"the scan found {baseline} target records, expected {TARGET_ENTRIES}")

    store = FileGameMemoryStore(root, maximum_entries=max(entries, 100_000))
    try:
        os.sync()  # each timed phase starts with the file system's journal flushed
        started = time.perf_counter()
        migration = await store.migrate_legacy_layout()
        migration_ms = (time.perf_counter() - started) * 1000
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
        "entries": entries,
        "targetEntries": TARGET_ENTRIES,
        "baselineFullDirectoryScanMilliseconds": round(scan_ms, 3),
        "baselineScannedDocuments": entries,
        "migrationMilliseconds": round(migration_ms, 3),
        "migratedEntries": migration.migrated_entries,
        "partitionedEntries": migration.partitioned_entries,
        "partitionedHotQueryMedianMilliseconds": round(median_ms, 4),
        "queryRuns": QUERY_RUNS,
        "authoritativeScanned": stage.scanned_count,
        "resultCount": len(snapshot.memories),
        "query_speedup": round(scan_ms / median_ms, 1),
        "migration_over_scan": round(migration_ms / scan_ms, 2),
        "operatingSystem": platform.system(),
        "framework": f"CPython {platform.python_version()}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args(argv)
    if not 100 <= args.entries <= 100_000:
        parser.error("Usage: store_scale.py [--entries 100..100000]")
    base = Path(tempfile.gettempdir()) / "game-memory-benchmarks"
    root = base / uuid.uuid4().hex
    root.mkdir(parents=True)
    try:
        seed(root, args.entries)
        result = asyncio.run(measure(root, args.entries))
    finally:
        if root.resolve().parent == base.resolve():
            shutil.rmtree(root)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
