"""GameAwareMemoryReranker: relevance, importance, recency in game ticks, diversity."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import game_memory.recall.reranker as reranker_module
from game_memory import (
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMoment,
)
from game_memory.recall.fusion import FusedCandidate
from support.vectors import MemoryFactory, query


def candidate(
    memory: GameMemory, score: float = 1.0, relevance: float | None = None
) -> FusedCandidate:
    """A fused candidate whose relevance (absolute) is its score unless given."""
    return FusedCandidate(
        memory, score, 1, None, score, None, score if relevance is None else relevance
    )


def only(**weights: float) -> GameAwareMemoryReranker:
    """A reranker with every weight 0 (and no supersession) except those given."""
    values: dict[str, float] = {
        "relevance_weight": 0.0,
        "importance_weight": 0.0,
        "recency_weight": 0.0,
        "diversity_penalty": 0.0,
        "supersession_penalty": 0.0,
    }
    values.update(weights)
    return GameAwareMemoryReranker(
        GameAwareMemoryRerankerOptions(**values, supersession_inherits=False)
    )


def at(tick: int, timeline: str = "world") -> GameMoment:
    return GameMoment(timeline_id=timeline, tick=tick)


def ids(ranked: list[FusedCandidate]) -> list[str]:
    return [c.memory.memory_id for c in ranked]


@contextmanager
def wall_clock_forbidden(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def forbidden(*_: object) -> float:
        raise AssertionError("the reranker read the wall clock")

    with monkeypatch.context() as patch:
        for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter"):
            patch.setattr(time, name, forbidden)
        yield


@pytest.mark.parametrize(
    ("age", "expected"), [(0, 1.0), (100, 0.5), (200, 0.25), (50, math.sqrt(0.5))]
)
def test_recency_halves_every_half_life_measured_in_ticks_before_at_or_before(
    make_memory: MemoryFactory, age: int, expected: float
) -> None:
    reranker = GameAwareMemoryReranker(GameAwareMemoryRerankerOptions(recency_half_life_ticks=100))
    memory = make_memory(tick=1_000 - age)
    assert reranker.recency(query(at_or_before=at(1_000)), candidate(memory)) == pytest.approx(
        expected
    )


def test_there_is_no_recency_without_at_or_before(make_memory: MemoryFactory) -> None:
    assert GameAwareMemoryReranker().recency(query(), candidate(make_memory(tick=5))) == 0.0


def test_there_is_no_recency_across_timelines(make_memory: MemoryFactory) -> None:
    memory = make_memory(tick=5, timeline_id="branch")
    assert GameAwareMemoryReranker().recency(query(at_or_before=at(9)), candidate(memory)) == 0.0


def test_a_memory_from_the_future_of_at_or_before_gets_no_recency(
    make_memory: MemoryFactory,
) -> None:
    memory = make_memory(tick=50)
    assert GameAwareMemoryReranker().recency(query(at_or_before=at(9)), candidate(memory)) == 0.0


def test_recent_memories_come_first_when_only_recency_counts(make_memory: MemoryFactory) -> None:
    # The reference's test: ticks 1 and 99, asked at tick 100.
    old, recent = make_memory("old", tick=1), make_memory("recent", tick=99)
    ranked = only(recency_weight=1.0).rank(
        query(at_or_before=at(100)), [candidate(old), candidate(recent)]
    )
    assert ids(ranked) == ["recent", "old"]


def test_without_at_or_before_recency_cannot_reorder_candidates(
    make_memory: MemoryFactory,
) -> None:
    old, recent = make_memory("old", tick=1), make_memory("recent", tick=99)
    ranked = only(recency_weight=1.0).rank(query(), [candidate(old), candidate(recent)])
    assert ids(ranked) == ["old", "recent"]


def test_recency_follows_the_game_clock_of_the_query_not_the_real_one(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    early, late = make_memory("early", tick=10), make_memory("late", tick=90)
    reranker = only(recency_weight=1.0)
    with wall_clock_forbidden(monkeypatch):
        asked_late = reranker.rank(query(at_or_before=at(100)), [candidate(early), candidate(late)])
        # After loading an earlier save, "late" is in the future and invisible; "early" is
        # now the recent one even though real time only moved forward.
        asked_early = reranker.rank(query(at_or_before=at(12)), [candidate(late), candidate(early)])
    assert ids(asked_late) == ["late", "early"]
    assert ids(asked_early) == ["early", "late"]


def test_the_reranker_module_does_not_import_a_clock() -> None:
    names = vars(reranker_module)
    assert "time" not in names and "datetime" not in names


def test_importance_lifts_what_the_game_marked_as_significant(make_memory: MemoryFactory) -> None:
    minor = make_memory("minor", importance=0.1)
    major = make_memory("major", importance=0.9)
    ranked = only(importance_weight=1.0).rank(query(), [candidate(minor), candidate(major)])
    assert ids(ranked) == ["major", "minor"]


def test_relative_relevance_is_the_fused_score_relative_to_the_best(
    make_memory: MemoryFactory,
) -> None:
    options = GameAwareMemoryRerankerOptions(
        relevance_weight=1.0,
        importance_weight=0.5,
        recency_weight=0.0,
        diversity_penalty=0.0,
        relevance="relative",
    )
    # b is far less relevant (0.2 of the best): importance 0.9 vs 0.1 adds only 0.4.
    a = candidate(make_memory("a", importance=0.1), 1.0)
    b = candidate(make_memory("b", importance=0.9), 0.2)
    assert ids(GameAwareMemoryReranker(options).rank(query(), [a, b])) == ["a", "b"]
    # ... but it overtakes a nearly as relevant one.
    close = candidate(make_memory("b", importance=0.9), 0.9)
    assert ids(GameAwareMemoryReranker(options).rank(query(), [a, close])) == ["b", "a"]


def test_diversity_penalty_moves_a_near_duplicate_below_a_different_memory(
    make_memory: MemoryFactory,
) -> None:
    first = make_memory("first", scope="tavern", kind="event", tags=("ale", "brawl"))
    twin = make_memory("twin", scope="tavern", kind="event", tags=("ale", "brawl"))
    other = make_memory("other", scope="forest", kind="fact", tags=("wolf",))
    candidates = [candidate(first, 1.0), candidate(twin, 0.99), candidate(other, 0.95)]
    without = only(relevance_weight=1.0).rank(query(), candidates)
    assert ids(without) == ["first", "twin", "other"]
    # twin shares 2 tags + scope + kind = 4 traits with first: 4 × 0.05 = 0.2 penalty.
    diverse = only(relevance_weight=1.0, diversity_penalty=0.05).rank(query(), candidates)
    assert ids(diverse) == ["first", "other", "twin"]


def test_diversity_counts_the_largest_overlap_with_any_memory_already_picked(
    make_memory: MemoryFactory,
) -> None:
    a = make_memory("a", scope="s1", kind="event", tags=("x",))
    b = make_memory("b", scope="s2", kind="fact", tags=("y",))
    c = make_memory("c", scope="s1", kind="fact", tags=("x", "y"))  # shares 2 with a, 2 with b
    d = make_memory("d", scope="s3", kind="goal", tags=("z",))  # shares nothing
    ranked = only(relevance_weight=1.0, diversity_penalty=0.1).rank(
        query(),
        [candidate(a, 1.0), candidate(b, 0.9), candidate(c, 0.85), candidate(d, 0.5)],
    )
    # c pays max(2, 2) × 0.1 = 0.2 (0.65 > d's 0.5); a sum would have cost it 0.4 (0.45).
    assert ids(ranked) == ["a", "b", "c", "d"]


def test_equal_scores_keep_the_fused_order(make_memory: MemoryFactory) -> None:
    candidates = [candidate(make_memory(f"m{i}"), 1.0) for i in range(5)]
    assert ids(only().rank(query(), candidates)) == ["m0", "m1", "m2", "m3", "m4"]


def test_candidates_past_the_greedy_limit_follow_in_fused_order(
    make_memory: MemoryFactory,
) -> None:
    options = GameAwareMemoryRerankerOptions(
        relevance_weight=0.0, importance_weight=1.0, recency_weight=0.0,
        diversity_penalty=0.0, maximum_greedy_selections=2,
    )  # fmt: skip
    candidates = [candidate(make_memory(f"m{i}", importance=i / 10)) for i in range(5)]
    ranked = GameAwareMemoryReranker(options).rank(query(), candidates)
    assert ids(ranked) == ["m4", "m3", "m0", "m1", "m2"]


def test_ranking_returns_a_permutation_of_its_input(make_memory: MemoryFactory) -> None:
    candidates = [
        candidate(make_memory(f"m{i}", importance=(i * 7 % 10) / 10, tick=i, tags=(f"t{i % 3}",)))
        for i in range(30)
    ]
    ranked = GameAwareMemoryReranker().rank(query(at_or_before=at(40)), candidates)
    assert sorted(map(id, ranked)) == sorted(map(id, candidates))
    assert GameAwareMemoryReranker().rank(query(), []) == []


def test_default_weights_are_the_documented_ones() -> None:
    options = GameAwareMemoryRerankerOptions()
    documented = " ".join((reranker_module.__doc__ or "").split())
    assert f"relevance {options.relevance_weight}" in documented
    assert f"importance {options.importance_weight}" in documented
    assert (
        f"recency {options.recency_weight} with a half-life of "
        f"{options.recency_half_life_ticks:,.0f} ticks" in documented
    )
    assert f"diversity {options.diversity_penalty}" in documented


@pytest.mark.parametrize(
    "field", ["relevance_weight", "importance_weight", "recency_weight", "diversity_penalty"]
)
@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_weights_must_be_finite_and_not_negative(field: str, value: float) -> None:
    with pytest.raises(ValueError):
        GameAwareMemoryRerankerOptions(**{field: value})  # type: ignore[arg-type]


def test_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError):
        GameAwareMemoryRerankerOptions(recency_half_life_ticks=0)
