"""Prefetching an owner's index partition (``VectorIndex.prefetch``): the front door asks for
it once per owner as a first recall begins; the file index then holds the partition and its
checked rows; it never raises, and damage it meets is still named by the search."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from game_memory import FileVectorMemoryIndex, VectorMemoryStore
from game_memory.durable.names import identity_hash
from game_memory.index import engine as engine_module
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query

from .test_corruption import flip_row

SESSION, OWNER = identity_hash("session"), identity_hash("owner")


async def filled(make_vector_store: VectorStoreFactory, make_memory: MemoryFactory) -> None:
    store = make_vector_store()
    for number, text in enumerate(["the cat sleeps", "a dog barks", "an axe is sharp"]):
        await store.append(make_memory(f"m{number}", text=text, tick=number))
    await store.aclose()


@pytest.fixture
async def reopened(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> VectorMemoryStore:
    """A save of one owner's three memories, written, closed and opened again."""
    await filled(make_vector_store, make_memory)
    return make_vector_store()


def file_index(store: VectorMemoryStore) -> FileVectorMemoryIndex:
    assert isinstance(store.index, FileVectorMemoryIndex)
    return store.index


async def test_a_prefetched_partition_is_held_with_its_rows_checked(
    reopened: VectorMemoryStore,
) -> None:
    store = reopened
    index = file_index(store)
    identity = store.active_identity
    assert identity is not None
    index.prefetch("session", "owner", identity)
    engine = index.engine
    partition = engine.cached_partition(SESSION, OWNER)
    assert partition is not None and partition.records == 3
    code = engine.known_identity_code(identity)
    assert code is not None
    assert engine.cached_matrix(partition, code, identity.dimensions) is not None
    index.prefetch("session", "nobody", identity)  # no partition: nothing, no error
    index.prefetch("other session", "owner", identity)
    result = await store.recall(query("cat", owner_id="owner"))
    assert not result.fallback and result.hits[0].memory.memory_id == "m0"


async def test_a_prefetch_meeting_damage_raises_nothing_and_the_search_names_it(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
) -> None:
    await filled(make_vector_store, make_memory)
    flip_row(tmp_path / "index")
    store = make_vector_store()
    identity = store.active_identity
    assert identity is not None
    file_index(store).prefetch("session", "owner", identity)  # the damaged row: no raise
    diagnostics.clear()
    result = await store.recall(query("dog", owner_id="owner"))
    assert result.fallback
    assert diagnostics.codes() == ["memory_vector_search_failed"]


async def test_the_front_door_prefetches_an_owner_once_as_its_first_recall_begins(
    reopened: VectorMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = reopened
    asked: list[tuple[str, str]] = []
    real = FileVectorMemoryIndex.prefetch

    def counted(self: FileVectorMemoryIndex, session_id: str, owner_id: str, *rest: object) -> None:
        asked.append((session_id, owner_id))
        real(self, session_id, owner_id, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(FileVectorMemoryIndex, "prefetch", counted)
    first = await store.recall(query("cat", owner_id="owner"))
    again = await store.recall(query("dog", owner_id="owner"))
    await store.recall(query("cat"))  # no owner: nothing to prefetch
    await store.recall(query(None, owner_id="someone"))  # no text: no vector search
    await store.recall(query("cat", owner_id="someone"))
    await store.aclose()  # every job submitted has run
    assert asked == [("session", "owner"), ("session", "someone")]
    assert [hit.memory.memory_id for hit in first.hits][:1] == ["m0"]
    assert [hit.memory.memory_id for hit in again.hits][:1] == ["m1"]


async def test_a_search_racing_a_prefetch_reads_the_partition_once(
    reopened: VectorMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads wanting one partition whole: one reads it, the other takes that read."""
    engine = file_index(reopened).engine
    decoded: list[int] = []
    started = threading.Event()
    proceed = threading.Event()
    real = engine_module.IndexEngine._decode

    def slow(self: engine_module.IndexEngine, *args: object, **kwargs: object) -> object:
        decoded.append(1)
        started.set()
        proceed.wait(5)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module.IndexEngine, "_decode", slow)
    found: list[object] = []
    first = threading.Thread(target=lambda: found.append(engine.partition(SESSION, OWNER)))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=lambda: found.append(engine.partition(SESSION, OWNER)))
    second.start()
    second.join(0.2)
    assert second.is_alive()  # waiting for the first read, not reading itself
    proceed.set()
    first.join(5)
    second.join(5)
    assert len(decoded) == 1 and len(found) == 2 and found[0] is found[1]
