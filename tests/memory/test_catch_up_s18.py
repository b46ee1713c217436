"""The automatic catch-up: memories saved without a vector are embedded once a recall finds
them (``catch_up.py``), bounded, never a retry loop, safe beside erases and a close.

Each save here holds memories the index has no vector for, as a process killed between its
save and its index write, or a lexical front door, leaves them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from game_memory import (
    DerivedIndexError,
    DiagnosticSeverity,
    FileGameMemoryStore,
    GameMemory,
    RecallResult,
    VectorMemoryState,
    VectorMemoryStore,
)
from game_memory import catch_up as catch_up_module
from game_memory.catch_up import CatchUps
from game_memory.store.view import PartitionView
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query, until

CAUGHT_UP = "memory_vectors_caught_up"
FAILED = "memory_embedding_catch_up_failed"

#: "feline" embeds as "cat" (``support.providers.SYNONYMS``) but shares no word with it: only
#: a vector finds a cat memory for it.
BY_MEANING = "feline"


async def saved_lexically(save: Path, memories: Sequence[GameMemory]) -> None:
    """Save ``memories`` through a front door without a model (no vectors written)."""
    lexical = VectorMemoryStore(FileGameMemoryStore(save))
    try:
        await lexical.append_many(memories)
    finally:
        await lexical.aclose()


async def caught_up(store: VectorMemoryStore) -> None:
    """Wait for the front door's catch-ups to end (a front door without them: at once)."""
    catch_ups = getattr(store, "_catch_ups", None)
    if catch_ups is not None:
        await catch_ups.idle()


def embedded(provider: FaultyProvider, start: int = 0) -> list[str]:
    """The searchable texts of the documents ``provider`` embedded, from the ``start``-th on
    (the projector adds the payload on a line of its own)."""
    return [text.split("\n")[0] for text in provider.documents.texts[start:]]


def found(result: RecallResult) -> list[str]:
    return [hit.memory.memory_id for hit in result.hits]


def by_vector(result: RecallResult) -> list[str]:
    return [hit.memory.memory_id for hit in result.hits if hit.vector_rank is not None]


def cats(make_memory: MemoryFactory, count: int, owner: str = "owner") -> list[GameMemory]:
    return [
        make_memory(f"{owner}-cat{i}", owner_id=owner, text=f"the cat number {i}", tick=i + 1)
        for i in range(count)
    ]


async def test_a_recall_answers_then_catches_up_the_npc_whose_memories_lack_vectors(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store()

    first = await store.recall(query(BY_MEANING, owner_id="owner"))
    assert found(first) == [] and first.fallback  # what is there: nothing has a vector yet

    await caught_up(store)
    later = await store.recall(query(BY_MEANING, owner_id="owner"))
    assert later.fallback is False
    assert sorted(by_vector(later)) == ["owner-cat0", "owner-cat1", "owner-cat2"]
    status = await store.get_status("session")
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    done = [d for d in diagnostics if d.code == CAUGHT_UP]
    assert len(done) == 1
    assert done[0].severity is DiagnosticSeverity.INFORMATION
    assert (done[0].owner_id, done[0].details) == ("owner", {"count": 3})


async def test_memories_saved_without_their_vector_beside_ready_ones_are_caught_up(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
) -> None:
    """The sidecar killed after a save, before its index write: the owner's other memories
    have vectors, so the recall does not fall back, and used to miss these for good."""
    first = make_vector_store()
    for i in range(3):
        await first.append(make_memory(f"dog{i}", text=f"the dog number {i}", tick=i + 1))
    await first.aclose()
    await saved_lexically(tmp_path / "save", [make_memory("cat", text="the cat", tick=9)])
    before = len(provider.documents.texts)
    store = make_vector_store()

    answered = await store.recall(query(BY_MEANING, owner_id="owner", limit=2))
    assert "cat" not in by_vector(answered) and answered.fallback is False

    await caught_up(store)
    assert embedded(provider, before) == ["the cat"]  # only the memory without a vector
    recalled = await store.recall(query(BY_MEANING, owner_id="owner", limit=1))
    assert by_vector(recalled) == ["cat"]
    assert (await store.get_status("session")).requires_rebuild is False


async def test_a_memory_erased_while_its_batch_embeds_gets_no_vector(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store()
    erased: list[int] = []

    async def erase_one(_: Sequence[str]) -> None:
        if not erased:
            erased.append(await store.erase("session", "owner", ["owner-cat1"]))

    provider.on_documents = erase_one
    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert erased == [1]
    status = await store.get_status("session")
    assert (status.ready_entries, status.pending_entries, status.orphan_entries) == (2, 0, 0)
    recalled = await store.recall(query(BY_MEANING, owner_id="owner"))
    assert sorted(by_vector(recalled)) == ["owner-cat0", "owner-cat2"]


async def test_a_failing_provider_gets_one_attempt_and_one_warning(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 2))
    store = make_vector_store()
    provider.document_fault = Fault.FAIL

    for _ in range(3):
        await store.recall(query(BY_MEANING, owner_id="owner"))
        await caught_up(store)

    assert provider.documents.calls == 1  # no retry loop
    warnings = [d for d in diagnostics if d.code == FAILED]
    assert len(warnings) == 1
    assert warnings[0].severity is DiagnosticSeverity.WARNING
    assert (warnings[0].session_id, warnings[0].owner_id) == ("session", "owner")
    lexically = await store.recall(query("cat", owner_id="owner"))
    assert sorted(found(lexically)) == ["owner-cat0", "owner-cat1"]  # still recalled
    assert (await store.get_status("session")).pending_entries == 2


async def test_an_append_that_fails_to_index_again_allows_one_more_attempt(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 2))
    store = make_vector_store()
    provider.document_fault = Fault.FAIL
    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)
    await store.append(make_memory("late", text="a late cat", tick=5))  # fails to index
    provider.document_fault = Fault.NONE

    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert [d.code for d in diagnostics if d.code in (FAILED, CAUGHT_UP)] == [FAILED, CAUGHT_UP]
    assert (await store.get_status("session")).state is VectorMemoryState.READY


async def test_aclose_during_a_catch_up_returns_and_leaves_save_and_index_consistent(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store(options={"rebuild_batch_size": 1})
    calls = [0]

    def hang_from_the_second(_: Sequence[str]) -> None:
        calls[0] += 1
        provider.document_fault = Fault.HANG if calls[0] >= 2 else Fault.NONE

    provider.on_documents = hang_from_the_second
    answered = await store.recall(query(BY_MEANING, owner_id="owner"))
    assert answered.fallback  # answered while the catch-up runs
    await until(lambda: provider.documents.in_flight == 1 and calls[0] == 2, "the second batch")

    await store.aclose()  # the hung embedding is cancelled; the close returns

    assert provider.documents.cancelled == 1
    provider.on_documents, provider.document_fault = None, Fault.NONE
    reopened = make_vector_store()
    status = await reopened.get_status("session")
    assert (status.ready_entries, status.pending_entries, status.orphan_entries) == (1, 2, 0)
    assert len(await reopened.enumerate("session")) == 3
    await reopened.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(reopened)
    assert (await reopened.get_status("session")).state is VectorMemoryState.READY


async def test_an_npc_with_vectors_of_another_model_is_left_to_a_rebuild(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
) -> None:
    old = make_vector_store(FaultyProvider(version="v0"))
    await old.append(make_memory("old", owner_id="stale", text="an old cat"))
    await old.aclose()
    await saved_lexically(tmp_path / "save", cats(make_memory, 2, owner="fresh"))
    provider = FaultyProvider()
    store = make_vector_store(provider)

    await store.recall(query(BY_MEANING, owner_id="stale"))
    await store.recall(query(BY_MEANING, owner_id="fresh"))
    await caught_up(store)

    assert sorted(embedded(provider)) == ["the cat number 0", "the cat number 1"]
    status = await store.get_status("session")
    assert (status.ready_entries, status.stale_entries) == (2, 1)


async def test_require_semantic_on_memories_without_vectors_asks_for_a_rebuild(
    tmp_path: Path, make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 2))
    store = make_vector_store()

    with pytest.raises(DerivedIndexError, match="rebuild") as raised:
        await store.recall(query(BY_MEANING, owner_id="owner"), require_semantic=True)
    assert "memories of 1 NPC of session 'session' have no vector" in str(raised.value)

    await caught_up(store)  # the refused recall started the catch-up
    semantic = await store.recall(query(BY_MEANING, owner_id="owner"), require_semantic=True)
    assert sorted(by_vector(semantic)) == ["owner-cat0", "owner-cat1"]


async def test_no_catch_up_starts_while_a_rebuild_of_the_session_runs() -> None:
    worked: list[tuple[str, str]] = []

    async def work(session_id: str, owner_id: str) -> None:
        worked.append((session_id, owner_id))

    rebuilding = {"busy"}
    catch_ups = CatchUps(work, rebuilding.__contains__)
    catch_ups.request("busy", "npc")
    catch_ups.request("calm", "npc")
    catch_ups.request("calm", "npc")  # tried already: once per front door
    await catch_ups.idle()
    rebuilding.clear()
    catch_ups.request("busy", "npc")  # skipped while rebuilding, not marked as tried
    await catch_ups.idle()
    await catch_ups.aclose()
    catch_ups.request("other", "npc")  # closed: none starts

    assert worked == [("calm", "npc"), ("busy", "npc")]


async def test_a_catch_up_decodes_a_batch_at_a_time_off_the_event_loop(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decoding every memory an NPC of 30,000 lacked vectors for took 1.6 s on the event
    loop (an audit's probe): every other request of the front door waited that long."""
    await saved_lexically(tmp_path / "save", cats(make_memory, 40))
    store = make_vector_store()
    decoded: list[tuple[int, int]] = []
    real = catch_up_module._memories_at

    def recording(view: PartitionView | None, positions: Sequence[int]) -> list[GameMemory]:
        decoded.append((threading.get_ident(), len(positions)))
        return real(view, positions)

    monkeypatch.setattr(catch_up_module, "_memories_at", recording)
    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert decoded and all(thread != threading.get_ident() for thread, _ in decoded)
    assert max(count for _, count in decoded) <= catch_up_module.CATCH_UP_BATCH
    assert sum(count for _, count in decoded) == 40
    assert (await store.get_status("session")).state is VectorMemoryState.READY


async def test_a_rebuild_begun_during_a_catch_up_ends_it_before_its_next_batch(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store(options={"rebuild_batch_size": 1})

    def rebuild_begins(_: Sequence[str]) -> None:
        store._rebuilding.add("session")  # as rebuild() marks its session

    provider.on_documents = rebuild_begins
    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert provider.documents.calls == 1  # the batch under way is written; no other
    assert not [d for d in diagnostics if d.code == CAUGHT_UP]
    status = await store.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (1, 2)


async def test_a_catch_up_ends_when_its_npc_is_erased(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store(options={"rebuild_batch_size": 1})
    erased: list[int] = []

    async def erase_the_npc(_: Sequence[str]) -> None:
        if not erased:
            erased.append(await store.erase("session", "owner"))

    provider.on_documents = erase_the_npc
    await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert erased == [3]
    assert provider.documents.calls == 1  # not the two batches of an NPC that is gone
    assert not [d for d in diagnostics if d.code == CAUGHT_UP]
    status = await store.get_status("session")
    assert (status.ready_entries, status.pending_entries, status.orphan_entries) == (0, 0, 0)


def test_a_catch_up_cut_by_the_end_of_its_event_loop_starts_again_in_the_next(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
) -> None:
    """A front door used across two ``asyncio.run`` (docs/api.md allows it): the first
    loop ended during the catch-up, which left the NPC marked as tried for good."""
    asyncio.run(saved_lexically(tmp_path / "save", cats(make_memory, 3)))
    store = make_vector_store()
    provider.document_fault = Fault.HANG

    async def first() -> None:
        await store.recall(query(BY_MEANING, owner_id="owner"))
        await until(lambda: provider.documents.in_flight == 1, "the catch-up's embedding")

    asyncio.run(first())  # ends with the catch-up hung in its embedding: cancelled

    async def second() -> VectorMemoryState:
        provider.document_fault = Fault.NONE
        await store.recall(query(BY_MEANING, owner_id="owner"))
        await caught_up(store)
        state = (await store.get_status("session")).state
        await store.aclose()
        return state

    assert asyncio.run(second()) is VectorMemoryState.READY


async def test_a_front_door_told_not_to_catch_up_embeds_nothing(
    tmp_path: Path,
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
) -> None:
    """``catch_up=False``: what a tool that only reads opens with (the CLI's ``search``)."""
    await saved_lexically(tmp_path / "save", cats(make_memory, 3))
    store = make_vector_store(options={"catch_up": False})
    answered = await store.recall(query(BY_MEANING, owner_id="owner"))
    await caught_up(store)

    assert answered.fallback and provider.documents.calls == 0
    status = await store.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (0, 3)
