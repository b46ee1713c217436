"""Fixtures of the PostgreSQL tests: the server, a fresh schema per test, store factories."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from game_memory import VectorMemoryStore, VectorMemoryStoreOptions
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from postgres.server import server_url, temporary_schema
from support.providers import FaultyProvider
from support.vectors import Diagnostics


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The test server's URL (see ``server.py``: on CI it must be given)."""
    with server_url() as url:
        yield url


@pytest.fixture
def database(postgres_server: str) -> Iterator[str]:
    """The URL of a fresh, empty schema of the test database (dropped after the test)."""
    with temporary_schema(postgres_server) as url:
        yield url


PostgresStoreFactory = Callable[..., PostgresGameMemoryStore]


@pytest.fixture
async def make_postgres_store(database: str) -> AsyncIterator[PostgresStoreFactory]:
    """``make_postgres_store(url=None, **options)``; every store is closed at the end."""
    opened: list[PostgresGameMemoryStore] = []

    def factory(url: str | None = None, **options: Any) -> PostgresGameMemoryStore:
        store = PostgresGameMemoryStore(url or database, **options)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.aclose()


@pytest.fixture
async def make_postgres_index(database: str) -> AsyncIterator[Callable[..., PostgresVectorIndex]]:
    """``make_postgres_index(url=None, **options)``; every index is closed at the end."""
    opened: list[PostgresVectorIndex] = []

    def factory(url: str | None = None, **options: Any) -> PostgresVectorIndex:
        index = PostgresVectorIndex(url or database, **options)
        opened.append(index)
        return index

    yield factory
    for index in opened:
        await index.aclose()


@pytest.fixture
async def make_vector_store(
    postgres_server: str, provider: FaultyProvider, diagnostics: Diagnostics
) -> AsyncIterator[Callable[..., VectorMemoryStore]]:
    """The hybrid-memory tests' ``make_vector_store``, on PostgreSQL.

    A ``save`` or ``index`` folder names a schema (the same folder, the same schema), so a
    test that reopens a save reopens the same database tables.
    """
    opened: list[VectorMemoryStore] = []
    schemas: dict[object, str] = {}
    contexts: list[Any] = []

    def url_for(key: object) -> str:
        if key not in schemas:
            context = temporary_schema(postgres_server)
            contexts.append(context)
            schemas[key] = context.__enter__()
        return schemas[key]

    def factory(
        provider: EmbeddingProvider = provider,
        *,
        save: Path | None = None,
        index: Path | None = None,
        options: dict[str, Any] | None = None,
        **keywords: Any,
    ) -> VectorMemoryStore:
        keywords.setdefault("diagnostics", diagnostics)
        settings = {"dispose_embedding_provider": False, **(options or {})}
        store = VectorMemoryStore(
            PostgresGameMemoryStore(url_for(("save", save))),
            PostgresVectorIndex(url_for(("index", index))),
            provider,
            options=VectorMemoryStoreOptions(**settings),
            **keywords,
        )
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.aclose()
    for context in reversed(contexts):
        context.__exit__(None, None, None)
