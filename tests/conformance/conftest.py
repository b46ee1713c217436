"""The backend registry of the conformance suite, and the fixtures that open backends.

Every test in ``tests/conformance/`` runs once per backend it uses: a test taking
``open_store`` (or ``store``) runs on every entry of :data:`STORE_BACKENDS`, one taking
``open_index`` on every entry of :data:`INDEX_BACKENDS`, and one taking ``open_hybrid`` on
every pair. A new backend (PostgreSQL) adds one factory to each registry and runs the whole
suite. No test names a backend, except ``test_equivalence.py``, whose reference is the file
pair.

A factory takes the test's ``tmp_path`` and returns an *opener*. ``open_store(save="save",
**options)`` opens a handle on the named save of this test: opening the same name again gives
another handle on the same memories (for the file backend a new object on the same folder,
for the in-memory backend the one store object, whose memories live in it), a new name gives
an empty save. ``open_index(name="index", **options)`` is the same for derived indexes. The
options every backend must take are the bounds the suite needs: ``maximum_entries`` for a
store, ``capacity`` for an index. Handles are closed when the test ends; a test never closes a
shared handle itself (an in-memory store forgets everything when closed).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from game_memory import (
    EmbeddingProvider,
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameMemoryStore,
    VectorIndex,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.index.memory import InMemoryVectorIndex
from game_memory.store.memory import InMemoryGameMemoryStore
from postgres.backends import postgres_index, postgres_store
from support.vectors import Diagnostics

__all__ = [
    "INDEX_BACKENDS",
    "STORES_WITHOUT_STORE_COUNT",
    "STORE_BACKENDS",
    "HybridFactory",
    "IndexOpener",
    "StoreOpener",
]


class StoreOpener(Protocol):
    def __call__(self, save: str = "save", **options: Any) -> GameMemoryStore: ...


class IndexOpener(Protocol):
    def __call__(self, name: str = "index", **options: Any) -> VectorIndex: ...


HybridFactory = Callable[..., VectorMemoryStore]


def _shared(build: Callable[..., Any]) -> Callable[..., Any]:
    """An opener handing out one object per name (built with the first open's options)."""
    opened: dict[str, Any] = {}

    def open_named(name: str, **options: Any) -> Any:
        if name not in opened:
            opened[name] = build(**options)
        elif options:
            raise AssertionError(f"{name!r} is already open: options apply to the first open")
        return opened[name]

    return open_named


def file_store(tmp_path: Path) -> StoreOpener:
    def open_store(save: str = "save", **options: Any) -> GameMemoryStore:
        return FileGameMemoryStore(tmp_path / save, **options)

    return open_store


def memory_store(tmp_path: Path) -> StoreOpener:
    shared = _shared(InMemoryGameMemoryStore)

    def open_store(save: str = "save", **options: Any) -> GameMemoryStore:
        store: GameMemoryStore = shared(save, **options)
        return store

    return open_store


def file_index(tmp_path: Path) -> IndexOpener:
    def open_index(name: str = "index", **options: Any) -> VectorIndex:
        return FileVectorMemoryIndex(tmp_path / name, **options)

    return open_index


def memory_index(tmp_path: Path) -> IndexOpener:
    shared = _shared(InMemoryVectorIndex)

    def open_index(name: str = "index", **options: Any) -> VectorIndex:
        index: VectorIndex = shared(name, **options)
        return index

    return open_index


#: Every authoritative backend the suite runs on: name -> factory(tmp_path) -> opener.
STORE_BACKENDS: dict[str, Callable[[Path], StoreOpener]] = {
    "file": file_store,
    "memory": memory_store,
    "postgres": postgres_store,
}
#: Store backends whose snapshots report 0 partitioned memories in their STORAGE_MIGRATION
#: stage instead of the whole store's size: on PostgreSQL that count is a scan of every
#: session (of every shard, on Citus) in each recall (docs/postgres.md).
STORES_WITHOUT_STORE_COUNT = frozenset({"postgres"})
#: Every derived-index backend the suite runs on: name -> factory(tmp_path) -> opener.
INDEX_BACKENDS: dict[str, Callable[[Path], IndexOpener]] = {
    "file": file_index,
    "memory": memory_index,
    "postgres": postgres_index,
}


@pytest.fixture(params=sorted(STORE_BACKENDS))
def store_backend(request: pytest.FixtureRequest) -> str:
    """The name of the store backend this run of the test uses."""
    name: str = request.param
    return name


@pytest.fixture(params=sorted(INDEX_BACKENDS))
def index_backend(request: pytest.FixtureRequest) -> str:
    """The name of the index backend this run of the test uses."""
    name: str = request.param
    return name


@pytest.fixture
async def open_store(store_backend: str, tmp_path: Path) -> AsyncIterator[StoreOpener]:
    """``open_store(save="save", **options)`` on this run's backend; closed at the end."""
    opener = STORE_BACKENDS[store_backend](tmp_path)
    opened: list[GameMemoryStore] = []

    def tracked(save: str = "save", **options: Any) -> GameMemoryStore:
        store = opener(save, **options)
        opened.append(store)
        return store

    yield tracked
    for store in opened:
        await store.aclose()


@pytest.fixture
async def open_index(index_backend: str, tmp_path: Path) -> AsyncIterator[IndexOpener]:
    """``open_index(name="index", **options)`` on this run's backend; closed at the end."""
    opener = INDEX_BACKENDS[index_backend](tmp_path)
    opened: list[VectorIndex] = []

    def tracked(name: str = "index", **options: Any) -> VectorIndex:
        index = opener(name, **options)
        opened.append(index)
        return index

    yield tracked
    for index in opened:
        await index.aclose()


@pytest.fixture
def store(open_store: StoreOpener) -> GameMemoryStore:
    """An empty save on this run's store backend."""
    return open_store()


@pytest.fixture
def index(open_index: IndexOpener) -> VectorIndex:
    """An empty derived index on this run's index backend."""
    return open_index()


@pytest.fixture
async def open_hybrid(
    open_store: StoreOpener, open_index: IndexOpener, diagnostics: Diagnostics
) -> AsyncIterator[HybridFactory]:
    """``open_hybrid(provider, *, save=, index=, options=, store_options=, index_options=)``.

    A front door over this run's store and index backends (``provider=None``: lexical
    mode, no index). It does not own the provider; the diagnostics go to the
    ``diagnostics`` fixture. Front doors are closed when the test ends (with their store
    and index: front doors opened on one save share it until then).
    """
    doors: list[VectorMemoryStore] = []

    def factory(
        provider: EmbeddingProvider | None,
        *,
        save: str = "save",
        index: str = "index",
        options: dict[str, Any] | None = None,
        store_options: dict[str, Any] | None = None,
        index_options: dict[str, Any] | None = None,
        **keywords: Any,
    ) -> VectorMemoryStore:
        keywords.setdefault("diagnostics", diagnostics)
        settings = {"dispose_embedding_provider": False, **(options or {})}
        derived = None if provider is None else open_index(index, **(index_options or {}))
        door = VectorMemoryStore(
            open_store(save, **(store_options or {})),
            derived,
            provider,
            options=VectorMemoryStoreOptions(**settings),
            **keywords,
        )
        doors.append(door)
        return door

    yield factory
    for door in doors:
        await door.aclose()
