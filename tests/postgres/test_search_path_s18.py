"""A save lives in the first schema its URL's ``search_path`` names, and only there.

A later schema of the path (``public``, which the path names for pgvector) may hold another
save: a fresh schema first on the path must get tables of its own (or, without migrating,
be refused as holding none), never read, write or erase the later schema's; a first schema
that does not exist is refused, never replaced by the next one. Each test makes a database
of its own: the shared test database's ``public`` must stay empty (``server.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from game_memory import DerivedIndexError, GameMemoryQuery, PersistenceError
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from postgres.server import schema_url, temporary_database
from support.vectors import MemoryFactory


@pytest.fixture
def own_database(postgres_server: str) -> Iterator[str]:
    """The URL of a new database (default ``search_path``), dropped after the test."""
    with temporary_database(postgres_server) as url:
        yield url


def _tables_by_schema(url: str) -> dict[str, int]:
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT table_schema, count(*) FROM information_schema.tables "
            "WHERE table_name LIKE 'game\\_memory\\_%' GROUP BY table_schema"
        ).fetchall()
    return {str(schema): int(count) for schema, count in rows}


def _create_schema(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")


async def _ids(store: PostgresGameMemoryStore) -> list[str]:
    query = GameMemoryQuery(session_id="session", limit=20)
    return sorted(hit.memory.memory_id for hit in (await store.snapshot(query)).lexical)


async def _save_in_public(url: str, make_memory: MemoryFactory) -> None:
    """World 1: a save in ``public`` (the default path), holding one memory."""
    async with PostgresGameMemoryStore(url) as world1:
        assert await world1.append(make_memory("secret-of-world-1", text="secret"))


async def test_a_fresh_schema_first_on_the_path_gets_its_own_save_not_publics(
    own_database: str, make_memory: MemoryFactory
) -> None:
    await _save_in_public(own_database, make_memory)
    _create_schema(own_database, "game2")
    async with PostgresGameMemoryStore(schema_url(own_database, "game2")) as world2:
        assert await _ids(world2) == []
        assert await world2.count() == 0
        assert await world2.append(make_memory("written-by-world-2", text="secret"))
        assert await world2.erase("session") == 1
        assert await _ids(world2) == []
    assert _tables_by_schema(own_database) == {"public": 7, "game2": 7}
    async with PostgresGameMemoryStore(own_database) as world1:
        assert await _ids(world1) == ["secret-of-world-1"]


async def test_without_migrating_a_fresh_first_schema_is_refused_not_replaced_by_public(
    own_database: str, make_memory: MemoryFactory
) -> None:
    await _save_in_public(own_database, make_memory)
    _create_schema(own_database, "game2")
    url = schema_url(own_database, "game2")
    async with PostgresGameMemoryStore(url, migrate=False) as store:
        with pytest.raises(PersistenceError, match=r"schema 'game2'.* version none"):
            await store.count()
    index = PostgresVectorIndex(url, migrate=False)
    try:
        with pytest.raises(DerivedIndexError, match=r"schema 'game2'.* version none"):
            index.verify("session", repair=False)
    finally:
        await index.aclose()
    assert _tables_by_schema(own_database) == {"public": 7}


@pytest.mark.parametrize(
    ("written", "named", "created"),
    [("missing_game", "'missing_game'", "missing_game"), ('"MyGame"', "'MyGame'", '"MyGame"')],
)
async def test_a_first_schema_that_does_not_exist_is_refused_and_nothing_is_created(
    own_database: str, make_memory: MemoryFactory, written: str, named: str, created: str
) -> None:
    url = schema_url(own_database, written.replace('"', "%22"))
    async with PostgresGameMemoryStore(url) as store:
        with pytest.raises(PersistenceError) as raised:
            await store.append(make_memory("m"))
    message = str(raised.value)
    assert f"the schema {named}, first on the search_path of" in message
    assert f"does not exist: create it (CREATE SCHEMA {created}) or correct the URL" in message
    index = PostgresVectorIndex(url)
    try:
        with pytest.raises(DerivedIndexError, match="first on the search_path"):
            index.verify("session", repair=False)
    finally:
        await index.aclose()
    assert _tables_by_schema(own_database) == {}
    # Once it exists, the save's tables are made there.
    _create_schema(own_database, created)
    async with PostgresGameMemoryStore(url) as store:
        assert await store.append(make_memory("m"))
    assert _tables_by_schema(own_database) == {created.strip('"'): 7}


async def test_a_first_schema_missing_a_table_of_its_version_is_refused(
    own_database: str, make_memory: MemoryFactory
) -> None:
    _create_schema(own_database, "game2")
    url = schema_url(own_database, "game2")
    async with PostgresGameMemoryStore(url) as store:
        assert await store.append(make_memory("mine"))
    await _save_in_public(own_database, make_memory)
    with psycopg.connect(own_database, autocommit=True) as connection:
        connection.execute("DROP TABLE game2.game_memory_retractions")
    for migrate in (True, False):
        async with PostgresGameMemoryStore(url, migrate=migrate) as store:
            with pytest.raises(PersistenceError, match="but not its table game_memory_retractions"):
                await _ids(store)
    assert _tables_by_schema(own_database) == {"public": 7, "game2": 6}
