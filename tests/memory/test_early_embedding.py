"""A recall embeds its question while the save is read, not after (``recall/pipeline.py``).

The embedding starts as a task before the snapshot and is given the turns of the event
loop it needs to reach the provider, so the store's read (in its pool, or on the loop for a
small cached owner) and the model's work overlap. A question already in the query cache
starts nothing. A snapshot that fails, or a recall that is cancelled, cancels the
embedding it started; a failed embedding falls back to lexical recall as before, and no
task's error is left unretrieved.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from game_memory import (
    CapacityExceededError,
    GameMemoryQuery,
    GameMemorySearchStageKind,
    StoreSnapshot,
    VectorMemoryStore,
)
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query, until

Stage = GameMemorySearchStageKind


def provider_runs_at_each_snapshot(store: VectorMemoryStore, provider: FaultyProvider) -> list[int]:
    """Wrap the store's snapshot: each call records how many query embeddings the provider
    had begun running by then."""
    seen: list[int] = []
    inner: Callable[..., Awaitable[StoreSnapshot]] = store.authoritative.snapshot

    async def snapshot(*args: Any, **keywords: Any) -> StoreSnapshot:
        seen.append(provider.queries.calls)
        return await inner(*args, **keywords)

    store.authoritative.snapshot = snapshot  # type: ignore[method-assign]
    return seen


async def seeded(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> VectorMemoryStore:
    store = make_vector_store()
    for tick, text in enumerate(["the bridge is open", "the mill burned", "a wolf ate a goat"]):
        await store.append(make_memory(f"m{tick}", text=text, tick=tick + 1))
    return store


def asked(text: str) -> GameMemoryQuery:
    return query(text, owner_id="owner", limit=3)


async def test_the_question_is_embedded_while_the_save_is_read(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = await seeded(make_vector_store, make_memory)
    seen = provider_runs_at_each_snapshot(store, provider)
    before = provider.queries.calls
    # The first recall of the owner (its snapshot read in the store's pool), then one
    # answered from the cached partition on the event loop, then a question asked again.
    first = await store.recall(asked("is the bridge open"))
    cached = await store.recall(asked("what happened to the mill"))
    again = await store.recall(asked("what happened to the mill"))
    assert seen == [before + 1, before + 2, before + 2]  # begun before each read began
    assert provider.queries.calls == before + 2  # the question asked again: from the cache
    for result in (first, cached, again):
        assert not result.fallback
        assert [s.stage for s in result.snapshot.stages] == [
            Stage.STORAGE_MIGRATION,
            Stage.AUTHORITATIVE_SNAPSHOT,
            Stage.LEXICAL_SEARCH,
            Stage.EMBEDDING,
            Stage.VECTOR_INDEX_READ,
            Stage.VECTOR_SCORING,
        ]
        assert all(s.duration_ms >= 0 for s in result.snapshot.stages)
    assert first.memories[0].memory_id == "m0"
    assert cached.memories[0].memory_id == "m1"


async def test_a_failed_snapshot_cancels_the_embedding_it_began(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = await seeded(make_vector_store, make_memory)
    provider.query_fault = Fault.HANG
    with pytest.raises(CapacityExceededError):
        await store.recall(asked("is the bridge open"), maximum_snapshot_entries=1)
    await until(lambda: provider.queries.in_flight == 0, "the embedding to end")
    assert provider.queries.calls == 1 and provider.queries.cancelled == 1
    # The store still answers, and embeds again.
    provider.query_fault = Fault.NONE
    result = await store.recall(asked("is the bridge open"))
    assert not result.fallback and result.memories[0].memory_id == "m0"


async def test_cancelling_a_recall_cancels_its_embedding(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = await seeded(make_vector_store, make_memory)
    provider.query_fault = Fault.HANG
    task = asyncio.ensure_future(store.recall(asked("is the bridge open")))
    await until(lambda: provider.queries.in_flight == 1, "the embedding to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: provider.queries.in_flight == 0, "the embedding to end")
    assert provider.queries.cancelled == 1


async def test_a_failed_embedding_still_falls_back_and_leaves_no_error_unretrieved(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = await seeded(make_vector_store, make_memory)
    provider.query_fault = Fault.FAIL
    caplog.set_level(logging.ERROR, logger="asyncio")
    result = await store.recall(asked("is the bridge open"))
    assert result.fallback and result.memories[0].memory_id == "m0"
    assert "memory_vector_search_failed" in diagnostics.codes()
    # Both fail: the snapshot's error is the recall's; the embedding's is dropped quietly.
    with pytest.raises(CapacityExceededError):
        await store.recall(asked("what happened to the mill"), maximum_snapshot_entries=1)
    for _ in range(5):
        await asyncio.sleep(0)
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
