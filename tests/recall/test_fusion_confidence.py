"""The ``"confidence"`` normalization (the default): min–max weighted by each channel's
confidence, never degenerate on small candidate lists (issue 11)."""

from __future__ import annotations

import pytest

from game_memory import FusionOptions
from game_memory.recall.fusion import fuse
from support.vectors import MemoryFactory

#: The library's defaults.
OPTIONS = FusionOptions()

#: The gap floor and the vector confidence in standard deviations, with round numbers for
#: readable arithmetic and no floor shrink (the defaults are in test_fusion_defaults; the
#: contrast and the shrink are tested below with the defaults themselves).
DEFAULT = FusionOptions(
    lexical_weight=0.5,
    vector_weight=0.5,
    lexical_confidence=8.0,
    vector_confidence_by="standing",
    vector_confidence=4.0,
    floor_candidates=1,
)


def _scores(fused: list) -> dict[str, float]:  # type: ignore[type-arg]
    return {c.memory.memory_id: c.score for c in fused}


def test_two_nearly_equal_candidates_stay_nearly_equal(make_memory: MemoryFactory) -> None:
    # The bridge: cosines 0.875 and 0.823. Plain min–max gives 1 and 0; here the
    # floor lies the minimum gap (0.2) below the best, so the weaker keeps 0.74.
    old, new = make_memory("old"), make_memory("new")
    fused = fuse([], [(old, 0.875), (new, 0.823)], DEFAULT, 10)
    scores = _scores(fused)
    assert scores["old"] == pytest.approx(0.5 * 1.0)
    assert scores["new"] == pytest.approx(0.5 * (0.823 - 0.675) / 0.2)
    relevance = {c.memory.memory_id: c.relevance for c in fused}
    # Relevance: a fraction of the best the fusion can give with the vector channel alone.
    assert relevance["old"] - relevance["new"] == pytest.approx(0.052 / 0.2)


def test_the_last_of_five_keeps_a_score_while_within_the_gap(
    make_memory: MemoryFactory,
) -> None:
    # An NPC with five memories, all close to the question: none is scored 0.
    memories = [make_memory(f"m{i}") for i in range(5)]
    cosines = [0.80, 0.79, 0.78, 0.77, 0.76]
    fused = fuse([], list(zip(memories, cosines, strict=True)), DEFAULT, 10)
    assert min(c.score for c in fused) > 0.0
    last = next(c for c in fused if c.memory.memory_id == "m4")
    # Five values 0.01 apart: z = (0.80 − 0.78) / std = 1.414; among five candidates the
    # most z can be is sqrt(4) = 2, so the confidence is 1.414 / 2.
    confidence = (0.02 / (0.0002**0.5)) / 2.0
    assert last.score == pytest.approx(0.5 * confidence * (0.76 - 0.60) / 0.2)


def test_a_far_candidate_scores_zero(make_memory: MemoryFactory) -> None:
    a, b = make_memory("a"), make_memory("b")
    scores = _scores(fuse([], [(a, 0.9), (b, 0.3)], DEFAULT, 10))
    assert scores == {"a": pytest.approx(0.5), "b": pytest.approx(0.0)}


def test_a_lone_candidate_reflects_its_own_similarity(make_memory: MemoryFactory) -> None:
    (weak,) = fuse([], [(make_memory("a"), 0.3)], DEFAULT, 10)
    (strong,) = fuse([], [(make_memory("b"), 0.9)], DEFAULT, 10)
    assert weak.score == pytest.approx(0.5 * 0.3)
    assert strong.score == pytest.approx(0.5 * 0.9)
    (lexical,) = fuse([(make_memory("c"), 4.0)], [], DEFAULT, 10)
    # BM25 4 over max(4, lexical_scale 8), weighted by the confidence 4 / (4 + 8).
    assert lexical.score == pytest.approx(0.5 * (4.0 / 12.0) * (4.0 / 8.0))


def test_a_weak_lexical_match_counts_little(make_memory: MemoryFactory) -> None:
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    vector = [(b, 0.62), (a, 0.40), (c, 0.20)]
    weak = _scores(fuse([(a, 0.8), (b, 0.2)], vector, DEFAULT, 10))
    strong = _scores(fuse([(a, 24.0), (b, 6.0)], vector, DEFAULT, 10))
    assert weak["b"] > weak["a"]  # 0.8 / (0.8 + 8): the lexical channel says little
    assert strong["a"] > strong["b"]  # 24 / (24 + 8): it says a lot


def test_a_flat_cosine_list_counts_little(make_memory: MemoryFactory) -> None:
    # Every cosine near 0.7 but one a hair higher: min–max alone would give it full weight.
    memories = [make_memory(f"m{i}") for i in range(8)]
    flat = [0.701, 0.700, 0.700, 0.700, 0.699, 0.699, 0.699, 0.699]
    lexical = [(memories[5], 9.0)]
    fused = fuse(lexical, list(zip(memories, flat, strict=True)), DEFAULT, 10)
    assert fused[0].memory.memory_id == "m5"
    # A clear vector winner (standing 3+ deviations out) beats the same lexical match.
    clear = [0.90, 0.40, 0.40, 0.40, 0.38, 0.38, 0.38, 0.38]
    fused = fuse(lexical, list(zip(memories, clear, strict=True)), DEFAULT, 10)
    assert fused[0].memory.memory_id == "m0"


def test_scores_do_not_depend_on_candidates_the_list_does_not_reach(
    make_memory: MemoryFactory,
) -> None:
    # Relevance is a fraction of the best the fusion could give (the weights' sum).
    a = make_memory("a")
    (hit,) = fuse([(a, 16.0)], [(a, 0.8)], DEFAULT, 10)
    assert hit.relevance == pytest.approx(hit.score / 1.0)
    assert 0.0 < hit.relevance <= 1.0


def test_every_score_is_in_range_and_the_order_is_by_score(make_memory: MemoryFactory) -> None:
    memories = [make_memory(f"m{i}") for i in range(6)]
    lexical = [(memories[i], s) for i, s in ((0, 12.0), (2, 7.0), (4, 0.5))]
    vector = [(memories[i], s) for i, s in ((1, 0.9), (2, 0.85), (3, 0.2), (5, -0.1))]
    fused = fuse(lexical, vector, DEFAULT, 10)
    assert all(0.0 <= c.relevance <= 1.0 for c in fused)
    assert [c.score for c in fused] == sorted((c.score for c in fused), reverse=True)


def test_a_clear_answer_among_three_memories_counts_fully(make_memory: MemoryFactory) -> None:
    # Among three candidates the best stands at most sqrt(2) deviations out: that is a
    # clear answer, and the vector channel keeps its whole weight (as among three hundred).
    answer, fresh, other = make_memory("answer"), make_memory("fresh"), make_memory("other")
    fused = fuse([], [(answer, 0.773), (other, 0.1), (fresh, 0.1)], DEFAULT, 10)
    assert fused[0].memory.memory_id == "answer"
    assert fused[0].relevance == pytest.approx(1.0)


def test_few_candidates_move_the_floor_toward_zero(make_memory: MemoryFactory) -> None:
    # The library's defaults: with fewer than floor_candidates (16) candidates the lowest
    # says little about where irrelevance lies. Of two, the floor (0.875 − 0.2) shrinks by
    # (2 − 1) / (16 − 1): the weaker keeps a score near its own similarity.
    old, new = make_memory("old"), make_memory("new")
    fused = {c.memory.memory_id: c for c in fuse([], [(old, 0.875), (new, 0.823)], OPTIONS, 10)}
    floor = 0.675 / 15
    weight = OPTIONS.vector_weight
    assert fused["old"].score == pytest.approx(weight)
    assert fused["new"].score == pytest.approx(weight * (0.823 - floor) / (0.875 - floor))
    # The last of an NPC's five memories, far below the best, still reflects its cosine.
    memories = [make_memory(f"m{i}") for i in range(5)]
    cosines = [0.9, 0.35, 0.3, 0.3, 0.3]
    last = fuse([], list(zip(memories, cosines, strict=True)), OPTIONS, 10)[-1]
    assert last.score > 0.0
    # With 16 candidates or more the lowest is the floor (min–max), as before.
    many = [make_memory(f"n{i}") for i in range(16)]
    spread = [0.9, *([0.3] * 15)]
    assert fuse([], list(zip(many, spread, strict=True)), OPTIONS, 20)[-1].score == 0.0


def test_the_vector_confidence_is_the_contrast_of_the_best_over_the_mean(
    make_memory: MemoryFactory,
) -> None:
    # A model that finds every text alike (MiniLM on Portuguese or CJK): mean 0.7, best 0.8,
    # contrast 0.14, so the vector channel counts 0.14 / vector_confidence of its weight;
    # on text it knows (mean 0.25, best 0.55) the contrast is 1.2: full weight.
    memories = [make_memory(f"m{i}") for i in range(5)]
    alike = [0.80, 0.675, 0.675, 0.675, 0.675]  # mean 0.7
    known = [0.55, 0.175, 0.175, 0.175, 0.175]  # mean 0.25
    (top_alike, *_) = fuse([], list(zip(memories, alike, strict=True)), OPTIONS, 10)
    (top_known, *_) = fuse([], list(zip(memories, known, strict=True)), OPTIONS, 10)
    weight, needed = OPTIONS.vector_weight, OPTIONS.vector_confidence
    assert needed <= 1.2
    assert top_alike.score == pytest.approx(weight * (0.1 / 0.7) / needed)
    assert top_known.score == pytest.approx(weight)
    # So a clear lexical winner outvotes the alike list, and not the known one.
    lexical = [(memories[3], 30.0)]
    assert (
        fuse(lexical, list(zip(memories, alike, strict=True)), OPTIONS, 10)[0].memory is memories[3]
    )
    assert (
        fuse(lexical, list(zip(memories, known, strict=True)), OPTIONS, 10)[0].memory is memories[0]
    )


def test_a_flat_lexical_list_counts_by_its_contrast(make_memory: MemoryFactory) -> None:
    # "are you a spy" when no memory mentions a spy: every candidate matches the common
    # words about equally (best 8.0, mean 7.0: contrast 1/7), so with lexical_contrast 1.0
    # the channel counts a seventh of what best / (best + 24) gives it; a question naming
    # what it asks about lifts one memory far above the rest (contrast ≥ 1): full weight.
    options = FusionOptions(
        lexical_weight=0.5, vector_weight=0.5, lexical_confidence=24.0, lexical_contrast=1.0
    )
    memories = [make_memory(f"m{i}") for i in range(5)]
    flat = [8.0, 6.75, 6.75, 6.75, 6.75]  # mean 7.0
    clear = [24.0, 4.0, 4.0, 4.0, 4.0]  # mean 8.0: contrast 2
    (top_flat, *_) = fuse(list(zip(memories, flat, strict=True)), [], options, 10)
    (top_clear, *_) = fuse(list(zip(memories, clear, strict=True)), [], options, 10)
    assert top_flat.score == pytest.approx(0.5 * 8.0 / (8.0 + 24.0) * (1.0 / 7.0))
    assert top_clear.score == pytest.approx(0.5 * 24.0 / (24.0 + 24.0))
    # Off (0, the default for other settings), the flat list keeps best / (best + 24).
    off = options.model_copy(update={"lexical_contrast": 0.0})
    (top_off, *_) = fuse(list(zip(memories, flat, strict=True)), [], off, 10)
    assert top_off.score == pytest.approx(0.5 * 8.0 / (8.0 + 24.0))
    # So a vector channel leaning (contrast 0.11) toward another memory outvotes the flat
    # list, not the clear one.
    vector = [(memories[4], 0.5), (memories[1], 0.45), (memories[2], 0.45), (memories[3], 0.4)]
    fused_flat = fuse(list(zip(memories, flat, strict=True)), vector, options, 10)
    fused_clear = fuse(list(zip(memories, clear, strict=True)), vector, options, 10)
    assert fused_flat[0].memory is memories[4]
    assert fused_clear[0].memory is memories[0]


def test_the_lexical_contrast_needs_three_candidates(make_memory: MemoryFactory) -> None:
    # Two candidates say nothing about how flat the list is: the contrast does not apply.
    options = FusionOptions(
        lexical_weight=0.5, vector_weight=0.5, lexical_confidence=24.0, lexical_contrast=1.0
    )
    a, b = make_memory("a"), make_memory("b")
    (top, *_) = fuse([(a, 8.0), (b, 7.9)], [], options, 10)
    assert top.score == pytest.approx(0.5 * 8.0 / (8.0 + 24.0))
