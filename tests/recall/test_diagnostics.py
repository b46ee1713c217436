"""Diagnostics: structured, text-free, and never able to change an outcome."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from pydantic import ValidationError

from game_memory import DiagnosticSeverity, MemoryVectorDiagnostic
from game_memory.recall.diagnostics import DiagnosticDispatcher
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query, until


def diagnostic(code: str = "memory_vector_search_failed") -> MemoryVectorDiagnostic:
    return MemoryVectorDiagnostic(
        code=code, severity=DiagnosticSeverity.WARNING, message="Something happened."
    )


@pytest.mark.parametrize("message", ["", "   ", "with\x00nul", "x" * 4_097])
def test_a_diagnostic_message_must_be_nonblank_text_without_nul(message: str) -> None:
    with pytest.raises(ValidationError):
        MemoryVectorDiagnostic(code="c", severity=DiagnosticSeverity.ERROR, message=message)


def test_diagnostic_details_are_bounded() -> None:
    with pytest.raises(ValidationError, match="65,536"):
        MemoryVectorDiagnostic(
            code="c", severity="error", message="m", details={"big": "x" * 70_000}
        )


async def test_a_sink_that_raises_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    def broken(_: MemoryVectorDiagnostic) -> None:
        raise RuntimeError("sink bug")

    async def broken_async(_: MemoryVectorDiagnostic) -> None:
        raise RuntimeError("async sink bug")

    with caplog.at_level(logging.ERROR, logger="game_memory.vector"):
        await DiagnosticDispatcher(broken, 1.0).report(diagnostic())
        await DiagnosticDispatcher(broken_async, 1.0).report(diagnostic())
    assert "sink failed" in caplog.text


async def test_a_slow_sink_is_dropped_after_the_timeout() -> None:
    finished: list[str] = []

    async def slow(item: MemoryVectorDiagnostic) -> None:
        await asyncio.sleep(30)
        finished.append(item.code)

    dispatcher = DiagnosticDispatcher(slow, 0.02)
    await dispatcher.report(diagnostic())
    assert finished == []


async def test_a_stuck_sink_holds_its_slot_and_later_diagnostics_are_dropped_at_once() -> None:
    release = asyncio.Event()
    received: list[str] = []

    async def stubborn(item: MemoryVectorDiagnostic) -> None:
        received.append(item.code)
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):  # ignores cancellation on purpose
                await release.wait()

    dispatcher = DiagnosticDispatcher(stubborn, 0.02)
    waits: list[int] = []
    slot = dispatcher._slot
    original = slot.acquire

    async def counted() -> bool:
        waits.append(1)
        return await original()

    slot.acquire = counted  # type: ignore[method-assign]
    try:
        await dispatcher.report(diagnostic("first"))
        for _ in range(20):
            await dispatcher.report(diagnostic("dropped"))
        # While the sink is stuck, nothing even waits for its slot: dropping is immediate.
        assert waits == [1]
        assert received == ["first"]
    finally:
        release.set()
    await until(lambda: not dispatcher._stuck, "the stuck sink to settle")
    await dispatcher.report(diagnostic("after"))
    assert received == ["first", "after"]


async def test_the_callers_cancellation_propagates_through_a_report() -> None:
    async def slow(_: MemoryVectorDiagnostic) -> None:
        await asyncio.sleep(30)

    dispatcher = DiagnosticDispatcher(slow, 10.0)
    task = asyncio.ensure_future(dispatcher.report(diagnostic()))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_without_a_sink_reporting_does_nothing() -> None:
    await DiagnosticDispatcher(None, 0.01).report(diagnostic())


@pytest.mark.parametrize("sink_kind", ["raises", "hangs", "stuck"])
async def test_a_failing_sink_never_changes_what_append_and_search_return(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    sink_kind: str,
) -> None:
    release = asyncio.Event()

    async def sink(_: MemoryVectorDiagnostic) -> None:
        if sink_kind == "raises":
            raise RuntimeError("sink bug")
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                if sink_kind == "hangs":
                    raise

    store = make_vector_store(diagnostics=sink, options={"diagnostic_timeout": 0.02})
    provider.set_fault(Fault.FAIL)
    try:
        assert await store.append(make_memory("m1", text="the blacksmith forged a sword"))
        assert await store.append(make_memory("m2", text="a cat on the roof"))
        result = await store.recall(query("blacksmith"))
        assert [m.memory_id for m in result.memories] == ["m1"]
        assert result.fallback
        assert [m.memory_id for m in await store.enumerate("session")] == ["m1", "m2"]
    finally:
        release.set()


async def test_diagnostics_name_ids_but_never_carry_memory_text(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    provider: FaultyProvider,
    diagnostics: Diagnostics,
) -> None:
    store = make_vector_store()
    provider.set_fault(Fault.CRASH)
    secret = "the treasure is under the old oak"
    await store.append(make_memory("m1", text=secret, payload_json='{"where":"oak"}'))
    await store.recall(query("treasure oak"))
    assert diagnostics.codes() == ["memory_embedding_append_failed", "memory_vector_search_failed"]
    appended = diagnostics[0]
    assert (appended.session_id, appended.owner_id, appended.memory_id) == (
        "session",
        "owner",
        "m1",
    )
    assert appended.details == {"exception": "EmbeddingUnavailableError"}
    assert appended.severity is DiagnosticSeverity.WARNING
    for item in diagnostics:
        dumped = item.model_dump_json()
        assert "treasure" not in dumped and "oak" not in dumped
