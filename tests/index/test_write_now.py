"""An append's vector written on the event loop, and every case that waits for the pool.

``FileVectorMemoryIndex.write_now`` writes one partition's records and rows as ``write``
does when that needs no wait: the partition cached and current, the identity known, the
writer lock free, no fsync. These tests pin when it declines (and then writes nothing),
that what it writes is what ``write`` writes, and that the front door's append uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from game_memory import CapacityExceededError, FileVectorMemoryIndex, HashingEmbeddingProvider
from game_memory.model import GameMemory
from support.vectors import (
    Diagnostics,
    MemoryFactory,
    VectorStoreFactory,
    owner_view,
    query,
    unit_rows,
)

_T = TypeVar("_T")
V1 = HashingEmbeddingProvider(32)


view = owner_view


def embed(memories: list[GameMemory]) -> np.ndarray:
    return unit_rows(memories, V1)


def held(index: FileVectorMemoryIndex, memories: list[GameMemory]) -> None:
    """Write ``memories`` and read their partition, so the index holds it."""
    index.write(memories, embed(memories), V1.identity)
    index.vectors(index.join(view(memories), V1.identity), V1.identity)


async def test_a_held_partition_is_written_now_and_reads_back_as_written(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    index = FileVectorMemoryIndex(tmp_path / "index")
    twin = FileVectorMemoryIndex(tmp_path / "twin")
    memories = [make_memory(f"m{i}", text=f"the mill {i}") for i in range(4)]
    held(index, memories[:3])
    held(twin, memories[:3])
    assert index.write_now(memories[3:], embed(memories[3:]), V1.identity)
    twin.write(memories[3:], embed(memories[3:]), V1.identity)
    # The same rows, and entries of the same size, as write() writes (the row files' names
    # carry each index's own generation tag).
    for suffix in ("*.f32", "*.entries"):
        mine = sorted((tmp_path / "index").rglob(suffix))
        theirs = sorted((tmp_path / "twin").rglob(suffix))
        assert [p.stat().st_size for p in mine] == [p.stat().st_size for p in theirs]
    assert [p.read_bytes() for p in sorted((tmp_path / "index").rglob("*.f32"))] == [
        p.read_bytes() for p in sorted((tmp_path / "twin").rglob("*.f32"))
    ]
    joined = index.join(view(memories), V1.identity)
    assert joined.ready == 4
    assert index.vectors(joined, V1.identity)[3].tobytes() == embed(memories[3:])[0].tobytes()
    await index.aclose()
    await twin.aclose()


async def test_write_now_declines_whatever_would_wait_and_writes_nothing(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", text=f"the mill {i}") for i in range(3)]
    other = make_memory("o1", owner_id="someone-else", text="another npc")
    fresh = FileVectorMemoryIndex(tmp_path / "fresh")
    assert not fresh.write_now(memories[:1], embed(memories[:1]), V1.identity)  # never opened
    await fresh.aclose()

    index = FileVectorMemoryIndex(tmp_path / "index")
    held(index, memories[:2])
    new = memories[2:]
    assert not index.write_now(new, embed(new), HashingEmbeddingProvider(32, version="v2").identity)
    assert not index.write_now([new[0], other], embed([new[0], other]), V1.identity)
    assert not index.write_now([other], embed([other]), V1.identity)  # not held
    assert not index.write_now(new, np.full((1, 32), np.nan, np.float32), V1.identity)
    another = FileVectorMemoryIndex(tmp_path / "index")  # another writer holds the lock
    with another.engine.locked():
        assert not index.write_now(new, embed(new), V1.identity)
    assert not index.is_ready(new[0], V1.identity)  # nothing was written
    assert index.join(view(memories[:2]), V1.identity).ready == 2
    assert index.write_now(new, embed(new), V1.identity)  # free again, and still current
    await another.aclose()
    await index.aclose()
    durable = FileVectorMemoryIndex(tmp_path / "durable", durable_writes=True)
    held(durable, memories[:2])
    assert not durable.write_now(new, embed(new), V1.identity)  # an fsync is a wait
    await durable.aclose()
    closed = FileVectorMemoryIndex(tmp_path / "index")
    held(closed, memories)
    await closed.aclose()
    assert not closed.write_now(new, embed(new), V1.identity)


async def test_write_now_raises_what_write_raises(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    index = FileVectorMemoryIndex(tmp_path / "index", capacity=2)
    memories = [make_memory(f"m{i}", text=f"the mill {i}") for i in range(3)]
    held(index, memories[:2])
    with pytest.raises(CapacityExceededError):
        index.write_now(memories[2:], embed(memories[2:]), V1.identity)
    assert index.join(view(memories[:2]), V1.identity).ready == 2
    await index.aclose()


async def test_an_append_into_a_held_partition_writes_its_vector_without_a_hop(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, diagnostics: Diagnostics
) -> None:
    store = make_vector_store()
    for number in range(5):
        await store.append(make_memory(f"m{number}", text=f"the old mill {number}", tick=number))
    await store.recall(query("mill", owner_id="owner"))  # the index holds the partition
    hops = [0]
    run = store._run

    async def counted(function: Callable[[], _T]) -> _T:
        hops[0] += 1
        return await run(function)

    store._run = counted  # type: ignore[method-assign]
    await store.append(make_memory("new", text="a small kitten", tick=9))
    assert hops[0] == 0 and not diagnostics
    found = await store.recall(query("kitten", owner_id="owner", limit=1))
    assert found.hits[0].memory.memory_id == "new" and found.hits[0].vector_rank == 1
