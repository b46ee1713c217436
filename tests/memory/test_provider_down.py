"""Search with the embedding provider down: lexical recall answers, nothing piles up."""

from __future__ import annotations

import asyncio

import pytest

from game_memory import (
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemory,
    HashingEmbeddingProvider,
    VectorMemoryState,
)
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query


async def saved_while_healthy(factory: VectorStoreFactory, *memories: GameMemory) -> None:
    """Save and embed with the default (patient) deadline, so only the query can time out."""
    store = factory()
    for memory in memories:
        await store.append(memory)
    await store.aclose()


BROKEN = [
    Fault.FAIL,
    Fault.CRASH,
    Fault.RAISE_EARLY,
    Fault.WRONG_SIZE,
    Fault.NAN,
    Fault.ZERO,
    Fault.HANG,
]


@pytest.mark.parametrize("fault", BROKEN)
async def test_search_answers_lexically_when_the_provider_is_down(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
    fault: Fault,
) -> None:
    await saved_while_healthy(
        make_vector_store,
        make_memory("m1", text="the blacksmith forged a sword", tick=1),
        make_memory("m2", text="the cat sleeps", tick=2),
    )
    store = make_vector_store(options={"embedding_timeout": 0.05})
    provider.query_fault = fault
    try:
        result = await store.recall(query("blacksmith feline"))
        assert await store.search(query("blacksmith feline")) == list(result.memories)
    finally:
        provider.release.set()
    assert ids_of(result) == ["m1"]
    assert result.fallback
    assert all(hit.vector_rank is None for hit in result.hits)
    assert set(diagnostics.codes()) == {"memory_vector_search_failed"}
    assert diagnostics[0].session_id == "session" and diagnostics[0].memory_id is None


def ids_of(result: object) -> list[str]:
    return [memory.memory_id for memory in result.memories]  # type: ignore[attr-defined]


async def test_search_answers_lexically_with_a_closed_provider(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    provider = HashingEmbeddingProvider(32)
    store = make_vector_store(provider)
    await store.append(make_memory("m1", text="the blacksmith"))
    await provider.aclose()
    result = await store.recall(query("blacksmith"))
    assert ids_of(result) == ["m1"] and result.fallback


@pytest.mark.parametrize(
    ("fault", "error"),
    [(Fault.CRASH, EmbeddingUnavailableError), (Fault.HANG, EmbeddingTimeoutError)],
)
async def test_search_raises_instead_when_semantic_recall_is_required(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    fault: Fault,
    error: type[Exception],
) -> None:
    await saved_while_healthy(make_vector_store, make_memory("m1", text="the blacksmith"))
    store = make_vector_store(
        options={"fail_when_embedding_unavailable": True, "embedding_timeout": 0.05}
    )
    provider.query_fault = fault
    try:
        with pytest.raises(error):
            await store.search(query("blacksmith"))
    finally:
        provider.release.set()


async def test_memories_saved_while_the_provider_is_down_get_vectors_from_a_rebuild(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    provider.set_fault(Fault.FAIL)
    await store.append(make_memory("m1", text="the cat sleeps on the roof"))
    await store.append(make_memory("m2", text="an axe by the door"))
    assert ids_of(await store.recall(query("cat"))) == ["m1"]
    assert (await store.get_status("session")).pending_entries == 2
    provider.set_fault(Fault.NONE)
    status = await store.rebuild("session")
    assert status.state is VectorMemoryState.READY
    result = await store.recall(query("feline", limit=1))
    assert ids_of(result) == ["m1"] and not result.fallback


async def test_searches_against_a_hung_provider_never_pile_up_calls(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    await saved_while_healthy(make_vector_store, make_memory("m1", text="the blacksmith"))
    store = make_vector_store(
        options={"embedding_timeout": 0.05, "maximum_concurrent_embedding_calls": 2}
    )
    provider.query_fault = Fault.HANG_STUBBORN
    try:
        results = await asyncio.gather(*(store.recall(query("blacksmith")) for _ in range(10)))
        for _ in range(3):
            results.append(await store.recall(query("blacksmith")))
        assert all(ids_of(result) == ["m1"] and result.fallback for result in results)
        assert provider.queries.calls == 2
    finally:
        provider.release.set()
