"""PostgresGameMemoryStore: idempotence, conflicts, bounds, caching, damage, errors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import game_memory.postgres.connection
from game_memory import (
    CapacityExceededError,
    GameMemory,
    GameMemoryQuery,
    GameMemoryStore,
    GameMoment,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
    StoreClosedError,
)
from game_memory.postgres import PostgresGameMemoryStore
from game_memory.postgres.connection import ConnectionPool
from game_memory.postgres.writes import append_one

Factory = Callable[..., PostgresGameMemoryStore]
MemoryFactory = Callable[..., GameMemory]


def query(text: str | None = None, **fields: Any) -> GameMemoryQuery:
    return GameMemoryQuery(
        session_id=fields.pop("session_id", "session"), limit=10, text=text, **fields
    )


async def test_it_is_a_game_memory_store_without_a_folder(make_postgres_store: Factory) -> None:
    store = make_postgres_store()
    assert isinstance(store, GameMemoryStore)
    assert store.folder is None


async def test_append_is_idempotent_and_a_reused_id_is_a_conflict(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store()
    assert await store.append(make_memory("m1", text="the cat"))
    assert not await store.append(make_memory("m1", text="the cat"))
    with pytest.raises(MemoryConflictError, match="'m1'"):
        await store.append(make_memory("m1", text="the dog"))
    assert [m.searchable_text for m in await store.enumerate("session")] == ["the cat"]
    assert await store.count() == 1


async def test_equal_memories_whose_json_differs_are_duplicates_not_conflicts(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store()
    first = make_memory("m1", metadata={"a": "1", "b": "2"})
    second = make_memory("m1", metadata={"b": "2", "a": "1"})
    assert first == second and first.model_dump_json() != second.model_dump_json()
    assert await store.append(first)
    assert not await store.append(second)


async def test_ids_with_nul_and_backslashes_are_kept_exactly_and_apart(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store()
    ids = ["a\x00b", "a\\0b", "a\\\\0b", "a\\"]
    for memory_id in ids:
        assert await store.append(make_memory(memory_id, owner_id="o\x00", session_id="s\\0"))
    stored = await store.enumerate("s\\0", "o\x00")
    assert sorted(m.memory_id for m in stored) == sorted(ids)
    assert await store.enumerate("s\x00") == []


async def test_a_full_partition_refuses_new_memories_but_not_duplicates(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store(maximum_partition_entries=2)
    await store.append(make_memory("m1"))
    await store.append(make_memory("m2"))
    with pytest.raises(CapacityExceededError) as raised:
        await store.append(make_memory("m3"))
    assert raised.value.bound == "maximum_partition_entries"
    assert not await store.append(make_memory("m2"))
    assert await store.append(make_memory("m3", owner_id="other"))


async def test_erasing_memories_of_a_full_partition_makes_room_for_as_many_new_ones(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    """The bound is on the memories an owner holds, not on the positions it ever used: an
    NPC kept under its bound by erasures (a retention policy) can go on appending."""
    store = make_postgres_store(maximum_partition_entries=4)
    await store.append_many([make_memory(f"m{number}") for number in range(4)])
    assert await store.erase("session", "owner", ["m0", "m1", "m2"]) == 3
    assert await store.append(make_memory("a1"))
    assert await store.append_many([make_memory("b1"), make_memory("b2"), make_memory("m3")]) == [
        True,
        True,
        False,
    ]
    with pytest.raises(CapacityExceededError) as raised:
        await store.append(make_memory("a2"))
    assert raised.value.bound == "maximum_partition_entries"
    assert await store.erase("session", "owner", ["b1"]) == 1
    with pytest.raises(CapacityExceededError):  # one free place, two new memories
        await store.append_many([make_memory("c1"), make_memory("c2")])
    assert await store.append_many([make_memory("c1"), make_memory("a1")]) == [True, False]
    reader = make_postgres_store()  # a cold reader and the cached one agree
    expected = ["a1", "b2", "c1", "m3"]
    for opened in (store, reader):
        assert sorted(m.memory_id for m in await opened.enumerate("session")) == expected
    assert (await store.check()).ok


async def test_snapshots_are_bounded(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store()
    for number in range(5):
        await store.append(make_memory(f"m{number}", owner_id=f"o{number % 2}"))
    assert len((await store.snapshot(query(), maximum_entries=5)).authoritative_memories) == 5
    for _ in range(2):  # cold, then from the cache
        with pytest.raises(CapacityExceededError) as raised:
            await store.snapshot(query(), maximum_entries=4)
        assert raised.value.bound == "maximum_snapshot_entries"
    assert len((await store.snapshot(query(owner_id="o0"), maximum_entries=3)).views) == 1


async def test_the_snapshot_bound_counts_what_partitions_hold_after_a_forget_or_an_erase(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    """A cached partition that a forget moved to a new generation is read again whole: its
    memories are counted once, not once cached and once read. An erase shrinks what a
    cached view held, so a session that outgrew the bound fits again once erased down."""
    store = make_postgres_store()
    await store.append_many([make_memory(f"m{number}", tick=number) for number in range(6)])
    assert len((await store.snapshot(query(), maximum_entries=10)).authoritative_memories) == 6
    assert await store.forget("session", "owner", "m0", GameMoment(timeline_id="world", tick=9))
    snapshot = await store.snapshot(query(), maximum_entries=10)
    assert len(snapshot.authoritative_memories) == 6 and snapshot.views[0].retractions
    await store.append_many([make_memory(f"n{number}", owner_id="b") for number in range(6)])
    assert len(await store.enumerate("session")) == 12  # cached whole, past the bound below
    with pytest.raises(CapacityExceededError):
        await store.snapshot(query(), maximum_entries=10)
    assert await store.erase("session", "b", ["n0", "n1", "n2"]) == 3
    snapshot = await store.snapshot(query(), maximum_entries=10)
    assert len(snapshot.authoritative_memories) == 9
    with pytest.raises(CapacityExceededError):
        await store.snapshot(query(), maximum_entries=8)


async def test_an_unchanged_partition_keeps_its_view_and_a_grown_one_extends_it(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    store = make_postgres_store()
    await store.append(make_memory("m1", text="the cat"))
    first = (await store.snapshot(query("cat"))).views[0]
    assert (await store.snapshot(query("cat"))).views[0] is first
    await store.append(make_memory("m2", text="the dog"))
    grown = (await store.snapshot(query("dog", owner_id="owner"))).views[0]
    assert grown is not first and grown.memories[0] is first.memories[0]
    assert [m.memory_id for m in grown.memories] == ["m1", "m2"]


async def test_another_store_object_sees_appends_at_once(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    reader, writer = make_postgres_store(), make_postgres_store()
    assert (await reader.snapshot(query("cat"))).lexical == ()
    await writer.append(make_memory("m1", text="the cat", owner_id="a"))
    await writer.append(make_memory("m2", text="a cat", owner_id="b"))
    hits = (await reader.snapshot(query("cat"))).lexical
    assert sorted(h.memory.memory_id for h in hits) == ["m1", "m2"]
    await writer.append(make_memory("m3", text="cat cat cat", owner_id="b"))
    hits = (await reader.snapshot(query("cat"))).lexical
    assert hits[0].memory.memory_id == "m3"
    assert not await reader.append(make_memory("m3", text="cat cat cat", owner_id="b"))


async def test_a_changed_document_fails_closed_and_check_names_it(
    make_postgres_store: Factory, make_memory: MemoryFactory, database: str
) -> None:
    store = make_postgres_store()
    await store.append(make_memory("m1", text="the cat"))
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(
            "UPDATE game_memory_memories SET document = "
            "convert_to(replace(convert_from(document, 'UTF8'), 'cat', 'dog'), 'UTF8')"
        )
    fresh = make_postgres_store()
    with pytest.raises(PersistenceError, match="content digest"):
        await fresh.snapshot(query("cat"))
    report = await fresh.check()
    assert not report.ok and "does not match its content digest" in report.problems[0]


async def test_check_moves_a_partition_row_that_fell_behind_back_up(
    make_postgres_store: Factory, make_memory: MemoryFactory, database: str
) -> None:
    store = make_postgres_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}"))
    assert (await store.check()).ok
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute("UPDATE game_memory_partitions SET next_seq = 1")
    report = await store.check()
    assert not report.ok and "holds memories up to 2" in report.problems[0]
    fixed = await store.check(fix=True)
    assert fixed.ok and fixed.repairs and fixed.memories == 3
    assert await store.append(make_memory("m3"))
    assert len(await make_postgres_store().enumerate("session")) == 4


async def test_bad_arguments_are_refused_before_anything_is_read(
    make_postgres_store: Factory,
) -> None:
    with pytest.raises(InvalidArgumentError):
        PostgresGameMemoryStore("/a/folder")
    with pytest.raises(InvalidArgumentError):
        make_postgres_store(maximum_partition_entries=0)
    store = make_postgres_store()
    with pytest.raises(InvalidArgumentError):
        await store.append("not a memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.enumerate(" ")


async def test_an_unreachable_server_is_a_persistence_error_without_the_password() -> None:
    store = PostgresGameMemoryStore(
        "postgresql://someone:secret-word@127.0.0.1:1/nowhere", timeout=2
    )
    try:
        with pytest.raises(PersistenceError) as raised:
            await store.count()
        assert "secret-word" not in str(raised.value)
        assert "127.0.0.1:1" in str(raised.value) and "could not reach" in str(raised.value)
    finally:
        await store.aclose()


async def test_a_closed_store_raises_store_closed(make_postgres_store: Factory) -> None:
    store = make_postgres_store()
    await store.count()
    await store.aclose()
    await store.aclose()
    with pytest.raises(StoreClosedError):
        await store.count()


@pytest.mark.parametrize("same_content", [True, False])
async def test_an_append_racing_another_of_the_same_id_waits_then_judges_its_row(
    make_postgres_store: Factory, make_memory: MemoryFactory, database: str, same_content: bool
) -> None:
    """The other writer holds the partition row (its transaction is open) when the append
    starts: the append waits for the lock, finds the id taken by a row its snapshot did not
    see, reads that row and tells a duplicate from a conflict."""
    store = make_postgres_store()
    await store.append(make_memory("first"))
    winner = make_memory("m1", text="the cat")
    with psycopg.connect(database) as other:
        with other.transaction():
            append_one(other, winner, 1_000_000, "the other writer")
            racing = asyncio.ensure_future(
                store.append(winner if same_content else make_memory("m1", text="the dog"))
            )
            await asyncio.sleep(0.5)
            assert not racing.done()  # blocked on the partition row's lock
        if same_content:
            assert await racing is False
        else:
            with pytest.raises(MemoryConflictError):
                await racing
    assert [m.memory_id for m in await store.enumerate("session")] == ["first", "m1"]
    assert (await store.check()).ok
    with psycopg.connect(database) as connection:  # the loser's position stays unused
        row = connection.execute("SELECT next_seq FROM game_memory_partitions").fetchone()
    assert row is not None and row[0] == 3


async def test_ids_too_long_for_the_key_index_are_an_invalid_argument_not_a_lost_server(
    make_postgres_store: Factory, make_memory: MemoryFactory
) -> None:
    """1,024 characters an id is valid, but three such ids of CJK text (3 bytes each in
    UTF-8, hardly compressible) do not fit a B-tree entry: PostgreSQL raises a
    program-limit error, a subclass of psycopg's OperationalError, which must not read as
    an unreachable server. Nothing is written and the store goes on working."""
    store = make_postgres_store()
    long_ids = [
        "".join(chr(0x4E00 + (seed * 7919 + n * 104729) % 20_000) for n in range(1_024))
        for seed in range(3)
    ]
    with pytest.raises(InvalidArgumentError) as raised:
        await store.append(make_memory(long_ids[0], session_id=long_ids[1], owner_id=long_ids[2]))
    assert "could not reach" not in str(raised.value) and "shorter ids" in str(raised.value)
    assert await store.count() == 0
    assert await store.append(make_memory("m1"))


def test_after_a_lost_connection_the_idle_ones_are_dropped_too(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server restart (or failover) kills every pooled connection: the first call that
    meets one fails, and the next call connects afresh instead of meeting the next dead one.
    (A dead idle connection is caught at checkout since (``connection._closed_while_idle``);
    that check is blinded here, for a loss it cannot see, such as a network cut.)"""
    monkeypatch.setattr(game_memory.postgres.connection, "_readable", lambda fd: False)
    pool = ConnectionPool(database, size=4, timeout=5)
    try:
        with contextlib.ExitStack() as stack:
            borrowed = [stack.enter_context(pool.connection()) for _ in range(4)]
            pids = [connection.info.backend_pid for connection in borrowed]
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
        with pytest.raises(psycopg.OperationalError), pool.connection() as connection:
            connection.execute("SELECT 1")
        for _ in range(4):
            with pool.connection() as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
                assert connection.info.backend_pid not in pids
    finally:
        pool.close()


def test_a_lost_connection_one_pool_saw_makes_the_others_of_the_process_reconnect(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A front door's store and index each have a pool on the same database: after a server
    restart the store's call failed, then the next remember's index write met the index
    pool's dead connection too (the memory saved without its vector). One call fails.
    (The checkout's own check of idle connections is blinded, as above.)"""
    monkeypatch.setattr(game_memory.postgres.connection, "_readable", lambda fd: False)
    store_pool = ConnectionPool(database, size=2, timeout=5)
    index_pool = ConnectionPool(database, size=2, timeout=5)
    try:
        pids = []
        for pool in (store_pool, index_pool):
            with pool.connection() as connection:
                pids.append(connection.info.backend_pid)
        with psycopg.connect(database, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
        with pytest.raises(psycopg.OperationalError), store_pool.connection() as connection:
            connection.execute("SELECT 1")  # the one call that fails
        with index_pool.connection() as connection:  # reconnects instead of failing too
            assert connection.execute("SELECT 1").fetchone() == (1,)
            assert connection.info.backend_pid not in pids
    finally:
        store_pool.close()
        index_pool.close()
