"""The shared engine: admission, queue, deadlines, cancellation, closing, batching, metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import numpy as np
import pytest
from onnx_fakes import GatedInference, WordTokenizer

from game_memory.errors import (
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    InvalidArgumentError,
    StoreBusyError,
)
from game_memory.onnx import (
    OnnxEmbeddingError,
    OnnxEmbeddingOperationMetrics,
    OnnxFailureKind,
    OnnxOperation,
)
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.limits import EngineLimits
from game_memory.onnx.pooling import Pooling

DOCUMENTS = OnnxOperation.DOCUMENTS


def limits(**overrides: object) -> EngineLimits:
    values: dict[str, object] = {
        "maximum_tokens": 512,
        "maximum_characters_per_text": 1_000,
        "maximum_texts_per_call": 64,
        "maximum_batch_size": 16,
        "maximum_batch_tokens": 32_768,
        "maximum_tensor_bytes": 268_435_456,
        "maximum_concurrent_inferences": 1,
        "maximum_queued_operations": 16,
        "queue_timeout": 5.0,
        "inference_timeout": 5.0,
    }
    values.update(overrides)
    return EngineLimits(**values)  # type: ignore[arg-type]


@pytest.fixture
def inference() -> GatedInference:
    return GatedInference()


@pytest.fixture
def records() -> list[OnnxEmbeddingOperationMetrics]:
    return []


@pytest.fixture
async def make_engine(inference: GatedInference, records: list[OnnxEmbeddingOperationMetrics]):
    engines: list[OnnxInferenceEngine] = []

    def make(pooling: Pooling = Pooling.CLS, tokenizer: WordTokenizer | None = None, **kw: object):
        engine = OnnxInferenceEngine(
            limits(**kw), tokenizer or WordTokenizer(), inference, pooling, records.append
        )
        engines.append(engine)
        return engine

    yield make
    inference.gate.set()
    for engine in engines:
        await engine.aclose()


async def wait_for(event: threading.Event, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not event.is_set():
        assert time.monotonic() < deadline, "timed out waiting for the fake inference"
        await asyncio.sleep(0.002)


async def test_embed_returns_one_unit_vector_per_text_in_order(make_engine) -> None:
    engine = make_engine()
    vectors = await engine.embed(["a bb", "ccc", "a bb"], DOCUMENTS)
    assert len(vectors) == 3
    for vector in vectors:
        assert vector.dtype == np.float32
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(vectors[0], vectors[2])
    await engine.aclose()


async def test_inference_runs_off_the_event_loop(make_engine, inference: GatedInference) -> None:
    engine = make_engine()
    await engine.embed(["hello"], DOCUMENTS)
    assert threading.get_ident() not in inference.threads
    await engine.aclose()


async def test_a_tokenizer_failure_gives_the_inference_slot_back(make_engine) -> None:
    engine = make_engine(
        tokenizer=WordTokenizer(fail_on="boom"), maximum_concurrent_inferences=1, queue_timeout=0.5
    )
    for _ in range(3):
        with pytest.raises(OnnxEmbeddingError) as caught:
            await engine.embed(["boom"], DOCUMENTS)
        assert caught.value.kind is OnnxFailureKind.TOKENIZATION
    assert len(await engine.embed(["fine"], DOCUMENTS)) == 1
    await engine.aclose()


async def test_full_queue_fails_at_once_without_starting_work(
    make_engine, inference: GatedInference, records
) -> None:
    engine = make_engine(maximum_concurrent_inferences=1, maximum_queued_operations=1)
    inference.gate.clear()
    running = asyncio.ensure_future(engine.embed(["one"], DOCUMENTS))
    await wait_for(inference.started)
    queued = asyncio.ensure_future(engine.embed(["two"], DOCUMENTS))
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["three"], DOCUMENTS)
    assert time.perf_counter() - started < 0.05
    assert caught.value.kind is OnnxFailureKind.QUEUE_FULL
    assert isinstance(caught.value, StoreBusyError)
    assert isinstance(caught.value, EmbeddingUnavailableError)
    assert inference.batch_sizes == [1]
    inference.gate.set()
    await asyncio.gather(running, queued)
    assert records[0].failure is OnnxFailureKind.QUEUE_FULL
    await engine.aclose()


async def test_waiting_past_queue_timeout_fails_with_queue_timeout(
    make_engine, inference: GatedInference
) -> None:
    engine = make_engine(queue_timeout=0.05)
    inference.gate.clear()
    running = asyncio.ensure_future(engine.embed(["one"], DOCUMENTS))
    await wait_for(inference.started)
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["two"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.QUEUE_TIMEOUT
    assert isinstance(caught.value, EmbeddingTimeoutError)
    inference.gate.set()
    await running
    # The abandoned waiter gave its place back: the engine still works.
    assert len(await engine.embed(["three"], DOCUMENTS)) == 1
    await engine.aclose()


async def test_running_past_inference_timeout_terminates_the_run(
    make_engine, inference: GatedInference, records
) -> None:
    engine = make_engine(inference_timeout=0.05)
    inference.gate.clear()
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["slow"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.TIMEOUT
    assert isinstance(caught.value, EmbeddingTimeoutError)
    await wait_for(inference.terminated)
    assert records[-1].failure is OnnxFailureKind.TIMEOUT
    assert not records[-1].succeeded
    await engine.aclose()


async def test_cancelling_a_call_terminates_its_run(
    make_engine, inference: GatedInference, records
) -> None:
    engine = make_engine()
    inference.gate.clear()
    task = asyncio.ensure_future(engine.embed(["slow"], DOCUMENTS))
    await wait_for(inference.started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(inference.terminated)
    assert records[-1].failure is OnnxFailureKind.CANCELLED
    await engine.aclose()


async def test_cancelling_a_queued_call_gives_its_place_back(
    make_engine, inference: GatedInference
) -> None:
    engine = make_engine(maximum_queued_operations=1)
    inference.gate.clear()
    running = asyncio.ensure_future(engine.embed(["one"], DOCUMENTS))
    await wait_for(inference.started)
    queued = asyncio.ensure_future(engine.embed(["two"], DOCUMENTS))
    await asyncio.sleep(0.01)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    inference.gate.set()
    await running
    assert len(await engine.embed(["three"], DOCUMENTS)) == 1
    assert inference.batch_sizes == [1, 1]
    await engine.aclose()


async def test_an_abandoned_run_keeps_its_slot_until_its_thread_ends(
    make_engine, inference: GatedInference
) -> None:
    engine = make_engine(inference_timeout=0.05, queue_timeout=0.05)
    inference.cooperative = False
    inference.gate.clear()
    with pytest.raises(OnnxEmbeddingError) as first:
        await engine.embed(["ignores termination"], DOCUMENTS)
    assert first.value.kind is OnnxFailureKind.TIMEOUT
    # The thread still runs, so no second inference may start beside it.
    with pytest.raises(OnnxEmbeddingError) as second:
        await engine.embed(["next"], DOCUMENTS)
    assert second.value.kind is OnnxFailureKind.QUEUE_TIMEOUT
    assert inference.most_active == 1
    inference.gate.set()
    await wait_for(inference.ended)
    await asyncio.sleep(0.01)
    assert len(await engine.embed(["after"], DOCUMENTS)) == 1
    await engine.aclose()


async def test_concurrent_inferences_stay_within_their_bound(
    make_engine, inference: GatedInference
) -> None:
    engine = make_engine(maximum_concurrent_inferences=2)
    inference.gate.clear()
    tasks = [asyncio.ensure_future(engine.embed([f"text {i}"], DOCUMENTS)) for i in range(6)]
    await asyncio.sleep(0.05)
    assert inference.active == 2
    inference.gate.set()
    await asyncio.gather(*tasks)
    assert inference.most_active == 2
    await engine.aclose()


async def test_aclose_cancels_running_and_queued_work_and_releases_the_model(
    make_engine, inference: GatedInference, records
) -> None:
    engine = make_engine()
    inference.gate.clear()
    running = asyncio.ensure_future(engine.embed(["one"], DOCUMENTS))
    await wait_for(inference.started)
    queued = asyncio.ensure_future(engine.embed(["two"], DOCUMENTS))
    await asyncio.sleep(0.01)
    await engine.aclose()
    assert inference.active == 0
    assert inference.closed == 1
    for task in (running, queued):
        with pytest.raises(OnnxEmbeddingError) as caught:
            await task
        assert caught.value.kind is OnnxFailureKind.CANCELLED
    await engine.aclose()
    assert inference.closed == 1
    with pytest.raises(OnnxEmbeddingError) as closed:
        await engine.embed(["three"], DOCUMENTS)
    assert closed.value.kind is OnnxFailureKind.CLOSED
    assert [record.failure for record in records] == [
        OnnxFailureKind.CANCELLED,
        OnnxFailureKind.CANCELLED,
        OnnxFailureKind.CLOSED,
    ]


async def test_concurrent_aclose_calls_all_wait_for_the_release(
    make_engine, inference: GatedInference
) -> None:
    engine = make_engine()
    await asyncio.gather(engine.aclose(), engine.aclose(), engine.aclose())
    assert inference.closed == 1
    assert engine.closed


@pytest.mark.parametrize("text", ["x" * 1_001, "nul \0 inside"])
async def test_an_oversized_or_nul_text_is_refused_before_inference(
    make_engine, inference: GatedInference, text: str
) -> None:
    engine = make_engine()
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["fine", text], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
    assert inference.batch_sizes == []
    await engine.aclose()


@pytest.mark.parametrize("texts", [[], "a string", ["ok", 3], ["x"] * 65])
async def test_bad_arguments_raise_invalid_argument(make_engine, records, texts) -> None:
    engine = make_engine()
    with pytest.raises(InvalidArgumentError):
        await engine.embed(texts, DOCUMENTS)
    assert records == []
    await engine.aclose()


async def test_a_failing_tokenizer_reports_tokenization(make_engine) -> None:
    engine = make_engine(tokenizer=WordTokenizer(fail_on="boom"))
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["fine", "boom"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION
    await engine.aclose()


async def test_a_tokenizer_exceeding_maximum_tokens_reports_tokenization(make_engine) -> None:
    engine = make_engine(tokenizer=WordTokenizer(maximum_tokens=40), maximum_tokens=10)
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["a " * 20], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION
    await engine.aclose()


async def test_a_runtime_failure_reports_inference(make_engine, inference: GatedInference) -> None:
    engine = make_engine()
    inference.fail = RuntimeError("kernel exploded")
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["text"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.INFERENCE
    assert isinstance(caught.value.__cause__, RuntimeError)
    await engine.aclose()


@pytest.mark.parametrize(
    "broken",
    [
        lambda hidden: hidden[:, :, :4],
        lambda hidden: hidden[:1],
        lambda hidden: hidden.astype(np.float64),
        lambda hidden: np.full_like(hidden, np.nan),
        lambda hidden: np.zeros_like(hidden),
        lambda hidden: np.full_like(hidden, np.inf),
        lambda hidden: np.concatenate([hidden[:1], np.full_like(hidden[1:], np.nan)]),
        lambda hidden: np.concatenate([np.zeros_like(hidden[:1]), hidden[1:]]),
        lambda hidden: hidden.tolist(),
    ],
    ids=[
        "narrow",
        "short-batch",
        "float64",
        "nan",
        "zero",
        "infinite",
        "one-nan-row",
        "one-zero-row",
        "not-an-array",
    ],
)
async def test_a_malformed_output_reports_invalid_output(
    make_engine, inference: GatedInference, broken
) -> None:
    engine = make_engine()
    inference.output = broken
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["one", "two"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.INVALID_OUTPUT
    await engine.aclose()


async def test_the_tensor_estimate_is_checked_before_a_run(
    make_engine, inference: GatedInference
) -> None:
    # 2 texts x 6 tokens x (24 + 8 x 4) bytes = 672 bytes > 600.
    engine = make_engine(maximum_tensor_bytes=600)
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["a b c d", "a b c d"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
    assert "maximum_tensor_bytes" in str(caught.value)
    assert inference.batch_sizes == []
    await engine.aclose()


async def test_batches_are_greedy_and_keep_order(
    make_engine, inference: GatedInference, records
) -> None:
    engine = make_engine(maximum_batch_size=2, maximum_batch_tokens=12)
    await engine.embed(["q"], OnnxOperation.QUERY)
    # 3, 3 and 5 tokens: [3, 3] fit 12 tokens in two texts, 5 starts a new batch.
    together = await engine.embed(["a", "b", "c d e"], DOCUMENTS)
    assert inference.batch_sizes == [1, 2, 1]
    alone = [(await engine.embed([text], DOCUMENTS))[0] for text in ["a", "b", "c d e"]]
    for batched, single in zip(together, alone, strict=True):
        np.testing.assert_allclose(batched, single, atol=1e-6)
    record = records[1]
    assert (record.inference_batch_count, record.maximum_inference_batch_size) == (2, 2)
    assert record.token_count == 11
    await engine.aclose()


async def test_one_metrics_record_per_operation_and_no_text_in_it(make_engine, records) -> None:
    engine = make_engine(tokenizer=WordTokenizer(maximum_tokens=4), maximum_tokens=4)
    await engine.embed(["secret words here", "x"], DOCUMENTS)
    await engine.embed(["query"], OnnxOperation.QUERY)
    assert [record.operation for record in records] == [DOCUMENTS, OnnxOperation.QUERY]
    first = records[0]
    assert first.succeeded and first.failure is None
    assert first.text_count == 2 and first.truncated_text_count == 1
    assert first.token_count == 4 + 3
    assert first.total_milliseconds >= first.inference_milliseconds >= 0
    for field in dataclasses.fields(OnnxEmbeddingOperationMetrics):
        for record in records:
            assert not isinstance(getattr(record, field.name), str), field.name
    await engine.aclose()


async def test_a_raising_metrics_sink_never_changes_a_result(inference: GatedInference) -> None:
    def broken_sink(record: OnnxEmbeddingOperationMetrics) -> None:
        raise RuntimeError("sink down")

    engine = OnnxInferenceEngine(limits(), WordTokenizer(), inference, Pooling.MEAN, broken_sink)
    assert len(await engine.embed(["fine"], DOCUMENTS)) == 1
    inference.fail = RuntimeError("kernel exploded")
    with pytest.raises(OnnxEmbeddingError) as caught:
        await engine.embed(["fails"], DOCUMENTS)
    assert caught.value.kind is OnnxFailureKind.INFERENCE
    await engine.aclose()


async def test_mean_pooling_ignores_padding(make_engine) -> None:
    engine = make_engine(Pooling.MEAN)
    alone = (await engine.embed(["a bb"], DOCUMENTS))[0]
    padded = (await engine.embed(["a bb", "a bb ccc dddd eeeee ffffff"], DOCUMENTS))[0]
    np.testing.assert_allclose(alone, padded, atol=1e-6)
    await engine.aclose()


async def test_a_storm_of_calls_cancellations_and_deadlines_leaves_the_engine_consistent(
    inference: GatedInference, records
) -> None:
    import random

    rng = random.Random(5)
    inference.delay = lambda: rng.choice([0.002, 0.004, 0.03])
    engine = OnnxInferenceEngine(
        limits(
            maximum_concurrent_inferences=2,
            maximum_queued_operations=6,
            queue_timeout=0.01,
            inference_timeout=0.02,
        ),
        WordTokenizer(),
        inference,
        Pooling.CLS,
        records.append,
    )
    tasks = []
    for index in range(120):
        texts = [f"text {index} " + "w " * rng.randrange(1, 20)] * rng.randrange(1, 4)
        tasks.append(asyncio.ensure_future(engine.embed(texts, DOCUMENTS)))
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() * 0.005)
        if rng.random() < 0.2:
            rng.choice(tasks).cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    kinds = {outcome.kind for outcome in outcomes if isinstance(outcome, OnnxEmbeddingError)}
    assert kinds <= {
        OnnxFailureKind.QUEUE_FULL,
        OnnxFailureKind.QUEUE_TIMEOUT,
        OnnxFailureKind.TIMEOUT,
    }
    assert any(isinstance(outcome, list) for outcome in outcomes)
    for outcome in outcomes:
        assert isinstance(outcome, list | OnnxEmbeddingError | asyncio.CancelledError)
    # One record per operation that ran (a task cancelled before it started never ran).
    finished = sum(not isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)
    assert finished <= len(records) <= len(tasks)
    # Every run ends, every slot and ticket comes back, and the engine still works.
    deadline = time.monotonic() + 5
    while engine._active and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert not engine._active
    assert engine._tickets == 8
    assert inference.most_active <= 2
    inference.delay = 0.0
    assert len(await engine.embed(["after the storm"], DOCUMENTS)) == 1
    await engine.aclose()
    assert inference.closed == 1
