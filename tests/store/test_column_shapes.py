"""Masks that skip the passes the columns' shape shows to change nothing, against the model.

``PredicateColumns.mask`` skips the timeline comparison when every memory is on the query's
timeline, the expiry pass when no memory expires, and turns "at or before a tick" into a
prefix when the ticks never decrease in append order. Each skip must give the very mask
the full passes give: these tests compare with ``memory_matches_query`` memory by memory,
for columns built whole, restored from an export and grown version by version, in every
combination of the three shapes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    memory_matches_query,
)
from game_memory.store.columns import PredicateColumns

_TIMELINES = ("main", "dream")


def memory(
    number: int, tick: int, timeline: str = "main", expires: int | None = None
) -> GameMemory:
    """Memory ``m<number>`` of one owner at ``tick`` on ``timeline``, expiring at ``expires``."""
    return GameMemory(
        memory_id=f"m{number}",
        session_id="session",
        owner_id="owner",
        kind="fact",
        scope="npc",
        moment=GameMoment(timeline_id=timeline, tick=tick),
        expires_at=None if expires is None else GameMoment(timeline_id=timeline, tick=expires),
        payload_json="{}",
        searchable_text=f"memory {number}",
    )


@st.composite
def memories(draw: st.DrawFn) -> list[GameMemory]:
    count = draw(st.integers(0, 24))
    ascending = draw(st.booleans())
    ticks = sorted(draw(st.lists(st.integers(-5, 40), min_size=count, max_size=count)))
    if not ascending:
        ticks = draw(st.permutations(ticks))
    several = draw(st.booleans())
    expiring = draw(st.booleans())
    found = []
    for number, tick in enumerate(ticks):
        timeline = draw(st.sampled_from(_TIMELINES)) if several else "main"
        expires = draw(st.none() | st.integers(tick, 60)) if expiring else None
        found.append(memory(number, tick, timeline, expires))
    return found


def expected(memories: list[GameMemory], query: GameMemoryQuery) -> list[bool]:
    return [memory_matches_query(memory, query) for memory in memories]


@settings(max_examples=300, deadline=None)
@given(
    memories(),
    st.integers(0, 24),
    st.sampled_from((*_TIMELINES, "elsewhere")),
    st.integers(-10, 70),
)
def test_a_mask_equals_the_predicate_however_the_columns_are_built(
    found: list[GameMemory], split: int, timeline: str, tick: int
) -> None:
    query = GameMemoryQuery(
        session_id="session",
        limit=10,
        at_or_before=GameMoment(timeline_id=timeline, tick=tick),
    )
    wanted = expected(found, query)
    whole = PredicateColumns(found)
    assert whole.mask(query).tolist() == wanted
    restored = PredicateColumns.restore(whole.export(), len(found))
    assert restored.mask(query).tolist() == wanted
    # Grown in two versions, the first one's shape known or not before growing.
    split = min(split, len(found))
    for known in (True, False):
        first = PredicateColumns(found[:split])
        if known:
            first.shape()
        grown = PredicateColumns(found, first)
        assert grown.mask(query).tolist() == wanted
        assert grown.shape() == PredicateColumns(found).shape()


def test_the_shape_names_one_timeline_expiry_and_order() -> None:
    plain = PredicateColumns([memory(0, 1), memory(1, 1), memory(2, 5)]).shape()
    assert (plain.timeline, plain.expiring, plain.ascending) == (0, False, True)
    mixed = PredicateColumns([memory(0, 3), memory(1, 2, "dream", 9)]).shape()
    assert (mixed.timeline, mixed.expiring, mixed.ascending) == (-1, True, False)
    empty = PredicateColumns([]).shape()
    assert (empty.timeline, empty.expiring, empty.ascending) == (-1, False, True)
