"""Joins of index entries to the snapshot, and the vector top-k over joined rows."""

from __future__ import annotations

import gc
import os
import random
import weakref
from dataclasses import astuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import game_memory.index.join as scoring_module
from game_memory import FileVectorMemoryIndex, GameMemory
from game_memory.durable.names import identity_hash
from game_memory.index.entries import (
    NO_VALUE,
    EntryRecord,
    EntryState,
    MemoryDigests,
    content_digest,
    decode_entries,
    encode_entry,
    memory_hash,
)
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.index.partition import IndexPartition
from game_memory.index.partition import extend_partition as _extend
from game_memory.recall.vectors import top_vector_hits
from game_memory.store.view import PartitionView
from support.providers import FaultyProvider
from support.vectors import MemoryFactory

ACTIVE, OTHER = 0, 1


def view(memories: list[GameMemory]) -> PartitionView:
    return PartitionView(
        "session",
        "owner",
        tuple(memories),
        {memory.memory_id: index for index, memory in enumerate(memories)},
    )


def partition(records: list[EntryRecord]) -> IndexPartition:
    decoded, _ = decode_entries(b"".join(encode_entry(record, 7) for record in records))
    return _extend(
        None, decoded, identity_hash("session"), identity_hash("owner"), os.stat(__file__)
    )


def entry(
    memory: GameMemory, state: EntryState = EntryState.READY, **fields: object
) -> EntryRecord:
    values: dict[str, object] = {
        "state": state,
        "identity": ACTIVE if state is EntryState.READY else NO_VALUE,
        "row": 0 if state is EntryState.READY else NO_VALUE,
        "memory_hash": memory_hash(memory.memory_id),
        "digest": content_digest(memory),
        "code": "",
    }
    values.update(fields)
    return EntryRecord(**values)  # type: ignore[arg-type]


def test_a_join_sorts_entries_into_ready_stale_pending_orphan_and_mismatched(
    make_memory: MemoryFactory,
) -> None:
    ready = make_memory("ready")
    stale = make_memory("stale")
    pending = make_memory("pending")
    edited = make_memory("edited")
    unindexed = make_memory("unindexed")
    records = [
        entry(ready, row=5),
        entry(stale, identity=OTHER),
        entry(pending, EntryState.PENDING),
        entry(edited, digest=content_digest(make_memory("edited", text="older content"))),
        entry(make_memory("orphan")),
    ]
    joined = JoinCache(MemoryDigests()).join(
        view([ready, stale, pending, edited, unindexed]), partition(records), ACTIVE
    )
    assert (joined.ready, joined.stale, joined.pending, joined.orphans, joined.mismatched) == (
        1,
        1,
        3,
        1,
        1,
    )
    assert joined.rows.tolist() == [5] and joined.positions.tolist() == [0]


def test_without_an_active_identity_code_every_ready_vector_is_stale(
    make_memory: MemoryFactory,
) -> None:
    memory = make_memory("m")
    joined = JoinCache(MemoryDigests()).join(view([memory]), partition([entry(memory)]), None)
    assert (joined.ready, joined.stale) == (0, 1)


def test_a_join_is_reused_while_both_versions_stay_current_and_replaced_after(
    make_memory: MemoryFactory,
) -> None:
    memory = make_memory("m")
    cache = JoinCache(MemoryDigests())
    snapshot, indexed = view([memory]), partition([entry(memory)])
    first = cache.join(snapshot, indexed, ACTIVE)
    assert cache.join(snapshot, indexed, ACTIVE) is first
    grown = view([memory, make_memory("n")])
    second = cache.join(grown, indexed, ACTIVE)
    assert second is not first and second.pending == 1
    assert len(cache._joins) == 1  # one join per partition: old versions are released


def test_the_joins_kept_hold_at_most_the_digest_cache_s_bound_of_memories(
    make_memory: MemoryFactory,
) -> None:
    # A join keeps its view (and every memory it parsed) alive: 4,096 joins of any size
    # held a whole world's memories whatever the store's partition cache let go.
    cache = JoinCache(MemoryDigests(maximum=1_000))
    held = []
    for number in range(5):
        owner = f"npc-{number}"
        memories = [make_memory(f"{owner}-{n}", owner_id=owner) for n in range(400)]
        shown = PartitionView("session", owner, tuple(memories), {})
        cache.join(shown, None, ACTIVE)
        held.append(weakref.ref(shown))
        del shown, memories
        assert cache.memories <= 1_000 or len(cache) == 1
    assert len(cache) == 2 and cache.memories == 800  # the two latest
    gc.collect()
    assert [ref() is None for ref in held] == [True, True, True, False, False]
    large = [make_memory(f"large-{n}", owner_id="large") for n in range(1_500)]
    cache.join(PartitionView("session", "large", tuple(large), {}), None, ACTIVE)
    assert len(cache) == 1 and cache.memories == 1_500  # the latest is always kept


def test_an_orphaned_partition_joins_with_no_view(make_memory: MemoryFactory) -> None:
    joined = JoinCache(MemoryDigests()).join(None, partition([entry(make_memory("m"))]), ACTIVE)
    assert (joined.orphans, joined.ready, joined.pending) == (1, 0, 0)


def scored_parts(memories: list[GameMemory], rows: np.ndarray) -> list:  # type: ignore[type-arg]
    records = [entry(memory, row=index) for index, memory in enumerate(memories)]
    snapshot = view(memories)
    joined = JoinCache(MemoryDigests()).join(snapshot, partition(records), ACTIVE)
    return [(joined, rows.astype(np.float32), np.ones(len(memories), dtype=np.bool_))]


def test_top_hits_are_ordered_by_cosine_then_importance_then_newer_tick_then_id(
    make_memory: MemoryFactory,
) -> None:
    memories = [
        make_memory("low", tick=1),
        make_memory("tie-old", tick=1, importance=0.9),
        make_memory("tie-new-b", tick=5, importance=0.9),
        make_memory("tie-new-a", tick=5, importance=0.9),
        make_memory("best", tick=1),
    ]
    rows = np.array([[0.1, 1.0], [0.6, 0.8], [0.6, 0.8], [0.6, 0.8], [1.0, 0.0]])
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    hits = top_vector_hits(scored_parts(memories, rows), np.array([1.0, 0.0], np.float32), 10)
    assert [memory.memory_id for memory, _ in hits] == [
        "best",
        "tie-new-a",
        "tie-new-b",
        "tie-old",
        "low",
    ]
    assert hits[0][1] == 1.0


def test_the_top_k_cut_keeps_every_tie_of_the_last_place_for_the_full_ordering(
    make_memory: MemoryFactory,
) -> None:
    count = 3_000
    memories = [make_memory(f"m{index:04d}", importance=(index % 7) / 10) for index in range(count)]
    rows = np.tile(np.array([[1.0, 0.0]]), (count, 1))  # every cosine is 1
    hits = top_vector_hits(scored_parts(memories, rows), np.array([1.0, 0.0], np.float32), 5)
    expected = sorted(memories, key=lambda m: (-m.importance, -m.moment.tick, m.memory_id))[:5]
    assert [memory for memory, _ in hits] == expected


def test_invisible_memories_are_never_scored(make_memory: MemoryFactory) -> None:
    memories = [make_memory("a"), make_memory("b")]
    ((joined, matrix, _),) = scored_parts(memories, np.array([[1.0, 0.0], [0.0, 1.0]]))
    hidden = np.array([True, False])
    hits = top_vector_hits([(joined, matrix, hidden)], np.array([0.0, 1.0], np.float32), 10)
    assert [memory.memory_id for memory, _ in hits] == ["a"]
    assert top_vector_hits([(joined, matrix, hidden)], np.array([0, 1], np.float32), 0) == []


def test_cosines_are_clipped_to_minus_one_and_one(make_memory: MemoryFactory) -> None:
    memories = [make_memory("a"), make_memory("b")]
    parts = scored_parts(memories, np.array([[1.0, 0.0], [-1.0, 0.0]]))
    hits = top_vector_hits(parts, np.array([1.0001, 0.0], np.float32), 10)
    assert [score for _, score in hits] == [1.0, -1.0]


def counts_up(joined: PartitionJoin) -> bool:
    """Whether rows and positions both run 0, 1, 2, … (what ``dense`` promises)."""
    expected = list(range(joined.positions.size))
    return joined.positions.tolist() == expected and joined.rows.tolist() == expected


def join_summary(joined: PartitionJoin) -> tuple[object, ...]:
    pairs = sorted(zip(joined.positions.tolist(), joined.rows.tolist(), strict=True))
    return (joined.ready, joined.stale, joined.pending, joined.orphans, joined.mismatched, pairs)


def test_a_join_extended_across_appends_equals_a_join_computed_from_scratch(
    make_memory: MemoryFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extensions: list[int] = []
    original = scoring_module._extend_join

    def counted(*args: Any) -> PartitionJoin:
        extensions.append(1)
        return original(*args)

    monkeypatch.setattr(scoring_module, "_extend_join", counted)
    rng = random.Random(11)
    engine = FileVectorMemoryIndex(tmp_path).engine
    with engine.locked():
        engine.identity_code(FaultyProvider(2).identity, create=True)
        engine.identity_code(FaultyProvider(2, version="v2").identity, create=True)
    session, owner = identity_hash("session"), identity_hash("owner")
    memories: list[GameMemory] = []
    cache = JoinCache(MemoryDigests())
    for step in range(40):
        for _ in range(rng.randint(0, 3)):
            memories.append(make_memory(f"m{len(memories)}", tick=len(memories)))
        names = [m.memory_id for m in memories] + ["orphan-a", "orphan-b"]
        records: list[EntryRecord] = []
        for _ in range(rng.randint(1, 4)):
            name = rng.choice(names)
            memory = next((m for m in memories if m.memory_id == name), make_memory(name))
            kind = rng.choice(["ready", "ready", "stale", "pending", "deleted", "edited"])
            digest = content_digest(memory)
            if kind == "edited":
                digest = content_digest(make_memory(name, text="other content"))
            state = {"pending": EntryState.PENDING, "deleted": EntryState.DELETED}.get(
                kind, EntryState.READY
            )
            code = 1 if kind == "stale" else 0
            records.append(EntryRecord(state, code, 0, memory_hash(name), digest, ""))
        ready_rows = {
            code: np.ones((sum(1 for r in records if r.identity == code), 2), np.float32)
            for code in (0, 1)
        }
        offsets = {0: 0, 1: 0}
        placed = []
        for r in records:
            if r.state is EntryState.READY:
                placed.append(
                    EntryRecord(r.state, r.identity, offsets[r.identity], *astuple(r)[3:])
                )
                offsets[r.identity] += 1
            else:
                placed.append(r)
        with engine.locked():
            engine.append(session, owner, placed, {c: m for c, m in ready_rows.items() if len(m)})
        current = engine.partition(session, owner)
        snapshot = view(list(memories))
        joined = cache.join(snapshot, current, 0)
        fresh = JoinCache(MemoryDigests()).join(snapshot, current, 0)
        assert join_summary(joined) == join_summary(fresh), f"step {step}"
        assert not joined.dense or counts_up(joined)  # dense only when it holds
    assert len(extensions) == 39  # every step after the first extended the previous join


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_aligned_join_extended_then_broken_equals_joins_from_scratch(
    make_memory: MemoryFactory, tmp_path: Path, seed: int
) -> None:
    """Entries appended in the memories' order join without dictionaries (aligned) until a
    record breaks the order (re-embedded, deleted, edited, ahead of the snapshot): every
    step, the extended join equals one computed from scratch."""
    rng = random.Random(seed)
    engine = FileVectorMemoryIndex(tmp_path).engine
    with engine.locked():
        engine.identity_code(FaultyProvider(2).identity, create=True)
    session, owner = identity_hash("session"), identity_hash("owner")
    memories: list[GameMemory] = []
    cache = JoinCache(MemoryDigests())
    broken_at = rng.randint(5, 25)
    previous: PartitionJoin | None = None
    kept_rows: list[int] = []
    had_room = False
    for step in range(40):
        records: list[EntryRecord] = []
        rows = 0  # rows of this batch (the engine places them after the file's)
        for _ in range(rng.randint(0, 3)):
            memories.append(make_memory(f"m{len(memories)}", tick=len(memories)))
            pending = rng.random() < 0.1
            state = EntryState.PENDING if pending else EntryState.READY
            records.append(
                entry(
                    memories[-1],
                    state,
                    row=NO_VALUE if pending else rows,
                    identity=NO_VALUE if pending else ACTIVE,
                )
            )
            rows += 0 if pending else 1
        if step == broken_at and memories:
            kind = rng.choice(["again", "deleted", "edited", "ahead"])
            target = rng.choice(memories)
            if kind == "again":
                records.append(entry(target, row=rows))
                rows += 1
            elif kind == "deleted":
                records.append(
                    EntryRecord(
                        EntryState.DELETED,
                        NO_VALUE,
                        NO_VALUE,
                        memory_hash(target.memory_id),
                        bytes(32),
                        "",
                    )
                )
            elif kind == "edited":
                other = make_memory(target.memory_id, text="other content")
                records.append(entry(target, row=rows, digest=content_digest(other)))
                rows += 1
            else:
                records.append(entry(make_memory("not-yet"), row=rows))
                rows += 1
        ready = sum(1 for r in records if r.state is EntryState.READY)
        if records:
            with engine.locked():
                vectors = {ACTIVE: np.ones((ready, 2), np.float32)} if ready else None
                engine.append(session, owner, records, vectors)
        current = engine.partition(session, owner)
        snapshot = view(list(memories))
        joined = cache.join(snapshot, current, ACTIVE)
        fresh = JoinCache(MemoryDigests()).join(snapshot, current, ACTIVE)
        assert join_summary(joined) == join_summary(fresh), f"step {step}"
        assert joined.entries == fresh.entries
        if step < broken_at and current is not None and current.records:
            assert joined.state.aligned == current.records  # no dictionary was built
            # An aligned join knows exactly (extended: from what was added) whether its
            # rows and positions count up: no pending entry among them so far.
            assert joined.dense == fresh.dense == counts_up(joined), f"step {step}"
            if previous is not None and had_room and joined is not previous:
                # Extended in the room the previous version grew into, not concatenated.
                assert np.shares_memory(previous.rows, joined.rows), f"step {step}"
                assert previous.rows.tolist() == kept_rows, "an older version changed"
        assert not joined.dense or counts_up(joined)
        previous, kept_rows = joined, joined.rows.tolist()
        had_room = "rows" in joined.state.rooms and joined.rows.size > 0


def test_a_join_state_s_grown_bytes_read_as_one_byte_string() -> None:
    """``_Grown`` (an aligned join's hashes and digests: a shared head, then what appends
    added) slices and joins exactly as the bytes it stands for."""
    import random

    from game_memory.index.join import _Grown

    rng = random.Random(5)
    for head_kind in (bytes, memoryview):
        head = rng.randbytes(96)
        grown = _Grown(head_kind(head))
        whole = bytearray(head)
        for more in (b"", rng.randbytes(32), memoryview(rng.randbytes(64))):
            grown.extend(more)
            whole += more
            assert len(grown) == len(whole) and grown.whole() == bytes(whole)
            for _ in range(40):
                start = rng.randint(0, len(whole))
                stop = rng.randint(start, len(whole))
                assert grown.slice(start, stop) == bytes(whole[start:stop])
    assert _Grown().whole() == b"" and len(_Grown()) == 0
