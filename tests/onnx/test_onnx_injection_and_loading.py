"""The providers' injection seam (fake tokenizer and inference) and the off-loop loader."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest
from onnx_fakes import GatedInference, WordTokenizer

from game_memory.onnx import (
    BgeM3OnnxEmbeddingOptions,
    BgeM3OnnxEmbeddingProvider,
    OnnxEmbeddingError,
    OnnxEmbeddingOperationMetrics,
    OnnxFailureKind,
    OnnxOperation,
)
from game_memory.onnx.loader import load_off_loop
from game_memory.onnx.model_files import ModelFileManifest, ModelFileRecord

MANIFEST = ModelFileManifest(
    directory=Path("/models/bge-m3"),
    files=(
        ModelFileRecord("config.json", 10, "a" * 64),
        ModelFileRecord("tokenizer_config.json", 10, "b" * 64),
        ModelFileRecord("sentencepiece.bpe.model", 10, "c" * 64),
        ModelFileRecord("onnx/model_int8.onnx", 10, "d" * 64),
    ),
)


def provider(inference: GatedInference, **options: object) -> BgeM3OnnxEmbeddingProvider:
    settings = BgeM3OnnxEmbeddingOptions("/models/bge-m3", **options)
    return BgeM3OnnxEmbeddingProvider(settings, MANIFEST, WordTokenizer(), inference)


async def test_the_constructor_takes_any_tokenizer_and_inference() -> None:
    inference = GatedInference(hidden_size=1024)
    async with provider(inference) as bge:
        assert bge.identity.version == (
            "int8-dddddddddddddddd-cccccccccccccccc+xlm-roberta-spm-fairseq-offset-cls-l2-v1-max512"
        )
        vector = await bge.embed_query("the guard")
        assert vector.shape == (1024,)
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)
    assert inference.closed == 1


async def test_an_inference_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        provider(GatedInference(hidden_size=768))
    assert caught.value.kind is OnnxFailureKind.UNSUPPORTED_MODEL


async def test_the_provider_reports_a_full_queue_and_broken_outputs() -> None:
    inference = GatedInference(hidden_size=1024)
    records: list[OnnxEmbeddingOperationMetrics] = []
    bge = provider(inference, maximum_queued_operations=0, metrics=records.append)
    inference.gate.clear()
    running = asyncio.ensure_future(bge.embed_query("one"))
    while not inference.started.is_set():
        await asyncio.sleep(0.002)
    with pytest.raises(OnnxEmbeddingError) as full:
        await bge.embed_documents(["two"])
    assert full.value.kind is OnnxFailureKind.QUEUE_FULL
    inference.gate.set()
    await running
    inference.output = lambda hidden: np.full_like(hidden, np.inf)
    with pytest.raises(OnnxEmbeddingError) as broken:
        await bge.embed_query("three")
    assert broken.value.kind is OnnxFailureKind.INVALID_OUTPUT
    await bge.aclose()
    assert [(r.operation, r.failure) for r in records] == [
        (OnnxOperation.DOCUMENTS, OnnxFailureKind.QUEUE_FULL),
        (OnnxOperation.QUERY, None),
        (OnnxOperation.QUERY, OnnxFailureKind.INVALID_OUTPUT),
    ]


async def test_a_query_must_be_a_string() -> None:
    from game_memory.errors import InvalidArgumentError

    async with provider(GatedInference(hidden_size=1024)) as bge:
        with pytest.raises(InvalidArgumentError):
            await bge.embed_query(None)  # type: ignore[arg-type]


async def test_a_slow_load_times_out_and_its_late_result_is_released() -> None:
    release = threading.Event()
    disposed: list[str] = []
    records: list[OnnxEmbeddingOperationMetrics] = []

    def slow(cancelled) -> str:
        release.wait(5)
        return "model"

    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_off_loop(slow, timeout=0.05, dispose=disposed.append, metrics=records.append)
    assert caught.value.kind is OnnxFailureKind.TIMEOUT
    release.set()
    for _ in range(500):
        if disposed:
            break
        await asyncio.sleep(0.01)
    assert disposed == ["model"]
    assert records[0].operation is OnnxOperation.MODEL_LOAD
    assert records[0].failure is OnnxFailureKind.TIMEOUT


async def test_a_cancelled_load_tells_the_loader_and_releases_its_result() -> None:
    release = threading.Event()
    saw_cancel: list[bool] = []
    disposed: list[str] = []

    def slow(cancelled) -> str:
        release.wait(5)
        saw_cancel.append(cancelled())
        return "model"

    task = asyncio.ensure_future(
        load_off_loop(slow, timeout=10, dispose=disposed.append, metrics=None)
    )
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    for _ in range(500):
        if disposed:
            break
        await asyncio.sleep(0.01)
    assert saw_cancel == [True] and disposed == ["model"]


async def test_an_unexpected_load_error_is_an_unsupported_model() -> None:
    def broken(cancelled) -> str:
        raise KeyError("surprise")

    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_off_loop(broken, timeout=5, dispose=lambda _: None, metrics=None)
    assert caught.value.kind is OnnxFailureKind.UNSUPPORTED_MODEL
