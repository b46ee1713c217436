"""The front door's writes against cancellation, ``aclose``, evictions and event loops, and
the bound a too-large snapshot names (the sixteenth audit).

* A cancelled ``erase`` runs to its end, as a cancelled append does: cut off after the
  save's erase, it left the vectors in the index (orphans, the session degraded).
* ``aclose`` waits for the writes in flight: an erase racing it raised
  ``StoreClosedError`` after the save's erase (its vectors left behind), and an append
  racing it returned ``True`` with its memory left without a vector.
* An eviction holds the erase gate as an erase does: an identical memory appended again
  between the eviction's erase from the save and from the index lost its new vector.
* A front door outlives an ``asyncio.run``: its guards are made anew for the next loop
  (they raised asyncio's "bound to a different event loop"); a call from another loop
  while the first one runs (another thread) is refused plainly instead of hanging.
* A recall of one NPC past ``maximum_index_entries`` named ``maximum_snapshot_entries``
  and advised querying one owner.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameMemory,
    GameMemoryQuery,
    InMemoryGameMemoryStore,
    InvalidArgumentError,
    StoreClosedError,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.forgetting import erase_memories
from game_memory.postgres.reads import read_views
from game_memory.postgres.views import ViewCache
from game_memory.write_guards import EraseGate, EvictionGuard
from support.providers import FaultyProvider
from support.vectors import MemoryFactory, VectorStoreFactory, query, until

_T = TypeVar("_T")

# -- helpers ------------------------------------------------------------------------------


class _Held:
    """Holds an awaited step of a write until released (an asyncio event per loop)."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def wait(self) -> None:
        self.reached.set()
        await self.release.wait()


def _hold_the_save_erase(store: VectorMemoryStore, held: _Held) -> None:
    """Make the front door's erase stop right after the save's erase is done (before the
    index step) until ``held`` is released."""
    erase = store.authoritative.erase

    async def erase_then_wait(*arguments: Any) -> int:
        erased = await erase(*arguments)
        await held.wait()
        return erased

    setattr(store.authoritative, "erase", erase_then_wait)  # noqa: B010 - an instance's


def _hold_the_embedding(provider: FaultyProvider, held: _Held) -> None:
    """Make the provider's document calls wait for ``held`` (a memory saved, not indexed)."""

    async def blocked(_texts: object) -> None:
        await held.wait()

    provider.on_documents = blocked


async def _counts(store: VectorMemoryStore) -> tuple[int, int, int, int]:
    """total, ready, pending and orphan entries of session ``session``."""
    status = await store.get_status("session")
    return (
        status.total_entries,
        status.ready_entries,
        status.pending_entries,
        status.orphan_entries,
    )


# -- 1. a cancelled erase -----------------------------------------------------------------


async def test_an_erase_cancelled_after_the_saves_erase_also_erases_from_the_index(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(6)])
    held = _Held()
    _hold_the_save_erase(store, held)
    task = asyncio.ensure_future(store.erase("session", "owner", ["m1", "m2", "m3"]))
    await held.reached.wait()  # gone from the save, still in the index
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()  # the cancellation waits for the index step
    held.release.set()
    with pytest.raises(asyncio.CancelledError):  # and is not lost
        await task
    assert sorted(m.memory_id for m in await store.enumerate("session")) == ["m0", "m4", "m5"]
    assert await _counts(store) == (3, 3, 0, 0)  # no orphan left behind
    assert not (await store.get_status("session")).requires_rebuild


async def test_an_erase_cancelled_while_it_waits_for_appends_erases_nothing(
    make_vector_store: VectorStoreFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m0"))
    held = _Held()
    _hold_the_embedding(provider, held)
    append = asyncio.ensure_future(store.append(make_memory("m1", tick=2)))
    await held.reached.wait()  # the append holds the erase gate
    erase = asyncio.ensure_future(store.erase("session", "owner", ["m0"]))
    await asyncio.sleep(0.01)
    erase.cancel()
    with pytest.raises(asyncio.CancelledError):
        await erase  # at once: it had not begun
    held.release.set()
    assert await append is True
    provider.on_documents = None
    assert sorted(m.memory_id for m in await store.enumerate("session")) == ["m0", "m1"]
    assert await _counts(store) == (2, 2, 0, 0)


# -- 2. aclose waits for the writes in flight ---------------------------------------------


async def test_aclose_waits_for_an_erase_in_flight_and_its_index_step(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(4)])
    held = _Held()
    _hold_the_save_erase(store, held)
    erase = asyncio.ensure_future(store.erase("session", "owner", ["m1", "m2"]))
    await held.reached.wait()
    close = asyncio.ensure_future(store.aclose())
    await asyncio.sleep(0.01)
    assert not close.done()  # waits for the erase
    with pytest.raises(StoreClosedError):  # a call made once the close began
        await store.append(make_memory("late", tick=9))
    with pytest.raises(StoreClosedError):
        await store.recall(query("memory"))
    held.release.set()
    assert await erase == 2  # not StoreClosedError: it ran to its end
    await close
    reopened = make_vector_store()
    assert sorted(m.memory_id for m in await reopened.enumerate("session")) == ["m0", "m3"]
    assert await _counts(reopened) == (2, 2, 0, 0)


@pytest.mark.parametrize("write", ["append", "append_many", "consolidate"])
async def test_aclose_waits_for_an_append_in_flight_to_be_indexed(
    make_vector_store: VectorStoreFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    write: str,
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m0"))
    held = _Held()
    _hold_the_embedding(provider, held)
    late = make_memory("late", tick=5, kind="reflection" if write == "consolidate" else "fact")
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "append": lambda: store.append(late),
        "append_many": lambda: store.append_many([late]),
        "consolidate": lambda: store.consolidate("session", "owner", ["m0"], late),
    }
    task = asyncio.ensure_future(calls[write]())
    await held.reached.wait()  # saved, being embedded
    close = asyncio.ensure_future(store.aclose())
    await asyncio.sleep(0.01)
    assert not close.done()
    held.release.set()
    assert await task in (True, [True])
    await close
    provider.on_documents = None
    reopened = make_vector_store()
    assert "late" in {m.memory_id for m in await reopened.enumerate("session")}
    assert await _counts(reopened) == (2, 2, 0, 0)  # the late memory has its vector


async def test_an_index_closed_under_an_erase_is_reported_as_the_documented_error(
    make_memory: MemoryFactory,
) -> None:
    # The save's erase is done; an index (or front door) closed before the index step is a
    # DerivedIndexError saying so, not a StoreClosedError ("open a new one").
    store = InMemoryGameMemoryStore()
    await store.append(make_memory("m0"))

    index: Any = object()  # never reached: ``closed`` refuses the hop
    with pytest.raises(DerivedIndexError, match="erased 1 memories from the save"):
        await erase_memories(store, index, _Closed(), "session", "owner", ["m0"])
    assert await store.enumerate("session") == []
    await store.aclose()


class _Closed:
    """A runner whose front door was closed: it refuses every hop."""

    def __call__(self, function: Callable[[], _T]) -> Awaitable[_T]:
        raise StoreClosedError("the vector memory store is closed; open a new one")


# -- 3. an eviction holds the erase gate --------------------------------------------------


async def test_an_eviction_keeps_a_memory_appended_again_during_its_erase_indexed(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(options={"maximum_memories_per_owner": 5})
    low = make_memory("m0", tick=0, importance=0.0)  # the first to be evicted
    for memory in [low] + [make_memory(f"m{n}", tick=n, importance=0.9) for n in range(1, 5)]:
        await store.append(memory)
    assert store.index is not None
    erase, entered, release = store.index.erase, threading.Event(), threading.Event()

    def slow_erase(*arguments: Any) -> None:
        entered.set()
        release.wait(10)  # a slow disk: the index step of the eviction
        erase(*arguments)

    setattr(store.index, "erase", slow_erase)  # noqa: B010 - an instance's
    trigger = asyncio.ensure_future(store.append(make_memory("m9", tick=9, importance=0.9)))
    await until(entered.is_set, "the eviction's index step")
    assert "m0" not in {m.memory_id for m in await store.enumerate("session")}
    again = asyncio.ensure_future(store.append(low))  # the same memory, appended again
    await asyncio.sleep(0.02)
    assert not again.done()  # it waits for the eviction's index step
    release.set()
    assert await trigger is True and await again is True
    setattr(store.index, "erase", erase)  # noqa: B010
    held = {m.memory_id for m in await store.enumerate("session")}
    assert "m0" in held and len(held) == 5
    assert await _counts(store) == (5, 5, 0, 0)  # m0 kept its new vector


async def test_an_eviction_takes_the_guards_gate_after_its_lock() -> None:
    gate = EraseGate()
    guard = EvictionGuard(gate)
    assert guard.gate is gate and EvictionGuard().gate is not gate
    async with gate.appending():
        waiting = asyncio.ensure_future(_evict_with(guard))
        await asyncio.sleep(0.01)
        assert not waiting.done() and guard.lock.locked()  # holds the lock, waits for the gate
    await waiting
    assert not gate.busy and not guard.lock.locked()


async def _evict_with(guard: EvictionGuard) -> None:
    async with guard.lock, guard.gate.erasing():
        pass


# -- 4. event loops -----------------------------------------------------------------------


def _contend(gate: EraseGate, guard: EvictionGuard) -> None:
    """In a fresh ``asyncio.run``: an erase waits for an append, an append waits for the
    erase, and two evictions contend for the lock (each primitive waited on)."""

    async def main() -> None:
        release = asyncio.Event()
        log: list[str] = []

        async def append(name: str) -> None:
            async with gate.appending():
                log.append(name)
                await release.wait()

        async def erase() -> None:
            async with gate.erasing():
                log.append("erase")

        async def evict() -> None:
            async with guard.lock:
                await asyncio.sleep(0)

        first = asyncio.ensure_future(append("append1"))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(erase())
        await asyncio.sleep(0)
        third = asyncio.ensure_future(append("append2"))
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, second, third, evict(), evict())
        assert log == ["append1", "erase", "append2"]

    asyncio.run(main())


def test_the_write_guards_serve_one_asyncio_run_after_another() -> None:
    gate = EraseGate()
    guard = EvictionGuard(gate)
    for _ in range(3):  # asyncio's primitives were bound to the first loop
        _contend(gate, guard)
    assert not gate.busy


def test_a_front_door_serves_one_asyncio_run_after_another(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    # Its erase gate contended in the first run (an erase waiting for an append being
    # embedded): the second run's erase raised "... is bound to a different event loop".
    provider: Any = FaultyProvider()

    def memory(number: int) -> GameMemory:
        return make_memory(f"m{number}", tick=number, text=f"the well {number}")

    async def opened() -> VectorMemoryStore:
        return VectorMemoryStore(
            FileGameMemoryStore(tmp_path / "save"),
            FileVectorMemoryIndex(tmp_path / "index"),
            provider,
            options=VectorMemoryStoreOptions(maximum_memories_per_owner=50),
        )

    async def contended(store: VectorMemoryStore, base: int) -> None:
        held = _Held()
        _hold_the_embedding(provider, held)
        append = asyncio.ensure_future(store.append(memory(base)))
        await held.reached.wait()
        erase = asyncio.ensure_future(store.erase("session", "owner", [f"m{base - 1}"]))
        await asyncio.sleep(0.01)
        held.release.set()
        assert await append is True
        assert await erase == (0 if base == 1 else 1)
        provider.on_documents = None

    store = asyncio.run(opened())
    asyncio.run(contended(store, 1))
    asyncio.run(contended(store, 2))

    async def end() -> tuple[int, int, int, int]:
        try:
            return await _counts(store)
        finally:
            await store.aclose()

    assert asyncio.run(end()) == (1, 1, 0, 0)


async def test_a_call_from_another_loop_while_the_first_runs_is_refused(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m0"))
    outcome: list[BaseException | object] = []

    def other_thread() -> None:
        try:
            outcome.append(asyncio.run(store.recall(query("memory"))))
        except BaseException as exc:  # the outcome is what is checked
            outcome.append(exc)

    thread = threading.Thread(target=other_thread, daemon=True)
    thread.start()
    await asyncio.to_thread(thread.join, 20)  # this loop runs meanwhile
    assert len(outcome) == 1 and isinstance(outcome[0], InvalidArgumentError)
    message = str(outcome[0])
    assert "one event loop" in message and "run_coroutine_threadsafe" in message
    assert len((await store.recall(query("memory"))).memories) == 1  # this loop still served


# -- 5. the bound a too-large snapshot names ----------------------------------------------


async def test_a_recall_past_maximum_index_entries_names_it_and_what_helps(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(options={"maximum_index_entries": 3})
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(5)])
    one_owner = GameMemoryQuery(session_id="session", owner_id="owner", text="memory", limit=3)
    with pytest.raises(CapacityExceededError) as raised:
        await store.recall(one_owner)
    message = str(raised.value)
    assert raised.value.bound == "maximum_index_entries"
    assert "owner 'owner'" in message and "maximum_index_entries" in message
    assert "maximum_snapshot_entries" not in message and "query one owner" not in message
    with pytest.raises(CapacityExceededError, match="query one owner") as raised:
        await store.recall(query("memory"))  # the whole session
    assert raised.value.bound == "maximum_index_entries"


async def test_a_recall_past_its_own_maximum_snapshot_entries_names_that(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(5)])
    one_owner = GameMemoryQuery(session_id="session", owner_id="owner", text="memory", limit=3)
    with pytest.raises(CapacityExceededError) as raised:
        await store.recall(one_owner, maximum_snapshot_entries=2)
    message = str(raised.value)
    assert raised.value.bound == "maximum_snapshot_entries"
    assert "larger maximum_snapshot_entries" in message and "query one owner" not in message
    assert "maximum_index_entries" not in message


@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_a_stores_snapshot_advises_one_owner_only_for_a_whole_session(
    tmp_path: Path, make_memory: MemoryFactory, kind: str
) -> None:
    store: Any = (
        FileGameMemoryStore(tmp_path / "save") if kind == "file" else InMemoryGameMemoryStore()
    )
    try:
        for number in range(3):
            await store.append(make_memory(f"m{number}", tick=number))
        owner = GameMemoryQuery(session_id="session", owner_id="owner", limit=3)
        with pytest.raises(CapacityExceededError) as raised:
            await store.snapshot(owner, maximum_entries=2)
        assert raised.value.bound == "maximum_snapshot_entries"  # the stores' documented name
        assert "owner 'owner'" in str(raised.value)
        assert "query one owner" not in str(raised.value)
        with pytest.raises(CapacityExceededError, match="query one owner"):
            await store.snapshot(GameMemoryQuery(session_id="session", limit=3), maximum_entries=2)
    finally:
        await store.aclose()


class _Rows:
    """A connection whose statement returns ``count`` memory rows (the bound's check comes
    before any row is decoded)."""

    def __init__(self, count: int) -> None:
        self._rows: list[tuple[object, ...]] = [
            (0, "o", 1, 0, n, f"k{n}", b"", b"") for n in range(count)
        ]

    def execute(self, _statement: object, _parameters: object) -> _Rows:
        return self

    def fetchall(self) -> list[tuple[object, ...]]:
        return self._rows


@pytest.mark.parametrize("owner", [None, "owner"])
def test_a_database_snapshot_advises_one_owner_only_for_a_whole_session(
    owner: str | None,
) -> None:
    connection: Any = _Rows(3)
    with pytest.raises(CapacityExceededError) as raised:
        read_views(connection, ViewCache(100), "session", owner, 2, "the database")
    assert raised.value.bound == "maximum_snapshot_entries"
    assert ("query one owner" in str(raised.value)) is (owner is None)
