"""``rank``, ``_versions`` and ``greedy_order`` give exactly what they gave at 040bcd1.

Since then the reranker reads each memory's fields from its instance dictionary, computes
its terms in one pass each, orders one trait set with one sort, and finds implicit versions
in ``recall/versions.py`` (Python ints for one owner and timeline, a sort-based bound on the
word overlaps, exact overlaps only for memories that may reach the similarity). The code
it replaced is kept verbatim in ``reranker_040bcd1.py``; these tests compare the two on
seeded random candidates: 0 to 64 of them, with and without vectors (float32 and float64),
belief keys, several owners and timelines, tied ticks, scores and importances, texts
without words, near-duplicate texts and vectors, tags given in different orders, game time
on, off, on another timeline and before every memory, random weights and thresholds,
and a subclass or an instance that replaces ``relevance`` or ``recency``.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import (
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
)
from game_memory.recall import reranker
from game_memory.recall.fusion import FusedCandidate
from recall import reranker_040bcd1 as before
from recall.test_reranker_greedy import random_case, reference_order
from support.vectors import MemoryFactory

#: A small vocabulary, so that texts share words and overlaps meet thresholds exactly.
WORDS = ("inn", "mira", "owns", "sold", "tavern", "bertram", "river", "storm", "bridge", "ford")


def _unit(raw: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return (raw / np.linalg.norm(raw)).astype(np.float32)


def _text(rng: random.Random, shared: list[str]) -> str | None:
    roll = rng.random()
    if roll < 0.05:
        return None  # the payload "{}": no words
    if roll < 0.35:
        return rng.choice(shared)  # a duplicate of another text
    if roll < 0.5:
        # A near duplicate: one shared text with a word more.
        return f"{rng.choice(shared)} {rng.choice(WORDS)}"
    if roll < 0.6:
        return " ".join(f"w{rng.randrange(500)}" for _ in range(rng.randint(8, 14)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 7)))


def random_candidates(
    make_memory: MemoryFactory, rng: random.Random, count: int
) -> list[FusedCandidate]:
    """Candidates sorted by score (best first), as fusion gives them."""
    generator = np.random.default_rng(rng.randrange(2**32))
    dimensions = rng.choice((3, 8, 384))
    bases = generator.standard_normal((rng.randint(1, 3), dimensions))
    owners = ("elda", "bram", "\U0001f409wyrm")[: rng.choice((1, 1, 2, 3))]
    timelines = ("world", "dream")[: rng.choice((1, 1, 2))]
    shared = [" ".join(rng.sample(WORDS, rng.randint(2, 6))) for _ in range(4)]
    vector_share = rng.choice((0.0, 0.5, 0.5, 1.0))
    belief_share = rng.choice((0.0, 0.0, 0.2))
    tick_range = rng.choice((1, 4, 50, 3_000))
    tag_sets = [(), (), ("quest",), ("quest", "trade"), ("trade", "quest"), ("rumour",)]
    one_trait_set = rng.random() < 0.5
    vectors: list[Any] = []
    candidates = []
    for index in range(count):
        memory = make_memory(
            f"m{index}",
            owner_id=rng.choice(owners),
            timeline_id=rng.choice(timelines),
            tick=rng.randint(0, tick_range),
            text=_text(rng, shared),
            importance=rng.choice((0.5, 0.5, 0.0, 1.0, rng.random())),
            scope="personal" if one_trait_set else rng.choice(("personal", "world")),
            kind="fact" if one_trait_set else rng.choice(("fact", "event")),
            tags=() if one_trait_set else rng.choice(tag_sets),
            belief_key="bridge.eastmarch" if rng.random() < belief_share else None,
        )
        vector = None
        if rng.random() < vector_share:
            if vectors and rng.random() < 0.15:
                vector = rng.choice(vectors)  # the same vector twice: cosine ties
            else:
                noise = rng.choice((0.02, 0.3, 1.5))
                raw = bases[rng.randrange(len(bases))] + noise * generator.standard_normal(
                    dimensions
                )
                vector = _unit(raw) if rng.random() < 0.9 else raw / np.linalg.norm(raw)
            vectors.append(vector)
        score = rng.choice((1.0, 0.5, 0.25, rng.random(), 0.0))
        relevance = rng.choice((score, 1.0, rng.random()))
        candidates.append(FusedCandidate(memory, score, 1, None, score, None, relevance, vector))
    candidates.sort(key=lambda candidate: -candidate.score)
    return candidates


def random_options(
    rng: random.Random, candidates: list[FusedCandidate]
) -> GameAwareMemoryRerankerOptions:
    similarity = rng.choice((0.0, 0.2, 0.25, 1 / 3, 0.45, 0.5, 2 / 3, 1.0))
    with_vectors = [c.vector for c in candidates if c.vector is not None]
    if len(with_vectors) > 1 and rng.random() < 0.2:
        # A threshold one pair's cosine meets exactly (as the float64 of its float32 dot).
        stacked = np.array(with_vectors, np.float32)
        gram = (stacked @ stacked.T).astype(np.float64)
        a, b = rng.sample(range(len(with_vectors)), 2)
        similarity = min(max(float(gram[a, b]), 0.0), 1.0)
    return GameAwareMemoryRerankerOptions(
        relevance_weight=rng.choice((1.0, 0.3, 0.0)),
        importance_weight=rng.choice((0.1, 0.2, 0.0)),
        recency_weight=rng.choice((0.2, 0.0, 1e-16)),
        recency_half_life_ticks=rng.choice((1_440.0, 7.0)),
        diversity_penalty=rng.choice((0.05, 0.0, 0.3, 1e-17)),
        maximum_greedy_selections=rng.choice((512, 1, 2, 3)),
        relevance=rng.choice(("relative", "relative", "absolute")),
        supersession_penalty=rng.choice((0.1, 0.1, 0.0)),
        supersession_similarity=similarity,
        supersession_candidates=rng.choice((2, 5, 32, 32, 512)),
        supersession_standing=rng.choice((3.0, 3.0, 0.0, 0.5, 100.0)),
        supersession_inherits=rng.choice((True, True, False)),
        # 040bcd1 took any kind for an older version; its copy is compared with that.
        supersession_kinds=frozenset(GameMemoryKind),
    )


def random_query(rng: random.Random) -> GameMemoryQuery:
    moment = rng.choice(
        (
            None,
            GameMoment(timeline_id="world", tick=rng.randrange(3_100)),
            GameMoment(timeline_id="world", tick=-1),  # before every memory
            GameMoment(timeline_id="dream", tick=rng.randrange(3_100)),
            GameMoment(timeline_id="elsewhere", tick=10),
        )
    )
    return GameMemoryQuery(
        session_id="session", limit=8, text="who owns the inn", at_or_before=moment
    )


COUNTS = (0, 1, 2, 3, 5, 32, 33, 64)


def _ids(ranked: list[FusedCandidate]) -> list[int]:
    return [id(candidate) for candidate in ranked]


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("seed", range(40))
def test_rank_equals_040bcd1(make_memory: MemoryFactory, count: int, seed: int) -> None:
    rng = random.Random(f"rank/{count}/{seed}")
    candidates = random_candidates(make_memory, rng, count)
    options = random_options(rng, candidates)
    query = random_query(rng)
    ranked = GameAwareMemoryReranker(options).rank(query, candidates)
    expected = before.GameAwareMemoryReranker(options).rank(query, candidates)
    assert _ids(ranked) == _ids(expected)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("seed", range(40))
def test_versions_equal_040bcd1(make_memory: MemoryFactory, count: int, seed: int) -> None:
    rng = random.Random(f"versions/{count}/{seed}")
    candidates = random_candidates(make_memory, rng, count)
    options = random_options(rng, candidates)
    assert reranker._versions(candidates, options) == before._versions(candidates, options)


@pytest.mark.parametrize("seed", range(30))
def test_versions_of_near_duplicates_equal_040bcd1(make_memory: MemoryFactory, seed: int) -> None:
    """One owner and timeline, texts from five words: most memories may reach the
    similarity by words, so the exact overlaps of many of them are compared."""
    rng = random.Random(seed)
    generator = np.random.default_rng(seed)
    base = generator.standard_normal(8)
    candidates = []
    for index in range(rng.choice((2, 3, 12, 32, 40))):
        memory = make_memory(
            f"m{index}",
            tick=rng.randint(0, 6),
            text=" ".join(rng.sample(WORDS[:5], rng.randint(1, 5))) if index % 9 else None,
        )
        vector = _unit(base + 0.1 * generator.standard_normal(8)) if rng.random() < 0.4 else None
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    for similarity in (0.0, 0.2, 0.5, 0.6, 0.75, 0.8, 1.0):
        for standing in (0.0, 1.0, 3.0):
            options = GameAwareMemoryRerankerOptions(
                supersession_similarity=similarity, supersession_standing=standing
            )
            assert reranker._versions(candidates, options) == before._versions(candidates, options)


@pytest.mark.parametrize("seed", range(30))
def test_one_tick_or_one_vector_equals_040bcd1(make_memory: MemoryFactory, seed: int) -> None:
    """The shortcuts of one owner and timeline: every tick equal, the memories without a
    vector all of one tick (a memory with a vector of that tick pairs with none of them),
    and at most one vector."""
    rng = random.Random(seed)
    generator = np.random.default_rng(seed)
    candidates = []
    plain_tick = rng.randint(0, 3)
    for index in range(rng.choice((2, 5, 16, 32))):
        has_vector = rng.random() < (0.5 if seed % 3 else 0.05)
        tick = rng.randint(0, 3) if has_vector or seed % 2 else plain_tick
        memory = make_memory(
            f"m{index}", tick=tick, text=" ".join(rng.sample(WORDS[:4], rng.randint(1, 4)))
        )
        vector = _unit(generator.standard_normal(4)) if has_vector else None
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    for similarity in (0.0, 0.25, 0.5, 1.0):
        options = GameAwareMemoryRerankerOptions(supersession_similarity=similarity)
        assert reranker._versions(candidates, options) == before._versions(candidates, options)


class _OwnTerms(GameAwareMemoryReranker):
    """Replaces both terms; ``rank`` must call them per candidate as before."""

    def recency(self, query: GameMemoryQuery, candidate: FusedCandidate) -> float:
        return np.float32(candidate.memory.moment.tick % 7 / 7)  # type: ignore[return-value]

    def relevance(self, candidate: FusedCandidate, best: float) -> float:
        return np.float32(candidate.score / 3)  # type: ignore[return-value]


class _OwnTermsBefore(before.GameAwareMemoryReranker):
    recency = _OwnTerms.recency  # type: ignore[assignment]
    relevance = _OwnTerms.relevance  # type: ignore[assignment]


@pytest.mark.parametrize("seed", range(30))
def test_replaced_terms_are_called_as_before(make_memory: MemoryFactory, seed: int) -> None:
    rng = random.Random(f"terms/{seed}")
    candidates = random_candidates(make_memory, rng, rng.choice((1, 5, 32)))
    options = random_options(rng, candidates)
    query = random_query(rng)
    expected = _OwnTermsBefore(options).rank(query, candidates)
    assert _ids(_OwnTerms(options).rank(query, candidates)) == _ids(expected)
    # Replaced on the instance instead: called as well.
    instance = GameAwareMemoryReranker(options)
    instance.recency = lambda q, c: c.memory.importance / 3  # type: ignore[method-assign]
    old = before.GameAwareMemoryReranker(options)
    old.recency = instance.recency  # type: ignore[method-assign]
    assert _ids(instance.rank(query, candidates)) == _ids(old.rank(query, candidates))


@pytest.mark.parametrize("seed", range(40))
def test_greedy_order_equals_040bcd1(seed: int) -> None:
    rng = random.Random(5_000 + seed)
    for _ in range(50):
        traits, base, penalty, rounds = random_case(rng)
        if seed % 2:  # one trait set: the one-sort pass
            traits = [traits[0]] * len(traits) if traits else traits
        rounds = rng.choice((rounds, 0, 1, 2, len(traits) + 3))
        expected = before.greedy_order(traits, base, penalty, rounds)
        assert reranker.greedy_order(traits, base, penalty, rounds) == expected
        if rounds >= 0:
            assert expected == reference_order(traits, base, penalty, min(rounds, len(traits)))


def test_one_sort_keeps_merged_ties_in_index_order() -> None:
    # After the first pick every value is lowered by 4.0: 1 + 2**-52 - 4 rounds to -3.0 =
    # 1 - 4, so the lower index comes first although its base is lower.
    base = [5.0, 1.0 + 2**-52, 1.0, 1.0 + 2**-52, -0.0, 0.0]
    trait: reranker.Traits = ("personal", "event", frozenset())
    assert 1.0 + 2**-52 - 4.0 == 1.0 - 4.0
    for rounds in range(8):
        expected = before.greedy_order([trait] * 6, base, 2.0, rounds)
        assert reranker._one_group_order(base, 4.0, rounds) == expected
        assert reranker.greedy_order([trait] * 6, base, 2.0, rounds) == expected
    # Lowered by 4.0, 1 + 2**-52 and 1 merge; not lowered, they do not (−0.0 and 0.0 tie).
    assert reranker._one_group_order(base, 4.0, 6) == [0, 1, 2, 3, 4, 5]
    assert reranker._one_group_order(base, 0.0, 6) == [0, 1, 3, 2, 4, 5]


def test_a_memory_keeps_its_fields_in_its_instance_dictionary(make_memory: MemoryFactory) -> None:
    """The reranker reads fields from ``vars(memory)`` and ``vars(memory.moment)``."""
    memory: GameMemory = make_memory("m", tick=4, text="the inn", tags=("quest",))
    for name in type(memory).model_fields:
        assert vars(memory)[name] is getattr(memory, name)
    for name in type(memory.moment).model_fields:
        assert vars(memory.moment)[name] is getattr(memory.moment, name)


@pytest.mark.parametrize("seed", range(4))
def test_versions_of_long_texts_equal_040bcd1(make_memory: MemoryFactory, seed: int) -> None:
    """Hundreds of words a memory, most of them shared: the exact overlaps of many long
    texts (their incidence has a column per repeated word only)."""
    rng = random.Random(seed)
    vocabulary = [f"w{index}" for index in range(1_500)]
    candidates = []
    for index in range(40):
        text = " ".join(rng.sample(vocabulary, rng.randint(300, 900)))
        memory = make_memory(f"m{index}", tick=rng.randint(0, 30), text=text)
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, None))
    for similarity in (0.1, 0.2, 0.3, 0.45):
        options = GameAwareMemoryRerankerOptions(
            supersession_similarity=similarity, supersession_candidates=40
        )
        assert reranker._versions(candidates, options) == before._versions(candidates, options)
