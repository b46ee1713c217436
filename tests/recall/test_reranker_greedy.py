"""The reranker's greedy diversity pass (grouped by traits, or lazy over a heap) picks exactly
what the plain loop picks: the loop it replaced is kept here as the reference, and all run
on random data with exact ties, ties made by float rounding, shared tags, scopes and kinds."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from game_memory.recall import reranker
from game_memory.recall.reranker import Traits, greedy_order


def reference_order(
    traits: Sequence[Traits], base: Sequence[float], penalty: float, rounds: int
) -> list[int]:
    """The greedy pass as written before (every remaining candidate against every pick)."""
    remaining = list(range(len(traits)))
    overlap = [0] * len(traits)
    chosen: list[int] = []
    for _ in range(rounds):
        winner = max(remaining, key=lambda i: (base[i] - penalty * overlap[i], -i))
        remaining.remove(winner)
        chosen.append(winner)
        scope, kind, tags = traits[winner]
        picked_tags = set(tags)
        for i in remaining:
            shared = len(picked_tags.intersection(traits[i][2]))
            shared += (traits[i][0] == scope) + (traits[i][1] == kind)
            overlap[i] = max(overlap[i], shared)
    chosen.extend(remaining)
    return chosen


def random_case(rng: random.Random) -> tuple[list[Traits], list[float], float, int]:
    count = rng.randint(0, 70)
    tags = ["a", "b", "c", "d"]
    traits: list[Traits] = [
        (
            rng.choice(["personal", "world"]),
            rng.choice(["event", "fact", "belief"]),
            frozenset(rng.sample(tags, rng.randint(0, rng.choice([0, 1, 3])))),
        )
        for _ in range(count)
    ]
    levels = [rng.random() for _ in range(rng.randint(1, 6))]
    base = [
        # exact ties (few levels), near ties that one subtraction may merge, or free values
        rng.choice(levels)
        if rng.random() < 0.5
        else rng.choice(levels) + rng.choice([0.0, 1e-17, 2e-16, 5e-17])
        if rng.random() < 0.5
        else rng.uniform(0.0, 1.4)
        for _ in range(count)
    ]
    penalty = rng.choice([0.0, 0.05, 0.1, 0.3, 1e-16, 7.0])
    rounds = min(count, rng.choice([count, 1, 3, 512]))
    return traits, base, penalty, rounds


@pytest.mark.parametrize("seed", range(40))
def test_both_greedy_passes_equal_the_plain_loop(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        traits, base, penalty, rounds = random_case(rng)
        expected = reference_order(traits, base, penalty, rounds)
        assert greedy_order(traits, base, penalty, rounds) == expected
        assert reranker._lazy_order(traits, base, penalty, rounds) == expected
        grouped: dict[Traits, list[int]] = {}
        for index, trait in enumerate(traits):
            grouped.setdefault(trait, []).append(index)
        assert reranker._grouped_order(grouped, base, penalty, rounds) == expected


def test_a_tie_merged_by_rounding_goes_to_the_lower_index() -> None:
    # After the first pick both others share scope and kind with it (overlap 2, minus 4.0):
    # 1 + 2**-52 - 4 rounds to -3.0 = 1 - 4, so the lower index wins although its base is
    # lower, as in the plain loop.
    traits: list[Traits] = [("personal", "event", frozenset())] * 3
    base = [5.0, 1.0, 1.0 + 2**-52]
    assert 1.0 + 2**-52 - 4.0 == 1.0 - 4.0
    for order in (greedy_order, reranker._lazy_order):
        assert order(traits, base, 2.0, 3) == [0, 1, 2] == reference_order(traits, base, 2.0, 3)
        assert order(traits, base, 0.0, 3) == [0, 2, 1] == reference_order(traits, base, 0.0, 3)


@pytest.mark.parametrize("seed", range(40))
def test_the_grouped_pass_finishing_its_last_group_at_once_equals_the_plain_loop(
    seed: int,
) -> None:
    """One or two trait sets (an NPC's memories of one scope and kind, with or without a
    tag): once the last group with candidates was picked from, its picks are one sort."""
    rng = random.Random(1_000 + seed)
    for _ in range(50):
        traits, base, penalty, rounds = random_case(rng)
        choices: list[Traits] = [("personal", "event", frozenset())]
        if seed % 2:
            choices.append(("personal", "event", frozenset({"a"})))
        traits = [rng.choice(choices) for _ in traits]
        expected = reference_order(traits, base, penalty, rounds)
        assert greedy_order(traits, base, penalty, rounds) == expected
