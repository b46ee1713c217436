"""EmbeddingGate: a concurrency limit and one deadline covering the queue and the call."""

from __future__ import annotations

import asyncio

import pytest

from game_memory import EmbeddingTimeoutError, EmbeddingUnavailableError
from game_memory.embedding.gate import EmbeddingGate
from support.providers import Fault, FaultyProvider
from support.vectors import until

QUICK = 0.05  # the deadline of calls meant to miss it
PATIENT = 10.0  # the deadline of calls meant to finish


def free_slots(gate: EmbeddingGate) -> int:
    """How many calls could start now (the gate's semaphore value)."""
    return int(gate._slots._value)


async def test_a_provider_that_never_returns_misses_the_deadline() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG)
    gate = EmbeddingGate(1, QUICK)
    with pytest.raises(EmbeddingTimeoutError, match="provider exceeded its configured deadline"):
        await gate.call(lambda: provider.embed_query("cat"), "the query")
    await until(lambda: provider.queries.settled == 1, "the cancelled call to settle")
    assert provider.queries.cancelled == 1


async def test_a_cancelled_cooperative_call_frees_its_slot_for_the_next_one() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG)
    gate = EmbeddingGate(1, QUICK)
    with pytest.raises(EmbeddingTimeoutError):
        await gate.call(lambda: provider.embed_query("cat"), "the query")
    await until(lambda: free_slots(gate) == 1, "the slot to be freed")
    assert provider.queries.cancelled == 1 and provider.queries.in_flight == 0


async def test_the_deadline_covers_waiting_for_a_slot() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG_STUBBORN)
    gate = EmbeddingGate(1, QUICK)
    try:
        with pytest.raises(EmbeddingTimeoutError, match="provider exceeded"):
            await gate.call(lambda: provider.embed_query("first"), "the first query")
        with pytest.raises(EmbeddingTimeoutError, match="queue exceeded its configured deadline"):
            await gate.call(lambda: provider.embed_query("second"), "the second query")
        assert provider.queries.calls == 1  # the second call never reached the provider
    finally:
        provider.release.set()


async def test_a_call_ignoring_cancellation_keeps_its_slot_until_it_really_settles() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG_STUBBORN)
    gate = EmbeddingGate(1, QUICK)
    try:
        with pytest.raises(EmbeddingTimeoutError):
            await gate.call(lambda: provider.embed_query("stuck"), "the query")
        await until(lambda: provider.queries.cancelled == 1, "the cancellation to arrive")
        assert provider.queries.in_flight == 1
        with pytest.raises(EmbeddingTimeoutError, match="queue"):
            await gate.call(lambda: provider.embed_query("next"), "the query")
    finally:
        provider.release.set()
    await until(lambda: provider.queries.in_flight == 0, "the stuck call to settle")
    await until(lambda: free_slots(gate) == 1, "the slot to be freed")


async def test_a_provider_that_never_returns_cannot_pile_up_detached_calls() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG_STUBBORN)
    gate = EmbeddingGate(2, QUICK)
    try:
        outcomes = await asyncio.gather(
            *(gate.call(lambda: provider.embed_query("q"), "a query") for _ in range(12)),
            return_exceptions=True,
        )
        assert all(isinstance(outcome, EmbeddingTimeoutError) for outcome in outcomes)
        for _ in range(5):
            with pytest.raises(EmbeddingTimeoutError):
                await gate.call(lambda: provider.embed_query("q"), "a query")
        assert provider.queries.calls == 2
        assert provider.queries.most_in_flight == 2
    finally:
        provider.release.set()
    await until(lambda: provider.queries.in_flight == 0, "the stuck calls to settle")


async def test_at_most_the_configured_number_of_calls_run_at_once() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG)
    gate = EmbeddingGate(3, PATIENT)
    calls = [
        asyncio.ensure_future(gate.call(lambda: provider.embed_query("q"), "a query"))
        for _ in range(10)
    ]
    await until(lambda: provider.queries.in_flight == 3, "three calls to start")
    await asyncio.sleep(0.01)
    assert provider.queries.calls == 3
    provider.release.set()
    results = await asyncio.gather(*calls)
    assert len(results) == 10 and provider.queries.most_in_flight == 3


async def test_a_foreign_provider_error_becomes_embedding_unavailable_and_frees_the_slot() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.CRASH)
    gate = EmbeddingGate(1, PATIENT)
    with pytest.raises(EmbeddingUnavailableError, match="RuntimeError") as raised:
        await gate.call(lambda: provider.embed_query("q"), "the query")
    assert isinstance(raised.value.__cause__, RuntimeError)
    provider.set_fault(Fault.NONE)
    await gate.call(lambda: provider.embed_query("q"), "the query")


async def test_an_embedding_unavailable_error_passes_through_unchanged() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.FAIL)
    with pytest.raises(EmbeddingUnavailableError, match="the test provider is down"):
        await EmbeddingGate(1, PATIENT).call(lambda: provider.embed_query("q"), "the query")


async def test_a_provider_raising_before_it_returns_an_awaitable_does_not_leak_its_slot() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.RAISE_EARLY)
    gate = EmbeddingGate(1, QUICK)
    for _ in range(3):  # a leaked slot would make the second call time out in the queue
        with pytest.raises(EmbeddingUnavailableError, match="broke before starting"):
            await gate.call(lambda: provider.embed_query("q"), "the query")
    assert free_slots(gate) == 1


async def test_the_callers_cancellation_propagates_and_cancels_the_provider_call() -> None:
    provider = FaultyProvider()
    provider.set_fault(Fault.HANG)
    gate = EmbeddingGate(1, PATIENT)
    call = asyncio.ensure_future(gate.call(lambda: provider.embed_query("q"), "the query"))
    await until(lambda: provider.queries.in_flight == 1, "the call to start")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await until(lambda: provider.queries.settled == 1, "the provider call to settle")
    assert provider.queries.cancelled == 1
    provider.set_fault(Fault.NONE)
    await gate.call(lambda: provider.embed_query("q"), "the query")


def test_the_gate_serves_one_asyncio_run_after_another_even_once_contended() -> None:
    # asyncio's semaphore belongs to the loop that first waited on it: a front door used
    # in a second asyncio.run, after its gate was contended in the first, failed every
    # embedding with RuntimeError (reported quietly, the memories left without vectors).
    gate = EmbeddingGate(concurrency=1, timeout=5.0)

    async def contended() -> list[int]:
        async def work(value: int) -> int:
            await asyncio.sleep(0.01)
            return value

        return list(await asyncio.gather(*(gate.call(lambda v=v: work(v), "t") for v in range(3))))

    assert asyncio.run(contended()) == [0, 1, 2]
    assert asyncio.run(contended()) == [0, 1, 2]
