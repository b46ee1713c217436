"""docs/embeddings.md cannot drift: every option, failure kind and command is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

import game_memory.onnx as onnx
from game_memory.onnx import (
    MODEL_NAMES,
    BgeM3OnnxEmbeddingOptions,
    OnnxEmbeddingOperationMetrics,
    OnnxFailureKind,
    SentenceEncoderOnnxEmbeddingOptions,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "embeddings.md"


@pytest.fixture(scope="module")
def text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_option_has_a_row_in_the_limits_table(text: str) -> None:
    names = set(BgeM3OnnxEmbeddingOptions.model_fields)
    names |= set(SentenceEncoderOnnxEmbeddingOptions.model_fields)
    for name in sorted(names):
        assert f"| `{name}`" in text, name


def test_every_failure_kind_has_a_row(text: str) -> None:
    for kind in OnnxFailureKind:
        assert f"| `{kind.name}` |" in text, kind.name


def test_every_metrics_field_is_described(text: str) -> None:
    for name in OnnxEmbeddingOperationMetrics.__dataclass_fields__:
        assert f"`{name}`" in text, name


def test_the_commands_and_the_benchmark_are_documented(text: str) -> None:
    for phrase in ("game-memory models prepare", "game-memory models info", "--force", "--home"):
        assert phrase in text
    assert "python benchmarks/embedding.py" in text


def test_both_named_models_and_their_benchmark_are_documented(text: str) -> None:
    for name in MODEL_NAMES:
        assert f"| `{name}` |" in text, name
    assert "game-memory models prepare multilingual" in text
    assert "python benchmarks/multilingual.py" in text
    assert "+xlmr-unigram-prefix-query-passage-mean-l2-v1-max512:384" in text


def test_every_public_name_is_documented(text: str) -> None:
    for name in onnx.__all__:
        assert f"`{name}" in text, name
