"""A warm recall scores its vectors on the event loop, and every case that must not.

When the index holds a partition's join and checked rows, current (``cached_vectors``), and
they are few (``pipeline.INLINE_ROWS``), recall scores them where it runs instead of hopping
into the front door's pool: the hop cost more than the product at 10k rows. These tests pin
that it answers exactly as the pool path does, and that whatever changed since (another
writer of the same save and index, an append, damaged rows) or is large goes through the
pool's blocking reads, as before.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from game_memory import VectorMemoryStore
from game_memory.index.partition import RowBuffer
from game_memory.recall import pipeline
from support.vectors import MemoryFactory, VectorStoreFactory, query

_T = TypeVar("_T")


def counting(store: VectorMemoryStore) -> list[int]:
    """Count the hops of the store's recalls into its pool (``RecallParts.run``) from now on."""
    hops = [0]
    run = store._parts.run

    async def counted(function: Callable[[], _T]) -> _T:
        hops[0] += 1
        return await run(function)

    store._parts = dataclasses.replace(store._parts, run=counted)
    return hops


def evidence(result: Any) -> list[tuple[Any, ...]]:
    return [
        (hit.memory.memory_id, hit.lexical_rank, hit.vector_rank, hit.vector_score, hit.fused_score)
        for hit in result.hits
    ]


async def fill(store: VectorMemoryStore, make_memory: MemoryFactory, count: int) -> None:
    texts = [f"the cat {n} sleeps on roof {n % 5}" for n in range(count)]
    await store.append_many(
        [make_memory(f"m{n:02}", text=text, tick=n) for n, text in enumerate(texts)]
    )


async def test_a_held_partition_is_scored_without_a_hop_and_answers_as_the_pool(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await fill(store, make_memory, 20)
    asked = query("feline roof", owner_id="owner", limit=5)
    first = await store.recall(asked)  # joins and reads the rows through the pool
    hops = counting(store)
    again = await store.recall(asked)
    assert hops[0] == 0 and not again.fallback
    assert evidence(again) == evidence(first)
    assert any(hit.vector_rank is not None for hit in again.hits)
    names = [stage.stage.name for stage in again.snapshot.stages]
    assert "VECTOR_INDEX_READ" in names and "VECTOR_SCORING" in names


async def test_another_writer_of_the_save_and_index_is_seen_through_the_pool(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    reader = make_vector_store()
    await fill(reader, make_memory, 10)
    asked = query("kitten", owner_id="owner", limit=3)
    await reader.recall(asked)
    hops = counting(reader)
    await reader.recall(asked)
    assert hops[0] == 0
    writer = make_vector_store()  # another handle on the same folders: another process
    await writer.append(make_memory("new", text="a small kitten", tick=50))
    seen = await reader.recall(asked)
    assert hops[0] == 1  # the index's entries changed behind the reader's cache
    assert seen.hits[0].memory.memory_id == "new" and seen.hits[0].vector_rank == 1
    await reader.recall(asked)
    assert hops[0] == 1  # and is held again


async def test_an_append_is_joined_through_the_pool_then_held(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await fill(store, make_memory, 10)
    asked = query("kitten", owner_id="owner", limit=3)
    await store.recall(asked)
    await store.append(make_memory("new", text="a small kitten", tick=50))
    hops = counting(store)
    after = await store.recall(asked)
    assert hops[0] == 1 and after.hits[0].memory.memory_id == "new"
    held = await store.recall(asked)
    assert hops[0] == 1 and evidence(held) == evidence(after)


async def test_more_rows_than_the_inline_bound_are_scored_in_the_pool(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    await fill(store, make_memory, 12)
    asked = query("feline", owner_id="owner", limit=4)
    first = await store.recall(asked)
    monkeypatch.setattr(pipeline, "INLINE_ROWS", 11)
    hops = counting(store)
    again = await store.recall(asked)
    assert hops[0] == 1 and evidence(again) == evidence(first)


def test_rows_are_handed_out_without_a_read_only_once_checked_and_never_while_locked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.f32"
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    path.write_bytes(rows.tobytes())

    class Partition:  # what checked_rows reads of an IndexPartition
        records = 3

    buffer = RowBuffer(tag=1, dimensions=4)
    assert buffer.checked_rows(Partition(), 3) is None  # nothing read yet
    buffer.load(str(path), 3)
    assert buffer.checked_rows(Partition(), 3) is None  # read, not verified
    buffer.checked = 3
    held = buffer.checked_rows(Partition(), 3)
    assert held is not None and np.array_equal(held, rows) and not held.flags.writeable
    assert buffer.checked_rows(Partition(), 4) is None  # more rows than held
    taken = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with buffer.lock:
            taken.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(5)
    try:
        assert buffer.checked_rows(Partition(), 3) is None  # never waits for the lock
    finally:
        release.set()
        holder.join()
    assert buffer.checked_rows(Partition(), 3) is not None
