"""Every store names the same memory, with the same words, for a batch's conflict.

The rule (``store/memory_partitions.py``'s ``add_many``, the file store's batches, and
PostgreSQL's ``append_batch``): walking the batch in order, the first memory unlike its id's
reference raises; the reference is the stored memory when the id is stored ("already holds
different content"), else the id's first copy in the batch ("given twice"). A conflict
anywhere comes before a capacity shortfall. PostgreSQL writes partitions in key order (its
lock order), which must not change which memory the error names.
"""

from __future__ import annotations

import pytest

from game_memory import CapacityExceededError, GameMemory, GameMemoryStore, MemoryConflictError
from game_memory.model.conflicts import memory_conflict
from support.vectors import MemoryFactory

from .conftest import StoreOpener


async def _conflict(store: GameMemoryStore, batch: list[GameMemory]) -> str:
    with pytest.raises(MemoryConflictError) as raised:
        await store.append_many(batch)
    return str(raised.value)


async def test_of_two_stored_conflicts_the_first_in_batch_order_is_named(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append_many([make_memory("m2", owner_id="o2"), make_memory("m1", owner_id="o1")])
    late_in_key_order = make_memory("m2", owner_id="o2", text="rewritten")
    batch = [late_in_key_order, make_memory("m1", owner_id="o1", text="rewritten")]
    assert await _conflict(store, batch) == str(memory_conflict(late_in_key_order))
    assert await store.count() == 2


async def test_a_stored_id_repeated_in_a_batch_conflicts_with_the_stored_memory(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    stored = make_memory("m1", text="original")
    await store.append(stored)
    first = make_memory("m1", text="b")
    assert await _conflict(store, [first, make_memory("m1", text="c")]) == str(
        memory_conflict(first)
    )
    # The first copy equals the stored memory: the second conflicts with the save, not the
    # batch ("already holds", not "given twice").
    second = make_memory("m1", text="c")
    assert await _conflict(store, [stored, second]) == str(memory_conflict(second))
    assert await store.count() == 1


async def test_a_stored_conflict_earlier_in_the_batch_comes_before_a_repeat_later(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("m1", owner_id="z", text="original"))
    rewritten = make_memory("m1", owner_id="z", text="rewritten")
    batch = [
        rewritten,
        make_memory("dup", owner_id="a", text="one"),
        make_memory("dup", owner_id="a", text="two"),
    ]
    assert await _conflict(store, batch) == str(memory_conflict(rewritten))
    # And the other way round: the repeat first in the batch is named, "given twice".
    repeat = make_memory("dup", owner_id="z2", text="two")
    batch = [make_memory("dup", owner_id="z2", text="one"), repeat, rewritten]
    assert await _conflict(store, batch) == str(memory_conflict(repeat, in_batch=True))
    assert await store.count() == 1


async def test_a_conflict_comes_before_a_capacity_shortfall(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    store = open_store(maximum_entries=3)
    await store.append(make_memory("m1", owner_id="z", text="original"))
    rewritten = make_memory("m1", owner_id="z", text="rewritten")
    too_many = [make_memory(f"n{i}", owner_id="a") for i in range(3)]
    assert await _conflict(store, [*too_many, rewritten]) == str(memory_conflict(rewritten))
    with pytest.raises(CapacityExceededError):
        await store.append_many(too_many)
    assert await store.count() == 1
