"""rebuild(): explicit, bounded, resumable, skipping ready vectors, safe beside appends."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory import (
    DerivedIndexError,
    DiagnosticSeverity,
    GameMemoryQuery,
    MemoryTextProjector,
    StoreBusyError,
    StoreClosedError,
    VectorMemoryState,
    VectorMemoryStore,
)
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from game_memory.index.entries import EntryState, memory_hash
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


async def pending_memories(
    store: VectorMemoryStore, provider: FaultyProvider, make_memory: MemoryFactory, count: int
) -> None:
    """Append ``count`` memories whose embedding fails (so they have no vector yet)."""
    provider.document_fault = Fault.FAIL
    for index in range(count):
        await store.append(make_memory(f"m{index}", text=f"the cat {WORDS[index]}", tick=index))
    provider.document_fault = Fault.NONE
    provider.documents.calls = 0
    provider.documents.texts.clear()


def fail_on_call(provider: FaultyProvider, number: int) -> None:
    """Make the ``number``-th (1-based) embed_documents call from now on fail."""
    seen = [0]

    def hook(_: Sequence[str]) -> None:
        seen[0] += 1
        provider.document_fault = Fault.FAIL if seen[0] == number else Fault.NONE

    provider.on_documents = hook


def row_files(index: Path) -> list[str]:
    return sorted(
        name
        for _, _, names in os.walk(index / INDEX_FOLDER)
        for name in names
        if name.endswith(".f32")
    )


async def test_a_rebuild_skips_memories_already_ready_for_the_active_model(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store()
    for index in range(3):
        await store.append(make_memory(f"m{index}"))
    calls = provider.documents.calls
    progress: list[tuple[int, int]] = []
    status = await store.rebuild("session", progress=lambda *p: progress.append(p))
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    assert provider.documents.calls == calls
    assert progress == [(0, 0)]
    assert diagnostics.codes() == ["memory_embedding_rebuild_completed"]
    assert diagnostics[0].severity is DiagnosticSeverity.INFORMATION


async def test_a_forced_rebuild_embeds_every_memory_again(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    for index in range(3):
        await store.append(make_memory(f"m{index}"))
    provider.documents.texts.clear()
    status = await store.rebuild("session", force=True)
    assert status.state is VectorMemoryState.READY
    assert len(provider.documents.texts) == 3


async def test_a_rebuild_embeds_in_batches_and_reports_progress_after_each(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 5)
    progress: list[tuple[int, int]] = []

    async def report(done: int, total: int) -> None:
        await asyncio.sleep(0)
        progress.append((done, total))

    status = await store.rebuild("session", progress=report)
    assert status.state is VectorMemoryState.READY
    assert progress == [(0, 5), (2, 5), (4, 5), (5, 5)]
    assert provider.documents.calls == 3
    assert provider.documents.most_in_flight == 1


async def test_a_failed_batch_stops_the_rebuild_and_running_it_again_resumes(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 6)
    diagnostics.clear()
    fail_on_call(provider, 2)
    progress: list[tuple[int, int]] = []
    status = await store.rebuild("session", progress=lambda *p: progress.append(p))
    assert (status.state, status.ready_entries, status.pending_entries) == (
        VectorMemoryState.DEGRADED,
        2,
        4,
    )
    assert progress == [(0, 6), (2, 6)]
    assert provider.documents.calls == 2  # stopped after the failed batch
    assert diagnostics.codes() == ["memory_embedding_rebuild_failed"]
    failed = diagnostics[0]
    assert failed.severity is DiagnosticSeverity.ERROR
    assert (failed.memory_id, failed.details) == ("m2", {"exception": "EmbeddingUnavailableError"})
    engine = store.index.engine
    partition = engine.partition(identity_hash("session"), identity_hash("owner"))
    assert partition is not None
    marked = partition.record(memory_hash("m2"))
    assert marked is not None and marked.state is EntryState.FAILED
    assert marked.code == "embedding_rebuild_failed"
    # The failed batch stays lexically recallable meanwhile.
    assert ids(await store.search(query("delta")))[:1] == ["m3"]

    provider.on_documents = None
    provider.document_fault = Fault.NONE
    provider.documents.texts.clear()
    resumed = await store.rebuild("session")
    assert resumed.state is VectorMemoryState.READY and resumed.ready_entries == 6
    assert len(provider.documents.texts) == 4  # only what the first run left
    assert diagnostics.codes()[-1] == "memory_embedding_rebuild_completed"


async def test_a_failed_batch_logs_its_cause_for_the_developer(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The diagnostic carries the exception's class only; its message (what the model
    # refused) is what fixes the cause, and the CLI said "the server log has the cause"
    # while nothing had logged it.
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 4)
    fail_on_call(provider, 1)
    with caplog.at_level(logging.WARNING, logger="game_memory"):
        await store.rebuild("session")
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("game_memory")]
    assert any(
        "A rebuild batch failed" in line
        and "EmbeddingUnavailableError: the test provider is down" in line
        for line in logged
    ), logged


async def test_a_forced_rebuild_whose_batch_fails_keeps_the_vectors_it_had(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", text="the cat sleeps"))
    await store.append(make_memory("m2", text="an axe"))
    provider.document_fault = Fault.CRASH
    status = await store.rebuild("session", force=True)
    assert status.state is VectorMemoryState.READY  # the vectors it had: counted ready
    codes = diagnostics.codes()  # but it did not finish: never said to have
    assert "memory_embedding_rebuild_failed" in codes
    assert "memory_embedding_rebuild_completed" not in codes
    provider.document_fault = Fault.NONE
    assert ids(await store.search(query("feline", limit=1))) == ["m1"]


async def test_a_failed_batch_that_cannot_be_recorded_raises_and_says_so(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    await pending_memories(store, provider, make_memory, 2)
    diagnostics.clear()
    provider.document_fault = Fault.FAIL

    def broken(*_: Any, **__: Any) -> None:
        raise DerivedIndexError("disk full")

    monkeypatch.setattr(store.index, "mark", broken)
    with pytest.raises(DerivedIndexError) as raised:
        await store.rebuild("session")
    message = str(raised.value)
    assert "could not record which batch (disk full)" in message
    assert "run the rebuild again" in message and "delete" not in message
    assert diagnostics.codes() == [
        "memory_embedding_rebuild_failed",
        "memory_vector_index_write_failed",
    ]


async def test_a_model_change_requires_a_rebuild_after_which_semantic_recall_resumes(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
) -> None:
    old = make_vector_store()
    await old.append(make_memory("m1", text="the cat sleeps on the roof"))
    await old.append(make_memory("m2", text="the smith sharpened an axe"))
    await old.aclose()
    provider = FaultyProvider(version="v2")
    new = make_vector_store(provider)
    assert (await new.recall(query("feline"))).fallback
    status = await new.rebuild("session")
    assert status.state is VectorMemoryState.READY and status.stale_entries == 0
    assert len(provider.documents.texts) == 2
    result = await new.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    # The compaction dropped the old model's rows: one row file (the new model's) is left.
    files = row_files(tmp_path / "index")
    assert len(files) == 1 and ".1." in files[0]


async def test_a_memory_appended_during_a_rebuild_keeps_its_vector(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 4)
    appended: list[bool] = []

    async def append_meanwhile(_: Sequence[str]) -> None:
        if not appended:
            appended.append(True)
            await store.append(make_memory("late", text="a kitten in the barn", tick=99))

    provider.on_documents = append_meanwhile
    status = await store.rebuild("session")
    assert appended == [True]
    assert status.state is VectorMemoryState.READY
    assert (status.ready_entries, status.pending_entries, status.orphan_entries) == (5, 0, 0)
    result = await store.recall(query("feline barn", limit=1))
    assert ids(result.memories) == ["late"] and result.hits[0].vector_rank is not None


async def test_the_orphan_sweep_keeps_a_vector_written_after_its_snapshot_of_the_save(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the reference loses: the sweep's view of the save is older than an append."""
    store = make_vector_store()
    await pending_memories(store, provider, make_memory, 2)
    original = store.authoritative.snapshot
    calls: list[int] = []

    async def views_then_append(query: GameMemoryQuery, **bounds: Any) -> Any:
        views = await original(query, **bounds)
        if query.limit == 0:  # a read of the session's partitions (not a recall)
            calls.append(1)
            if len(calls) == 2:  # the re-read after the batches, just before the sweep
                await store.append(make_memory("late", text="a kitten in the barn", tick=99))
        return views

    monkeypatch.setattr(store.authoritative, "snapshot", views_then_append)
    status = await store.rebuild("session")
    monkeypatch.undo()
    assert len(calls) >= 2
    assert (status.ready_entries, status.pending_entries) == (3, 0)
    assert ids((await store.recall(query("feline barn", limit=1))).memories) == ["late"]


async def test_the_orphan_sweep_deletes_vectors_of_memories_absent_from_the_save(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    await first.append(make_memory("gone", text="the cat"))
    await first.append(make_memory("kept", text="a dog"))
    other = make_vector_store(save=tmp_path / "other-save")
    await other.authoritative.append(make_memory("kept", text="a dog"))
    before = await other.get_status("session")
    assert before.orphan_entries == 1
    after = await other.rebuild("session")
    assert (after.state, after.orphan_entries, after.ready_entries) == (
        VectorMemoryState.READY,
        0,
        1,
    )
    partition = other.index.engine.partition(identity_hash("session"), identity_hash("owner"))
    assert partition is not None and partition.record(memory_hash("gone")) is None


async def test_compaction_keeps_recall_results_identical(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    tmp_path: Path,
) -> None:
    store = make_vector_store(options={"rebuild_batch_size": 3})
    words = ["cat", "dog", "axe", "barn", "roof", "kitten", "sword", "river"]
    for index in range(16):
        text = f"{words[index % 8]} {words[(index * 3) % 8]} {index}"
        await store.append(make_memory(f"m{index:02d}", text=text, tick=index))
    # Superseded records and dead rows pile up when a memory is re-embedded.
    engine = store.index.engine
    await store.rebuild("session", force=True)  # compacts at the end
    questions = [query(text, limit=5) for text in ("feline", "hound blade", "barn roof", "river")]
    before = [await store.recall(q) for q in questions]
    path = Path(engine.entries_path(identity_hash("session"), identity_hash("owner")))
    records_before = path.stat().st_size
    # Write superseded rows and records again, then compact through another rebuild.
    memories = list(before[0].snapshot.authoritative_memories)
    projector = MemoryTextProjector()
    raw = await provider.embed_documents([projector.project_document(m) for m in memories])
    vectors = np.stack([np.asarray(v, np.float32) / np.linalg.norm(v) for v in raw])
    assert store.index is not None and store.active_identity is not None
    store.index.write(memories, vectors, store.active_identity)
    assert path.stat().st_size == 2 * records_before
    await store.rebuild("session")
    assert path.stat().st_size == records_before
    after = [await store.recall(q) for q in questions]
    for old, new in zip(before, after, strict=True):
        assert ids(old.memories) == ids(new.memories)
        assert [h.vector_score for h in old.hits] == [h.vector_score for h in new.hits]
    (rows,) = row_files(tmp_path / "index")
    session = tmp_path / "index" / INDEX_FOLDER / f"s-{identity_hash('session')}"
    assert (session / rows).stat().st_size == 16 * 256 * 4


async def test_a_second_rebuild_of_a_session_while_one_runs_is_refused(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    await pending_memories(store, provider, make_memory, 1)
    provider.document_fault = Fault.HANG
    running = asyncio.ensure_future(store.rebuild("session"))
    try:
        while provider.documents.in_flight == 0:
            await asyncio.sleep(0.001)
        with pytest.raises(StoreBusyError, match="already running"):
            await store.rebuild("session")
        other = await store.rebuild("another-session")
        assert other.state is VectorMemoryState.EMPTY
    finally:
        provider.release.set()
    assert (await running).state is VectorMemoryState.READY


async def test_a_memory_erased_while_its_batch_is_embedded_leaves_no_vector_behind(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    """The rebuild embeds what its first read of the save held; a memory erased meanwhile
    gets its vector written after the erase dropped it. The sweep must find it: erase
    promises no byte of an erased memory's vector is left, and the status must be READY."""
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 4)
    erased: list[int] = []

    async def erase_meanwhile(_: Sequence[str]) -> None:
        if not erased:
            erased.append(await store.erase("session", "owner", ["m0"]))

    provider.on_documents = erase_meanwhile
    status = await store.rebuild("session")
    assert erased == [1]
    assert status.state is VectorMemoryState.READY
    assert (status.ready_entries, status.pending_entries, status.orphan_entries) == (3, 0, 0)
    partition = store.index.engine.partition(identity_hash("session"), identity_hash("owner"))
    assert partition is not None and partition.record(memory_hash("m0")) is None
    assert (await store.get_status("session")).orphan_entries == 0


async def test_a_memory_erased_while_embedded_leaves_no_vector_when_the_rebuild_stops_early(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    tmp_path: Path,
) -> None:
    # The sweep ran only after a rebuild that finished: one that stopped (a failed batch,
    # a cancel) wrote the erased memory's vector and left it, byte for byte.
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 4)
    calls = [0]

    async def erase_then_fail(_: Sequence[str]) -> None:
        calls[0] += 1
        if calls[0] == 1:
            assert await store.erase("session", "owner", ["m0"]) == 1
        provider.document_fault = Fault.FAIL if calls[0] == 2 else Fault.NONE

    provider.on_documents = erase_then_fail
    await store.rebuild("session")
    partition = store.index.engine.partition(identity_hash("session"), identity_hash("owner"))
    assert partition is not None and partition.record(memory_hash("m0")) is None
    status = await store.get_status("session")
    assert (status.ready_entries, status.orphan_entries) == (1, 0)  # m1; m2, m3 failed
    provider.on_documents, provider.document_fault = None, Fault.NONE
    assert (await store.rebuild("session")).state is VectorMemoryState.READY


async def test_a_memory_replaced_under_its_id_while_embedded_keeps_its_new_vector(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    # The batch held the old content; written after the new memory's own vector, it
    # stood for content the save no longer held, and the new memory fell back to pending.
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 4)
    replaced: list[bool] = []

    async def replace_meanwhile(_: Sequence[str]) -> None:
        if not replaced:
            replaced.append(True)
            assert await store.erase("session", "owner", ["m0"]) == 1
            assert await store.append(make_memory("m0", text="a hound bays", tick=9)) is True

    provider.on_documents = replace_meanwhile
    status = await store.rebuild("session")
    assert status.state is VectorMemoryState.READY
    assert (status.ready_entries, status.pending_entries) == (4, 0)


async def test_closing_the_store_during_a_rebuild_ends_it_as_closed_not_as_damage(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    # It raised DerivedIndexError advising to delete the index folder, after two ERROR
    # diagnostics: the store had only been closed (StoreClosedError is documented).
    store = make_vector_store(options={"rebuild_batch_size": 2})
    await pending_memories(store, provider, make_memory, 6)
    closing: list[asyncio.Task[None]] = []

    async def close_meanwhile(_: Sequence[str]) -> None:
        if not closing:
            closing.append(asyncio.ensure_future(store.aclose()))
            await asyncio.sleep(0.05)

    provider.on_documents = close_meanwhile
    with pytest.raises(StoreClosedError):
        await store.rebuild("session")
    await closing[0]
    assert "memory_embedding_rebuild_failed" not in diagnostics.codes()
