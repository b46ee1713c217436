"""Writers racing each other on PostgreSQL, as an audit found them: a store-wide
``maximum_entries`` passed under concurrent appends, and locks taken in different orders
deadlocked a consolidation (and the partition repair of ``check``) with appends.

Each race is made deterministic with a second connection that holds a lock while the store's
call waits for it (seen in ``pg_blocking_pids``), then does what a concurrent writer would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from game_memory import CapacityExceededError, GameMemory
from game_memory.postgres.writes import append_one
from support.vectors import MemoryFactory

from .conftest import PostgresStoreFactory

#: The store-wide entries lock, as ``statements.py`` takes it (the same key: a test
#: connection holding it stands for another process's bounded append in progress).
ENTRIES_LOCK = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || ':game-memory entries'))"

#: How long a test waits for the store's call to queue behind the held lock before it
#: gives up (a guard against a hung test, not an assertion about speed).
_PATIENCE = 60.0


@contextmanager
def holder(database: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection of the test schema with an open transaction (committed on exit)."""
    with psycopg.connect(database, autocommit=True) as connection, connection.transaction():
        yield connection


async def wait_until_blocked_by(database: str, blocker: psycopg.Connection[Any]) -> None:
    """Return once another backend waits for a lock ``blocker`` holds."""
    pid = blocker.info.backend_pid
    with psycopg.connect(database, autocommit=True) as monitor:
        for _ in range(int(_PATIENCE / 0.01)):
            row = monitor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (pid,),
            ).fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.01)
    raise AssertionError(f"no call of the store queued behind the test's lock in {_PATIENCE}s")


async def race_the_lock(
    database: str, call: Awaitable[Any], while_held: Callable[[psycopg.Connection[Any]], None]
) -> Any:
    """Hold the entries lock, start ``call``, and once it waits for the lock run
    ``while_held`` on the holding connection (in a thread: it may block), then commit and
    return what ``call`` returned (or raise what it raised)."""
    with holder(database) as connection:
        connection.execute(ENTRIES_LOCK)
        task = asyncio.ensure_future(call)
        await wait_until_blocked_by(database, connection)
        await asyncio.to_thread(while_held, connection)
    return await task


def appender(memory: GameMemory) -> Callable[[psycopg.Connection[Any]], None]:
    """What a concurrent bounded append does after taking the entries lock."""

    def append(connection: psycopg.Connection[Any]) -> None:
        assert append_one(connection, memory, 1_000, "the test database") is True

    return append


# -- maximum_entries is exact ----------------------------------------------------------


async def test_a_bounded_append_counts_the_memories_committed_while_it_waited(
    database: str, make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    """The count used to run in the statement that took the lock, on a snapshot taken
    before the wait: the memory committed by the lock's holder was not counted."""
    store = make_postgres_store(maximum_entries=1)
    assert await store.count() == 0
    with pytest.raises(CapacityExceededError) as caught:
        await race_the_lock(
            database, store.append(make_memory("late")), appender(make_memory("first"))
        )
    assert caught.value.bound == "maximum_entries"
    assert [m.memory_id for m in await store.enumerate("session")] == ["first"]


async def test_a_bounded_batch_counts_the_memories_committed_while_it_waited(
    database: str, make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store(maximum_entries=2)
    assert await store.count() == 0
    batch = [make_memory("b1", owner_id="o1"), make_memory("b2", owner_id="o2")]
    with pytest.raises(CapacityExceededError):
        await race_the_lock(database, store.append_many(batch), appender(make_memory("first")))
    assert await store.count() == 1


async def test_concurrent_appends_through_one_store_stop_at_maximum_entries(
    make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    """The auditor's case: 40 appends at once with a bound of 10 left 13 memories."""
    store = make_postgres_store(maximum_entries=10, max_connections=8)
    assert await store.count() == 0

    async def one(number: int) -> bool:
        try:
            return await store.append(make_memory(f"m{number}", owner_id=f"o{number % 4}"))
        except CapacityExceededError:
            return False

    added = await asyncio.gather(*(one(number) for number in range(40)))
    assert added.count(True) == 10
    assert await store.count() == 10


# -- one lock order: no deadlock -------------------------------------------------------


async def test_a_bounded_consolidate_waits_for_an_append_to_its_owner_without_deadlock(
    database: str, make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    """consolidate locked the partition row and then the entries lock, an append the
    entries lock and then the partition row: each waited for the other ("deadlock
    detected", a StoreBusyError). Now both take the entries lock first."""
    store = make_postgres_store(maximum_entries=100)
    await store.append(make_memory("source", owner_id="o"))
    summary = make_memory("summary", owner_id="o", kind="reflection", tick=5)
    consolidation = store.consolidate("session", "o", ["source"], summary)
    added = await race_the_lock(
        database, consolidation, appender(make_memory("appended", owner_id="o"))
    )
    assert added is True
    stored = sorted(m.memory_id for m in await store.enumerate("session"))
    assert stored == ["appended", "source", "summary"]


async def test_the_partition_repair_locks_rows_in_key_order(
    database: str, make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    """``check(fix=True)`` locks every partition row; it met them in a hash aggregate's
    order, so a writer locking them in key order (a batch, an erase of the session)
    deadlocked with it."""
    store = make_postgres_store()
    owners = [f"o{number:02d}" for number in range(20)]
    await store.append_many([make_memory(f"m-{owner}", owner_id=owner) for owner in owners])
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("UPDATE game_memory_partitions SET next_seq = 0")  # behind: repair
    lock_row = (
        "SELECT 1 FROM game_memory_partitions WHERE session_id = 'session' AND owner_id = %s "
        "FOR UPDATE"
    )

    def lock_the_others(connection: psycopg.Connection[Any]) -> None:
        for owner in owners[1:]:
            connection.execute(lock_row, (owner,))

    with holder(database) as connection:
        connection.execute(lock_row, (owners[0],))
        task = asyncio.ensure_future(store.check(fix=True))
        await wait_until_blocked_by(database, connection)
        await asyncio.to_thread(lock_the_others, connection)
    report = await task
    assert report.repairs and not report.problems
