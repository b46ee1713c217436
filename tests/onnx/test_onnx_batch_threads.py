"""One call's batches side by side (``batch_threads``), and one thread a run by default
(the sentence encoders; BGE-M3 keeps onnxruntime's threads and batches in turn).

The engine's worker and its helper threads each take the next batch of an operation; the
vectors come back in the texts' order, the same as one batch after another. A failure
starts no further batch and is raised once every running batch has ended; a cancellation
terminates every running batch; a batch too large for ``maximum_tensor_bytes`` anywhere in
the call fails it before any batch runs.
"""

from __future__ import annotations

import asyncio
import os
import threading

import numpy as np
import numpy.typing as npt
import pytest
from onnx_fakes import GatedInference, WordTokenizer
from test_onnx_engine import limits, wait_for

from game_memory.onnx import (
    BgeM3OnnxEmbeddingOptions,
    OnnxEmbeddingError,
    OnnxEmbeddingOperationMetrics,
    OnnxFailureKind,
    OnnxOperation,
    SentenceEncoderOnnxEmbeddingOptions,
)
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.pooling import Pooling
from game_memory.onnx.tokens import RunControl

DOCUMENTS = OnnxOperation.DOCUMENTS
TEXTS = [f"text {'w' * (index + 1)} of {index}" for index in range(7)]


class FailingInference(GatedInference):
    """Fails the run of any batch holding the id of a word of ``length`` letters."""

    def __init__(self, length: int) -> None:
        super().__init__()
        self.failing_id = 4 + length

    def run(
        self,
        input_ids: npt.NDArray[np.int64],
        attention_mask: npt.NDArray[np.int64],
        control: RunControl,
    ) -> npt.NDArray[np.float32]:
        if self.failing_id in input_ids:
            with self._lock:
                self.batch_sizes.append(len(input_ids))
            raise RuntimeError("this batch broke")
        return super().run(input_ids, attention_mask, control)


def engine_of(
    inference: GatedInference,
    records: list[OnnxEmbeddingOperationMetrics] | None = None,
    **overrides: object,
) -> OnnxInferenceEngine:
    settings: dict[str, object] = {"maximum_batch_size": 1, **overrides}
    sink = records.append if records is not None else None
    return OnnxInferenceEngine(limits(**settings), WordTokenizer(), inference, Pooling.CLS, sink)


async def test_batches_run_two_at_a_time_and_come_back_in_order() -> None:
    together, apart = GatedInference(), GatedInference()
    together.delay = apart.delay = 0.05  # long enough for the runs to meet, even on a busy machine
    records: list[OnnxEmbeddingOperationMetrics] = []
    shared = engine_of(together, records, batch_threads=2)
    alone = engine_of(apart, batch_threads=1)
    try:
        side_by_side = await shared.embed(TEXTS, DOCUMENTS)
        in_turn = await alone.embed(TEXTS, DOCUMENTS)
    finally:
        await shared.aclose()
        await alone.aclose()
    assert len(side_by_side) == len(TEXTS)
    for a, b in zip(side_by_side, in_turn, strict=True):
        assert np.array_equal(a, b)
    assert together.most_active == 2 and apart.most_active == 1
    assert len(together.threads) == 2 and len(apart.threads) == 1
    assert records[-1].inference_batch_count == len(TEXTS)
    assert records[-1].maximum_inference_batch_size == 1 and records[-1].succeeded


async def test_a_failed_batch_starts_no_other_and_is_raised_once_the_runs_end() -> None:
    inference = FailingInference(length=3)  # the third text's word "www"
    inference.delay = 0.05
    engine = engine_of(inference, batch_threads=2)
    try:
        with pytest.raises(OnnxEmbeddingError) as caught:
            await engine.embed(TEXTS, DOCUMENTS)
        assert caught.value.kind is OnnxFailureKind.INFERENCE
        assert "this batch broke" in str(caught.value.__cause__)
        assert inference.active == 0  # the batch beside it had ended
        assert len(inference.batch_sizes) <= 4  # texts 1-3, and at most one started beside
        # The engine still answers.
        assert len(await engine.embed(["fine words"], DOCUMENTS)) == 1
    finally:
        await engine.aclose()


async def test_cancelling_a_call_terminates_every_running_batch() -> None:
    inference = GatedInference()
    inference.gate.clear()
    engine = engine_of(inference, batch_threads=2)
    try:
        task = asyncio.ensure_future(engine.embed(TEXTS, DOCUMENTS))
        while inference.most_active < 2:
            await asyncio.sleep(0.002)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_for(inference.terminated)
        while inference.active:
            await asyncio.sleep(0.002)
        assert len(inference.batch_sizes) == 2  # nothing started after the cancellation
        inference.gate.set()
        assert len(await engine.embed(["after"], DOCUMENTS)) == 1
    finally:
        inference.gate.set()
        await engine.aclose()


@pytest.mark.parametrize("batch_threads", [1, 2])
async def test_a_batch_too_large_anywhere_fails_the_call_before_any_runs(
    batch_threads: int,
) -> None:
    inference = GatedInference()
    # 56 bytes a token slot at width 8: a 3-token text fits, the 22-token one does not.
    engine = engine_of(inference, batch_threads=batch_threads, maximum_tensor_bytes=56 * 10)
    long_text = " ".join(["word"] * 20)
    try:
        with pytest.raises(OnnxEmbeddingError) as caught:
            await engine.embed(["a", "b", "c", long_text], DOCUMENTS)
        assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
        assert inference.batch_sizes == []
    finally:
        await engine.aclose()


async def test_a_closed_engine_stops_its_batch_threads() -> None:
    before = set(threading.enumerate())  # other engines' threads are not this test's
    engine = engine_of(GatedInference(), batch_threads=3)
    await engine.embed(TEXTS, DOCUMENTS)
    named = [
        thread
        for thread in threading.enumerate()
        if thread.name.startswith("game-memory-onnx-batch") and thread not in before
    ]
    assert named
    await engine.aclose()
    for thread in named:
        thread.join(timeout=5)
        assert not thread.is_alive()


def test_the_sentence_encoders_run_one_thread_a_run_and_two_batches_at_once(
    tmp_path: object,
) -> None:
    options = SentenceEncoderOnnxEmbeddingOptions(tmp_path)  # type: ignore[arg-type]
    assert options.intra_op_threads == 1 and options.batch_threads == 0
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    assert options.engine_limits(16).batch_threads == min(2, cores)
    chosen = SentenceEncoderOnnxEmbeddingOptions(tmp_path, batch_threads=1)  # type: ignore[arg-type]
    assert chosen.engine_limits(16).batch_threads == 1


def test_bge_m3_keeps_onnxruntimes_threads_and_batches_in_turn(tmp_path: object) -> None:
    options = BgeM3OnnxEmbeddingOptions(tmp_path)  # type: ignore[arg-type]
    assert options.intra_op_threads == 0 and options.batch_threads == 1
    assert options.engine_limits(16).batch_threads == 1
