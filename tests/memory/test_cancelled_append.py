"""A cancelled ``append`` (or ``consolidate``) is finished before the cancellation is raised.

The save of a memory cannot be taken back once its group commit has begun (the store
writes it in the background either way), so a cancellation that lands after that point
used to leave the memory saved without its vector, and with no diagnostic: recalled
lexically only, until a rebuild. Now the append runs to its end, saved *and* indexed, and
the caller's task is cancelled after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable

import pytest

from game_memory import GameMemoryKind
from support.providers import FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query


async def cancel_while_it_embeds(provider: FaultyProvider, write: Awaitable[object]) -> None:
    """Start ``write``, cancel it once its memory is saved and its vector being embedded
    (the provider's document call held), then let the embedding go on: the cancellation
    must wait for the write's end, and must not be lost."""
    embedding, release = asyncio.Event(), asyncio.Event()

    async def blocked(_texts: object) -> None:
        embedding.set()
        await release.wait()

    provider.on_documents = blocked
    task = asyncio.ensure_future(write)
    await embedding.wait()
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()  # the cancellation waits for the write's end
    release.set()
    with pytest.raises(asyncio.CancelledError):  # the cancellation is not lost
        await task
    provider.on_documents = None


async def test_an_append_cancelled_while_it_embeds_is_saved_and_indexed(
    make_vector_store: VectorStoreFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store()
    await store.append(make_memory("seed", text="the well"))
    await cancel_while_it_embeds(provider, store.append(make_memory("late", text="the well again")))
    status = await store.get_status("session")
    assert (status.total_entries, status.ready_entries, status.pending_entries) == (2, 2, 0)
    recalled = await store.recall(query("well"))
    assert {m.memory_id for m in recalled.memories} == {"seed", "late"} and not recalled.fallback
    assert "memory_embedding_append_failed" not in diagnostics.codes()


async def test_appends_cancelled_at_any_point_leave_every_saved_memory_indexed(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append(make_memory("seed", text="the well"))
    for turns in range(12):
        memory = make_memory(f"m{turns}", text=f"the well {turns}")
        task = asyncio.ensure_future(store.append(memory))
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # or it ended before the cancel
            await task
    saved = {m.memory_id for m in await store.enumerate("session")}
    status = await store.get_status("session")
    assert status.total_entries == len(saved) and status.ready_entries == len(saved)
    assert status.pending_entries == 0


async def test_a_consolidate_cancelled_while_its_summary_embeds_is_finished(
    make_vector_store: VectorStoreFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"s{number}", text=f"the fire {number}", tick=number))
    summary = make_memory(
        "summary", text="the fires were arson", tick=10, kind=GameMemoryKind.REFLECTION
    )
    await cancel_while_it_embeds(
        provider, store.consolidate("session", "owner", ["s0", "s1"], summary)
    )
    status = await store.get_status("session")
    assert status.ready_entries == status.total_entries == 4


async def test_a_batch_cancelled_while_it_embeds_is_saved_and_indexed(
    make_vector_store: VectorStoreFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    batch = [make_memory(f"b{number}", text=f"the mill {number}") for number in range(5)]
    await cancel_while_it_embeds(provider, store.append_many(batch))
    status = await store.get_status("session")
    assert status.ready_entries == status.total_entries == 5
