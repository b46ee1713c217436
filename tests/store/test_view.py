"""Views of a growing partition extend their predecessors' structures exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory.model import GameMemory, GameMemoryQuery, GameMoment, ordinal_key
from game_memory.store.lexical import lexical_search
from game_memory.store.view import IdPositions, LexicalIndex, PartitionView

_IDS = st.lists(
    st.text(alphabet="ab\u00e9\U0001f600\uff00z", min_size=1, max_size=4),
    min_size=1,
    max_size=30,
    unique=True,
)


def _memory(memory_id: str, tick: int) -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id="session",
        owner_id="owner",
        scope="personal",
        kind="fact",
        payload_json="{}",
        moment=GameMoment(timeline_id="world", tick=tick),
        searchable_text=f"the {memory_id} fire at the well",
    )


def _view(memories: list, base: PartitionView | None = None) -> PartitionView:  # type: ignore[type-arg]
    positions = {memory.memory_id: index for index, memory in enumerate(memories)}
    return PartitionView("session", "owner", tuple(memories), positions, base)


@settings(max_examples=60, deadline=None)
@given(ids=_IDS, split=st.integers(min_value=0, max_value=30))
def test_an_extended_view_orders_and_ranks_like_a_fresh_one(ids: list[str], split: int) -> None:
    memories = [_memory(memory_id, index) for index, memory_id in enumerate(ids)]
    cut = min(split, len(memories))
    first = _view(memories[:cut])
    query = GameMemoryQuery(session_id="session", limit=10, text="fire well")
    if cut:
        # Build the base's structures so the extended view reuses and extends them.
        assert list(first.ordered) == sorted(memories[:cut], key=lambda m: ordinal_key(m.memory_id))
        lexical_search([first], query, 10)
        _ = first.order_keys
    extended = _view(memories, first if cut else None)
    fresh = _view(memories)
    assert extended.ordered == fresh.ordered
    assert extended.order_keys == fresh.order_keys
    assert lexical_search([extended], query, 10) == lexical_search([fresh], query, 10)


@settings(max_examples=60, deadline=None)
@given(
    ids=_IDS,
    split=st.integers(min_value=0, max_value=30),
    picks=st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=12),
    keyed=st.sets(st.integers(0, 29), max_size=5),
)
def test_an_extended_view_retracts_and_keys_like_a_fresh_one(
    ids: list[str], split: int, picks: list[tuple[int, int]], keyed: set[int]
) -> None:
    """Consolidation rows and belief keys are found the same from a base as from scratch,
    also when a summary names a source that comes after it (a raw append)."""
    memories = [_memory(memory_id, index) for index, memory_id in enumerate(ids)]
    for summary, source in picks:
        if summary < len(memories) and source < len(memories) and summary != source:
            sources = (*memories[summary].consolidates, ids[source])
            memories[summary] = memories[summary].model_copy(
                update={"consolidates": tuple(dict.fromkeys(sources))}
            )
    for index in keyed:
        if index < len(memories):
            memories[index] = memories[index].model_copy(update={"belief_key": "k"})
    cut = min(split, len(memories))
    base = _view(memories[:cut])
    _ = base.has_beliefs, base.mask(GameMemoryQuery(session_id="session", limit=1))
    extended, fresh = _view(memories, base if cut else None), _view(memories)
    assert sorted(extended._retraction_rows) == sorted(fresh._retraction_rows)
    assert extended.has_beliefs == fresh.has_beliefs
    for tick in (None, 0, 5, 15, 40):
        at = None if tick is None else GameMoment(timeline_id="world", tick=tick)
        query = GameMemoryQuery(session_id="session", limit=10, at_or_before=at)
        assert extended.mask(query).tolist() == fresh.mask(query).tolist()


def test_a_grown_view_shares_its_base_id_map_and_older_views_keep_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An append no longer copies the partition's id map (100k ids at 100k memories): the
    # new view's map shares the base's dictionary and merges only every MERGE appends.
    from game_memory.store.partitions import _build_view

    monkeypatch.setattr(IdPositions, "MERGE", 4)
    memories = [_memory(f"m{index:02d}", index) for index in range(11)]
    views = [_build_view(None, memories[:1], "folder")]
    for memory in memories[1:]:
        views.append(_build_view(views[-1], [memory], "folder"))
    views.append(_build_view(views[-1], [memories[3], memories[10]], "folder"))  # copies
    shared = [view.positions._shared for view in views if view is not None]  # type: ignore[attr-defined]
    assert shared[1] is shared[0] and shared[4] is shared[0]  # no copy until the merge
    assert shared[5] is not shared[0] and len(shared[5]) == 6
    for count, view in enumerate(views[:11], 1):
        assert view is not None
        assert dict(view.positions) == {m.memory_id: i for i, m in enumerate(memories[:count])}
        assert list(view.positions) == [m.memory_id for m in memories[:count]]
        assert len(view.positions) == count
        assert ("m10" in view.positions) == (count == 11)
        assert view.positions.get("m10") == (10 if count == 11 else None)
    assert views[-1] is not None and len(views[-1]) == 11


def test_merged_ids_stay_beside_a_larger_base_map_until_they_outgrow_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Merging every MERGE appends used to copy the whole map (100k ids: 5-10 ms and a second
    # dictionary of them); now the ids added since the base stay in a middle dictionary
    # beside it, until they are as many as the base's.
    from game_memory.store.partitions import _build_view

    monkeypatch.setattr(IdPositions, "MERGE", 4)
    memories = [_memory(f"m{index:03d}", index) for index in range(60)]
    base = _build_view(None, memories[:20], "folder")
    assert base is not None
    large = base.positions._shared  # type: ignore[attr-defined]
    views = [base]
    for memory in memories[20:]:
        grown = _build_view(views[-1], [memory], "folder")
        assert grown is not None
        views.append(grown)
    for count, view in enumerate(views, 20):
        expected = {m.memory_id: i for i, m in enumerate(memories[:count])}
        assert dict(view.positions) == expected and len(view.positions) == count
        assert all(view.positions[m] == i for m, i in expected.items())
        assert view.positions.get(memories[count].memory_id if count < 60 else "x") is None
        shared = view.positions._shared  # type: ignore[attr-defined]
        if 25 <= count < 40:  # merged ids stay beside the base's map, which is shared as is
            assert isinstance(shared, IdPositions) and shared._shared is large
        if 41 <= count <= 45:  # as many as the base's: merged into one dictionary
            assert isinstance(shared, dict) and len(shared) == 41
        if count >= 46:  # which is the large one from then on
            assert isinstance(shared, IdPositions) and len(shared._shared) == 41


def test_a_grown_lexical_index_shares_its_base_postings_and_ranks_like_a_fresh_one() -> None:
    # Copying every posting per append cost the vocabulary; a grown index keeps the terms
    # it changed beside its base's shared postings and merges them now and then.
    memories = [_memory(f"t{index:04d}", index) for index in range(1_300)]
    indexes = [LexicalIndex(memories[:1])]
    for count in range(2, len(memories) + 1):
        indexes.append(LexicalIndex(memories[:count], indexes[-1]))
    assert indexes[1]._shared is indexes[0]._shared  # no copy below the merge threshold
    assert indexes[-1]._shared is not indexes[0]._shared  # merged once the terms piled up
    fresh = LexicalIndex(memories)
    for term in ("t0000", "t0700", "t1299", "fire", "well", "absent"):
        for grown, built in zip(indexes[-1].postings(term), fresh.postings(term), strict=True):
            assert np.array_equal(grown, built)
    for part, whole in zip(indexes[-1].export(), fresh.export(), strict=True):
        assert np.array_equal(np.asarray(part), np.asarray(whole))
    assert indexes[5].postings("t0700")[0].size == 0  # older versions keep their postings
    # Token counts grow in the room their lineage shares (no array of the partition's size
    # per append); an older version keeps its own.
    assert np.shares_memory(indexes[-1].lengths, indexes[-2].lengths)
    assert np.array_equal(indexes[-1].lengths, fresh.lengths) and indexes[5].lengths.size == 6
    assert np.array_equal(indexes[-1].counted_lengths, fresh.counted_lengths)
    grown = LexicalIndex(memories, indexes[-2])  # a second branch from the same base
    assert np.array_equal(grown.lengths, fresh.lengths)
    assert np.array_equal(indexes[-1].lengths, fresh.lengths)  # the first branch unchanged


def test_a_grown_view_extends_its_base_ids_in_place_and_a_second_branch_copies() -> None:
    memories = [_memory(f"m{index:02d}", index) for index in range(4)]
    first = _view(memories[:2])
    assert first.memory_ids == ["m00", "m01"]
    second = _view(memories[:3], first)
    third = _view(memories, second)
    assert third.memory_ids == ["m00", "m01", "m02", "m03"]
    assert third.memory_ids._items is first.memory_ids._items  # extended, not copied
    assert first.memory_ids == ["m00", "m01"] and list(second.memory_ids) == ["m00", "m01", "m02"]
    assert second.memory_ids[-1] == "m02" and second.memory_ids[1:] == ["m01", "m02"]
    with pytest.raises(IndexError):
        second.memory_ids[3]
    other = _view([*memories[:3], _memory("x", 9)], second)  # second's list was extended
    assert other.memory_ids == ["m00", "m01", "m02", "x"]
    assert third.memory_ids == ["m00", "m01", "m02", "m03"]


def test_a_view_knows_it_extends_the_views_of_its_chain_but_not_a_branch() -> None:
    # Joins and caches are extended when a view grew from another; proving it by comparing
    # the memories cost the partition's size after every append.
    memories = [_memory(f"m{index}", index) for index in range(4)]
    first = _view(memories[:2])
    grown = _view(memories[:3], first)
    again = _view(memories, grown)
    assert again.extends(grown) and again.extends(first) and grown.extends(first)
    assert not first.extends(grown)  # shorter
    branch = _view([*memories[:2], _memory("other", 9)], first)  # first is no longer newest
    assert not branch.extends(grown) and not grown.extends(branch)
    assert not again.extends(branch)
    assert not _view(memories[:3]).extends(first)  # unknown (another read): compare instead


def test_a_views_mask_is_kept_for_the_same_visibility_and_computed_again_for_another() -> None:
    memories = [_memory(f"m{n}", n * 10) for n in range(30)]
    view = _view(memories)
    queries = [
        GameMemoryQuery(
            session_id="session", limit=1, at_or_before=GameMoment(timeline_id="world", tick=tick)
        )
        for tick in (55, 55, 200, 55, 0)
    ] + [
        GameMemoryQuery(session_id="session", limit=1),
        GameMemoryQuery(session_id="session", limit=1, minimum_importance=0.9),
    ]
    previous = None
    for query in queries:
        mask = view.mask(query)
        fresh = view.columns.mask(query)  # computed, never kept
        assert mask.tolist() == fresh.tolist()
        assert not mask.flags.writeable
        if (
            previous is not None
            and previous[0] == query.at_or_before
            and query.minimum_importance == 0
        ):
            assert mask is previous[1]  # the same visibility: the kept mask itself
        previous = (query.at_or_before, mask)
    # The text and the limit do not change what is visible: the same mask.
    one = GameMemoryQuery(session_id="session", limit=1, text="well")
    other = GameMemoryQuery(session_id="session", limit=9, text="bread")
    assert view.mask(one) is view.mask(other)


def test_the_batch_reads_of_a_view_equal_its_reads_one_by_one() -> None:
    """``order_keys_at``, ``memories_at`` and ``IdList.picked`` (a recall reads its
    candidates at once) give what ``order_key``, ``memories[i]`` and ``ids[i]`` give."""
    ids = ["b", "a\U0001f600", "\u00e9", "c", "a\uffff"]
    memories = [_memory(memory_id, 10 - index) for index, memory_id in enumerate(ids)]
    view = _view(memories)
    positions = np.array([4, 0, 2, 2, 1], np.int64)
    expected_keys = [view.order_key(position) for position in positions.tolist()]
    assert view.order_keys_at(positions) == expected_keys
    assert view.memories_at(positions.tolist()) == [memories[p] for p in positions.tolist()]
    assert view.memory_ids.picked(positions.tolist()) == [ids[p] for p in positions.tolist()]
    _ = view.order_keys  # once built, the batch read takes the built keys
    assert view.order_keys_at(positions) == expected_keys
    assert view.order_keys_at(np.empty(0, np.int64)) == []
    for wrong in ([5], [-1]):
        with pytest.raises(IndexError):
            view.memory_ids.picked(wrong)


def test_an_older_view_is_freed_without_the_garbage_collector() -> None:
    # A view and its ordered memories held each other: every view of a partition (one per
    # append, with its columns and indexes) waited for the collector's full pass, 20-36 ms
    # at 100k memories.
    import gc
    import weakref

    from game_memory.store.partitions import _build_view

    memories = [_memory(f"m{index:02d}", index) for index in range(12)]
    first = _build_view(None, memories[:10], "folder")
    assert first is not None
    ordered = first.ordered
    assert [m.memory_id for m in ordered] == sorted(m.memory_id for m in memories[:10])
    _ = first.lexical, first.columns  # built: the next view extends them
    later = _build_view(first, memories[10:], "folder")
    assert later is not None and [m.memory_id for m in later.ordered][-2:] == ["m10", "m11"]
    gone = weakref.ref(first)
    fresh = _build_view(None, memories[:3], "folder")
    assert fresh is not None
    kept = fresh.ordered  # read only after its view is gone: sorted from the memories
    gone_fresh = weakref.ref(fresh)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del first, later, fresh
        assert gone() is None and gone_fresh() is None  # freed by reference counts alone
    finally:
        if enabled:
            gc.enable()
    assert [m.memory_id for m in ordered] == sorted(m.memory_id for m in memories[:10])
    assert [m.memory_id for m in kept] == ["m00", "m01", "m02"]
