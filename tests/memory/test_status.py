"""VectorMemoryStatus: the four states, the counts behind them, and the store's report."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from pydantic import ValidationError

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    VectorMemoryState,
    VectorMemoryStatus,
)
from support.providers import Fault, FaultyProvider
from support.vectors import MemoryFactory, VectorStoreFactory

IDENTITY = FaultyProvider().identity


@pytest.mark.parametrize(
    ("counts", "state", "requires_rebuild"),
    [
        ({"ready": 0, "pending": 0, "stale": 0, "orphans": 0}, VectorMemoryState.EMPTY, False),
        ({"ready": 3, "pending": 0, "stale": 0, "orphans": 0}, VectorMemoryState.READY, False),
        ({"ready": 2, "pending": 1, "stale": 0, "orphans": 0}, VectorMemoryState.DEGRADED, True),
        ({"ready": 2, "pending": 0, "stale": 0, "orphans": 1}, VectorMemoryState.DEGRADED, True),
        ({"ready": 0, "pending": 0, "stale": 0, "orphans": 4}, VectorMemoryState.DEGRADED, True),
        (
            {"ready": 1, "pending": 1, "stale": 1, "orphans": 0},
            VectorMemoryState.REBUILD_REQUIRED,
            True,
        ),
    ],
)
def test_the_state_follows_the_reference_rule(
    counts: dict[str, int], state: VectorMemoryState, requires_rebuild: bool
) -> None:
    status = VectorMemoryStatus.from_counts(IDENTITY, **counts)
    assert status.state is state
    assert status.requires_rebuild is requires_rebuild
    assert status.total_entries == counts["ready"] + counts["pending"] + counts["stale"]
    assert status.active_identity == IDENTITY
    assert status.model_dump()["requires_rebuild"] is requires_rebuild


def test_counts_that_do_not_add_up_are_refused() -> None:
    with pytest.raises(ValidationError, match="ready \\+ pending \\+ stale"):
        VectorMemoryStatus(
            state=VectorMemoryState.READY,
            active_identity=IDENTITY,
            total_entries=5,
            ready_entries=1,
            pending_entries=1,
            stale_entries=1,
            orphan_entries=0,
        )


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValidationError):
        VectorMemoryStatus.from_counts(IDENTITY, ready=-1, pending=1, stale=0, orphans=0)


async def test_a_session_moves_from_empty_to_ready_to_degraded_to_rebuild_required(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, provider: FaultyProvider
) -> None:
    store = make_vector_store()
    assert (await store.get_status("session")).state is VectorMemoryState.EMPTY
    await store.append(make_memory("m1"))
    ready = await store.get_status("session")
    assert (ready.state, ready.ready_entries, ready.total_entries) == (
        VectorMemoryState.READY,
        1,
        1,
    )
    provider.document_fault = Fault.FAIL
    await store.append(make_memory("m2"))
    degraded = await store.get_status("session")
    assert (degraded.state, degraded.pending_entries) == (VectorMemoryState.DEGRADED, 1)
    newer = make_vector_store(FaultyProvider(version="v2"))
    stale = await newer.get_status("session")
    assert stale.state is VectorMemoryState.REBUILD_REQUIRED
    assert (stale.ready_entries, stale.stale_entries, stale.pending_entries) == (0, 1, 1)
    assert stale.active_identity == FaultyProvider(version="v2").identity


async def test_status_counts_only_the_asked_session(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", session_id="one"))
    await store.append(make_memory("m2", session_id="two"))
    await store.append(make_memory("m3", session_id="two", owner_id="another"))
    assert (await store.get_status("one")).total_entries == 1
    assert (await store.get_status("two")).total_entries == 2
    assert (await store.get_status("three")).state is VectorMemoryState.EMPTY


async def test_an_index_that_cannot_be_written_is_not_called_damaged(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # "damaged ... until a rebuild repairs it" is wrong advice when the folder refuses
    # writes: a rebuild cannot write either.
    store = make_vector_store()
    await store.append(make_memory("m1"))
    refused = OSError(errno.EROFS, os.strerror(errno.EROFS), "index/lock")

    def verify(*_arguments: object, **_keywords: object) -> list[Exception]:
        error = DerivedIndexError("could not open the index lock")
        error.__cause__ = refused
        raise error

    monkeypatch.setattr(store.index, "verify", verify)
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        status = await store.get_status("session")
    assert status.pending_entries == 1
    assert "folder is not writable" in caplog.text and "damaged" not in caplog.text


async def test_a_session_past_maximum_index_entries_names_that_bound(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    # The store's message named its snapshot parameter, which a status or a rebuild
    # caller never set; the bound hit is the front door's maximum_index_entries.
    store = make_vector_store(options={"maximum_index_entries": 2})
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id=f"npc{number}"))
    for call in (store.get_status, store.rebuild):
        with pytest.raises(CapacityExceededError, match="maximum_index_entries") as raised:
            await call("session")
        assert raised.value.bound == "maximum_index_entries"
