"""PostgresVectorIndex: entries joined to views, refreshes across processes, sweeps, damage."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import psycopg
import pytest

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    GameMemory,
    MemoryEmbeddingIdentity,
    VectorIndex,
)
from game_memory.index.entries import EntryState
from game_memory.index.partition import PartitionReplacedError
from game_memory.postgres import PostgresVectorIndex
from game_memory.store.view import PartitionView

Factory = Callable[..., PostgresVectorIndex]
MemoryFactory = Callable[..., GameMemory]
IDENTITY = MemoryEmbeddingIdentity(provider_id="test", model_id="model", version="v1", dimensions=4)
OTHER = MemoryEmbeddingIdentity(provider_id="test", model_id="model", version="v2", dimensions=4)


def view(*memories: GameMemory) -> PartitionView:
    first = memories[0]
    positions = {m.memory_id: i for i, m in enumerate(memories)}
    return PartitionView(first.session_id, first.owner_id, tuple(memories), positions)


def rows(count: int, seed: int = 0) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((count, 4)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


async def test_written_vectors_join_their_view_exactly(
    make_postgres_index: Factory, make_memory: MemoryFactory
) -> None:
    index = make_postgres_index()
    assert isinstance(index, VectorIndex) and index.folder is None
    memories = [make_memory(f"m{n}", text=f"memory {n}") for n in range(3)]
    vectors = rows(3)
    index.write(memories, vectors, IDENTITY)
    joined = index.join(view(*memories), IDENTITY)
    assert (joined.ready, joined.pending, joined.stale, joined.orphans) == (3, 0, 0, 0)
    matrix = index.vectors(joined, IDENTITY)
    for row, position in zip(joined.rows.tolist(), joined.positions.tolist(), strict=True):
        assert np.array_equal(matrix[row], vectors[position])
    assert index.is_ready(memories[0], IDENTITY)
    assert not index.is_ready(memories[0], OTHER)
    assert not index.is_ready(make_memory("m0", text="other content"), IDENTITY)


async def test_another_process_sees_writes_marks_and_deletions(
    make_postgres_index: Factory, make_memory: MemoryFactory
) -> None:
    reader, writer = make_postgres_index(), make_postgres_index()
    memories = [make_memory(f"m{n}") for n in range(4)]
    assert reader.join(view(*memories), IDENTITY).ready == 0
    writer.write(memories[:2], rows(2), IDENTITY)
    first = reader.join(view(*memories), IDENTITY)
    assert (first.ready, first.pending) == (2, 2)
    writer.mark(memories[2:3], EntryState.FAILED, "embedding_failed")
    writer.write(memories[3:], rows(1, 1), IDENTITY)
    writer.write(memories[:1], rows(1, 2), IDENTITY)  # rewritten: the latest wins
    grown = reader.join(view(*memories), IDENTITY)
    assert (grown.ready, grown.pending) == (3, 1)
    assert grown.partition is not None and grown.partition.inode == first.partition.inode
    latest = reader.vectors(grown, IDENTITY)[grown.rows[grown.positions.tolist().index(0)]]
    assert np.array_equal(latest, rows(1, 2)[0])
    # The sweep deletes an orphan (m3 is gone from the save): readers load the partition anew.
    candidates = writer.orphans("session", [view(*memories[:3])])
    assert candidates.count == 1
    assert writer.remove_orphans(candidates, [view(*memories[:3])]) == 1
    after = reader.join(view(*memories[:3]), IDENTITY)
    assert (after.ready, after.orphans) == (2, 0)
    assert after.partition is not None and after.partition.inode != first.partition.inode
    with pytest.raises(PartitionReplacedError):
        reader.vectors(first, IDENTITY)


async def test_an_entry_rewritten_after_it_was_listed_survives_the_sweep(
    make_postgres_index: Factory, make_memory: MemoryFactory
) -> None:
    index = make_postgres_index()
    memory = make_memory("m1")
    index.write([memory], rows(1), IDENTITY)
    candidates = index.orphans("session", [])
    index.write([memory], rows(1, 5), IDENTITY)  # the memory was saved again meanwhile
    assert index.remove_orphans(candidates, []) == 0
    assert index.join(view(memory), IDENTITY).ready == 1


async def test_a_full_partition_refuses_new_entries_but_rewrites_old_ones(
    make_postgres_index: Factory, make_memory: MemoryFactory
) -> None:
    index = make_postgres_index(capacity=2)
    memories = [make_memory(f"m{n}") for n in range(3)]
    index.write(memories[:2], rows(2), IDENTITY)
    with pytest.raises(CapacityExceededError) as raised:
        index.write(memories[2:], rows(1), IDENTITY)
    assert raised.value.bound == "capacity"
    index.write(memories[:1], rows(1, 3), OTHER)
    joined = index.join(view(*memories), OTHER)
    assert (joined.ready, joined.stale, joined.pending) == (1, 1, 1)


async def test_verify_names_damaged_partitions_and_repair_deletes_them(
    make_postgres_index: Factory, make_memory: MemoryFactory, database: str
) -> None:
    index = make_postgres_index()
    good = [make_memory(f"g{n}", owner_id="good") for n in range(2)]
    bad = [make_memory(f"b{n}", owner_id="bad") for n in range(2)]
    index.write(good + bad, rows(4), IDENTITY)
    assert index.verify("session", repair=False) == []
    with psycopg.connect(database, autocommit=True) as connection:
        connection.execute(
            "UPDATE game_memory_index_entries SET embedding = '[1,2,3]' WHERE owner_id = 'bad'"
        )
    fresh = make_postgres_index()
    with pytest.raises(DerivedIndexError, match="dimensions"):
        fresh.join(view(*bad), IDENTITY)
    damaged = fresh.verify("session", repair=True)
    assert len(damaged) == 1 and "'bad'" in str(damaged[0])
    assert fresh.verify("session", repair=False) == []
    assert fresh.join(view(*bad), IDENTITY).ready == 0
    assert fresh.join(view(*good), IDENTITY).ready == 2


async def test_an_unreachable_server_is_a_derived_index_error() -> None:
    index = PostgresVectorIndex("postgresql://u:pw@127.0.0.1:1/nowhere", timeout=2)
    with pytest.raises(DerivedIndexError, match="could not reach"):
        index.verify("session", repair=False)
    await index.aclose()
