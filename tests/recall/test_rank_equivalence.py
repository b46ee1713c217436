"""``GameAwareMemoryReranker.rank`` orders exactly as the implementation it replaced.

``rank_reference`` below is ``rank`` as it stood before its per-candidate work moved into
C-level iterators and float64 columns, kept verbatim (on ``_versions`` and the plain greedy
loop of ``test_reranker_greedy``, each pinned by its own equivalence tests). The tests
compare the two on seeded random candidates with tied scores, importances and ticks,
game time on and off, shared tags, scopes and kinds, versions with and without vectors, and
random weights: the same candidates in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from game_memory import (
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemoryQuery,
    GameMoment,
)
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.reranker import _versions
from recall.test_reranker_greedy import reference_order
from support.vectors import MemoryFactory


def rank_reference(
    reranker: GameAwareMemoryReranker,
    query: GameMemoryQuery,
    candidates: Sequence[FusedCandidate],
    versions: Callable[
        [Sequence[FusedCandidate], GameAwareMemoryRerankerOptions], list[tuple[int, int]]
    ] = _versions,
) -> list[FusedCandidate]:
    """``rank`` as it stood, with the pairs of versions ``versions`` finds."""
    if not candidates:
        return []
    options = reranker.options
    best = candidates[0].score
    relevance = [reranker.relevance(c, best) for c in candidates]
    superseded: set[int] = set()
    if options.supersession_penalty > 0 or options.supersession_inherits:
        for older, newer in versions(candidates, options):
            if options.supersession_inherits:
                relevance[newer] = max(relevance[newer], relevance[older])
            superseded.add(older)
    base = [
        options.relevance_weight * relevance[i]
        + options.importance_weight * c.memory.importance
        + options.recency_weight * reranker.recency(query, c)
        - (options.supersession_penalty if i in superseded else 0.0)
        for i, c in enumerate(candidates)
    ]
    traits = [(c.memory.scope, c.memory.kind, frozenset(c.memory.tags)) for c in candidates]
    rounds = min(len(candidates), options.maximum_greedy_selections)
    chosen = reference_order(traits, base, options.diversity_penalty, rounds)
    return [candidates[i] for i in chosen]


def _random_case(
    make_memory: MemoryFactory, rng: random.Random
) -> tuple[GameAwareMemoryReranker, GameMemoryQuery, list[FusedCandidate]]:
    count = rng.choice((0, 1, 2, 5, 32, 40))
    words = ["inn", "mira", "owns", "sold", "tavern", "bertram", "river", "storm"]
    candidates = []
    for index in range(count):
        memory = make_memory(
            f"m{index}",
            owner_id=rng.choice(("elda", "elda", "bram")),
            tick=rng.choice((1, 5, rng.randrange(3_000))),
            importance=rng.choice((0.5, 0.5, 0.0, rng.random())),
            text=" ".join(rng.sample(words, rng.randint(1, 5))),
            scope=rng.choice(("personal", "personal", "world")),
            tags=rng.sample(["quest", "rumour", "trade"], rng.choice((0, 0, 1, 2))),
            belief_key=rng.choice((None, None, None, "weather")),
        )
        score = rng.choice((1.0, 0.5, rng.random()))
        vector = None
        if rng.random() < 0.6:
            vector = np.array([rng.choice((1.0, 0.9)), rng.random(), 0.1], np.float32)
            vector /= np.linalg.norm(vector)
        candidates.append(FusedCandidate(memory, score, 1, None, score, None, score / 2, vector))
    candidates.sort(key=lambda candidate: -candidate.score)
    options = GameAwareMemoryRerankerOptions(
        relevance_weight=rng.choice((1.0, 0.3, 0.0)),
        importance_weight=rng.choice((0.1, 0.2, 0.0)),
        recency_weight=rng.choice((0.2, 0.0, 1e-16)),
        recency_half_life_ticks=rng.choice((1_440.0, 7.0)),
        diversity_penalty=rng.choice((0.05, 0.0, 0.3)),
        maximum_greedy_selections=rng.choice((512, 1, 3)),
        relevance=rng.choice(("relative", "absolute")),
        supersession_penalty=rng.choice((0.1, 0.0)),
        supersession_similarity=rng.choice((0.45, 0.2, 0.0)),
        supersession_standing=rng.choice((3.0, 0.0)),
        supersession_inherits=rng.choice((True, False)),
    )
    moment = rng.choice((None, GameMoment(timeline_id="world", tick=rng.randrange(3_000))))
    query = GameMemoryQuery(
        session_id="session", limit=8, text="who owns the inn", at_or_before=moment
    )
    return GameAwareMemoryReranker(options), query, candidates


@pytest.mark.parametrize("seed", range(300))
def test_rank_equals_the_reference(make_memory: MemoryFactory, seed: int) -> None:
    reranker, query, candidates = _random_case(make_memory, random.Random(seed))
    ranked = reranker.rank(query, candidates)
    expected = rank_reference(reranker, query, candidates)
    assert [id(candidate) for candidate in ranked] == [id(candidate) for candidate in expected]
