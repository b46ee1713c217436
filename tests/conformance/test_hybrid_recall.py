"""The front door over every store × index pair: hybrid recall, status, rebuild, identity changes.

The provider is the deterministic hashing one (``support.providers``: "feline" embeds like
"cat"), so a paraphrase is found by its vector alone and a new ``version`` is a model change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    StoreClosedError,
    VectorMemoryState,
)
from game_memory.index import quantized
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, query

from .conftest import HybridFactory


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


async def remember(memory: Any, make_memory: MemoryFactory, **texts: str) -> None:
    for tick, (memory_id, text) in enumerate(texts.items(), start=1):
        await memory.append(make_memory(memory_id, text=text, tick=tick))


async def test_a_paraphrase_is_recalled_by_its_vector_alone(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await remember(memory, make_memory, m1="the cat sleeps on the warm roof", m2="an axe")
    result = await memory.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    hit = result.hits[0]
    assert (hit.lexical_rank, hit.vector_rank, hit.channels) == (None, 1, "vector")
    assert hit.vector_score is not None and hit.vector_score > 0.3
    both = (await memory.recall(query("cat roof", limit=1))).hits[0]
    assert both.memory.memory_id == "m1" and both.channels == "both"
    assert both.lexical_score is not None and both.lexical_score > 0


async def test_recall_returns_only_memories_of_its_one_snapshot(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await remember(memory, make_memory, m1="the cat", m2="the kitten", m3="a dog")
    snapshot = await memory.search_snapshot(query("feline"))
    authoritative = {id(m) for m in snapshot.authoritative_memories}
    assert snapshot.memories and all(id(m) in authoritative for m in snapshot.memories)
    assert [s.reused for s in snapshot.stages if s.stage.name == "AUTHORITATIVE_SNAPSHOT"] == [True]


async def test_lexical_mode_is_the_same_pipeline_without_a_provider(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(None)
    await remember(memory, make_memory, m1="the cat sleeps", m2="a dog barks", m3="cat and dog")
    result = await memory.recall(query("cat"))
    assert ids(result.memories) == ["m3", "m1"] and not result.fallback
    assert all(hit.vector_rank is None for hit in result.hits)
    assert (await memory.recall(query("feline"))).memories == ()
    status = await memory.get_status("session")
    assert (status.state, status.total_entries) == (VectorMemoryState.LEXICAL, 3)


async def test_vectors_of_memories_absent_from_the_save_never_enter_results(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    first = open_hybrid(provider)
    await remember(first, make_memory, m1="the cat sleeps", m2="a dog barks")
    other = open_hybrid(provider, save="other-save")  # same index, a save holding only m2
    await other.authoritative.append(make_memory("m2", text="a dog barks", tick=2))
    assert ids((await other.recall(query("feline"))).memories) == ["m2"]
    status = await other.get_status("session")
    assert (status.state, status.orphan_entries, status.ready_entries) == (
        VectorMemoryState.DEGRADED,
        1,
        1,
    )
    swept = await other.rebuild("session")
    assert (swept.state, swept.orphan_entries, swept.ready_entries) == (
        VectorMemoryState.READY,
        0,
        1,
    )


async def test_a_vector_computed_from_other_content_is_never_used(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    first = open_hybrid(provider)
    await first.append(make_memory("m1", text="the cat sleeps on the roof"))
    other = open_hybrid(provider, save="other-save")
    await other.authoritative.append(make_memory("m1", text="an axe by the door"))
    status = await other.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (0, 1)
    result = await other.recall(query("feline"))  # then embeds m1's content in the background
    assert result.memories == () and result.fallback


async def test_a_new_model_requires_a_rebuild_after_which_recall_is_semantic_again(
    open_hybrid: HybridFactory, make_memory: MemoryFactory, diagnostics: Diagnostics
) -> None:
    old = open_hybrid(FaultyProvider())
    await remember(old, make_memory, m1="the cat sleeps on the roof", m2="the smith's axe")
    assert (await old.get_status("session")).state is VectorMemoryState.READY
    provider = FaultyProvider(version="v2")
    new = open_hybrid(provider)
    for _ in range(2):
        result = await new.recall(query("feline"))
        assert result.memories == () and result.fallback
    assert ids(await new.search(query("axe"))) == ["m2"]  # lexical recall still answers
    assert diagnostics.codes() == ["memory_vector_rebuild_required"]  # once, not per query
    stale = await new.get_status("session")
    assert (stale.state, stale.stale_entries, stale.ready_entries) == (
        VectorMemoryState.REBUILD_REQUIRED,
        2,
        0,
    )
    with pytest.raises(DerivedIndexError, match="rebuild"):
        await new.recall(query("feline"), require_semantic=True)
    progress: list[tuple[int, int]] = []
    rebuilt = await new.rebuild("session", progress=lambda *p: progress.append(p))
    assert (rebuilt.state, rebuilt.ready_entries, rebuilt.stale_entries) == (
        VectorMemoryState.READY,
        2,
        0,
    )
    assert progress == [(0, 2), (2, 2)] and len(provider.documents.texts) == 2
    result = await new.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    assert diagnostics.codes()[-1] == "memory_embedding_rebuild_completed"
    # The old model's vectors were compacted away: from its side, every vector is stale.
    assert (await old.get_status("session")).state is VectorMemoryState.REBUILD_REQUIRED


async def test_status_moves_from_empty_to_ready_to_degraded_and_a_rebuild_repairs_it(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider, options={"rebuild_batch_size": 2})
    assert (await memory.get_status("session")).state is VectorMemoryState.EMPTY
    await memory.append(make_memory("m0", text="the cat"))
    assert (await memory.get_status("session")).state is VectorMemoryState.READY
    provider.document_fault = Fault.FAIL
    for index in range(1, 5):
        assert await memory.append(make_memory(f"m{index}", text=f"the dog {index}"))
    provider.document_fault = Fault.NONE
    degraded = await memory.get_status("session")
    assert (degraded.state, degraded.pending_entries, degraded.ready_entries) == (
        VectorMemoryState.DEGRADED,
        4,
        1,
    )
    assert ids(await memory.search(query("dog 3", limit=1))) == ["m3"]  # lexically recallable
    seen = [0]

    def fail_second_batch(_: Sequence[str]) -> None:
        seen[0] += 1
        provider.document_fault = Fault.FAIL if seen[0] == 2 else Fault.NONE

    provider.on_documents = fail_second_batch
    stopped = await memory.rebuild("session")
    assert (stopped.ready_entries, stopped.pending_entries) == (3, 2)
    provider.on_documents = None
    provider.document_fault = Fault.NONE
    resumed = await memory.rebuild("session")
    assert (resumed.state, resumed.ready_entries) == (VectorMemoryState.READY, 5)


async def test_a_memory_appended_during_a_rebuild_keeps_its_vector(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider, options={"rebuild_batch_size": 2})
    provider.document_fault = Fault.FAIL
    for index in range(4):
        await memory.append(make_memory(f"m{index}", text=f"the dog {index}", tick=index))
    provider.document_fault = Fault.NONE
    appended: list[bool] = []

    async def append_meanwhile(_: Sequence[str]) -> None:
        if not appended:
            appended.append(True)
            await memory.append(make_memory("late", text="a kitten in the barn", tick=99))

    provider.on_documents = append_meanwhile
    status = await memory.rebuild("session")
    assert appended == [True]
    assert (status.state, status.ready_entries, status.orphan_entries) == (
        VectorMemoryState.READY,
        5,
        0,
    )
    result = await memory.recall(query("feline barn", limit=1))
    assert ids(result.memories) == ["late"] and result.hits[0].vector_rank is not None


async def test_a_forced_rebuild_re_embeds_everything_and_keeps_results_identical(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider, options={"rebuild_batch_size": 3})
    words = ["cat", "dog", "axe", "barn", "roof", "kitten", "sword", "river"]
    for index in range(16):
        text = f"{words[index % 8]} {words[(index * 3) % 8]} {index}"
        await memory.append(make_memory(f"m{index:02d}", owner_id=f"o{index % 2}", text=text))
    questions = [query(text, limit=5) for text in ("feline", "hound blade", "barn roof", "river")]
    before = [await memory.recall(q) for q in questions]
    provider.documents.texts.clear()
    for _ in range(2):  # superseded rows pile up, then the sweep compacts them
        status = await memory.rebuild("session", force=True)
        assert status.state is VectorMemoryState.READY
    assert len(provider.documents.texts) == 32
    after = [await memory.recall(q) for q in questions]
    for old, new in zip(before, after, strict=True):
        assert old.hits == new.hits


async def test_the_store_bound_refuses_the_memory_and_the_index_bound_only_its_vector(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    memory = open_hybrid(
        provider, store_options={"maximum_entries": 3}, index_options={"capacity": 2}
    )
    for index in range(3):
        assert await memory.append(make_memory(f"m{index}", text=f"cat {index}"))
    assert diagnostics.codes() == ["memory_embedding_append_failed"]  # the third vector
    with pytest.raises(CapacityExceededError) as raised:
        await memory.append(make_memory("m3"))
    assert raised.value.bound == "maximum_entries"
    assert provider.documents.calls == 3  # nothing embedded for a refused memory
    status = await memory.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (2, 1)
    hits = {hit.memory.memory_id: hit for hit in (await memory.recall(query("cat 2"))).hits}
    assert (hits["m2"].lexical_rank, hits["m2"].vector_rank) == (1, None)  # still recalled


async def test_a_closed_front_door_refuses_every_call(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await memory.append(make_memory("m1"))
    await memory.aclose()
    await memory.aclose()  # idempotent
    for operation in (
        memory.append(make_memory("m2")),
        memory.recall(query("cat")),
        memory.get_status("session"),
        memory.rebuild("session"),
        memory.enumerate("session"),
    ):
        with pytest.raises(StoreClosedError):
            await operation
    with pytest.raises(StoreClosedError):  # the store and index were closed with it
        await memory.authoritative.count()


async def test_a_large_npc_answers_the_same_with_its_int8_copy(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every index hands out rows that never change while their array lives (its
    ``vectors`` contract), which the int8 copies rely on: on every store × index pair, an
    NPC of 4,200 memories answers the same before and after its rows were copied."""
    memory = open_hybrid(provider)
    words = ["cat", "roof", "bridge", "storm", "bread", "sword", "river", "inn", "king"]
    records = [
        make_memory(
            f"m{number:05d}",
            text=f"{words[number % 9]} {words[(number * 7) % 9]} note {number}",
            tick=number,
            importance=(number % 3) / 2,
        )
        for number in range(quantized.QUANTIZED_FROM_ROWS + 104)
    ]
    assert all(await memory.append_many(records))
    asked = [query("feline bridge", limit=8), query("storm over the inn", limit=8)]

    async def answers() -> list[list[tuple[str, float | None, float]]]:
        results = [await memory.recall(question) for question in asked]
        assert not any(result.fallback for result in results)
        return [
            [(hit.memory.memory_id, hit.vector_score, hit.fused_score) for hit in result.hits]
            for result in results
        ]

    quantized.forget_all()
    with monkeypatch.context() as patched:
        patched.setattr(quantized, "_DOT", None)  # as on a platform without SimSIMD
        before = await answers()
    for _ in range(quantized.COPY_AFTER):
        await memory.recall(asked[0])
    for _ in range(300):
        if quantized.held_bytes():
            break
        await asyncio.sleep(0.01)
    assert quantized.held_bytes() > 0  # this index's rows were copied
    assert await answers() == before
    quantized.forget_all()
