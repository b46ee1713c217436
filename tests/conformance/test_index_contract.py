"""What every VectorIndex does: joins, latest entry wins, capacity, orphans, compaction, lifecycle.

These tests drive the protocol directly with partition views built by hand, so they prove
the index alone; ``test_hybrid_recall.py`` proves it under the front door.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import (
    CapacityExceededError,
    GameMemory,
    HashingEmbeddingProvider,
    InvalidArgumentError,
    StoreClosedError,
    VectorIndex,
)
from game_memory.index.entries import EntryState
from game_memory.index.partition import PartitionReplacedError
from game_memory.store.view import PartitionView
from support.vectors import MemoryFactory, owner_view, unit_rows

from .conftest import IndexOpener

V1 = HashingEmbeddingProvider(32)
V2 = HashingEmbeddingProvider(32, version="v2")
Matrix = npt.NDArray[np.float32]


view = owner_view


def embed(memories: Sequence[GameMemory], provider: HashingEmbeddingProvider = V1) -> Matrix:
    return unit_rows(memories, provider)


def scored_rows(index: VectorIndex, snapshot: PartitionView) -> dict[str, Matrix]:
    """Memory id -> the row the index would score for it under V1."""
    joined = index.join(snapshot, V1.identity)
    matrix = index.vectors(joined, V1.identity)
    return {
        snapshot.memories[position].memory_id: matrix[row]
        for row, position in zip(joined.rows.tolist(), joined.positions.tolist(), strict=True)
    }


def counts(index: VectorIndex, snapshot: PartitionView) -> tuple[int, int, int, int, int]:
    joined = index.join(snapshot, V1.identity)
    return (joined.ready, joined.stale, joined.pending, joined.orphans, joined.mismatched)


async def test_written_vectors_join_their_memories_and_come_back_bit_for_bit(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", text=f"a cat {i}") for i in range(5)]
    vectors = embed(memories)
    index.write(memories[:2], vectors[:2], V1.identity)
    index.write(memories[2:], vectors[2:], V1.identity)
    snapshot = view(memories)
    rows = scored_rows(index, snapshot)
    assert sorted(rows) == [m.memory_id for m in memories]
    for memory, vector in zip(memories, vectors, strict=True):
        assert rows[memory.memory_id].tobytes() == vector.tobytes()
        assert index.is_ready(memory, V1.identity)
        assert not index.is_ready(memory, V2.identity)
    assert counts(index, snapshot) == (5, 0, 0, 0, 0)
    assert index.join(snapshot, V1.identity).entries == 5


async def test_a_join_counts_ready_stale_pending_orphan_and_mismatched_entries(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    ready, stale, failed, edited, unindexed, orphan = (
        make_memory(name, text=name)
        for name in ("ready", "stale", "failed", "edited", "unindexed", "orphan")
    )
    index.write([ready, orphan], embed([ready, orphan]), V1.identity)
    index.write([stale], embed([stale], V2), V2.identity)
    index.mark([failed], EntryState.FAILED, "embedding_failed")
    index.write([edited], embed([edited]), V1.identity)
    edited_now = make_memory("edited", text="other content")
    snapshot = view([ready, stale, failed, edited_now, unindexed])
    # pending: failed, edited (another content) and unindexed; mismatched: edited.
    assert counts(index, snapshot) == (1, 1, 3, 1, 1)
    assert not index.is_ready(edited_now, V1.identity)
    assert index.is_ready(stale, V2.identity) and not index.is_ready(failed, V1.identity)
    from_v2 = index.join(snapshot, V2.identity)  # from V2, the V1 vector is the stale one
    assert (from_v2.ready, from_v2.stale, from_v2.positions.tolist()) == (1, 1, [1])


async def test_without_any_vector_of_the_identity_every_ready_entry_is_stale(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memory = make_memory("m", text="cat")
    index.write([memory], embed([memory]), V1.identity)
    never = HashingEmbeddingProvider(32, version="never-written").identity
    joined = index.join(view([memory]), never)
    assert (joined.ready, joined.stale, joined.active) == (0, 1, None)


async def test_the_latest_entry_of_a_memory_wins(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memory = make_memory("m", text="cat")
    first, second = embed([memory]), embed([make_memory("x", text="dog")])
    index.write([memory], first, V1.identity)
    index.write([memory], second, V1.identity)
    assert scored_rows(index, view([memory]))["m"].tobytes() == second[0].tobytes()
    index.mark([memory], EntryState.PENDING, "embedding_pending")
    assert counts(index, view([memory])) == (0, 0, 1, 0, 0)
    index.write([memory], first, V1.identity)
    assert scored_rows(index, view([memory]))["m"].tobytes() == first[0].tobytes()


async def test_partitions_are_kept_apart_by_session_and_owner(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    mine = make_memory("m", owner_id="a", text="cat")
    other_owner = make_memory("m", owner_id="b", text="cat")
    other_session = make_memory("m", session_id="elsewhere", text="cat")
    index.write([mine, other_owner, other_session], embed([mine] * 3), V1.identity)
    assert counts(index, view([mine])) == (1, 0, 0, 0, 0)
    joins = index.session_joins("session", [view([mine])], V1.identity)
    assert sorted(j.view.owner_id if j.view else "none" for j in joins) == ["a", "none"]
    assert sum(j.orphans for j in joins) == 1  # owner b has no view: its entry is an orphan
    assert index.session_joins("nobody", [], V1.identity) == []
    assert [j.entries for j in index.session_joins("elsewhere", [], V1.identity)] == [1]


async def test_joins_are_cached_while_both_sides_are_unchanged(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(3)]
    index.write(memories[:2], embed(memories[:2]), V1.identity)
    snapshot = view(memories[:2])
    assert index.join(snapshot, V1.identity) is index.join(snapshot, V1.identity)
    index.write(memories[2:], embed(memories[2:]), V1.identity)
    grown = PartitionView(
        "session",
        "owner",
        tuple(memories),
        {m.memory_id: i for i, m in enumerate(memories)},
        snapshot,
    )
    joined = index.join(grown, V1.identity)
    assert joined.ready == 3 and sorted(joined.positions.tolist()) == [0, 1, 2]


async def test_an_owner_partition_holds_at_most_capacity_entries(
    open_index: IndexOpener, make_memory: MemoryFactory
) -> None:
    index = open_index(capacity=2)
    assert index.capacity == 2
    a = [make_memory(f"a{i}", owner_id="a", text="cat") for i in range(3)]
    index.write(a[:2], embed(a[:2]), V1.identity)
    index.write(a[:2], embed(a[:2]), V1.identity)  # rewriting entries adds none
    with pytest.raises(CapacityExceededError) as raised:
        index.write(a[2:], embed(a[2:]), V1.identity)
    assert raised.value.bound == "capacity"
    assert not index.is_ready(a[2], V1.identity)
    # Partitions are written in turn: one that fits is written before one that overflows.
    b = make_memory("b0", owner_id="b", text="dog")
    with pytest.raises(CapacityExceededError):
        index.write([b, a[2]], embed([b, a[2]]), V1.identity)
    assert index.is_ready(b, V1.identity) and not index.is_ready(a[2], V1.identity)


async def test_out_of_range_options_raise_invalid_argument_errors(
    open_index: IndexOpener,
) -> None:
    for number, capacity in enumerate((0, 1_000_001, True)):
        with pytest.raises(InvalidArgumentError):
            open_index(f"refused-{number}", capacity=capacity)


async def test_verify_finds_nothing_wrong_with_a_healthy_index(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", owner_id=f"o{i % 2}", text=f"cat {i}") for i in range(4)]
    index.write(memories, embed(memories), V1.identity)
    index.write(memories[:1], embed(memories[:1], V2), V2.identity)
    index.mark(memories[1:2], EntryState.FAILED, "embedding_failed")
    assert index.verify("session", repair=False) == []
    assert index.verify("session", repair=True) == []
    assert index.verify("nobody", repair=True) == []
    assert index.is_ready(memories[2], V1.identity)


async def test_orphans_are_listed_then_removed_only_if_still_absent_and_unchanged(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    gone, back, rewritten, kept = (
        make_memory(n, text=n) for n in ("gone", "back", "rewritten", "kept")
    )
    index.write([gone, back, rewritten, kept], embed([gone, back, rewritten, kept]), V1.identity)
    before = view([kept])
    candidates = index.orphans("session", [before])
    assert candidates.count == 3 and candidates.session_id == "session"
    index.write([rewritten], embed([kept]), V1.identity)  # changed since it was listed
    later = view([kept, back])  # "back" was saved meanwhile
    assert index.remove_orphans(candidates, [later]) == 1
    assert index.orphans("session", [view([kept, back, rewritten])]).count == 0
    assert not index.is_ready(gone, V1.identity)
    assert index.is_ready(back, V1.identity) and index.is_ready(rewritten, V1.identity)
    rows = scored_rows(index, view([kept, back, rewritten]))
    assert rows["kept"].tobytes() == embed([kept])[0].tobytes()
    assert rows["rewritten"].tobytes() == embed([kept])[0].tobytes()


async def test_a_compaction_drops_superseded_rows_and_keeps_every_live_vector(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(6)]
    snapshot = view(memories)
    for _ in range(3):  # superseded records and rows pile up
        index.write(memories, embed(memories), V1.identity)
    index.mark(memories[:1], EntryState.FAILED, "embedding_failed")
    before = scored_rows(index, snapshot)
    stale_join = index.join(snapshot, V1.identity)
    assert index.remove_orphans(index.orphans("session", [snapshot]), [snapshot]) == 0
    after = scored_rows(index, snapshot)
    assert {k: v.tobytes() for k, v in after.items()} == {k: v.tobytes() for k, v in before.items()}
    assert counts(index, snapshot) == (5, 0, 1, 0, 0)
    assert index.vectors(index.join(snapshot, V1.identity), V1.identity).shape == (5, 32)
    with pytest.raises(PartitionReplacedError):  # a reader of the old generation is told
        index.vectors(stale_join, V1.identity)


async def test_a_fresh_index_has_no_legacy_records_to_migrate(index: VectorIndex) -> None:
    assert await index.migrate_legacy_index() == 0
    assert await index.migrate_legacy_index() == 0


async def test_the_folder_is_an_absolute_path_or_none(index: VectorIndex) -> None:
    folder = index.folder
    assert folder is None or (isinstance(folder, Path) and folder.is_absolute())


async def test_a_closed_index_refuses_every_operation(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    memory = make_memory("m", text="cat")
    index.write([memory], embed([memory]), V1.identity)
    joined = index.join(view([memory]), V1.identity)
    await index.aclose()
    await index.aclose()  # idempotent
    calls = [
        lambda: index.join(view([memory]), V1.identity),
        lambda: index.session_joins("session", [], V1.identity),
        lambda: index.vectors(joined, V1.identity),
        lambda: index.is_ready(memory, V1.identity),
        lambda: index.write([memory], embed([memory]), V1.identity),
        lambda: index.mark([memory], EntryState.FAILED, "embedding_failed"),
        lambda: index.verify("session", repair=False),
        lambda: index.orphans("session", []),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()
    with pytest.raises(StoreClosedError):
        await index.migrate_legacy_index()


def cached_or_none(index: VectorIndex, snapshot: PartitionView) -> tuple[object, bytes] | None:
    """``cached_vectors`` as (the join, its rows' bytes), checked against the blocking calls."""
    cached = index.cached_vectors(snapshot, V1.identity)
    if cached is None:
        return None
    joined, matrix = cached
    assert joined is index.join(snapshot, V1.identity)  # the very join, unchanged
    assert not matrix.flags.writeable
    assert matrix.tobytes() == index.vectors(joined, V1.identity).tobytes()
    return joined, matrix.tobytes()


async def test_cached_vectors_answer_only_what_join_and_vectors_would(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    """``None`` is always allowed; an answer is the current join and its checked rows, and
    a change on either side (a write, a grown view, a compaction) is never answered from
    before it."""
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(4)]
    index.write(memories[:2], embed(memories[:2]), V1.identity)
    snapshot = view(memories[:2])
    assert index.cached_vectors(view(memories[2:]), V1.identity) is None  # nothing written
    index.vectors(index.join(snapshot, V1.identity), V1.identity)
    first = cached_or_none(index, snapshot)
    index.write(memories[2:], embed(memories[2:]), V1.identity)
    grown = view(memories)
    if first is not None:
        assert index.cached_vectors(snapshot, V1.identity) is None  # the entries grew
    assert index.cached_vectors(grown, V1.identity) is None  # never joined
    index.vectors(index.join(grown, V1.identity), V1.identity)
    again = cached_or_none(index, grown)
    assert again is None or again[1] == embed(memories).tobytes()
    for _ in range(2):
        index.write(memories, embed(memories), V1.identity)
    assert index.remove_orphans(index.orphans("session", [grown]), [grown]) == 0
    assert index.cached_vectors(grown, V1.identity) is None  # compacted: join again
    assert index.cached_vectors(grown, V2.identity) is None  # an identity never written
    await index.aclose()
    assert index.cached_vectors(grown, V1.identity) is None  # closed: never an answer


async def test_write_now_writes_what_write_writes_or_nothing(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    """``False`` (nothing written) is always allowed; ``True`` means the very records and
    rows :meth:`write` would have written."""
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(4)]
    index.write(memories[:2], embed(memories[:2]), V1.identity)
    index.vectors(index.join(view(memories[:2]), V1.identity), V1.identity)  # held now
    if not index.write_now(memories[2:3], embed(memories[2:3]), V1.identity):
        index.write(memories[2:3], embed(memories[2:3]), V1.identity)
    index.write(memories[3:], embed(memories[3:]), V1.identity)
    rows = scored_rows(index, view(memories))
    assert {k: v.tobytes() for k, v in rows.items()} == {
        m.memory_id: embed([m])[0].tobytes() for m in memories
    }
    assert counts(index, view(memories)) == (4, 0, 0, 0, 0)
    assert not index.write_now([], np.empty((0, 32), np.float32), V1.identity)


async def test_a_prefetch_changes_no_answer_and_never_raises(
    index: VectorIndex, make_memory: MemoryFactory
) -> None:
    """``prefetch`` only reads ahead: before anything is written, for owners and models it
    does not hold, and between writes, the joins and rows answer as without it."""
    index.prefetch("session", "owner", V1.identity)  # nothing written yet
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(3)]
    index.write(memories[:2], embed(memories[:2]), V1.identity)
    for session_id, owner_id, identity in (
        ("session", "owner", V1.identity),
        ("session", "nobody", V1.identity),
        ("another session", "owner", V1.identity),
        ("session", "owner", V2.identity),
    ):
        index.prefetch(session_id, owner_id, identity)
    joined = index.join(view(memories[:2]), V1.identity)
    assert index.vectors(joined, V1.identity).tobytes() == embed(memories[:2]).tobytes()
    index.write(memories[2:], embed(memories[2:]), V1.identity)
    index.prefetch("session", "owner", V1.identity)
    grown = index.join(view(memories), V1.identity)
    assert grown.ready == 3
    assert index.vectors(grown, V1.identity).tobytes() == embed(memories).tobytes()
