"""The search for implicit versions is skipped when no candidate can be an older version.

Only a memory of ``supersession_kinds`` (default: every kind but ``event``) is ever taken
for the older version of a belief, so when none of the candidates searched is of such a
kind (an NPC's memories of what happened: the bridge's default kind), no pair found could
be kept. ``rank`` then skips the search: the tests compare it, on seeded random candidates
of mixed and of single kinds, with a reference that always searches, and check that the
search does not run when nothing could come of it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest

from game_memory import (
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
)
from game_memory.recall import reranker as reranker_module
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.reranker import OUTDATABLE_KINDS, _outdatable
from game_memory.recall.versions import implicit_versions
from recall.test_rank_equivalence import rank_reference
from support.vectors import MemoryFactory

EVENT = GameMemoryKind.EVENT


def versions_always(
    candidates: Sequence[FusedCandidate], options: GameAwareMemoryRerankerOptions
) -> list[tuple[int, int]]:
    """The pairs ``rank`` keeps, from a search that always runs."""
    first = candidates[: options.supersession_candidates]
    fields = [dict(vars(candidate.memory)) for candidate in first]
    found = implicit_versions(
        fields,
        [candidate.memory.moment.tick for candidate in first],
        [candidate.memory.moment.timeline_id for candidate in first],
        [candidate.vector for candidate in first],
        options.supersession_similarity,
        options.supersession_standing,
    )
    return _outdatable(found, fields, options.supersession_kinds) if found else found


def _case(
    make_memory: MemoryFactory, rng: random.Random, kinds: Sequence[GameMemoryKind]
) -> tuple[GameAwareMemoryReranker, GameMemoryQuery, list[FusedCandidate]]:
    words = ["inn", "mira", "owns", "sold", "tavern", "bertram", "river", "storm"]
    candidates = []
    for index in range(rng.choice((2, 5, 32, 40))):
        memory = make_memory(
            f"m{index}",
            tick=rng.choice((1, 5, rng.randrange(3_000))),
            importance=rng.choice((0.5, 0.0, rng.random())),
            text=" ".join(rng.sample(words, rng.randint(1, 5))),
            kind=rng.choice(kinds),
        )
        score = rng.choice((1.0, 0.5, rng.random()))
        vector = None
        if rng.random() < 0.6:
            vector = np.array([rng.choice((1.0, 0.9)), rng.random(), 0.1], np.float32)
            vector /= np.linalg.norm(vector)
        candidates.append(FusedCandidate(memory, score, 1, None, score, None, score / 2, vector))
    candidates.sort(key=lambda candidate: -candidate.score)
    options = GameAwareMemoryRerankerOptions(
        supersession_similarity=rng.choice((0.4, 0.2, 0.0)),
        supersession_standing=rng.choice((3.0, 0.0)),
        supersession_kinds=rng.choice(
            (OUTDATABLE_KINDS, frozenset(GameMemoryKind), frozenset({GameMemoryKind.FACT}))
        ),
    )
    moment = rng.choice((None, GameMoment(timeline_id="world", tick=rng.randrange(3_000))))
    query = GameMemoryQuery(
        session_id="session", limit=8, text="who owns the inn", at_or_before=moment
    )
    return GameAwareMemoryReranker(options), query, candidates


@pytest.mark.parametrize("seed", range(200))
def test_rank_equals_a_rank_that_always_searches(make_memory: MemoryFactory, seed: int) -> None:
    rng = random.Random(seed)
    kinds = rng.choice(([EVENT], [EVENT, EVENT, EVENT, GameMemoryKind.FACT], [GameMemoryKind.FACT]))
    reranker, query, candidates = _case(make_memory, rng, kinds)
    ranked = reranker.rank(query, candidates)
    expected = rank_reference(reranker, query, candidates, versions_always)
    assert [id(c) for c in ranked] == [id(c) for c in expected]


def test_no_search_when_no_candidate_can_be_outdated(
    make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    searched: list[int] = []

    def spy(fields, *args):  # type: ignore[no-untyped-def]
        searched.append(len(fields))
        return implicit_versions(fields, *args)

    monkeypatch.setattr(reranker_module, "implicit_versions", spy)
    reranker, query, events = _case(make_memory, random.Random(1), [EVENT])
    reranker = GameAwareMemoryReranker()  # the default kinds: events are never outdated
    reranker.rank(query, events)
    assert searched == []
    # One fact among them, and the search runs (over the first 32 candidates).
    _, _, mixed = _case(make_memory, random.Random(1), [EVENT])
    facts = [
        FusedCandidate(
            make_memory("fact", kind=GameMemoryKind.FACT, text="mira owns the inn"),
            mixed[0].score,
            1,
            None,
            mixed[0].score,
            None,
            mixed[0].score / 2,
            None,
        ),
        *mixed[1:],
    ]
    reranker.rank(query, facts)
    assert searched == [min(len(facts), reranker.options.supersession_candidates)]
