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


def _values(columns: PredicateColumns) -> list[list[object]]:
    names = ("ticks", "importance", "timeline_codes", "has_expiry", "expiry_ticks")
    return [getattr(columns, name).tolist() for name in (*names, "belief_codes")]


def test_grown_columns_share_their_room_and_no_version_ever_changes() -> None:
    """Appending to the newest version writes after its values in place (no column is
    copied); growing an older version again copies into a room of its own. Every version
    keeps exactly the values it was built with, and equals columns built whole."""
    first = [memory(n, n) for n in range(5)]
    base = PredicateColumns(first)
    grown = [first]
    versions = [base]
    for number in range(5, 40):  # one memory per version, as appends make them
        grown.append(grown[-1] + [memory(number, number, expires=number + 3)])
        versions.append(PredicateColumns(grown[-1], versions[-1]))
    rooms = {id(version._room) for version in versions[1:]}
    assert len(rooms) == 1  # the first growth made the room; the others wrote in it
    shared = versions[1]._room
    assert shared is not None and shared.length == 40
    assert versions[-1].ticks.base is versions[1].ticks.base  # views of one array
    branch = PredicateColumns(grown[19] + [memory(99, 99, "dream")], versions[19])
    assert branch._room is not shared  # versions[19] was grown already: copied
    assert shared.length == 40  # and the shared room untouched
    for memories, version in zip(grown, versions, strict=True):
        assert _values(version) == _values(PredicateColumns(memories))
    assert _values(branch) == _values(PredicateColumns(grown[19] + [memory(99, 99, "dream")]))
    assert branch.ticks.tolist() == [*list(range(24)), 99]
    extended = PredicateColumns(grown[-1] + [memory(40, 40)], versions[-1])
    assert extended._room is shared and shared.length == 41  # the tip grows in place
    assert _values(versions[-1]) == _values(PredicateColumns(grown[-1]))
