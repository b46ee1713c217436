"""Many processes append to one session at once: nothing is lost, conflicts are detected.

Six writer processes (``workers.py``) start at the same instant and each append, to one
session of three owners, memories of their own, memories every writer shares (same
content) and ids every writer contests (different content). Afterwards: every memory of
its own is there with its content; each shared memory was added by exactly one writer and
was a no-op for the others; each contested id was added by exactly one writer, whose
content is the one stored, and was a conflict for every other writer; the save checks
clean and positions are unique and in order.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psycopg

from game_memory import GameMemory
from game_memory.postgres import PostgresGameMemoryStore
from postgres.workers import SESSION, memory, plan

WORKERS = 6
COUNT = 40


async def test_six_processes_appending_to_one_session_lose_nothing_and_detect_conflicts(
    database: str,
) -> None:
    store = PostgresGameMemoryStore(database)
    try:
        assert await store.count() == 0  # creates the schema before the writers start
        script = Path(__file__).with_name("workers.py")
        start_at = time.time() + 3.0
        processes = [
            subprocess.Popen(
                [sys.executable, str(script), database, f"w{n}", str(COUNT), str(start_at)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(WORKERS)
        ]
        outcomes: dict[str, list[tuple[str, object]]] = {}
        for n, process in enumerate(processes):
            out, err = process.communicate(timeout=240)
            assert process.returncode == 0, err
            outcomes[f"w{n}"] = [tuple(json.loads(line)) for line in out.splitlines()]
        for worker, results in outcomes.items():
            assert [memory_id for memory_id, _ in results] == [
                m.memory_id for m in plan(worker, COUNT)
            ]
        by_id: dict[str, Counter[object]] = {}
        winners: dict[str, str] = {}
        for worker, results in outcomes.items():
            for memory_id, outcome in results:
                by_id.setdefault(memory_id, Counter())[json.dumps(outcome)] += 1
                if memory_id.startswith("contested-") and outcome is True:
                    winners[memory_id] = worker
        for number in range(COUNT):
            assert by_id[f"shared-{number}"] == Counter({"true": 1, "false": WORKERS - 1})
            assert by_id[f"contested-{number}"] == Counter({"true": 1, '"conflict"': WORKERS - 1})
            for n in range(WORKERS):
                assert by_id[f"w{n}-{number}"] == Counter({"true": 1})
        stored = {m.memory_id: m for m in await store.enumerate(SESSION)}
        assert len(stored) == WORKERS * COUNT + 2 * COUNT
        assert await store.count() == len(stored)
        for number in range(COUNT):
            assert stored[f"shared-{number}"] == memory(f"shared-{number}", number, "everyone")
            winner = winners[f"contested-{number}"]
            assert stored[f"contested-{number}"] == memory(f"contested-{number}", number, winner)
            for n in range(WORKERS):
                assert stored[f"w{n}-{number}"] == memory(f"w{n}-{number}", number, f"w{n}")
        report = await store.check()
        assert report.ok and report.memories == len(stored), report.problems
    finally:
        await store.aclose()
    with psycopg.connect(database) as connection:
        rows = connection.execute(
            "SELECT owner_id, count(*), count(DISTINCT seq), max(seq) FROM game_memory_memories "
            "GROUP BY owner_id"
        ).fetchall()
        positions = dict(
            connection.execute("SELECT owner_id, next_seq FROM game_memory_partitions").fetchall()
        )
    assert len(rows) == 3
    for owner, count, distinct, highest in rows:
        assert count == distinct  # one position per memory
        assert highest < positions[owner]  # and every one below the partition's next position


async def _wait_until_blocked(database: str, application: str = "game-memory") -> None:
    """Return once a connection of ``application`` waits for a lock (or fail after 10 s)."""
    deadline = time.monotonic() + 10
    with psycopg.connect(database, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                "AND wait_event_type = 'Lock'",
                (application,),
            ).fetchone()
            if row is not None and row[0]:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the batch never waited for the partition row's lock")


async def test_a_batch_naming_owners_in_any_order_does_not_deadlock_with_another_writer(
    database: str, make_memory: Callable[..., GameMemory]
) -> None:
    """Another transaction (a batch or an erase, which lock partitions in owner order) holds
    owner ``a`` and goes on to ``b``; a batch that lists ``b`` before ``a`` must wait for
    ``a`` without holding ``b``, else PostgreSQL aborts it as a deadlock (StoreBusyError)."""
    store = PostgresGameMemoryStore(database)
    try:
        assert await store.append_many(
            [make_memory("a-0", owner_id="a"), make_memory("b-0", owner_id="b")]
        )
        batch = [make_memory("b-1", owner_id="b"), make_memory("a-1", owner_id="a")]
        with psycopg.connect(database) as other:
            other.execute("SELECT 1 FROM game_memory_partitions WHERE owner_id = 'a' FOR UPDATE")
            appending = asyncio.ensure_future(store.append_many(batch))
            await _wait_until_blocked(database)
            await asyncio.wait_for(
                asyncio.to_thread(
                    other.execute,
                    "UPDATE game_memory_partitions SET next_seq = next_seq WHERE owner_id = 'b'",
                ),
                timeout=30,
            )
            other.commit()
            assert await asyncio.wait_for(appending, timeout=30) == [True, True]
        stored = await store.enumerate("session")
        assert sorted(m.memory_id for m in stored) == ["a-0", "a-1", "b-0", "b-1"]
        assert (await store.check()).ok
    finally:
        await store.aclose()
