"""An owner read answered from the cache on the calling thread, and every case that is not.

``FileGameMemoryStore.snapshot`` of one owner whose partition is cached, unchanged and
small ranks it on the caller's thread (``StoreReader.cached_views``) instead of hopping into
the pool. These tests pin that it does so only when nothing has to be read or checked, and
that every other case (another writer, a forget, damage, a rewrite in progress, a large
owner) goes through the pool's full read and answers, or fails, exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, GameMoment, PersistenceError
from game_memory.store import file_store

from .helpers import MemoryFactory, StoreFactory, log_path

_T = TypeVar("_T")


def counting(store: FileGameMemoryStore) -> list[int]:
    """Count the store's hops into its pool (``_run`` calls) from now on."""
    hops = [0]
    run = store._run

    async def counted(function: Callable[[], _T]) -> _T:
        hops[0] += 1
        return await run(function)

    store._run = counted  # type: ignore[method-assign]
    return hops


def owner_query(**fields: Any) -> GameMemoryQuery:
    values: dict[str, Any] = {"session_id": "session", "owner_id": "owner", "limit": 10}
    values.update(fields)
    return GameMemoryQuery(**values)


async def ids(store: FileGameMemoryStore, query: GameMemoryQuery) -> list[str]:
    snapshot = await store.snapshot(query)
    return sorted(memory.memory_id for memory in snapshot.authoritative_memories)


async def test_a_cached_owner_is_read_on_the_calling_thread(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    for number in range(5):
        await store.append(make_memory(f"m{number}", text=f"the mill wheel {number}"))
    query = owner_query(text="mill")
    first = await store.snapshot(query)  # reads the partition into the cache
    hops = counting(store)
    again = await store.snapshot(query)
    assert hops[0] == 0
    assert [(hit.memory.memory_id, hit.score) for hit in again.lexical] == [
        (hit.memory.memory_id, hit.score) for hit in first.lexical
    ]
    stages = [stage.stage.name for stage in again.search_snapshot().stages]
    assert stages == ["STORAGE_MIGRATION", "AUTHORITATIVE_SNAPSHOT", "LEXICAL_SEARCH"]
    # A session-wide query lists the session's folder: it goes through the pool.
    await store.snapshot(GameMemoryQuery(session_id="session", limit=10))
    assert hops[0] == 1


async def test_the_inline_read_ranks_as_the_pool_read(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    for number in range(40):
        await store.append(
            make_memory(
                f"m{number:02}",
                text=f"bread {'and ale ' * (number % 3)}at the inn {number}",
                tick=number,
                importance=(number % 5) / 5,
            )
        )
    queries = [
        owner_query(text="bread ale"),
        owner_query(text="inn", at_or_before=GameMoment(timeline_id="world", tick=20)),
        owner_query(text="nothing matches this"),
        owner_query(limit=3),
    ]
    inline = [await store.snapshot(query) for query in queries]
    monkeypatch.setattr(file_store, "INLINE_MEMORIES", 0)
    hops = counting(store)
    pooled = [await store.snapshot(query) for query in queries]
    assert hops[0] == len(queries)
    for a, b in zip(inline, pooled, strict=True):
        assert [(h.memory.memory_id, h.score) for h in a.lexical] == [
            (h.memory.memory_id, h.score) for h in b.lexical
        ]
        assert a.visible == b.visible


async def test_another_writer_and_a_forget_are_seen(
    tmp_path: Path, make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    folder = tmp_path / "save"
    reader, writer = make_store(folder), make_store(folder)
    await reader.append(make_memory("m1"))
    assert await ids(reader, owner_query()) == ["m1"]
    hops = counting(reader)
    await writer.append(make_memory("m2", text="the bridge fell"))
    assert await ids(reader, owner_query()) == ["m1", "m2"]  # the ledger changed: the pool
    assert hops[0] == 1
    assert await ids(reader, owner_query()) == ["m1", "m2"]  # cached again: inline
    assert hops[0] == 1
    await writer.forget("session", "owner", "m2", GameMoment(timeline_id="world", tick=5))
    later = owner_query(at_or_before=GameMoment(timeline_id="world", tick=9))
    snapshot = await reader.snapshot(later)
    assert [memory.memory_id for memory in snapshot.search_snapshot().memories] == ["m1"]
    assert hops[0] == 2
    # Another owner's write changes the ledger too: read through the pool, still right.
    await writer.append(make_memory("x1", owner_id="other"))
    assert await ids(reader, owner_query()) == ["m1", "m2"]
    assert hops[0] == 3


async def test_damage_to_a_cached_partition_still_fails_closed(
    tmp_path: Path, make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    folder = tmp_path / "save"
    store = make_store(folder)
    for number in range(4):
        await store.append(make_memory(f"m{number}", text=f"a long enough memory {number}"))
    assert len(await ids(store, owner_query())) == 4
    log = log_path(folder, "session", "owner")
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2])  # acknowledged records cut away
    with pytest.raises(PersistenceError, match="lost"):
        await store.snapshot(owner_query())


async def test_a_large_owner_or_a_rewrite_goes_through_the_pool(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}"))
    await store.snapshot(owner_query())
    hops = counting(store)
    monkeypatch.setattr(file_store, "INLINE_MEMORIES", 2)
    assert await ids(store, owner_query()) == ["m0", "m1", "m2"]
    assert hops[0] == 1
    monkeypatch.setattr(file_store, "INLINE_MEMORIES", 3)
    assert await ids(store, owner_query()) == ["m0", "m1", "m2"]
    assert hops[0] == 1
    # With a rewrite (an erase or compaction) unfinished, the cache is not trusted.
    engine = store._engine
    assert engine.cached_views("session", "owner", 10) is not None
    monkeypatch.setattr(engine.rewrites, "current", lambda: object())
    assert engine.cached_views("session", "owner", 10) is None
    # An owner never read, or a bad id, is not answered from memory either.
    monkeypatch.undo()
    assert engine.cached_views("session", "nobody", 10) is None
    assert engine.cached_views("session", "", 10) is None


async def test_a_closed_store_still_says_so(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("m1"))
    await store.snapshot(owner_query())
    await store.aclose()
    with pytest.raises(Exception, match="closed"):
        await store.snapshot(owner_query())
