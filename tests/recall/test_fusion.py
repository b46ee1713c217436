"""fuse(): reciprocal-rank fusion (plain and weighted) and convex score fusion."""

from __future__ import annotations

import pytest

from game_memory import DerivedIndexError, FusionMode, FusionOptions, GameMemory
from game_memory.recall.fusion import fuse
from support.vectors import MemoryFactory

RRF = FusionOptions(mode=FusionMode.RRF)


def ids(fused: list) -> list[str]:  # type: ignore[type-arg]
    return [candidate.memory.memory_id for candidate in fused]


def test_rrf_gives_the_first_item_1_over_61_and_the_second_1_over_62(
    make_memory: MemoryFactory,
) -> None:
    a, b = make_memory("a"), make_memory("b")
    fused = fuse([(a, 9.0), (b, 1.0)], [], RRF, 10)
    assert [c.score for c in fused] == [1 / 61, 1 / 62]
    assert (fused[0].lexical_rank, fused[0].vector_rank) == (1, None)


def test_rrf_adds_the_contributions_of_a_memory_found_by_both_channels(
    make_memory: MemoryFactory,
) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    fused = fuse([(a, 3.0), (b, 2.0)], [(b, 0.9), (c, 0.8)], RRF, 10)
    assert ids(fused) == ["b", "a", "c"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    assert (fused[0].lexical_rank, fused[0].vector_rank) == (2, 1)
    assert (fused[0].lexical_score, fused[0].vector_score) == (2.0, 0.9)
    assert (fused[1].score, fused[2].score) == (1 / 61, 1 / 62)


def test_rrf_ignores_score_magnitudes_and_uses_ranks_only(make_memory: MemoryFactory) -> None:
    a, b = make_memory("a"), make_memory("b")
    close = fuse([(a, 1.0001), (b, 1.0)], [], RRF, 10)
    far = fuse([(a, 1_000.0), (b, 1.0)], [], RRF, 10)
    assert [c.score for c in close] == [c.score for c in far]


def test_rrf_k_is_configurable(make_memory: MemoryFactory) -> None:
    fused = fuse([(make_memory("a"), 1.0)], [], FusionOptions(mode=FusionMode.RRF, rrf_k=0), 5)
    assert fused[0].score == 1.0


def test_equal_scores_order_by_importance_then_newer_tick_then_owner_then_id(
    make_memory: MemoryFactory,
) -> None:
    low = make_memory("low", importance=0.1, tick=9)
    old = make_memory("old", importance=0.9, tick=1)
    new_b = make_memory("b", importance=0.9, tick=5, owner_id="owner-b")
    new_a2 = make_memory("a2", importance=0.9, tick=5, owner_id="owner-a")
    new_a1 = make_memory("a1", importance=0.9, tick=5, owner_id="owner-a")
    # Equal cosines and no lexical hits: every fused score is the same.
    same = [(memory, 0.5) for memory in (low, old, new_b, new_a2, new_a1)]
    fused = fuse([], same, FusionOptions(mode=FusionMode.CONVEX), 10)
    assert len({candidate.score for candidate in fused}) == 1
    assert ids(fused) == ["a1", "a2", "b", "old", "low"]


def test_ties_break_deterministically_in_the_documented_order(make_memory: MemoryFactory) -> None:
    # Lexical rank i and vector rank i give equal sums when the lists are mirrored.
    x = make_memory("x", importance=0.5, tick=1)
    y = make_memory("y", importance=0.5, tick=1)
    assert ids(fuse([(x, 2.0), (y, 1.0)], [(y, 2.0), (x, 1.0)], RRF, 10)) == ["x", "y"]
    assert ids(fuse([(y, 2.0), (x, 1.0)], [(x, 2.0), (y, 1.0)], RRF, 10)) == ["x", "y"]
    heavier = make_memory("z", importance=0.6, tick=1)
    assert ids(fuse([(x, 2.0), (heavier, 1.0)], [(heavier, 2.0), (x, 1.0)], RRF, 10)) == [
        "z",
        "x",
    ]
    newer = make_memory("w", importance=0.5, tick=2)
    assert ids(fuse([(x, 2.0), (newer, 1.0)], [(newer, 2.0), (x, 1.0)], RRF, 10)) == ["w", "x"]
    other_owner = make_memory("a", owner_id="b-owner", importance=0.5, tick=1)
    first_owner = make_memory("b", owner_id="a-owner", importance=0.5, tick=1)
    mirrored = fuse(
        [(other_owner, 2.0), (first_owner, 1.0)], [(first_owner, 2.0), (other_owner, 1.0)], RRF, 10
    )
    assert ids(mirrored) == ["b", "a"]


def test_weighted_rrf_scales_each_channel_by_its_weight(make_memory: MemoryFactory) -> None:
    a, b = make_memory("a"), make_memory("b")
    options = FusionOptions(mode=FusionMode.WEIGHTED_RRF, lexical_weight=0.25, vector_weight=2.0)
    fused = fuse([(a, 5.0)], [(b, 0.5)], options, 10)
    assert ids(fused) == ["b", "a"]
    assert [c.score for c in fused] == [pytest.approx(2.0 / 61), pytest.approx(0.25 / 61)]


def test_best_lexical_convex_fusion_divides_lexical_by_the_best_and_clips_cosine(
    make_memory: MemoryFactory,
) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    options = FusionOptions(
        mode=FusionMode.CONVEX,
        normalization="best_lexical",
        lexical_weight=0.3,
        vector_weight=0.7,
    )
    fused = fuse([(a, 8.0), (b, 2.0)], [(b, 0.5), (c, -0.4)], options, 10)
    scores = {candidate.memory.memory_id: candidate.score for candidate in fused}
    assert scores["a"] == pytest.approx(0.3 * 1.0)
    assert scores["b"] == pytest.approx(0.3 * 0.25 + 0.7 * 0.5)
    assert scores["c"] == pytest.approx(0.0)
    assert ids(fused) == ["b", "a", "c"]


def test_best_lexical_convex_fusion_without_lexical_hits_is_the_weighted_cosine(
    make_memory: MemoryFactory,
) -> None:
    options = FusionOptions(normalization="best_lexical", vector_weight=0.6)
    fused = fuse([], [(make_memory("a"), 0.8)], options, 10)
    assert fused[0].score == pytest.approx(0.6 * 0.8)
    assert (fused[0].lexical_rank, fused[0].vector_rank) == (None, 1)


def test_floor_convex_fusion_maps_each_channel_from_its_worst_candidate(
    make_memory: MemoryFactory,
) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    options = FusionOptions(
        normalization="floor",
        lexical_weight=0.5,
        vector_weight=0.5,
        lexical_minimum_spread=0.0,
        vector_minimum_spread=0.0,
    )
    # Plain min–max: lexical 10..2 and cosine 0.9..0.3 both map onto 1..0.
    fused = fuse([(a, 10.0), (b, 4.0), (c, 2.0)], [(c, 0.9), (b, 0.5), (a, 0.3)], options, 10)
    scores = {candidate.memory.memory_id: candidate.score for candidate in fused}
    assert scores["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.0)
    assert scores["b"] == pytest.approx(0.5 * 0.25 + 0.5 * (0.2 / 0.6))
    assert scores["c"] == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)


def test_floor_convex_fusion_does_not_stretch_a_channel_that_barely_separates_candidates(
    make_memory: MemoryFactory,
) -> None:
    a, b = make_memory("a"), make_memory("b")
    options = FusionOptions(
        normalization="floor",
        lexical_weight=0.5,
        vector_weight=0.5,
        lexical_minimum_spread=8.0,
        vector_minimum_spread=1.0,
    )
    # Spreads of 2.0 (BM25) and 0.1 (cosine) are divided by the minimum spreads instead.
    fused = fuse([(a, 3.0), (b, 1.0)], [(b, 0.6), (a, 0.5)], options, 10)
    scores = {candidate.memory.memory_id: candidate.score for candidate in fused}
    assert scores["a"] == pytest.approx(0.5 * 2.0 / 8.0)
    assert scores["b"] == pytest.approx(0.5 * 0.1 / 1.0)


def test_fusion_keeps_at_most_limit_candidates(make_memory: MemoryFactory) -> None:
    memories = [(make_memory(f"m{i}"), float(10 - i)) for i in range(8)]
    assert ids(fuse(memories, [], RRF, 3)) == ["m0", "m1", "m2"]
    assert fuse(memories, [], RRF, 0) == []


def test_a_memory_arriving_with_two_different_contents_is_refused(
    make_memory: MemoryFactory,
) -> None:
    lexical: GameMemory = make_memory("same", text="one content")
    vector: GameMemory = make_memory("same", text="another content")
    with pytest.raises(DerivedIndexError, match="two different contents"):
        fuse([(lexical, 1.0)], [(vector, 0.9)], RRF, 10)


def test_an_equal_copy_from_the_other_channel_is_merged_keeping_the_lexical_instance(
    make_memory: MemoryFactory,
) -> None:
    lexical, copy = make_memory("same"), make_memory("same")
    fused = fuse([(lexical, 1.0)], [(copy, 0.9)], RRF, 10)
    assert len(fused) == 1 and fused[0].memory is lexical


@pytest.mark.parametrize("field", ["lexical_weight", "vector_weight"])
def test_negative_weights_are_refused(field: str) -> None:
    with pytest.raises(ValueError):
        FusionOptions(**{field: -0.1})  # type: ignore[arg-type]
