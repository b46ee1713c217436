"""InMemoryGameMemoryStore: what the conformance suite cannot see (threads, the pool, its checker).

The shared behaviour (idempotence, conflicts, order, bounds, ranking, lifecycle) is proved on
every backend by ``tests/conformance/``; these tests cover this backend's own guarantees.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from game_memory import (
    GameMemoryQuery,
    InvalidArgumentError,
    MemoryConflictError,
    StoreClosedError,
)
from game_memory.store import memory as memory_module
from game_memory.store.lexical import SMALL_SNAPSHOT
from game_memory.store.memory import InMemoryGameMemoryStore

from .helpers import MemoryFactory


@pytest.fixture
async def store() -> AsyncIterator[InMemoryGameMemoryStore]:
    opened = InMemoryGameMemoryStore()
    yield opened
    await opened.aclose()


def query(**fields: Any) -> GameMemoryQuery:
    return GameMemoryQuery(session_id="session", limit=fields.pop("limit", 10), **fields)


def test_it_has_no_folder_and_says_what_it_holds() -> None:
    store = InMemoryGameMemoryStore()
    assert store.folder is None
    assert repr(store) == "InMemoryGameMemoryStore(memories=0, state=open)"


@pytest.mark.parametrize("workers", [0, 65, True])
def test_the_pool_size_must_be_from_1_to_64(workers: int) -> None:
    with pytest.raises(InvalidArgumentError, match="max_workers"):
        InMemoryGameMemoryStore(max_workers=workers)


async def test_it_keeps_the_memory_objects_it_was_given(
    store: InMemoryGameMemoryStore, make_memory: MemoryFactory
) -> None:
    memory = make_memory("m1")
    await store.append(memory)
    assert (await store.enumerate("session"))[0] is memory
    assert (await store.snapshot(query())).views[0].memories[0] is memory


async def test_small_reads_run_on_the_loop_and_large_ones_in_the_pool(
    store: InMemoryGameMemoryStore, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    original = memory_module.lexical_search

    def spy(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return original(*args)

    monkeypatch.setattr(memory_module, "lexical_search", spy)
    for index in range(SMALL_SNAPSHOT):
        await store.append(make_memory(f"m{index:03d}", text=f"cat {index}"))
    await store.snapshot(query(text="cat"))
    await store.append(make_memory("one-more", text="cat"))
    await store.snapshot(query(text="cat"))
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("game-memory-ram")


async def test_a_snapshot_is_the_store_as_it_was_when_the_read_began(
    store: InMemoryGameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(SMALL_SNAPSHOT + 10):  # large: ranked in the pool
        await store.append(make_memory(f"m{index:03d}", text="cat"))
    reading = asyncio.ensure_future(store.snapshot(query(text="cat", limit=500)))
    await asyncio.sleep(0)  # the read has planned its partitions and waits for the pool
    await store.append(make_memory("late", text="cat"))
    snapshot = await reading
    assert len(snapshot.authoritative_memories) == SMALL_SNAPSHOT + 10
    assert "late" not in {hit.memory.memory_id for hit in snapshot.lexical}
    assert len((await store.snapshot(query(text="cat", limit=500))).lexical) == SMALL_SNAPSHOT + 11


async def test_a_cancelled_read_leaves_the_store_usable(
    store: InMemoryGameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(SMALL_SNAPSHOT + 1):
        await store.append(make_memory(f"m{index:03d}"))
    reading = asyncio.ensure_future(store.enumerate("session"))
    await asyncio.sleep(0)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert len(await store.enumerate("session")) == SMALL_SNAPSHOT + 1
    assert (await store.check()).ok


def test_appends_from_many_threads_and_loops_lose_nothing(make_memory: MemoryFactory) -> None:
    store = InMemoryGameMemoryStore(maximum_entries=400)
    outcomes: list[object] = []
    lock = threading.Lock()

    def writer(worker: int) -> None:
        async def run() -> None:
            for index in range(50):
                owner = f"o{index % 3}"
                mine = make_memory(f"w{worker}-{index}", owner_id=owner)
                shared = make_memory(f"shared-{index}", owner_id=owner)  # the same for all
                contested = make_memory(f"contested-{index}", owner_id=owner, text=f"w{worker}")
                results: list[object] = [await store.append(mine), await store.append(shared)]
                try:
                    results.append(await store.append(contested))
                except MemoryConflictError:
                    results.append("conflict")
                await store.snapshot(query(owner_id=owner))
                with lock:
                    outcomes.extend(results)

        asyncio.run(run())

    threads = [threading.Thread(target=writer, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Every own memory, one of each shared and contested id; the rest no-ops and conflicts.
    assert outcomes.count(True) == 4 * 50 + 50 + 50
    assert outcomes.count(False) == 3 * 50 and outcomes.count("conflict") == 3 * 50

    async def audit() -> None:
        assert await store.count() == 300
        check = await store.check()
        assert check.ok, check.problems
        await store.aclose()

    asyncio.run(audit())


async def test_the_checker_reports_damaged_bookkeeping_and_repairs_nothing(
    store: InMemoryGameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(3):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index % 2}"))
    assert (await store.check()).ok
    # Break the store's own structures on purpose, as the file tests flip bytes on disk.
    state = store._partitions
    state._sessions["session"]["o0"].positions["m0"] = 1
    state._count += 1
    report = await store.check(fix=True)
    assert not report.ok and report.repairs == ()
    assert any("mis-indexed" in problem for problem in report.problems)
    assert any("counts 4 memories but holds 3" in problem for problem in report.problems)
    assert (report.memories, report.ledger_entries) == (3, 4)


async def test_closing_forgets_every_memory_and_is_idempotent(make_memory: MemoryFactory) -> None:
    async with InMemoryGameMemoryStore() as store:
        await store.append(make_memory("m1"))
    assert repr(store).endswith("state=closed)")
    await store.aclose()
    with pytest.raises(StoreClosedError, match="gone"):
        await store.count()
    assert store._partitions._sessions == {}
