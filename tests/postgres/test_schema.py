"""The schema's migration runner: idempotent, safe from many processes, refuses the future."""

from __future__ import annotations

import threading

import psycopg
import pytest

from game_memory import DerivedIndexError, PersistenceError
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from game_memory.postgres.schema import SCHEMA_VERSION, migrate_schema

TABLES = {
    "game_memory_schema",
    "game_memory_partitions",
    "game_memory_memories",
    "game_memory_identities",
    "game_memory_index_partitions",
    "game_memory_index_entries",
    "game_memory_retractions",
}


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
    return {row[0] for row in rows}


def test_the_runner_applies_every_migration_once_even_from_many_threads(database: str) -> None:
    applied: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(database, autocommit=True) as connection:
                applied.append(migrate_schema(connection, "the test database"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert sorted(applied) == [[]] * 5 + [list(range(1, SCHEMA_VERSION + 1))]
    assert _tables(database) == TABLES
    with psycopg.connect(database, autocommit=True) as connection:
        assert migrate_schema(connection, "the test database") == []


def test_every_primary_key_and_unique_constraint_starts_with_the_session(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as connection:
        migrate_schema(connection, "the test database")
        rows = connection.execute(
            """SELECT c.conrelid::regclass::text, c.contype, a.attname
            FROM pg_constraint c JOIN pg_attribute a
                ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
            WHERE c.contype IN ('p', 'u') AND c.connamespace = current_schema()::regnamespace"""
        ).fetchall()
    distributed = [
        row for row in rows if row[0] not in ("game_memory_schema", "game_memory_identities")
    ]
    assert len(distributed) == 6
    assert all(column == "session_id" for _, _, column in distributed)


async def test_a_newer_schema_is_refused_and_migrate_false_refuses_an_empty_one(
    database: str,
) -> None:
    unmigrated = PostgresGameMemoryStore(database, migrate=False)
    try:
        with pytest.raises(PersistenceError, match="migrate=True") as raised:
            await unmigrated.count()
        # A CLI user has no migrate=True: the message names the command too.
        assert "'game-memory migrate --database URL'" in str(raised.value)
    finally:
        await unmigrated.aclose()
    store = PostgresGameMemoryStore(database)
    try:
        assert await store.count() == 0
    finally:
        await store.aclose()
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(
            "INSERT INTO game_memory_schema (version, name) VALUES (%s, 'from the future')",
            (SCHEMA_VERSION + 1,),
        )
    for opened in (
        PostgresGameMemoryStore(database),
        PostgresGameMemoryStore(database, migrate=False),
    ):
        try:
            with pytest.raises(PersistenceError, match="Upgrade game-memory"):
                await opened.count()
        finally:
            await opened.aclose()
    index = PostgresVectorIndex(database)
    try:
        with pytest.raises(DerivedIndexError, match="Upgrade game-memory"):
            index.verify("session", repair=False)
    finally:
        await index.aclose()
