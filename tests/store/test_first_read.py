"""The first read of an opened save prepares the store and reads in one job of its pool.

``FileGameMemoryStore._ready_then`` opens the layout (and migrates a legacy one) and runs
the read in the same job when the store is not ready yet: one hop into a new thread instead
of two. These tests pin what must not change with it: a failed preparation leaves the store
unprepared (the next call prepares again), a read that fails after the preparation leaves
it prepared (and raises the read's own error), the migration stage reports the first use,
and every later read is its own job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from game_memory import (
    CapacityExceededError,
    FileGameMemoryStore,
    GameMemoryQuery,
    PersistenceError,
)

from .helpers import MemoryFactory, StoreFactory

_T = TypeVar("_T")


def counting(store: FileGameMemoryStore) -> list[int]:
    """Count the store's jobs in its pool from now on."""
    jobs = [0]
    run = store._run

    async def counted(function: Callable[[], _T]) -> _T:
        jobs[0] += 1
        return await run(function)

    store._run = counted  # type: ignore[method-assign]
    return jobs


def query(**fields: Any) -> GameMemoryQuery:
    return GameMemoryQuery(**{"session_id": "session", "limit": 10, **fields})


def migration(snapshot: Any) -> tuple[int, int]:
    stage = next(
        s for s in snapshot.search_snapshot().stages if s.stage.name == "STORAGE_MIGRATION"
    )
    return stage.scanned_count, stage.candidate_count


async def test_the_first_read_prepares_and_reads_in_one_job(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    writer = make_store()
    for number in range(3):
        await writer.append(make_memory(f"m{number}", text=f"the old mill {number}"))
    await writer.aclose()
    store = make_store()
    jobs = counting(store)
    first = await store.snapshot(query(text="mill"))
    assert jobs[0] == 1 and len(first.lexical) == 3
    assert migration(first) == (0, 3)  # the first use's report: nothing migrated, 3 saved
    again = await store.snapshot(query(text="mill"))  # session-wide: its own job
    assert jobs[0] == 2 and [h.memory.memory_id for h in again.lexical] == [
        h.memory.memory_id for h in first.lexical
    ]
    assert migration(again) == (0, 3)


async def test_a_read_failing_after_the_preparation_leaves_the_store_prepared(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_store()
    for number in range(3):
        await writer.append(make_memory(f"m{number}", text="the old mill"))
    await writer.aclose()
    store = make_store()
    prepared = [0]
    prepare = store._prepare

    def counted_prepare() -> Any:
        prepared[0] += 1
        return prepare()

    monkeypatch.setattr(store, "_prepare", counted_prepare)
    with pytest.raises(CapacityExceededError):
        await store.snapshot(query(text="mill"), maximum_entries=2)
    assert prepared == [1]
    snapshot = await store.snapshot(query(text="mill"))
    assert prepared == [1] and len(snapshot.lexical) == 3


async def test_a_failed_preparation_is_made_again_by_the_next_call(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_store()
    await writer.append(make_memory("m1", text="the old mill"))
    await writer.aclose()
    store = make_store()
    prepare = store._prepare
    calls = [0]

    def failing_once() -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise PersistenceError("the layout could not be opened")
        return prepare()

    monkeypatch.setattr(store, "_prepare", failing_once)
    with pytest.raises(PersistenceError, match="could not be opened"):
        await store.snapshot(query(text="mill"))
    snapshot = await store.snapshot(query(text="mill"))
    assert calls == [2] and [h.memory.memory_id for h in snapshot.lexical] == ["m1"]
