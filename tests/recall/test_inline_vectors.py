"""A warm recall scores its vectors on the event loop, and every case that must not.

When the index holds a partition's join and checked rows, current (``cached_vectors``), and
they are few (``pipeline.INLINE_ROWS``), recall scores them where it runs instead of hopping
into the front door's pool: the hop cost more than the product at 10k rows. These tests pin
that it answers exactly as the pool path does, that this process's own appends stay held
(the writer hands its rows to the held room, the join is extended on the loop), and that
whatever else changed since (another writer of the same save and index, the first append
after a map, a large batch, damaged rows) or is large goes through the pool's blocking
reads, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from game_memory import VectorMemoryStore
from game_memory.index import join, row_map
from game_memory.index import partition as partition_module
from game_memory.index.partition import RowBuffer
from game_memory.recall import pipeline
from support.maps import mapped_file
from support.providers import Fault, FaultyProvider
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


@contextlib.contextmanager
def held_by_another_thread(lock: threading.Lock) -> Iterator[None]:
    """``lock`` held by another thread for the ``with`` block."""
    taken = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(5)
    try:
        yield
    finally:
        release.set()
        holder.join()


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


async def test_an_append_is_joined_through_the_pool_then_held_and_later_ones_on_the_loop(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After an append the writer has mapped its rows as checked, and the join is extended
    on the loop (``JoinCache.extended_now``), answering as a fresh reader does."""
    store = make_vector_store()
    await fill(store, make_memory, 10)
    asked = query("kitten", owner_id="owner", limit=3)
    await store.recall(asked)
    await store.append(make_memory("new", text="a small kitten", tick=50))
    hops = counting(store)
    after = await store.recall(asked)
    assert hops[0] == 0 and after.hits[0].memory.memory_id == "new"
    held = await store.recall(asked)
    assert hops[0] == 0 and evidence(held) == evidence(after)
    for number in range(3):
        await store.append(make_memory(f"kit{number}", text=f"kitten {number}", tick=60 + number))
        later = await store.recall(asked)
        assert hops[0] == 0 and not later.fallback  # no hop: rows and join held
        fresh = make_vector_store()  # another handle: joins and reads through its pool
        assert evidence(await fresh.recall(asked)) == evidence(later)
    monkeypatch.setattr(join, "INLINE_GROWTH", 1)
    await store.append_many(
        [make_memory(f"pair{n}", text=f"kitten pair {n}", tick=70 + n) for n in range(2)]
    )
    grown = await store.recall(asked)
    assert hops[0] == 1  # more than the bound: joined through the pool
    assert evidence(grown) == evidence(await make_vector_store().recall(asked))
    monkeypatch.setattr(join, "INLINE_GROWTH", 64)
    await store.append(make_memory("small", text="kitten small", tick=75))
    small = await store.recall(asked)
    assert hops[0] == 1 and not small.fallback  # on the loop again
    monkeypatch.setattr(join, "INLINE_ENTRIES", 10)  # a partition past it: the pool's join
    await store.append(make_memory("large", text="kitten large", tick=80))
    large = await store.recall(asked)
    assert hops[0] == 2 and evidence(large) == evidence(await make_vector_store().recall(asked))


async def test_a_join_that_no_longer_lines_up_is_given_back_and_joined_in_the_pool(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    """A memory saved without a vector (its embedding failed) leaves the next one's entry
    out of the view's order: the join is not extended on the loop but given back, and the
    pool's join answers as a fresh reader does, then is held again."""
    store, fresh = make_vector_store(), make_vector_store()
    for door in (store, fresh):  # no catch-up of "lost": the join is what is looked at here
        door._parts = dataclasses.replace(door._parts, missing=None)
    await fill(store, make_memory, 10)
    asked = query("kitten", owner_id="owner", limit=4)
    for number in range(2):  # past the first append's read into room
        await store.append(make_memory(f"warm{number}", text=f"kitten {number}", tick=40))
        await store.recall(asked)
    provider.document_fault = Fault.FAIL
    await store.append(make_memory("lost", text="a kitten without a vector", tick=50))
    provider.document_fault = Fault.NONE
    await store.append(make_memory("found", text="a kitten found", tick=51))
    hops = counting(store)
    after = await store.recall(asked)
    assert hops[0] == 1 and not after.fallback
    assert evidence(after) == evidence(await fresh.recall(asked))
    again = await store.recall(asked)
    assert hops[0] == 1 and evidence(again) == evidence(after)


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


def rows_file(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A row file of 3 rows of 4 values, and those rows."""
    path = tmp_path / "rows.f32"
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    path.write_bytes(rows.tobytes())
    return path, rows


def test_rows_are_handed_out_without_a_read_only_once_checked_and_never_while_locked(
    tmp_path: Path,
) -> None:
    path, rows = rows_file(tmp_path)

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
    with held_by_another_thread(buffer.lock):
        assert buffer.checked_rows(Partition(), 3) is None  # never waits for the lock
    assert buffer.checked_rows(Partition(), 3) is not None


class Written:
    """What take_written reads of an IndexPartition: its record count."""

    def __init__(self, records: int) -> None:
        self.records = records


def appender(path: Path) -> Callable[[np.ndarray], Any]:
    """Append rows to the row file at ``path``; return its ``stat`` after."""

    def append(values: np.ndarray) -> Any:
        with path.open("ab") as file:
            file.write(values.tobytes())
        return path.stat()

    return append


@pytest.mark.parametrize("small", [False, True], ids=["mapped", "small-read"])
def test_a_writer_s_rows_are_mapped_as_checked_only_after_every_checked_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: bool
) -> None:
    # A small file is read into memory with room (``SMALL_ROWS_BYTES``), a large one mapped:
    # a writer's rows are taken alike, into the room or mapped in place.
    if not small:
        monkeypatch.setattr(partition_module, "SMALL_ROWS_BYTES", 0)
    path, rows = rows_file(tmp_path)

    append = appender(path)

    buffer = RowBuffer(tag=1, dimensions=4)
    one = np.full((1, 4), 7, np.float32)
    info = append(one)
    assert not buffer.take_written(str(path), 3, info, Written(3), Written(4))  # unread
    buffer.load(str(path), 3)
    assert buffer.rows == 4  # the read mapped every whole row there was
    buffer.checked = 4
    two = np.full((2, 4), 8, np.float32)
    info = append(two)
    assert not buffer.take_written(str(path), 3, info, Written(4), Written(6))  # not held
    assert not buffer.take_written(str(path), 4, info, Written(5), Written(7))  # unchecked
    with held_by_another_thread(buffer.lock):
        assert not buffer.take_written(str(path), 4, info, Written(4), Written(6))
    assert buffer.rows == 4 and buffer.checked == 4
    assert buffer.take_written(str(path), 4, info, Written(4), Written(6))
    assert buffer.rows == 6 and buffer.checked == 6
    assert (mapped_file(buffer.array) == str(path)) is not small
    assert buffer.file is not None and buffer.file[2] == info.st_size
    held = buffer.checked_rows(Written(6), 6)
    assert held is not None and np.array_equal(held, np.concatenate((rows, one, two)))
    three = np.full((1, 4), 9, np.float32)
    stale = append(three)
    append(three)  # another write came after the one taken: left for a search to check
    assert not buffer.take_written(str(path), 6, stale, Written(6), Written(7))
    assert buffer.checked == 6


def test_where_a_map_cannot_grow_in_place_the_writer_leaves_the_first_copy_to_a_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first growth without an in-place map copies every row: never on the writer's
    # thread (the event loop), always on a search's (the pool). Later rows fit the room.
    monkeypatch.setattr(row_map, "_MMAP", None)  # as on Windows
    monkeypatch.setattr(partition_module, "SMALL_ROWS_BYTES", 0)  # a file that is mapped
    path, rows = rows_file(tmp_path)

    append = appender(path)

    buffer = RowBuffer(tag=1, dimensions=4)
    buffer.load(str(path), 3)
    buffer.checked = 3
    one = np.full((1, 4), 7, np.float32)
    info = append(one)
    assert not buffer.take_written(str(path), 3, info, Written(3), Written(4))
    assert buffer.rows == 3 and mapped_file(buffer.array) == str(path)  # nothing copied
    buffer.load(str(path), 4)  # the search copies, into room
    buffer.checked = 4
    assert mapped_file(buffer.array) != str(path)
    two = np.full((2, 4), 8, np.float32)
    info = append(two)
    assert buffer.take_written(str(path), 4, info, Written(4), Written(6))  # room: taken
    assert buffer.rows == 6 and buffer.checked == 6
    assert np.array_equal(buffer.array, np.concatenate((rows, one, two)))
