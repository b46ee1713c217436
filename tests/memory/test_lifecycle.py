"""RuntimeMemoryLifecycle: inspect, rebuild and close one hybrid store for a game's lifetime."""

from __future__ import annotations

import pytest

from game_memory import RuntimeMemoryLifecycle, StoreClosedError, VectorMemoryState
from support.providers import FaultyProvider
from support.vectors import MemoryFactory, VectorStoreFactory


async def test_inspect_reports_the_stores_status(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    lifecycle = RuntimeMemoryLifecycle(store)
    assert lifecycle.store is store
    await store.append(make_memory("m1"))
    assert (await lifecycle.inspect("session")).state is VectorMemoryState.READY


async def test_rebuild_goes_through_to_the_store_with_force_and_progress(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1"))
    lifecycle = RuntimeMemoryLifecycle(store)
    progress: list[tuple[int, int]] = []
    status = await lifecycle.rebuild("session", force=True, progress=lambda *p: progress.append(p))
    assert status.state is VectorMemoryState.READY
    assert progress == [(0, 1), (1, 1)]
    assert provider.documents.calls == 2


async def test_closing_is_idempotent_closes_the_store_and_refuses_later_use(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    lifecycle = RuntimeMemoryLifecycle(store)
    await lifecycle.aclose()
    await lifecycle.aclose()
    with pytest.raises(StoreClosedError):
        await store.append(make_memory("m1"))
    with pytest.raises(StoreClosedError):
        await lifecycle.inspect("session")
    with pytest.raises(StoreClosedError):
        await lifecycle.rebuild("session")
    with pytest.raises(StoreClosedError):
        _ = lifecycle.store
