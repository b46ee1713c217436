"""The reranker's game-time promises, on a scale that does not depend on the candidates.

* A lone or last candidate keeps a score that reflects its own similarity (``"absolute"``).
* A fresh memory overtakes a slightly more relevant old one; importance breaks near-ties.
* Of two versions of one belief (alike, same owner and timeline), the newer comes first.
* What happened stays true: an event is never taken for the older version of anything.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from game_memory import (
    FusionOptions,
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
)
from game_memory.recall.fusion import FusedCandidate, fuse
from game_memory.recall.reranker import OUTDATABLE_KINDS
from support.vectors import MemoryFactory

ABSOLUTE = FusionOptions(normalization="absolute", lexical_weight=0.25, vector_weight=0.75)
#: The default reranker without the supersession of versions (the candidates below carry
#: the factory's one text, so every pair of them would be versions of one belief).
NO_VERSIONS = GameAwareMemoryRerankerOptions(supersession_penalty=0.0, supersession_inherits=False)


def at(tick: int) -> GameMemoryQuery:
    return GameMemoryQuery(
        session_id="session",
        limit=10,
        text="x",
        at_or_before=GameMoment(timeline_id="world", tick=tick),
    )


def unit(*values: float) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_a_lone_candidate_keeps_its_own_similarity(make_memory: MemoryFactory) -> None:
    a, b = make_memory("a"), make_memory("b")
    (lone,) = fuse([(a, 2.0)], [(a, 0.6)], ABSOLUTE, 10)
    pair = {
        c.memory.memory_id: c
        for c in fuse([(a, 2.0), (b, 1.0)], [(a, 0.6), (b, 0.5)], ABSOLUTE, 10)
    }
    # 0.75 × cosine + 0.25 × BM25 / max(best, lexical_scale 8): the same alone or not.
    assert lone.score == pytest.approx(0.75 * 0.6 + 0.25 * 2.0 / 8.0)
    assert pair["a"].score == pytest.approx(lone.score)
    assert pair["b"].score == pytest.approx(0.75 * 0.5 + 0.25 * 1.0 / 8.0)
    assert lone.relevance == pytest.approx(lone.score)  # weights sum to 1


def test_under_floor_normalization_the_last_of_two_scores_zero(make_memory: MemoryFactory) -> None:
    # Why "absolute" exists: the earlier default gives the weaker of two candidates nothing.
    a, b = make_memory("a"), make_memory("b")
    fused = {
        c.memory.memory_id: c
        for c in fuse(
            [(a, 2.0), (b, 1.9)],
            [(a, 0.8), (b, 0.79)],
            FusionOptions(normalization="floor", lexical_weight=0.25, vector_weight=0.75),
            10,
        )
    }
    assert fused["b"].score == 0.0 and fused["a"].score > 0.0


def test_relevance_is_a_fraction_of_the_best_the_channels_present_can_give(
    make_memory: MemoryFactory,
) -> None:
    a = make_memory("a")
    (lexical_only,) = fuse([(a, 16.0)], [], ABSOLUTE, 10)
    assert lexical_only.relevance == pytest.approx(1.0)  # a strong lexical match, alone
    (rrf,) = fuse([(a, 3.0)], [(a, 0.9)], FusionOptions(mode="rrf"), 10)
    assert rrf.relevance == pytest.approx(1.0)  # first in both channels


def _candidate(
    memory: GameMemory, relevance: float, vector: np.ndarray | None = None
) -> FusedCandidate:
    return FusedCandidate(memory, relevance, 1, 1, 1.0, relevance, relevance, vector)


def test_a_fresh_memory_overtakes_a_slightly_more_relevant_old_one(
    make_memory: MemoryFactory,
) -> None:
    old = make_memory("old", tick=0, importance=0.5)
    fresh = make_memory("fresh", tick=1_440, importance=0.5)
    reranker = GameAwareMemoryReranker(NO_VERSIONS)
    ranked = reranker.rank(at(1_440), [_candidate(old, 0.70), _candidate(fresh, 0.65)])
    assert [c.memory.memory_id for c in ranked] == ["fresh", "old"]
    # ... but not a clearly more relevant one: recency is worth at most 0.2.
    ranked = reranker.rank(at(1_440), [_candidate(old, 0.90), _candidate(fresh, 0.55)])
    assert [c.memory.memory_id for c in ranked] == ["old", "fresh"]


def test_importance_breaks_a_near_tie(make_memory: MemoryFactory) -> None:
    plain = make_memory("plain", tick=10, importance=0.1)
    vital = make_memory("vital", tick=10, importance=1.0)
    ranked = GameAwareMemoryReranker(NO_VERSIONS).rank(
        at(10), [_candidate(plain, 0.70), _candidate(vital, 0.66)]
    )
    assert [c.memory.memory_id for c in ranked] == ["vital", "plain"]


def test_the_scale_does_not_depend_on_how_many_candidates_there_are(
    make_memory: MemoryFactory,
) -> None:
    old = make_memory("old", tick=0)
    fresh = make_memory("fresh", tick=1_440)
    fillers = [make_memory(f"f{i}", tick=5, scope=f"s{i}", kind="goal") for i in range(8)]
    reranker = GameAwareMemoryReranker(NO_VERSIONS)
    two = reranker.rank(at(1_440), [_candidate(old, 0.70), _candidate(fresh, 0.65)])
    many = reranker.rank(
        at(1_440),
        [_candidate(old, 0.70), _candidate(fresh, 0.65), *[_candidate(f, 0.1) for f in fillers]],
    )
    assert [c.memory.memory_id for c in two] == [c.memory.memory_id for c in many[:2]]


def test_a_newer_version_of_a_belief_supersedes_the_older(make_memory: MemoryFactory) -> None:
    options = GameAwareMemoryRerankerOptions(supersession_penalty=0.3, supersession_similarity=0.6)
    old = make_memory("old", tick=100, text="The bridge is open.")
    new = make_memory("new", tick=500, text="The bridge collapsed.")
    other = make_memory("other", tick=50, text="Wolves in the hills.")
    same, apart = unit(1.0, 0.9, 0.0), unit(0.0, 0.1, 1.0)
    candidates = [
        _candidate(old, 0.80, unit(1.0, 0.8, 0.0)),
        _candidate(new, 0.60, same),
        _candidate(other, 0.55, apart),
    ]
    ranked = [
        c.memory.memory_id for c in GameAwareMemoryReranker(options).rank(at(900), candidates)
    ]
    assert ranked[0] == "new" and ranked.index("old") > 0
    # Off with no penalty and no inheritance, and never across owners or timelines.
    plain = GameAwareMemoryReranker(
        options.model_copy(update={"supersession_penalty": 0.0, "supersession_inherits": False})
    )
    assert plain.rank(at(900), candidates)[0].memory.memory_id == "old"
    elsewhere = new.model_copy(update={"owner_id": "someone-else"})
    moved = [candidates[0], _candidate(elsewhere, 0.60, same), candidates[2]]
    assert GameAwareMemoryReranker(options).rank(at(900), moved)[0].memory.memory_id == "old"


def test_without_vectors_the_overlap_of_words_tells_versions_apart(
    make_memory: MemoryFactory,
) -> None:
    options = GameAwareMemoryRerankerOptions(supersession_penalty=0.3, supersession_similarity=0.5)
    old = make_memory("old", tick=100, text="the ferry to Vel leaves at dawn")
    new = make_memory("new", tick=500, text="the ferry to Vel leaves at noon")
    ranked = GameAwareMemoryReranker(options).rank(
        at(900), [_candidate(old, 0.8), _candidate(new, 0.6)]
    )
    assert [c.memory.memory_id for c in ranked] == ["new", "old"]


def test_a_candidate_without_a_vector_does_not_hide_the_cosines_of_the_others(
    make_memory: MemoryFactory,
) -> None:
    # Only the lexical channel returned "stray" (no vector): old and new are still compared
    # by their cosine (0.99), not by their words (which share almost nothing).
    options = GameAwareMemoryRerankerOptions(supersession_penalty=0.3, supersession_similarity=0.6)
    old = make_memory("old", tick=100, text="The bridge is open.")
    new = make_memory("new", tick=500, text="Storm wrecked that crossing.")
    stray = make_memory("stray", tick=50, text="Wolves in the hills.")
    candidates = [
        _candidate(old, 0.80, unit(1.0, 0.8, 0.0)),
        _candidate(new, 0.60, unit(1.0, 0.9, 0.0)),
        _candidate(stray, 0.55),
    ]
    ranked = GameAwareMemoryReranker(options).rank(at(900), candidates)
    assert ranked[0].memory.memory_id == "new"


@pytest.mark.model
async def test_the_bridge_reopened_with_the_default_model_comes_first(
    tmp_path: Path, default_model_home: Path
) -> None:
    """The issue's example: the old memory is the closer match, the new one is fresh and vital."""
    from game_memory import open_memory

    async with await open_memory(
        tmp_path / "save", model="default", home=default_model_home
    ) as memory:
        assert memory.mode == "hybrid"
        for memory_id, text, tick, importance in (
            ("old", "The bridge to Eastmarch is open.", 0, 0.0),
            ("new", "The bridge to Eastmarch is open again.", 1_440, 1.0),
        ):
            await memory.append(
                GameMemory(
                    memory_id=memory_id,
                    session_id="s",
                    owner_id="o",
                    scope="world",
                    kind="fact",
                    payload_json="{}",
                    moment=GameMoment(timeline_id="main", tick=tick),
                    importance=importance,
                    searchable_text=text,
                )
            )
        result = await memory.recall(
            GameMemoryQuery(
                session_id="s",
                limit=2,
                text="Is the bridge to Eastmarch open?",
                at_or_before=GameMoment(timeline_id="main", tick=1_440),
            )
        )
    assert [hit.memory.memory_id for hit in result.hits] == ["new", "old"]


def test_the_newer_version_inherits_what_the_older_answered(make_memory: MemoryFactory) -> None:
    # "Who owns the inn?" finds "Mira owns the inn" by its words; its newer version, "Mira
    # sold her tavern to Bertram", shares few words with the question (relevance 0.1, below
    # an unrelated memory at 0.3) but answers it: it takes the older one's relevance.
    old = make_memory("old", tick=0, text="Mira owns the Rusty Flagon inn.")
    new = make_memory("new", tick=43_200, text="Mira sold her tavern to Bertram.")
    other = make_memory("other", tick=30_000, text="The chapel bell cracked.")
    candidates = [
        _candidate(old, 1.0, unit(1.0, 0.6, 0.0)),
        _candidate(other, 0.3, unit(0.0, 0.2, 1.0)),
        _candidate(new, 0.1, unit(1.0, 0.9, 0.1)),
    ]
    ranked = [c.memory.memory_id for c in GameAwareMemoryReranker().rank(at(45_000), candidates)]
    assert ranked == ["new", "old", "other"]
    # Without the inheritance the penalty alone demotes the old version, and the unrelated
    # memory comes first: the update is lost.
    penalty_only = GameAwareMemoryRerankerOptions(supersession_inherits=False)
    ranked = [
        c.memory.memory_id
        for c in GameAwareMemoryReranker(penalty_only).rank(at(45_000), candidates)
    ]
    assert ranked[0] == "old"


def test_a_model_that_finds_everything_alike_makes_no_versions(make_memory: MemoryFactory) -> None:
    # Twelve memories whose vectors are all alike (pairwise cosines 0.5-0.86, mean 0.69, as
    # MiniLM gives CJK text): many pairs pass the absolute 0.40, none stands 3 deviations
    # above the others, so no memory is taken for a version of another.
    rng = np.random.default_rng(7)
    base = unit(*([1.0] * 32))
    vectors = [unit(*(base + rng.normal(0.0, 0.12, 32))) for _ in range(12)]
    memories = [make_memory(f"m{i}", tick=10 * i, text=f"text {i}") for i in range(12)]
    relevance = [1.0 - 0.05 * i for i in range(12)]
    candidates = [_candidate(m, r, v) for m, r, v in zip(memories, relevance, vectors, strict=True)]
    gram = np.stack(vectors) @ np.stack(vectors).T
    assert gram[np.triu_indices(12, 1)].min() > 0.45  # every pair passes the absolute bar (0.40)
    ranked = GameAwareMemoryReranker().rank(at(1_000), candidates)
    plain = GameAwareMemoryReranker(NO_VERSIONS).rank(at(1_000), candidates)
    assert [c.memory.memory_id for c in ranked] == [c.memory.memory_id for c in plain]
    # A pair that does stand out among them (z ~4) is still a pair of versions.
    vectors[5] = unit(*(np.asarray(vectors[1]) + rng.normal(0.0, 0.005, 32)))
    candidates[5] = _candidate(memories[5], relevance[5], vectors[5])
    order = [c.memory.memory_id for c in GameAwareMemoryReranker().rank(at(1_000), candidates)]
    plain_order = [
        c.memory.memory_id for c in GameAwareMemoryReranker(NO_VERSIONS).rank(at(1_000), candidates)
    ]
    assert plain_order.index("m1") < plain_order.index("m5")
    assert order.index("m5") < order.index("m1")  # m5 (tick 50) is m1's newer version


def test_a_memory_with_a_belief_key_is_never_an_implicit_version(
    make_memory: MemoryFactory,
) -> None:
    # The demo's ford: "carts cross the Willow ford" (belief ford.willow) and, half an hour
    # later, "Elda gathered willow bark by the river", alike enough by their cosine. The
    # game named the ford's versions with its key, so the bark is not taken for one.
    ford = make_memory("ford", tick=450, text="The ford over the Willow river is knee-deep.")
    ford = ford.model_copy(update={"belief_key": "ford.willow"})
    bark = make_memory("bark", tick=480, text="Elda gathered willow bark by the river.")
    candidates = [
        _candidate(ford, 1.0, unit(1.0, 0.5, 0.0)),
        _candidate(bark, 0.4, unit(1.0, 0.6, 0.1)),
    ]
    ranked = GameAwareMemoryReranker().rank(at(900), candidates)
    assert [c.memory.memory_id for c in ranked] == ["ford", "bark"]
    # Without the key the two are versions, and the newer takes the older one's place.
    plain = [_candidate(ford.model_copy(update={"belief_key": None}), 1.0, unit(1.0, 0.5, 0.0))]
    ranked = GameAwareMemoryReranker().rank(at(900), [*plain, candidates[1]])
    assert ranked[0].memory.memory_id == "bark"


def _sword_and_burn(make_memory: MemoryFactory, older_kind: str) -> list[FusedCandidate]:
    """The smith forged a sword (older, the better answer), then his apprentice burned his
    hand (newer, alike: cosine 0.95, the only pair of three)."""
    sword = make_memory(
        "sword", tick=0, kind=older_kind, text="The smith forged a sword for the captain."
    )
    burn = make_memory(
        "burn", tick=3_000, kind="event", text="The smith's apprentice burned his hand."
    )
    other = make_memory("other", tick=1_000, kind="event", text="The chapel bell cracked.")
    return [
        _candidate(sword, 1.0, unit(1.0, 0.3, 0.0)),
        _candidate(other, 0.5, unit(0.0, 0.0, 1.0)),
        _candidate(burn, 0.6, unit(1.0, 0.0, 0.0)),
    ]


def test_an_event_is_never_taken_for_an_older_version(make_memory: MemoryFactory) -> None:
    """A later memory on the same subject does not undo what happened: asked about the
    sword, the NPC answers with the sword, not with the burn the version test would have
    put first (it does so when the older memory is a fact, or when events are allowed)."""
    ranked = GameAwareMemoryReranker().rank(at(3_000), _sword_and_burn(make_memory, "event"))
    assert [c.memory.memory_id for c in ranked] == ["sword", "burn", "other"]
    as_fact = GameAwareMemoryReranker().rank(at(3_000), _sword_and_burn(make_memory, "fact"))
    assert as_fact[0].memory.memory_id == "burn"
    every_kind = GameAwareMemoryRerankerOptions(supersession_kinds=frozenset(GameMemoryKind))
    ranked = GameAwareMemoryReranker(every_kind).rank(
        at(3_000), _sword_and_burn(make_memory, "event")
    )
    assert ranked[0].memory.memory_id == "burn"


@pytest.mark.parametrize("kind", [kind.value for kind in GameMemoryKind])
def test_no_kind_no_versions(make_memory: MemoryFactory, kind: str) -> None:
    """``supersession_kinds`` empty: no memory of any kind is outdated implicitly, as with
    the version test off."""
    nothing = GameAwareMemoryRerankerOptions(supersession_kinds=frozenset())
    candidates = _sword_and_burn(make_memory, kind)
    ranked = GameAwareMemoryReranker(nothing).rank(at(3_000), candidates)
    plain = GameAwareMemoryReranker(NO_VERSIONS).rank(at(3_000), candidates)
    assert [c.memory.memory_id for c in ranked] == [c.memory.memory_id for c in plain]
    assert ranked[0].memory.memory_id == "sword"
    outdated = GameAwareMemoryReranker().rank(at(3_000), candidates)[0].memory.memory_id
    assert outdated == ("burn" if GameMemoryKind(kind) in OUTDATABLE_KINDS else "sword")


def test_the_outdatable_kinds_are_every_kind_but_event_and_read_from_json() -> None:
    assert frozenset(GameMemoryKind) - {GameMemoryKind.EVENT} == OUTDATABLE_KINDS
    options = GameAwareMemoryRerankerOptions.model_validate_json(
        '{"supersession_kinds": ["Goal", "fact", "goal"]}'
    )
    assert options.supersession_kinds == {GameMemoryKind.FACT, GameMemoryKind.GOAL}
    # Serialized in the kinds' declaration order, whatever the set's order in this process.
    assert options.model_dump(mode="json")["supersession_kinds"] == ["fact", "goal"]
    with pytest.raises(ValueError, match="unknown memory kind"):
        GameAwareMemoryRerankerOptions(supersession_kinds=frozenset({"rumour"}))
