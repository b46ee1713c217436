"""Forget, erase and consolidate on PostgreSQL: what only the database backend has.

The rules are the conformance suite's (it runs on PostgreSQL too); here: another process's
cached views notice a forget and an erase (the partition's generation), the erased rows are
gone from every table, a version-1 schema gains the retractions table without losing data,
and every statement of the lifecycle filters on the session first.
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from game_memory import GameMemoryQuery, GameMoment, PersistenceError
from game_memory.postgres import PostgresGameMemoryStore
from game_memory.postgres import lifecycle as lifecycle_sql
from game_memory.postgres.schema import MIGRATIONS
from support.vectors import MemoryFactory

from .conftest import PostgresStoreFactory


def at(tick: int) -> GameMoment:
    return GameMoment(timeline_id="world", tick=tick)


async def recalled(store: PostgresGameMemoryStore, tick: int | None = None) -> list[str]:
    query = GameMemoryQuery(
        session_id="session", limit=20, at_or_before=None if tick is None else at(tick)
    )
    return sorted(hit.memory.memory_id for hit in (await store.snapshot(query)).lexical)


async def test_a_reader_with_cached_views_sees_another_writers_forget_and_erase(
    make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    writer, reader = make_postgres_store(), make_postgres_store()
    for number in range(4):
        await writer.append(make_memory(f"m{number}", tick=number, owner_id=f"o{number % 2}"))
    assert await recalled(reader) == ["m0", "m1", "m2", "m3"]  # cached now
    await writer.forget("session", "o0", "m2", at(2))
    assert await recalled(reader) == ["m0", "m1", "m3"]
    assert await recalled(reader, 1) == ["m0", "m1"]
    await writer.erase("session", "o1")
    assert await recalled(reader) == ["m0"]
    await writer.append(make_memory("m9", owner_id="o0", tick=9))  # grows after the erase
    assert await recalled(reader) == ["m0", "m9"]
    assert [m.memory_id for m in await reader.enumerate("session", "o1")] == []


async def test_erased_rows_are_gone_from_every_table(
    make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory, database: str
) -> None:
    store = make_postgres_store()
    secret = make_memory(
        "secret",
        text="PG-ERASE-MARKER the key is under the stone",
        payload_json=json.dumps({"where": "PG-PAYLOAD-MARKER"}),
    )
    await store.append(secret)
    await store.append(make_memory("kept", text="the well is deep"))
    await store.forget("session", "owner", "secret", at(5))
    assert await store.erase("session", "owner", ["secret"]) == 1
    with psycopg.connect(database) as connection:
        for table in ("game_memory_memories", "game_memory_retractions"):
            left = connection.execute(
                f"SELECT count(*) FROM {table} WHERE memory_id = 'secret'"
            ).fetchone()
            assert left == (0,), table
        marked = connection.execute(
            "SELECT count(*) FROM game_memory_memories WHERE position('MARKER' in "
            "convert_from(document, 'UTF8')) > 0"
        ).fetchone()
        assert marked == (0,)
    report = await store.compact()
    assert report.bytes_after > 0
    assert (await store.check()).ok


async def test_a_version_1_schema_gains_retractions_and_keeps_its_memories(
    database: str, make_memory: MemoryFactory
) -> None:
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE game_memory_schema (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for statement in MIGRATIONS[0].statements:
            connection.execute(statement)
        connection.execute("INSERT INTO game_memory_schema (version, name) VALUES (1, 'old')")
    old = make_memory("old", text="from the first schema")
    async with PostgresGameMemoryStore(database, migrate=True) as store:
        # The first schema's store is the one under test now: it migrates on first use.
        await store.append(old)
        assert await store.forget("session", "owner", "old", at(10)) is True
        assert [m.memory_id for m in await store.enumerate("session")] == ["old"]
    with psycopg.connect(database) as connection:
        versions = [row[0] for row in connection.execute("SELECT version FROM game_memory_schema")]
    assert sorted(versions) == [1, 2]


def test_every_lifecycle_statement_filters_on_the_session_first() -> None:
    statements = [
        value
        for name, value in vars(lifecycle_sql).items()
        if name.startswith("_") and isinstance(value, str) and "game_memory_" in value
    ]
    assert len(statements) >= 5
    for statement in statements:
        if "UPDATE" in statement or "SELECT" in statement or "INSERT" in statement:
            assert "session_id" in statement, statement


@pytest.mark.parametrize("owner", [None, "o0"])
async def test_an_owner_with_a_summary_is_erased_whole(
    make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory, owner: str | None
) -> None:
    store = make_postgres_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id="o0", tick=number))
    summary = make_memory("sum", owner_id="o0", kind="reflection", tick=10)
    assert await store.consolidate("session", "o0", ["m0", "m1"], summary) is True
    assert await store.erase("session", owner) == 4
    assert await store.enumerate("session") == []
    assert await store.count() == 0


async def test_a_compact_that_postgresql_could_not_vacuum_is_an_error_not_a_success(
    database: str, make_postgres_store: PostgresStoreFactory, make_memory: MemoryFactory
) -> None:
    """VACUUM by a role that does not own the tables is skipped with a warning, not an error:
    compact reported success with nothing done. A role granted what docs/postgres.md lists
    (DML on the seven tables) is such a role."""
    owner = make_postgres_store()
    await owner.append(make_memory("m1"))
    role = f"dml_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database, autocommit=True) as connection:
        schema = connection.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        connection.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'dml'")
        connection.execute(f"GRANT USAGE ON SCHEMA {schema[0]} TO {role}")
        connection.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema[0]} TO {role}"
        )
    try:
        parts = urlsplit(database)
        as_role = urlunsplit(parts._replace(netloc=f"{role}:dml@{parts.hostname}:{parts.port}"))
        limited = make_postgres_store(as_role, migrate=False)
        assert len(await limited.enumerate("session")) == 1  # the grants are enough to read
        with pytest.raises(PersistenceError, match="VACUUM needs the tables' owner"):
            await limited.compact()
        await limited.aclose()
        assert (await owner.compact()).bytes_after > 0  # the owner's compact still works
    finally:
        with psycopg.connect(database, autocommit=True) as connection:
            connection.execute(f"DROP OWNED BY {role}")
            connection.execute(f"DROP ROLE {role}")
