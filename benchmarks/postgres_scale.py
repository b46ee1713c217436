"""Scale benchmark of the PostgreSQL backend, side by side with the file backend.

One session of 100k memories over 200 NPCs (one NPC with 10k, the others ~452 each), with
384-dimension vectors from a fake provider (fixed random unit vectors: no model is loaded),
in one run:

1. **bulk append**: the memories go into PostgreSQL with ``append_many`` (batches of 1,000
   of one NPC, one durable transaction each), then the vectors with the index's ``write``;
   the same memories go into a file save (reference v1 documents and the store's bulk
   migration) and its index (a ``rebuild``);
2. **recall** p50/p99 (hybrid: snapshot, BM25, query embedding, vector scoring, fusion,
   game-time reranker) for the large NPC and for typical NPCs, warm (every partition read
   once before), on both backends; the PostgreSQL stage medians; and, for the lexical
   choice, the large NPC's BM25 over the snapshot in this process against PostgreSQL's own
   ``ts_rank_cd`` full-text ranking computed in SQL on the same rows;
3. **recall after an append** on the large NPC (the cached view, join and vectors grow);
4. **durable single append** p50/p99: the save alone, and the front door (save, then the
   vector), on both backends (the file save is on the same disk, fsynced);
5. **8 concurrent client processes** (each its own ``VectorMemoryStore`` on the database)
   for a few seconds: hybrid appends per second, then typical-NPC recalls per second, in all.

The PostgreSQL server is ``$GAME_MEMORY_TEST_DATABASE`` or ``--database``; without either,
one is started with ``.ci/postgres.sh`` (and stopped). Tables go into a schema of their own,
dropped at the end. Prints JSON. Usage: ``python benchmarks/postgres_scale.py [--memories
100000] [--npcs 200] [--large 10000] [--repeats 200] [--workers 8] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from hybrid_scale import WORDS, RandomUnitProvider, single_threaded_blas

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameAwareMemoryReranker,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.durable.names import identity_hash
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from game_memory.store.documents import encode_legacy_document

DIMENSIONS = 384
SESSION = "world"
LARGE = "npc-000"
SCRIPT = Path(__file__).resolve()
POSTGRES_SH = SCRIPT.parents[1] / ".ci" / "postgres.sh"
_EXPORT = re.compile(r"^export (GAME_MEMORY_TEST_[A-Z_]+)=(\S+)$")


def owner_of(index: int, npcs: int, large: int) -> str:
    if index < large:
        return LARGE
    return f"npc-{1 + (index - large) % (npcs - 1):03d}"


def make_memory(index: int, npcs: int, large: int, rng: random.Random) -> GameMemory:
    words = " ".join(rng.choice(WORDS) for _ in range(12))
    return GameMemory(
        memory_id=f"m-{index:07d}",
        session_id=SESSION,
        owner_id=owner_of(index, npcs, large),
        scope=("personal", "village")[index % 2],
        kind=("event", "fact", "relationship")[index % 3],
        payload_json=f'{{"n":{index}}}',
        moment=GameMoment(timeline_id="main", tick=index),
        importance=rng.random(),
        searchable_text=words,
    )


def options(size: int) -> VectorMemoryStoreOptions:
    bound = size + 10_000
    return VectorMemoryStoreOptions(
        maximum_index_entries=bound,
        maximum_stored_vector_values=bound * DIMENSIONS,
        maximum_vector_comparisons_per_search=bound * DIMENSIONS,
        rebuild_batch_size=1_024,
        dispose_embedding_provider=False,
    )


def postgres_memory(url: str, size: int) -> VectorMemoryStore:
    return VectorMemoryStore(
        PostgresGameMemoryStore(url),
        PostgresVectorIndex(url, capacity=size + 10_000),
        RandomUnitProvider(DIMENSIONS),
        reranker=GameAwareMemoryReranker(),
        options=options(size),
    )


def file_memory(root: Path, size: int) -> VectorMemoryStore:
    return VectorMemoryStore(
        FileGameMemoryStore(root / "save", maximum_entries=size + 10_000),
        FileVectorMemoryIndex(root / "index", capacity=size + 10_000),
        RandomUnitProvider(DIMENSIONS),
        reranker=GameAwareMemoryReranker(),
        options=options(size),
    )


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": ms(statistics.median(ordered)),
        "p99_ms": ms(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]),
    }


async def timed(action: Callable[[], Awaitable[Any]], repeats: int) -> list[float]:
    values = []
    for _ in range(repeats):
        started = time.perf_counter()
        await action()
        values.append(time.perf_counter() - started)
    return values


# -- seeding ---------------------------------------------------------------------------------


async def seed_postgres(url: str, memories: list[GameMemory]) -> dict[str, float]:
    store = PostgresGameMemoryStore(url)
    index = PostgresVectorIndex(url, capacity=len(memories) + 10_000)
    provider = RandomUnitProvider(DIMENSIONS)
    try:
        by_owner: dict[str, list[GameMemory]] = {}
        for memory in memories:
            by_owner.setdefault(memory.owner_id, []).append(memory)
        batches = [
            group[start : start + 1_000]
            for group in by_owner.values()
            for start in range(0, len(group), 1_000)
        ]
        await store.count()
        started = time.perf_counter()
        for batch in batches:
            await store.append_many(batch)
        saved = time.perf_counter()
        for batch in batches:
            vectors = np.stack([provider.vector(m.searchable_text or "") for m in batch])
            await asyncio.to_thread(index.write, batch, vectors, provider.identity)
        indexed = time.perf_counter()
    finally:
        await store.aclose()
        await index.aclose()
    return {
        "bulk_append_memories_per_second": round(len(memories) / (saved - started)),
        "bulk_vector_writes_per_second": round(len(memories) / (indexed - saved)),
        "batches": len(batches),
    }


async def seed_files(root: Path, memories: list[GameMemory]) -> dict[str, float]:
    save = root / "save"
    save.mkdir(parents=True)
    started = time.perf_counter()
    for memory in memories:
        key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
        (save / f"{identity_hash(key)}.memory.json").write_bytes(encode_legacy_document(memory))
    store = file_memory(root, len(memories))
    try:
        await store.authoritative.migrate_legacy_layout()
        saved = time.perf_counter()
        status = await store.rebuild(SESSION)
        assert status.ready_entries == len(memories), status
        indexed = time.perf_counter()
    finally:
        await store.aclose()
    return {
        "bulk_import_memories_per_second": round(len(memories) / (saved - started)),
        "rebuild_vectors_per_second": round(len(memories) / (indexed - saved)),
    }


# -- recall ----------------------------------------------------------------------------------


def query(rng: random.Random, owner: str) -> GameMemoryQuery:
    text = " ".join(rng.choice(WORDS) for _ in range(3))
    return GameMemoryQuery(
        session_id=SESSION,
        owner_id=owner,
        limit=8,
        text=text,
        at_or_before=GameMoment(timeline_id="main", tick=10**9),
    )


async def recalls(
    memory: VectorMemoryStore, npcs: int, repeats: int, seed: int
) -> dict[str, object]:
    rng = random.Random(seed)
    typical = [f"npc-{n:03d}" for n in range(1, npcs)]
    cold_started = time.perf_counter()
    await memory.recall(query(rng, LARGE))
    cold_large = time.perf_counter() - cold_started
    for owner in typical:  # every partition read once: the warm state a game server is in
        await memory.recall(query(rng, owner))
    large: list[float] = []
    small: list[float] = []
    stages: dict[str, list[float]] = {}
    for number in range(repeats):
        for owner, sink in ((LARGE, large), (typical[number % len(typical)], small)):
            started = time.perf_counter()
            result = await memory.recall(query(rng, owner))
            sink.append(time.perf_counter() - started)
            assert not result.fallback and len(result.hits) == 8
            if owner == LARGE:
                for stage in result.snapshot.stages:
                    stages.setdefault(stage.stage.name.lower(), []).append(stage.duration_ms / 1000)
    return {
        "large_npc": {**percentiles(large), "cold_first_ms": ms(cold_large)},
        "typical_npc": percentiles(small),
        "large_npc_stage_p50_ms": {k: ms(statistics.median(v)) for k, v in stages.items()},
    }


async def recall_after_append(
    memory: VectorMemoryStore, repeats: int, start: int
) -> dict[str, float]:
    rng = random.Random(start)
    values: list[float] = []
    for number in range(repeats):
        await memory.append(make_memory(start + number, 2, 10**9, rng))  # the large NPC
        started = time.perf_counter()
        await memory.recall(query(rng, LARGE))
        values.append(time.perf_counter() - started)
    return percentiles(values)


def sql_full_text(url: str, repeats: int) -> dict[str, float]:
    """PostgreSQL's own ranking (``ts_rank_cd`` over ``to_tsvector``) of the large NPC."""
    rng = random.Random(5)
    statement = """
        SELECT memory_id, ts_rank_cd(document_vector, q) AS rank
        FROM (SELECT memory_id, to_tsvector('simple', convert_from(document, 'UTF8'))
                  AS document_vector
              FROM game_memory_memories WHERE session_id = %s AND owner_id = %s) m,
             plainto_tsquery('simple', %s) q
        WHERE document_vector @@ q ORDER BY rank DESC LIMIT 8"""
    values = []
    with psycopg.connect(url, autocommit=True) as connection:
        for _ in range(repeats):
            text = " ".join(rng.choice(WORDS) for _ in range(3))
            started = time.perf_counter()
            connection.execute(statement, (SESSION, LARGE, text)).fetchall()
            values.append(time.perf_counter() - started)
    return percentiles(values)


# -- appends ---------------------------------------------------------------------------------


async def single_appends(memory: VectorMemoryStore, repeats: int, start: int) -> dict[str, object]:
    rng = random.Random(start)
    numbers = iter(range(start, start + 2 * repeats))
    save = memory.authoritative
    store_only = await timed(lambda: save.append(make_memory(next(numbers), 200, 0, rng)), repeats)
    front_door = await timed(
        lambda: memory.append(make_memory(next(numbers), 200, 0, rng)), repeats
    )
    return {"save_only": percentiles(store_only), "save_and_vector": percentiles(front_door)}


# -- concurrent clients ----------------------------------------------------------------------


async def worker(url: str, mode: str, number: int, start_at: float, seconds: float) -> None:
    memory = postgres_memory(url, 200_000)
    rng = random.Random(number)
    typical = [f"npc-{n:03d}" for n in range(1, 200)]
    try:
        await memory.recall(query(rng, typical[number]))  # connected and warm-ish
        for owner in typical:
            await memory.recall(query(rng, owner))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        done = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            if mode == "append":
                memory_id = 50_000_000 + number * 1_000_000 + done
                await memory.append(make_memory(memory_id, 200, 0, rng))
            else:
                await memory.recall(query(rng, typical[(number * 31 + done) % len(typical)]))
            done += 1
        print(json.dumps({"done": done}), flush=True)
    finally:
        await memory.aclose()


def concurrent(url: str, mode: str, workers: int, seconds: float) -> dict[str, float]:
    start_at = time.time() + 15.0
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(SCRIPT),
                "--worker",
                mode,
                url,
                str(n),
                str(start_at),
                str(seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(SCRIPT.parent)},
        )
        for n in range(workers)
    ]
    done = 0
    for process in processes:
        out, _ = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"a {mode} worker failed")
        done += json.loads(out.strip().splitlines()[-1])["done"]
    return {"processes": workers, "per_second": round(done / seconds, 1), "operations": done}


# -- the run ---------------------------------------------------------------------------------


def start_server() -> tuple[str, str | None]:
    url = os.environ.get("GAME_MEMORY_TEST_DATABASE")
    if url:
        return url, None
    started = subprocess.run(
        ["bash", str(POSTGRES_SH), "start"], capture_output=True, text=True, check=True
    )
    values = dict(m.groups() for line in started.stdout.splitlines() if (m := _EXPORT.match(line)))
    return values["GAME_MEMORY_TEST_DATABASE"], values["GAME_MEMORY_TEST_POSTGRES_DIR"]


async def run(args: argparse.Namespace, server: str) -> dict[str, object]:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
        version = connection.execute("SHOW server_version").fetchone()
    url = f"{server}{'&' if '?' in server else '?'}options=-csearch_path%3D{schema},public"
    root = Path(tempfile.mkdtemp(prefix="game-memory-postgres-bench-"))
    rng = random.Random(14)
    memories = [make_memory(i, args.npcs, args.large, rng) for i in range(args.memories)]
    try:
        result: dict[str, object] = {
            "memories": args.memories,
            "npcs": args.npcs,
            "large_npc_memories": args.large,
            "dimensions": DIMENSIONS,
            "repeats": args.repeats,
            "postgres": version[0] if version else None,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        }
        result["seed_postgres"] = await seed_postgres(url, memories)
        result["seed_files"] = await seed_files(root, memories)
        postgres, files = postgres_memory(url, args.memories), file_memory(root, args.memories)
        try:
            result["recall_postgres"] = await recalls(postgres, args.npcs, args.repeats, 1)
            result["recall_files"] = await recalls(files, args.npcs, args.repeats, 1)
            result["lexical_large_npc"] = {
                "bm25_over_snapshot_p50_ms": result["recall_postgres"][
                    "large_npc_stage_p50_ms"
                ].get(  # type: ignore[index]
                    "lexical_search"
                ),
                "sql_ts_rank_cd": sql_full_text(url, max(20, args.repeats // 4)),
            }
            result["recall_after_append_postgres"] = await recall_after_append(
                postgres, max(20, args.repeats // 4), 10_000_000
            )
            result["recall_after_append_files"] = await recall_after_append(
                files, max(20, args.repeats // 4), 10_000_000
            )
            result["append_postgres"] = await single_appends(postgres, args.repeats, 20_000_000)
            result["append_files"] = await single_appends(files, args.repeats, 20_000_000)
        finally:
            await postgres.aclose()
            await files.aclose()
        result["concurrent_appends"] = concurrent(url, "append", args.workers, args.seconds)
        result["concurrent_recalls"] = concurrent(url, "recall", args.workers, args.seconds)
        pg, fs = result["recall_postgres"], result["recall_files"]
        result["ratios_postgres_over_files"] = {
            f"{who}_{p}": round(pg[who][p] / fs[who][p], 2)  # type: ignore[index]
            for who in ("large_npc", "typical_npc")
            for p in ("p50_ms", "p99_ms")
        }
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--worker"]:
        mode, url, number, start_at, seconds = arguments[1:6]
        asyncio.run(worker(url, mode, int(number), float(start_at), float(seconds)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--npcs", type=int, default=200)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--database", help="a postgresql:// URL (default: start one)")
    args = parser.parse_args(arguments)
    single_threaded_blas()
    if args.database:
        os.environ["GAME_MEMORY_TEST_DATABASE"] = args.database
    server, folder = start_server()
    try:
        print(json.dumps(asyncio.run(run(args, server)), indent=2))
    finally:
        if folder is not None:
            subprocess.run(["bash", str(POSTGRES_SH), "stop", folder], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
