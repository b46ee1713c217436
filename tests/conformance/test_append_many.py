"""What every GameMemoryStore's ``append_many`` does, and the front door's on top of it.

A batch is atomic: its results follow ``append`` one per memory (a repeat within the batch
or of a stored memory is ``False``), and a conflict or a capacity shortfall anywhere adds
nothing. The front door indexes the batch (embeddings batched) and keeps the retention
policy's bound.
"""

from __future__ import annotations

import itertools

import pytest

from game_memory import (
    CapacityExceededError,
    GameMemoryQuery,
    GameMemoryStore,
    GameMoment,
    MemoryConflictError,
)
from support.providers import FaultyProvider
from support.vectors import MemoryFactory

from .conftest import HybridFactory, StoreOpener


def _ids(memories: object) -> list[str]:
    return [memory.memory_id for memory in memories]  # type: ignore[attr-defined]


async def test_a_batch_adds_every_new_memory_and_reports_each_like_append(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    assert await store.append(make_memory("old"))
    batch = [
        make_memory("a", owner_id="o1", text="one"),
        make_memory("old"),
        make_memory("b", owner_id="o2", text="two"),
        make_memory("a", owner_id="o1", text="one"),
        make_memory("c", owner_id="o1", text="three"),
    ]
    assert await store.append_many(batch) == [True, False, True, False, True]
    assert await store.count() == 4
    assert sorted(_ids(await store.enumerate("session"))) == ["a", "b", "c", "old"]
    assert await store.append_many(batch) == [False] * 5
    assert await store.append_many([]) == []
    assert await store.count() == 4
    assert (await store.check()).ok


async def test_a_conflict_anywhere_in_a_batch_adds_nothing_of_it(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("m1", text="original"))
    stored = [make_memory(f"n{i}") for i in range(5)]
    with pytest.raises(MemoryConflictError, match=r"'m1'.* already holds different content"):
        await store.append_many([*stored, make_memory("m1", text="rewritten")])
    # Nothing holds 'dup': the message must say the batch gave it twice, not that the save
    # holds it (a game would look for a stored memory that is not there).
    with pytest.raises(MemoryConflictError, match=r"'dup'.* given twice") as raised:
        await store.append_many(
            [make_memory("dup", text="one"), *stored, make_memory("dup", text="two")]
        )
    assert "already holds" not in str(raised.value)
    assert await store.count() == 1
    assert _ids(await store.enumerate("session")) == ["m1"]
    assert (await store.check()).ok


async def test_a_batch_that_does_not_fit_the_capacity_adds_nothing(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    store = open_store(maximum_entries=5)
    await store.append_many([make_memory(f"m{i}") for i in range(3)])
    with pytest.raises(CapacityExceededError) as raised:
        await store.append_many([make_memory(f"n{i}") for i in range(3)])
    assert raised.value.bound == "maximum_entries"
    assert await store.count() == 3
    # Repeats of stored memories take no room: this batch fits.
    batch = [make_memory("m0"), make_memory("n0"), make_memory("n1")]
    assert await store.append_many(batch) == [False, True, True]
    assert await store.count() == 5


async def test_a_batch_keeps_its_order_for_beliefs_at_one_tick(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    versions = [
        make_memory(f"v{i}", text=f"the bridge is {state}", tick=7, belief_key="bridge")
        for i, state in enumerate(["open", "closed", "rebuilt"])
    ]
    assert await store.append_many(versions) == [True, True, True]
    snapshot = await store.snapshot(
        GameMemoryQuery(
            session_id="session",
            owner_id="owner",
            text="bridge",
            at_or_before=GameMoment(timeline_id="world", tick=10),
            limit=10,
        )
    )
    assert [hit.memory.memory_id for hit in snapshot.lexical] == ["v2"]


async def test_a_reopened_store_holds_the_batch(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    first = open_store()
    batch = [make_memory(f"m{i}", owner_id=f"o{i % 4}") for i in range(40)]
    assert all(await first.append_many(batch))
    again = open_store()
    assert sorted(_ids(await again.enumerate("session"))) == sorted(_ids(batch))
    assert await again.count() == 40


async def test_the_front_door_indexes_a_batch_and_recalls_it_semantically(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    provider = FaultyProvider()
    memory = open_hybrid(provider)
    batch = [make_memory(f"m{i}", text=f"memory number {i} of the feline") for i in range(30)]
    assert await memory.append_many(batch) == [True] * 30
    status = await memory.get_status("session")
    assert status.ready_entries == 30 and status.pending_entries == 0
    assert provider.documents.calls == 1  # batched, not one call per memory
    result = await memory.recall(GameMemoryQuery(session_id="session", text="feline", limit=5))
    assert not result.fallback and len(result.memories) == 5


async def test_the_front_door_keeps_an_owner_within_its_bound_after_a_batch(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(None, options={"maximum_memories_per_owner": 20})
    batch = [make_memory(f"m{i:02d}", tick=i) for i in range(30)]
    assert await memory.append_many(batch) == [True] * 30
    assert len(await memory.enumerate("session", "owner")) <= 20


async def test_the_front_door_embeds_and_indexes_a_batch_owner_by_owner(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    """A batch interleaving NPCs (a world's import) is embedded in chunks that each hold
    as few owners as possible, every owner's memories in the batch's order: the index
    writes a chunk once per partition it touches. Each memory keeps its own vector."""
    provider = FaultyProvider()
    calls: list[list[str]] = []
    provider.on_documents = lambda texts: calls.append(list(texts))
    memory = open_hybrid(provider)
    owners = ("smith", "miller", "guard")
    batch = [
        make_memory(f"m{i:03d}", owner_id=owners[i % 3], text=f"{owners[i % 3]} saw thing{i}")
        for i in range(600)
    ]
    assert await memory.append_many(batch) == [True] * 600
    assert [len(texts) for texts in calls] == [256, 256, 88]  # EMBEDDING_BATCH chunks
    embedded = [text.split("\n")[0] for texts in calls for text in texts]
    for owner in owners:
        wanted = [f"{owner} saw thing{i}" for i in range(600) if owners[i % 3] == owner]
        assert [text for text in embedded if text.startswith(owner)] == wanted
    switches = sum(a.split()[0] != b.split()[0] for a, b in itertools.pairwise(embedded))
    assert switches == 2  # owner after owner, not 599 changes
    status = await memory.get_status("session")
    assert status.ready_entries == 600 and status.pending_entries == 0
    for number in (0, 301, 599):
        owner = owners[number % 3]
        result = await memory.recall(
            GameMemoryQuery(session_id="session", owner_id=owner, text=f"thing{number}", limit=1)
        )
        assert not result.fallback and _ids(result.memories) == [f"m{number:03d}"]
