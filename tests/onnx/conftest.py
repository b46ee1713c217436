"""Fixtures of the ONNX provider tests: tiny models built here, never downloaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sentencepiece
import tiny_xlmr_model as tiny

from game_memory.onnx import OnnxEmbeddingOperationMetrics


@pytest.fixture(scope="session")
def sentencepiece_bytes() -> bytes:
    """A SentencePiece BPE model trained on a small corpus (about 0.1 s)."""
    return tiny.train_sentencepiece()


@pytest.fixture(scope="session")
def sentencepiece_processor(sentencepiece_bytes: bytes) -> sentencepiece.SentencePieceProcessor:
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(sentencepiece_bytes)
    return processor


@pytest.fixture(scope="session")
def tiny_weights(sentencepiece_processor: sentencepiece.SentencePieceProcessor) -> tiny.TinyWeights:
    return tiny.TinyWeights.random(sentencepiece_processor.GetPieceSize() + 1)


@pytest.fixture
def bge_folder(tmp_path: Path, sentencepiece_bytes: bytes, tiny_weights: tiny.TinyWeights) -> Path:
    """A BGE-M3-shaped folder with the tiny contextual graph."""
    return tiny.write_folder(
        tmp_path / "bge-m3", sentencepiece_bytes, tiny.build_graph(tiny_weights)
    )


@pytest.fixture
def metrics_records() -> list[OnnxEmbeddingOperationMetrics]:
    """Records collected by the ``collect_metrics`` sink."""
    return []


@pytest.fixture
def collect_metrics(
    metrics_records: list[OnnxEmbeddingOperationMetrics],
) -> Callable[[OnnxEmbeddingOperationMetrics], None]:
    return metrics_records.append
