"""VectorMemoryStore: authoritative append first, one snapshot per recall, safe vector path."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    EmbeddingProvider,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameAwareMemoryReranker,
    GameMemoryQuery,
    GameMemorySearchStageKind,
    GameMoment,
    InvalidArgumentError,
    MemoryConflictError,
    StoreClosedError,
    VectorMemoryState,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
    open_memory,
)
from game_memory.recall.fusion import FusedCandidate
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query

Stage = GameMemorySearchStageKind


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


async def remember(store: VectorMemoryStore, make_memory: MemoryFactory, **texts: str) -> None:
    for tick, (memory_id, text) in enumerate(texts.items(), start=1):
        await store.append(make_memory(memory_id, text=text, tick=tick))


class SpyReranker(GameAwareMemoryReranker):
    """Records the pool it was given; optionally reverses it."""

    def __init__(self, *, reverse: bool = False) -> None:
        super().__init__()
        self.pools: list[list[str]] = []
        self.reverse = reverse

    def rank(
        self, q: GameMemoryQuery, candidates: Sequence[FusedCandidate]
    ) -> list[FusedCandidate]:
        self.pools.append([candidate.memory.memory_id for candidate in candidates])
        return list(candidates)[::-1] if self.reverse else list(candidates)


# -- append ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Fault.FAIL,
        Fault.CRASH,
        Fault.RAISE_EARLY,
        Fault.WRONG_SIZE,
        Fault.WRONG_COUNT,
        Fault.NAN,
        Fault.ZERO,
    ],
)
async def test_a_vector_failure_never_undoes_the_authoritative_append(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
    fault: Fault,
) -> None:
    store = make_vector_store()
    provider.document_fault = fault
    assert await store.append(make_memory("m1", text="the blacksmith forged a sword"))
    assert ids(await store.enumerate("session")) == ["m1"]
    assert diagnostics.codes() == ["memory_embedding_append_failed"]
    status = await store.get_status("session")
    assert (status.pending_entries, status.ready_entries) == (1, 0)
    assert ids(await store.search(query("blacksmith"))) == ["m1"]


async def test_an_embedding_timeout_during_append_is_reported_and_the_memory_stays_recallable(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store(options={"embedding_timeout": 0.05})
    provider.document_fault = Fault.HANG
    try:
        assert await store.append(make_memory("m1", text="the blacksmith forged a sword"))
    finally:
        provider.release.set()
    assert diagnostics[0].code == "memory_embedding_append_failed"
    assert diagnostics[0].details == {"exception": "EmbeddingTimeoutError"}
    assert ids(await store.search(query("blacksmith"))) == ["m1"]


async def test_fail_when_embedding_unavailable_raises_but_the_memory_stays_saved(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store(options={"fail_when_embedding_unavailable": True})
    provider.document_fault = Fault.CRASH
    with pytest.raises(EmbeddingUnavailableError):
        await store.append(make_memory("m1"))
    assert ids(await store.enumerate("session")) == ["m1"]


async def test_authoritative_errors_propagate_and_nothing_is_embedded_then(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", text="first content"))
    with pytest.raises(MemoryConflictError):
        await store.append(make_memory("m1", text="other content"))
    assert provider.documents.calls == 1


async def test_appending_an_equivalent_memory_again_does_not_embed_it_again(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    assert await store.append(make_memory("m1"))
    assert not await store.append(make_memory("m1"))
    assert provider.documents.calls == 1


async def test_appending_again_after_a_failed_embedding_gives_the_memory_its_vector(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    provider.document_fault = Fault.FAIL
    await store.append(make_memory("m1"))
    provider.document_fault = Fault.NONE
    assert not await store.append(make_memory("m1"))
    status = await store.get_status("session")
    assert status.state is VectorMemoryState.READY


# -- recall ---------------------------------------------------------------------------------


async def test_semantic_recall_finds_a_paraphrase_sharing_no_word_with_the_query(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await remember(
        store, make_memory, m1="the cat sleeps on the warm roof", m2="the smith sharpened an axe"
    )
    assert await store.search(query("feline")) != []
    result = await store.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"]
    hit = result.hits[0]
    assert (hit.lexical_rank, hit.vector_rank, hit.channels) == (None, 1, "vector")
    assert hit.vector_score is not None and hit.vector_score > 0.3
    assert not result.fallback


async def test_a_memory_found_by_both_channels_carries_both_ranks(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await remember(store, make_memory, m1="the cat sleeps on the roof", m2="an axe")
    hit = (await store.recall(query("cat roof", limit=1))).hits[0]
    assert hit.memory.memory_id == "m1" and hit.channels == "both"
    assert hit.lexical_score is not None and hit.lexical_score > 0


async def test_each_recall_reads_one_authoritative_snapshot_and_reuses_it_for_vectors(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    await remember(store, make_memory, m1="the cat", m2="a dog")
    authoritative = store.authoritative
    assert isinstance(authoritative, FileGameMemoryStore)
    reads: list[str] = []
    original = authoritative.snapshot

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append("snapshot")
        return await original(*args, **kwargs)

    async def forbidden(*_: Any, **__: Any) -> Any:
        raise AssertionError("recall read the save a second time")

    monkeypatch.setattr(authoritative, "snapshot", counted)
    monkeypatch.setattr(authoritative, "enumerate", forbidden)
    snapshot = await store.search_snapshot(query("feline"))
    assert reads == ["snapshot"]
    snapshots = [s for s in snapshot.stages if s.stage is Stage.AUTHORITATIVE_SNAPSHOT]
    assert len(snapshots) == 1 and snapshots[0].reused
    assert [s.stage for s in snapshot.stages] == [
        Stage.STORAGE_MIGRATION,
        Stage.AUTHORITATIVE_SNAPSHOT,
        Stage.LEXICAL_SEARCH,
        Stage.EMBEDDING,
        Stage.VECTOR_INDEX_READ,
        Stage.VECTOR_SCORING,
    ]
    assert ids(snapshot.authoritative_memories) == ["m1", "m2"]


async def test_every_stage_reports_duration_and_counts_and_never_text_or_ids(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(reranker=GameAwareMemoryReranker())
    await remember(store, make_memory, alpha_id="the cat sleeps", beta_id="a dog barks")
    snapshot = await store.search_snapshot(query("feline cat", limit=1))
    assert {s.stage for s in snapshot.stages} == set(Stage)
    for stage in snapshot.stages:
        assert set(type(stage).model_fields) == {
            "stage",
            "duration_ms",
            "scanned_count",
            "candidate_count",
            "reused",
        }
        assert stage.duration_ms >= 0
        dumped = stage.model_dump_json()
        assert "alpha_id" not in dumped and "cat" not in dumped and "session" not in dumped
    scoring = snapshot.stage(Stage.VECTOR_SCORING)
    assert scoring is not None and (scoring.scanned_count, scoring.candidate_count) == (2, 2)
    rerank = snapshot.stage(Stage.RERANK)
    assert rerank is not None and rerank.scanned_count == 2
    assert json.loads(snapshot.model_dump_json())["memories"][0]["memory_id"] == "alpha_id"


async def test_recalled_memories_are_instances_of_the_authoritative_snapshot(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await remember(store, make_memory, m1="the cat", m2="the kitten", m3="a dog")
    snapshot = await store.search_snapshot(query("feline"))
    authoritative = {id(memory) for memory in snapshot.authoritative_memories}
    assert snapshot.memories and all(id(m) in authoritative for m in snapshot.memories)


async def test_vectors_of_memories_absent_from_the_save_never_enter_results(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    await remember(first, make_memory, m1="the cat sleeps", m2="a dog barks")
    # Another save shares the index folder but only holds m2: m1's vector is an orphan.
    other = make_vector_store(save=tmp_path / "other-save")
    await other.authoritative.append(make_memory("m2", text="a dog barks", tick=2))
    result = await other.recall(query("feline"))
    assert ids(result.memories) == ["m2"]
    status = await other.get_status("session")
    assert (status.orphan_entries, status.ready_entries) == (1, 1)
    assert status.state is VectorMemoryState.DEGRADED


async def test_a_vector_computed_from_other_content_is_never_used(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    await first.append(make_memory("m1", text="the cat sleeps on the roof"))
    # Same id, other content, other save, same index: the digest no longer matches.
    other = make_vector_store(save=tmp_path / "other-save")
    await other.authoritative.append(make_memory("m1", text="an axe by the door"))
    status = await other.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (0, 1)
    result = await other.recall(query("feline"))  # then embeds m1's content in the background
    assert result.memories == () and result.fallback


async def test_vectors_of_another_model_are_stale_and_recall_is_lexical_until_a_rebuild(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    old = make_vector_store()
    await remember(old, make_memory, m1="the cat sleeps", m2="a dog barks")
    await old.aclose()
    new = make_vector_store(FaultyProvider(version="v2"))
    for _ in range(2):
        result = await new.recall(query("feline"))
        assert result.memories == () and result.fallback
    assert ids(await new.search(query("dog"))) == ["m2"]
    assert diagnostics.codes() == ["memory_vector_rebuild_required"]
    status = await new.get_status("session")
    assert status.state is VectorMemoryState.REBUILD_REQUIRED and status.stale_entries == 2


async def test_stale_vectors_raise_when_semantic_recall_is_required(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    old = make_vector_store()
    await old.append(make_memory("m1"))
    strict = make_vector_store(
        FaultyProvider(version="v2"), options={"fail_when_embedding_unavailable": True}
    )
    with pytest.raises(DerivedIndexError, match="rebuild"):
        await strict.recall(query("feline"))


async def test_search_never_returns_another_sessions_memories(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append(make_memory("mine", text="the cat"))
    await store.append(make_memory("theirs", text="the cat", session_id="other-session"))
    assert ids(await store.search(query("feline"))) == ["mine"]
    assert ids(await store.search(query("feline", session_id="other-session"))) == ["theirs"]


VISIBILITY_CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({"owner_id": "npc-b"}, ["b"]),
    ({"at_or_before": GameMoment(timeline_id="world", tick=20)}, ["a", "b", "expiring"]),
    ({"at_or_before": GameMoment(timeline_id="world", tick=30)}, ["a", "b", "late"]),
    ({"at_or_before": GameMoment(timeline_id="branch", tick=99)}, ["branched"]),
    ({"scopes": ("secret",)}, ["b"]),
    ({"kinds": ("goal",)}, ["late"]),
    ({"tags": ("pet", "indoor")}, ["a"]),
    ({"minimum_importance": 0.8}, ["expiring"]),
]


@pytest.mark.parametrize(("filters", "expected"), VISIBILITY_CASES)
async def test_visibility_filters_hold_on_the_vector_path(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    filters: dict[str, Any],
    expected: list[str],
) -> None:
    store = make_vector_store()
    memories = [
        make_memory("a", owner_id="npc-a", text="the cat", tick=10, tags=("indoor", "pet")),
        make_memory("b", owner_id="npc-b", text="the cat", tick=11, scope="secret", tags=("pet",)),
        make_memory(
            "expiring",
            owner_id="npc-a",
            text="the cat",
            tick=12,
            importance=0.9,
            expires_at=GameMoment(timeline_id="world", tick=30),  # gone at tick 30
        ),
        make_memory("late", owner_id="npc-a", text="the cat", tick=25, kind="goal"),
        make_memory("branched", owner_id="npc-a", text="the cat", tick=5, timeline_id="branch"),
    ]
    for memory in memories:
        await store.append(memory)
    # "feline" shares no word with any memory: only the vector path can find them.
    result = await store.recall(query("feline", **filters))
    assert not result.fallback
    assert sorted(ids(result.memories)) == expected
    assert all(hit.lexical_rank is None for hit in result.hits)


async def test_the_reranker_sees_min_of_maximum_candidates_and_limit_times_multiplier(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    spy = SpyReranker()
    store = make_vector_store(reranker=spy, options={"candidate_multiplier": 4})
    for index in range(30):
        await store.append(make_memory(f"m{index:02d}", text=f"the cat number {index}"))
    assert len(await store.search(query("cat", limit=3))) == 3
    capped = make_vector_store(
        reranker=spy, options={"candidate_multiplier": 4, "maximum_candidates": 5}
    )
    assert len(await capped.search(query("cat", limit=3))) == 3
    assert len(await capped.search(query("cat", limit=7))) == 5
    assert [len(pool) for pool in spy.pools] == [12, 5, 5]


async def test_fusion_then_the_reranker_then_the_limit(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    reversing = SpyReranker(reverse=True)
    store = make_vector_store(reranker=reversing)
    for index in range(10):
        await store.append(make_memory(f"m{index}", text="cat " * (index + 1)))
    recalled = ids(await store.search(query("cat", limit=2)))
    (pool,) = reversing.pools
    # The fused pool (2 × 4 = 8) is reordered as a whole, and only then cut to the limit.
    assert len(pool) == 8
    assert recalled == pool[::-1][:2]


async def test_a_reranker_returning_a_memory_it_was_not_given_is_refused(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    class Inventing(GameAwareMemoryReranker):
        def rank(
            self, q: GameMemoryQuery, candidates: Sequence[FusedCandidate]
        ) -> list[FusedCandidate]:
            copy = candidates[0]
            return [FusedCandidate(copy.memory, 1.0, None, None, None, None)]

    store = make_vector_store(reranker=Inventing())
    await store.append(make_memory("m1", text="the cat"))
    with pytest.raises(DerivedIndexError, match="reranker"):
        await store.search(query("cat"))


async def test_limit_zero_recalls_nothing_and_embeds_nothing(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", text="the cat"))
    assert await store.search(query("cat", limit=0)) == []
    assert (await store.search_snapshot(query("cat", limit=0))).memories == ()
    assert provider.queries.calls == 0


async def test_a_query_without_text_is_answered_lexically_without_embedding(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", text="the cat"))
    result = await store.recall(query(None))
    assert ids(result.memories) == ["m1"] and not result.fallback
    assert provider.queries.calls == 0
    assert (await store.recall(query("   "))).fallback is False


async def test_more_vectors_than_a_search_may_compare_fall_back_to_lexical(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, diagnostics: Diagnostics
) -> None:
    store = make_vector_store(options={"maximum_vector_comparisons_per_search": 300})
    await remember(store, make_memory, m1="the cat", m2="a dog")  # 2 × 256 > 300
    result = await store.recall(query("feline dog"))
    assert result.fallback and ids(result.memories) == ["m2"]
    assert diagnostics.codes()[-1] == "memory_vector_search_too_large"  # the docs: one says why
    strict = make_vector_store(
        options={
            "maximum_vector_comparisons_per_search": 300,
            "fail_when_embedding_unavailable": True,
        }
    )
    with pytest.raises(CapacityExceededError) as raised:
        await strict.recall(query("feline dog"))
    assert raised.value.bound == "maximum_vector_comparisons_per_search"


async def test_memories_without_vectors_fall_back_with_a_diagnostic_or_raise_when_told(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
) -> None:
    # An index folder deleted (or never built): no memory has a vector of the model, so
    # vectors cannot help, and a diagnostic says why; ``fail_when_embedding_unavailable``
    # raises instead of answering lexically.
    first = make_vector_store()
    await remember(first, make_memory, m1="the cat", m2="a dog")
    await first.aclose()
    shutil.rmtree(tmp_path / "index")
    store = make_vector_store()
    result = await store.recall(query("dog"))
    assert result.fallback and ids(result.memories) == ["m2"]
    assert diagnostics.codes()[-1] == "memory_vector_unindexed"
    strict = make_vector_store(options={"fail_when_embedding_unavailable": True})
    with pytest.raises(DerivedIndexError, match="rebuild"):
        await strict.recall(query("dog"))
    await store.rebuild("session")
    assert not (await store.recall(query("dog"))).fallback


async def test_the_hybrid_store_answers_the_reference_stores_calls(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    # The reference's "use it wherever an IGameMemoryStore is accepted": append, search,
    # search_snapshot and enumerate. (GameMemoryStore is now the backends' seam below it.)
    store = make_vector_store()
    for call in ("append", "search", "search_snapshot", "enumerate"):
        assert callable(getattr(store, call))
    await store.append(make_memory("b", owner_id="npc-2"))
    await store.append(make_memory("a", owner_id="npc-1"))
    assert ids(await store.enumerate("session")) == ["a", "b"]
    assert ids(await store.enumerate("session", "npc-2")) == ["b"]


async def test_closing_is_idempotent_and_later_calls_raise_store_closed(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    provider = FaultyProvider()
    store = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"), FileVectorMemoryIndex(tmp_path / "index"), provider
    )
    await store.append(make_memory("m1"))
    await store.aclose()
    await store.aclose()
    assert provider.closed == 1
    for call in (
        store.append(make_memory("m2")),
        store.search(query("cat")),
        store.enumerate("session"),
        store.get_status("session"),
        store.rebuild("session"),
        store.search(query("cat", limit=0)),  # answered without a read: still closed
    ):
        with pytest.raises(StoreClosedError):
            await call


async def test_a_failing_index_close_still_closes_the_save_and_is_raised(
    tmp_path: Path, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save is closed all the same (its files written, its lock released)."""
    index = FileVectorMemoryIndex(tmp_path / "index")
    save = FileGameMemoryStore(tmp_path / "save")
    store = VectorMemoryStore(save, index, FaultyProvider())
    await store.append(make_memory("m1"))

    async def broken() -> None:
        raise OSError("the index folder went away")

    monkeypatch.setattr(index, "aclose", broken)
    with pytest.raises(OSError, match="went away"):
        await store.aclose()
    with pytest.raises(StoreClosedError):
        await save.enumerate("session")
    async with FileGameMemoryStore(tmp_path / "save") as reopened:
        assert ids(await reopened.enumerate("session")) == ["m1"]


async def test_the_provider_is_left_open_when_the_store_does_not_own_it(
    make_vector_store: VectorStoreFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await store.aclose()
    assert provider.closed == 0


def test_an_index_folder_inside_the_save_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="inside the save folder"):
        VectorMemoryStore(
            FileGameMemoryStore(tmp_path / "save"),
            FileVectorMemoryIndex(tmp_path / "save" / "index"),
            FaultyProvider(),
        )


def test_options_that_cannot_hold_the_index_vectors_are_refused(tmp_path: Path) -> None:
    options = VectorMemoryStoreOptions(
        maximum_index_entries=1_000, maximum_stored_vector_values=1_000
    )
    with pytest.raises(InvalidArgumentError, match="options"):
        VectorMemoryStore(
            FileGameMemoryStore(tmp_path / "save"),
            FileVectorMemoryIndex(tmp_path / "index"),
            FaultyProvider(),
            options=options,
        )


async def test_the_snapshot_of_a_search_is_bounded(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(options={"maximum_index_entries": 2})
    for index in range(3):
        await store.append(make_memory(f"m{index}"))
    # The bound that applied is the options' maximum_index_entries (named so).
    with pytest.raises(CapacityExceededError, match="maximum_index_entries") as raised:
        await store.search(query("cat"))
    assert raised.value.bound == "maximum_index_entries"
    roomy = make_vector_store()
    with pytest.raises(CapacityExceededError, match="maximum_snapshot_entries") as raised:
        await roomy.search_snapshot(query("cat"), maximum_snapshot_entries=2)
    assert raised.value.bound == "maximum_snapshot_entries"
    assert len((await roomy.search_snapshot(query("cat"), 3)).authoritative_memories) == 3


class ListProvider:
    """A provider returning plain float lists (the protocol allows any float sequence)."""

    def __init__(self) -> None:
        self.inner = FaultyProvider()

    @property
    def identity(self) -> Any:
        return self.inner.identity

    async def embed_query(self, text: str) -> list[float]:
        return [float(value) for value in self.inner.inner.embed(text)]

    async def embed_documents(self, texts: Sequence[str]) -> tuple[list[float], ...]:
        return tuple([float(v) for v in self.inner.inner.embed(text)] for text in texts)

    async def aclose(self) -> None:
        return None


async def test_a_provider_may_return_plain_float_sequences(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    provider = ListProvider()
    assert isinstance(provider, EmbeddingProvider)
    store = make_vector_store(provider)
    await store.append(make_memory("m1", text="the cat sleeps on the roof"))
    await store.append(make_memory("m2", text="an axe by the door"))
    result = await store.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback


class HugeProvider(ListProvider):
    """Finite components whose sum of squares leaves float64's range (1e200 and 1e-200)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    async def embed_query(self, text: str) -> list[float]:
        return [value * self.scale for value in await super().embed_query(text)]

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await super().embed_documents(texts)
        return [[value * self.scale for value in vector] for vector in vectors]


@pytest.mark.parametrize("scale", [1e200, 1e-200])
async def test_vectors_out_of_float64_range_are_normalised_not_zeroed(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, scale: float
) -> None:
    # A sum of squares that overflows (or underflows) used to give an all-zero row, counted
    # ready and never matching (or an "all-zero vector" error for a vector that is not).
    store = make_vector_store(HugeProvider(scale))
    await store.append(make_memory("m1", text="the cat sleeps on the roof"))
    await store.append(make_memory("m2", text="an axe by the door"))
    result = await store.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    assert result.hits[0].vector_score is not None and result.hits[0].vector_score > 0.1
    assert (await store.get_status("session")).ready_entries == 2


async def test_bad_arguments_to_the_front_door_are_library_errors(
    tmp_path: Path, make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(FaultyProvider())
    for call in (
        store.get_status(""),
        store.get_status(None),  # type: ignore[arg-type]
        store.rebuild(" "),
        store.rebuild(None),  # type: ignore[arg-type]
        store.append_many(None),  # type: ignore[arg-type]
        store.recall(query("cat"), maximum_snapshot_entries="5"),  # type: ignore[arg-type]
        store.recall(query("cat"), maximum_snapshot_entries=-1),
    ):
        with pytest.raises(InvalidArgumentError):
            await call
    with pytest.raises(InvalidArgumentError, match="options"):
        VectorMemoryStore(FileGameMemoryStore(tmp_path / "s"), options="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="EmbeddingProvider"):
        VectorMemoryStore(
            FileGameMemoryStore(tmp_path / "s"),
            FileVectorMemoryIndex(tmp_path / "i"),
            5,  # type: ignore[arg-type]
        )
    with pytest.raises(InvalidArgumentError, match="model must be"):
        await open_memory(tmp_path / "save", model=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="options"):
        await open_memory(tmp_path / "save", model="lexical", options="x")  # type: ignore[arg-type]
    # A memory is hashable (by its identity; the metadata mapping is not), as frozen
    # records are: equal memories hash alike.
    one, same = make_memory("m1", metadata={"k": "v"}), make_memory("m1", metadata={"k": "v"})
    assert hash(one) == hash(same) and len({one, same, make_memory("m2")}) == 2


class StubbornProvider(ListProvider):
    """A provider whose close hangs, or fails with a plain exception."""

    def __init__(self, hangs: bool) -> None:
        super().__init__()
        self.hangs = hangs

    async def aclose(self) -> None:
        if self.hangs:
            await asyncio.Event().wait()
        raise RuntimeError("the model's runtime crashed while closing")


@pytest.mark.parametrize("hangs", [True, False])
async def test_a_provider_whose_close_hangs_or_fails_never_keeps_the_save_open(
    tmp_path: Path, make_memory: MemoryFactory, hangs: bool
) -> None:
    store = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "index"),
        StubbornProvider(hangs),
        options=VectorMemoryStoreOptions(embedding_timeout=0.2),
    )
    await store.append(make_memory("m1", text="the cat sleeps on the roof"))
    expected = EmbeddingTimeoutError if hangs else EmbeddingUnavailableError
    with pytest.raises(expected, match="closed anyway"):
        await asyncio.wait_for(store.aclose(), 10)
    async with FileGameMemoryStore(tmp_path / "save") as again:  # the save was closed
        assert [m.memory_id for m in await again.enumerate("session")] == ["m1"]
