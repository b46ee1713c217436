"""The measured defaults of fusion and reranking (docs/retrieval.md), pinned.

These values were chosen by ``benchmarks/retrieval.py`` on real development sets; change
them only together with a new measurement and the tables in ``docs/retrieval.md``.
"""

from __future__ import annotations

import pytest

from game_memory import (
    FusionMode,
    FusionOptions,
    GameAwareMemoryRerankerOptions,
    VectorMemoryStoreOptions,
)
from game_memory.recall.fusion import fuse
from support.vectors import MemoryFactory

#: The earlier default ("floor", chosen on three sets; docs/retrieval.md), still a mode.
FLOOR = FusionOptions(normalization="floor", lexical_weight=0.25, vector_weight=0.75)


def test_fusion_defaults_are_the_cross_validated_confidence_combination() -> None:
    defaults = FusionOptions()
    assert defaults.model_dump() == {
        "mode": FusionMode.CONVEX,
        "lexical_weight": 0.4,
        "vector_weight": 0.6,
        "rrf_k": 60,
        "normalization": "confidence",
        "lexical_minimum_spread": 8.0,
        "vector_minimum_spread": 1.0,
        "lexical_scale": 8.0,
        "lexical_minimum_gap": 4.0,
        "vector_minimum_gap": 0.2,
        "lexical_confidence": 24.0,
        "lexical_contrast": 1.0,
        "vector_confidence": 1.0,
        "vector_confidence_by": "contrast",
        "floor_candidates": 16,
    }


def test_the_hybrid_store_fuses_with_the_measured_defaults() -> None:
    assert VectorMemoryStoreOptions().fusion == FusionOptions()


def test_reranker_defaults_are_the_measured_weights() -> None:
    assert GameAwareMemoryRerankerOptions().model_dump() == {
        "relevance_weight": 1.0,
        "importance_weight": 0.1,
        "recency_weight": 0.2,
        "recency_half_life_ticks": 1_440.0,
        "diversity_penalty": 0.05,
        "maximum_greedy_selections": 512,
        "relevance": "relative",
        "supersession_penalty": 0.1,
        "supersession_similarity": 0.40,
        "supersession_candidates": 32,
        "supersession_standing": 3.0,
        "supersession_inherits": True,
        "supersession_kinds": ["fact", "relationship", "goal", "reflection", "procedure"],
    }


def test_floor_a_flat_cosine_list_cannot_outvote_a_clear_lexical_winner(
    make_memory: MemoryFactory,
) -> None:
    # What MiniLM does on Portuguese text: every cosine near 0.7. The lexical spread (15)
    # exceeds the minimum spread, so lexical scores span [0, 1]; the cosines span 0.02 of
    # the full cosine range.
    a, b = make_memory("a"), make_memory("b")
    fused = fuse([(a, 20.0), (b, 5.0)], [(b, 0.72), (a, 0.70)], FLOOR, 10)
    scores = {c.memory.memory_id: c.score for c in fused}
    assert scores == {
        "a": pytest.approx(0.25 * 1.0 + 0.75 * 0.0),
        "b": pytest.approx(0.25 * 0.0 + 0.75 * 0.02),
    }
    assert [c.memory.memory_id for c in fused] == ["a", "b"]


def test_floor_weak_lexical_evidence_is_not_stretched_to_full_weight(
    make_memory: MemoryFactory,
) -> None:
    # A match on common words only: a BM25 spread of 0.6, well under the minimum of 8.
    a, b, c = make_memory("a"), make_memory("b"), make_memory("c")
    lexical = [(a, 1.1), (b, 0.5)]
    vector = [(b, 0.45), (a, 0.42), (c, 0.25)]
    fused = fuse(lexical, vector, FLOOR, 10)
    scores = {candidate.memory.memory_id: candidate.score for candidate in fused}
    assert scores["a"] == pytest.approx(0.25 * 0.6 / 8.0 + 0.75 * 0.17)
    assert scores["b"] == pytest.approx(0.75 * 0.20)
    assert scores["c"] == pytest.approx(0.0)
    assert [candidate.memory.memory_id for candidate in fused] == ["b", "a", "c"]
    # Plain min-max stretches both spreads to [0, 1] and lets the weak match win.
    plain = FLOOR.model_copy(update={"lexical_minimum_spread": 0.0, "vector_minimum_spread": 0.0})
    stretched = fuse(lexical, vector, plain, 10)
    assert [candidate.memory.memory_id for candidate in stretched] == ["a", "b", "c"]


def test_floor_a_lone_candidate_is_measured_from_zero(make_memory: MemoryFactory) -> None:
    (hit,) = fuse([(make_memory("a"), 4.0)], [], FLOOR, 10)
    assert hit.score == pytest.approx(0.25 * 4.0 / 8.0)
    (hit,) = fuse([], [(make_memory("b"), 0.8)], FLOOR, 10)
    assert hit.score == pytest.approx(0.75 * 0.8)
