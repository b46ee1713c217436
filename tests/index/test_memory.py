"""InMemoryVectorIndex: its checks, its damage handling, its threads and its argument checks.

The shared behaviour is proved on every backend by ``tests/conformance/``. Damage here means
changing the index's own storage (its record bytes and row buffers), as the file index tests
flip bytes in files: the outcome must be the same, a ``DerivedIndexError`` and a rebuild.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import (
    DerivedIndexError,
    GameMemory,
    HashingEmbeddingProvider,
    InvalidArgumentError,
    VectorMemoryState,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.durable.names import identity_hash
from game_memory.index.entries import EntryState
from game_memory.index.memory import InMemoryVectorIndex
from game_memory.index.memory_partition import MemoryPartition
from game_memory.store.memory import InMemoryGameMemoryStore
from game_memory.store.view import PartitionView
from support.providers import FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, query

PROVIDER = HashingEmbeddingProvider(16)
IDENTITY = PROVIDER.identity


def view(memories: Sequence[GameMemory]) -> PartitionView:
    return PartitionView(
        memories[0].session_id,
        memories[0].owner_id,
        tuple(memories),
        {memory.memory_id: index for index, memory in enumerate(memories)},
    )


def embed(memories: Sequence[GameMemory]) -> npt.NDArray[np.float32]:
    return np.stack([PROVIDER.embed(m.searchable_text or "") + 0.01 for m in memories])


def partition_of(index: InMemoryVectorIndex, owner: str = "owner") -> MemoryPartition:
    """The index's storage of one partition (reached into on purpose, to damage it)."""
    return index._slots[(identity_hash("session"), identity_hash(owner))]


@pytest.fixture
async def hybrid(diagnostics: Diagnostics) -> AsyncIterator[VectorMemoryStore]:
    store = VectorMemoryStore(
        InMemoryGameMemoryStore(),
        InMemoryVectorIndex(),
        FaultyProvider(),
        diagnostics=diagnostics,
        options=VectorMemoryStoreOptions(dispose_embedding_provider=False),
    )
    yield store
    await store.aclose()


def test_it_has_no_folder_and_says_what_it_holds() -> None:
    index = InMemoryVectorIndex(capacity=7)
    assert (index.folder, index.capacity) == (None, 7)
    assert repr(index) == "InMemoryVectorIndex(partitions=0, closed=False)"


@pytest.mark.parametrize(
    "options",
    [
        {"capacity": 0},
        {"capacity": 2.5},
        {"digest_cache_entries": 999},
        {"digest_cache_entries": True},
    ],
)
def test_out_of_range_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        InMemoryVectorIndex(**options)  # type: ignore[arg-type]


def test_vectors_must_be_one_row_of_the_identitys_width_per_memory(
    make_memory: MemoryFactory,
) -> None:
    index = InMemoryVectorIndex()
    memories = [make_memory("a", text="cat"), make_memory("b", text="dog")]
    for bad in (embed(memories)[:1], embed(memories)[:, :8], np.zeros(16, np.float32)):
        with pytest.raises(InvalidArgumentError, match="one vector of 16 values per memory"):
            index.write(memories, bad, IDENTITY)
    assert index._slots == {}
    index.write([], np.zeros((0, 16), np.float32), IDENTITY)  # nothing to write is fine


def test_mark_takes_only_failed_or_pending_with_an_ascii_code(make_memory: MemoryFactory) -> None:
    index = InMemoryVectorIndex()
    memory = make_memory("a")
    for state, code in (
        (EntryState.READY, "x"),
        (EntryState.DELETED, "x"),
        (EntryState.FAILED, "é"),
    ):
        with pytest.raises(InvalidArgumentError):
            index.mark([memory], state, code)
    assert index._slots == {}


def test_handed_out_vectors_are_read_only_and_survive_later_writes(
    make_memory: MemoryFactory,
) -> None:
    index = InMemoryVectorIndex()
    first = [make_memory(f"m{i}", text=f"cat {i}") for i in range(3)]
    index.write(first, embed(first), IDENTITY)
    joined = index.join(view(first), IDENTITY)
    matrix = index.vectors(joined, IDENTITY)
    copy = matrix.copy()
    assert not matrix.flags.writeable
    more = [make_memory(f"n{i}", text=f"dog {i}") for i in range(500)]  # the buffer grows
    index.write(more, embed(more), IDENTITY)
    index.write(first, embed(more[:3]), IDENTITY)  # and the first three are superseded
    assert np.array_equal(matrix, copy)
    assert index.vectors(index.join(view(first + more), IDENTITY), IDENTITY).shape == (506, 16)


def test_verify_finds_a_flipped_record_byte_and_repair_deletes_the_partition(
    make_memory: MemoryFactory,
) -> None:
    index = InMemoryVectorIndex()
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(3)]
    index.write(memories, embed(memories), IDENTITY)
    partition_of(index).entries[128 + 20] ^= 0x01  # a byte of the second record's hash
    (damage,) = index.verify("session", repair=False)
    assert isinstance(damage, DerivedIndexError) and "record 1 fails its checksum" in str(damage)
    assert index.is_ready(memories[0], IDENTITY)  # not repaired yet
    assert len(index.verify("session", repair=True)) == 1
    assert not any(index.is_ready(memory, IDENTITY) for memory in memories)
    assert index.verify("session", repair=False) == []
    assert index.session_joins("session", [], IDENTITY) == []


def test_verify_rechecks_every_row_against_its_checksum(make_memory: MemoryFactory) -> None:
    index = InMemoryVectorIndex()
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(3)]
    index.write(memories, embed(memories), IDENTITY)
    index.vectors(index.join(view(memories), IDENTITY), IDENTITY)  # checked once on first use
    (buffer,) = partition_of(index).rows.values()
    buffer.array[2, 5] += 1.0
    (damage,) = index.verify("session", repair=True)
    assert "vector 2 of the in-memory index partition" in str(damage)
    assert "fails its checksum" in str(damage)


def test_a_damaged_row_never_reaches_scoring(make_memory: MemoryFactory) -> None:
    index = InMemoryVectorIndex()
    memories = [make_memory(f"m{i}", text=f"cat {i}") for i in range(2)]
    index.write(memories, embed(memories), IDENTITY)
    (buffer,) = partition_of(index).rows.values()
    buffer.array[1, 0] = 7.0  # damaged before any read checked it
    with pytest.raises(DerivedIndexError, match="fails its checksum"):
        index.vectors(index.join(view(memories), IDENTITY), IDENTITY)


async def test_a_rebuild_replaces_a_damaged_partition_and_recall_falls_back_until_then(
    hybrid: VectorMemoryStore, make_memory: MemoryFactory, diagnostics: Diagnostics
) -> None:
    await hybrid.append(make_memory("m1", text="the cat sleeps on the roof"))
    await hybrid.append(make_memory("m2", text="a dog barks"))
    assert isinstance(hybrid.index, InMemoryVectorIndex)
    (buffer,) = partition_of(hybrid.index).rows.values()
    buffer.array[0, 0] += 1.0
    result = await hybrid.recall(query("feline"))
    assert result.fallback and result.memories == ()
    assert diagnostics.codes() == ["memory_vector_search_failed"]
    status = await hybrid.rebuild("session")
    assert status.state is VectorMemoryState.READY
    assert "memory_vector_index_reset" in diagnostics.codes()
    assert [m.memory_id for m in (await hybrid.recall(query("feline", limit=1))).memories] == ["m1"]


def test_a_partition_left_without_entries_by_the_sweep_is_dropped(
    make_memory: MemoryFactory,
) -> None:
    index = InMemoryVectorIndex()
    gone = make_memory("gone", owner_id="ghost", text="cat")
    kept = make_memory("kept", text="dog")
    index.write([gone, kept], embed([gone, kept]), IDENTITY)
    candidates = index.orphans("session", [view([kept])])
    assert index.remove_orphans(candidates, [view([kept])]) == 1
    assert [
        j.view is not None for j in index.session_joins("session", [view([kept])], IDENTITY)
    ] == [True]
    assert (identity_hash("session"), identity_hash("ghost")) not in index._slots


def test_writers_and_readers_in_many_threads_lose_nothing(make_memory: MemoryFactory) -> None:
    index = InMemoryVectorIndex(capacity=1_000)
    owners = ["a", "b"]
    memories = {
        owner: [make_memory(f"m{i}", owner_id=owner, text=f"cat {i}") for i in range(200)]
        for owner in owners
    }
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            own = memories[owners[worker % 2]]
            for start in range(worker, 200, 4):  # the four workers share both partitions
                batch = own[start : start + 1] + own[(start * 7) % 200 : (start * 7) % 200 + 1]
                index.write(batch, embed(batch), IDENTITY)
                joined = index.join(view(own), IDENTITY)
                matrix = index.vectors(joined, IDENTITY)
                assert matrix.shape[0] >= joined.rows.max(initial=-1) + 1
        except BaseException as exc:  # reported below, never lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for owner in owners:
        own = memories[owner]
        assert sum(index.is_ready(memory, IDENTITY) for memory in own) == 100
    assert index.verify("session", repair=False) == []


async def test_closing_drops_every_vector(make_memory: MemoryFactory) -> None:
    index = InMemoryVectorIndex()
    memory = make_memory("m", text="cat")
    index.write([memory], embed([memory]), IDENTITY)
    await index.aclose()
    assert index._slots == {} and repr(index).endswith("closed=True)")
