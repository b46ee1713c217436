"""BGE-M3 provider on a tiny XLM-R-shaped graph and a SentencePiece model trained here."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import tiny_xlmr_model as tiny
from onnx import TensorProto

from game_memory.embedding.provider import EmbeddingProvider
from game_memory.onnx import (
    BgeM3OnnxEmbeddingOptions,
    BgeM3OnnxEmbeddingProvider,
    OnnxEmbeddingError,
    OnnxFailureKind,
    OnnxOperation,
)
from game_memory.onnx.tokens import RunControl

TEXTS = [
    "the guard saw the thief near the old mill",
    "a dragon flew over the village",
    "wolves howled",
    "Ünïcödé and unseen symbols ✓ 42",
    "",
]


async def create(folder: Path, **options: object) -> BgeM3OnnxEmbeddingProvider:
    return await BgeM3OnnxEmbeddingProvider.create(BgeM3OnnxEmbeddingOptions(folder, **options))


async def failure_of(folder: Path, **options: object) -> OnnxFailureKind:
    with pytest.raises(OnnxEmbeddingError) as caught:
        provider = await create(folder, **options)
        await provider.aclose()
    return caught.value.kind


async def test_embeddings_match_an_independent_numpy_reference(
    bge_folder: Path,
    tiny_weights: tiny.TinyWeights,
    sentencepiece_processor: sentencepiece.SentencePieceProcessor,
) -> None:
    async with await create(bge_folder) as provider:
        assert isinstance(provider, EmbeddingProvider)
        vectors = await provider.embed_documents(TEXTS)
        query = await provider.embed_query(TEXTS[0])
    for text, vector in zip(TEXTS, vectors, strict=True):
        assert vector.shape == (1024,) and vector.dtype == np.float32
        expected = tiny.reference_embedding(tiny_weights, sentencepiece_processor, text, 512)
        np.testing.assert_allclose(vector, expected, atol=2e-5)
    np.testing.assert_array_equal(query, vectors[0])


async def test_truncation_keeps_the_first_pieces_and_is_counted(
    bge_folder: Path,
    tiny_weights: tiny.TinyWeights,
    sentencepiece_processor: sentencepiece.SentencePieceProcessor,
    collect_metrics,
    metrics_records,
) -> None:
    text = " ".join(tiny.CORPUS)
    async with await create(bge_folder, maximum_tokens=8, metrics=collect_metrics) as provider:
        (vector,) = await provider.embed_documents([text])
    expected = tiny.reference_embedding(tiny_weights, sentencepiece_processor, text, 8)
    np.testing.assert_allclose(vector, expected, atol=2e-5)
    record = metrics_records[-1]
    assert record.operation is OnnxOperation.DOCUMENTS
    assert (record.truncated_text_count, record.token_count) == (1, 8)


async def test_a_text_embeds_the_same_alone_and_beside_longer_texts(bge_folder: Path) -> None:
    async with await create(bge_folder, maximum_batch_size=8) as provider:
        alone = await provider.embed_query("wolves howled")
        batch = await provider.embed_documents(
            ["wolves howled", tiny.CORPUS[1], " ".join(tiny.CORPUS[:3])]
        )
    np.testing.assert_allclose(batch[0], alone, atol=1e-6)


async def test_cls_pooling_is_contextual_and_the_model_honours_the_mask(
    bge_folder: Path,
) -> None:
    async with await create(bge_folder) as provider:
        first, second = await provider.embed_documents(["the guard", "the thief"])
        # Both start with <s>, so only attention over the rest can tell them apart.
        assert float(first @ second) < 0.999
        inference = provider.engine._inference
        ids = np.array([[0, 5, 6, 7, 2]], dtype=np.int64)
        full = inference.run(ids, np.ones_like(ids), RunControl())
        masked = inference.run(ids, np.array([[1, 1, 1, 0, 0]]), RunControl())
        assert not np.allclose(full[0, 0], masked[0, 0])


async def test_identity_names_weights_tokenizer_preprocessing_and_maximum_tokens(
    bge_folder: Path, tmp_path: Path, sentencepiece_bytes: bytes
) -> None:
    async with await create(bge_folder) as provider:
        identity = provider.identity
        weights_sha = provider.manifest.record("onnx/model_int8.onnx").sha256
        tokenizer_sha = provider.manifest.record("sentencepiece.bpe.model").sha256
    assert identity.provider_id == "onnx-in-process"
    assert identity.model_id == "BAAI/bge-m3"
    assert identity.dimensions == 1024
    assert identity.version == (
        f"int8-{weights_sha[:16]}-{tokenizer_sha[:16]}"
        "+xlm-roberta-spm-fairseq-offset-cls-l2-v1-max512"
    )
    async with await create(bge_folder, maximum_tokens=256) as provider:
        assert provider.identity != identity
    async with await create(bge_folder, provider_id="my-game") as provider:
        assert provider.identity.provider_id == "my-game"
    async with await create(bge_folder, model_version="pinned-1") as provider:
        assert provider.identity.version.startswith("pinned-1+")
    other = tiny.write_folder(
        tmp_path / "other-weights",
        sentencepiece_bytes,
        tiny.build_graph(tiny.TinyWeights.random(200, seed=99)),
    )
    async with await create(other) as provider:
        assert provider.identity.version != identity.version
        assert provider.identity.version.split("-")[2] == identity.version.split("-")[2]
    retrained = tiny.write_folder(
        tmp_path / "other-tokenizer",
        tiny.train_sentencepiece(vocabulary_size=110),
        tiny.build_graph(tiny.TinyWeights.random(200)),
    )
    async with await create(retrained) as provider:
        assert provider.identity.version.split("-")[2] != identity.version.split("-")[2]


@pytest.mark.parametrize(
    "name",
    ["config.json", "tokenizer_config.json", "sentencepiece.bpe.model", "onnx/model_int8.onnx"],
)
async def test_a_missing_file_fails_with_missing_model_file(bge_folder: Path, name: str) -> None:
    (bge_folder / name).unlink()
    assert await failure_of(bge_folder) is OnnxFailureKind.MISSING_MODEL_FILE


async def test_a_missing_folder_or_an_escaping_link_is_invalid_configuration(
    bge_folder: Path, tmp_path: Path
) -> None:
    assert await failure_of(tmp_path / "absent") is OnnxFailureKind.INVALID_CONFIGURATION
    outside = tmp_path / "outside.json"
    (bge_folder / "config.json").rename(outside)
    (bge_folder / "config.json").symlink_to(outside)
    assert await failure_of(bge_folder) is OnnxFailureKind.INVALID_CONFIGURATION


async def test_host_supplied_sizes_and_hashes_are_enforced(bge_folder: Path) -> None:
    async with await create(bge_folder) as provider:
        record = provider.manifest.record("onnx/model_int8.onnx")
    async with await create(
        bge_folder,
        expected_sha256={"onnx\\model_int8.onnx": record.sha256.upper()},
        expected_file_bytes={"onnx/model_int8.onnx": record.size},
    ):
        pass
    wrong_hash = {"onnx/model_int8.onnx": "0" * 64}
    assert await failure_of(bge_folder, expected_sha256=wrong_hash) is (
        OnnxFailureKind.MODEL_INTEGRITY
    )
    wrong_size = {"onnx/model_int8.onnx": record.size + 1}
    assert await failure_of(bge_folder, expected_file_bytes=wrong_size) is (
        OnnxFailureKind.MODEL_INTEGRITY
    )


async def test_empty_oversized_or_unreadable_files_fail_integrity(bge_folder: Path) -> None:
    model = bge_folder / "onnx" / "model_int8.onnx"
    model.write_bytes(model.read_bytes() + b"\0" * 1_048_576)
    assert await failure_of(bge_folder, maximum_model_bytes=1_048_576) is (
        OnnxFailureKind.MODEL_INTEGRITY
    )
    model.write_bytes(b"")
    assert await failure_of(bge_folder) is OnnxFailureKind.MODEL_INTEGRITY
    (bge_folder / "tokenizer_config.json").write_text("{not json")
    assert await failure_of(bge_folder) is OnnxFailureKind.MODEL_INTEGRITY
    (bge_folder / "tokenizer_config.json").write_text("[" * 40 + "]" * 40)
    assert await failure_of(bge_folder) is OnnxFailureKind.MODEL_INTEGRITY
    (bge_folder / "tokenizer_config.json").write_text("[1, 2]")
    assert await failure_of(bge_folder) is OnnxFailureKind.MODEL_INTEGRITY


@pytest.mark.parametrize(
    ("document", "change"),
    [
        ("config", {"model_type": "bert"}),
        ("config", {"hidden_size": 768}),
        ("config", {"vocab_size": 30522}),
        ("config", {"pad_token_id": 0}),
        ("config", {"bos_token_id": True}),
        ("config", {"type_vocab_size": 2}),
        ("config", {"max_position_embeddings": 100}),
        ("config", {"_name_or_path": " "}),
        ("tokenizer", {"tokenizer_class": "BertTokenizer"}),
        ("tokenizer", {"model_max_length": 64}),
    ],
)
async def test_a_config_that_is_not_bge_m3_is_unsupported(
    bge_folder: Path, document: str, change: dict[str, object]
) -> None:
    name, base = (
        ("config.json", tiny.CONFIG)
        if document == "config"
        else ("tokenizer_config.json", tiny.TOKENIZER_CONFIG)
    )
    (bge_folder / name).write_text(json.dumps({**base, **change}))
    assert await failure_of(bge_folder) is OnnxFailureKind.UNSUPPORTED_MODEL


@pytest.mark.parametrize(
    "breakage",
    [
        {"ids_type": TensorProto.INT32},
        {"extra_input": "position_ids"},
        {"output_name": "sentence_embedding"},
        {"output_type": TensorProto.DOUBLE},
    ],
    ids=["int32-ids", "extra-input", "no-last-hidden-state", "double-output"],
)
async def test_a_graph_breaking_the_contract_is_unsupported(
    tmp_path: Path, sentencepiece_bytes: bytes, tiny_weights: tiny.TinyWeights, breakage
) -> None:
    folder = tiny.write_folder(
        tmp_path / "broken", sentencepiece_bytes, tiny.build_graph(tiny_weights, **breakage)
    )
    assert await failure_of(folder) is OnnxFailureKind.UNSUPPORTED_MODEL


async def test_a_graph_of_the_wrong_width_is_unsupported(
    tmp_path: Path, sentencepiece_bytes: bytes
) -> None:
    weights = tiny.TinyWeights.random(200, width=768)
    folder = tiny.write_folder(tmp_path / "narrow", sentencepiece_bytes, tiny.build_graph(weights))
    assert await failure_of(folder) is OnnxFailureKind.UNSUPPORTED_MODEL


async def test_optional_token_type_ids_are_fed_zeros(
    tmp_path: Path,
    sentencepiece_bytes: bytes,
    tiny_weights: tiny.TinyWeights,
    sentencepiece_processor: sentencepiece.SentencePieceProcessor,
) -> None:
    folder = tiny.write_folder(
        tmp_path / "types",
        sentencepiece_bytes,
        tiny.build_graph(tiny_weights, token_type_ids=True),
    )
    async with await create(folder) as provider:
        vector = await provider.embed_query("the old mill")
    expected = tiny.reference_embedding(tiny_weights, sentencepiece_processor, "the old mill", 512)
    np.testing.assert_allclose(vector, expected, atol=2e-5)


async def test_a_damaged_sentencepiece_model_fails_tokenization(bge_folder: Path) -> None:
    (bge_folder / "sentencepiece.bpe.model").write_bytes(b"not a sentencepiece model")
    assert await failure_of(bge_folder) is OnnxFailureKind.TOKENIZATION


async def test_a_damaged_graph_is_unsupported(bge_folder: Path) -> None:
    (bge_folder / "onnx" / "model_int8.onnx").write_bytes(b"not an onnx graph")
    assert await failure_of(bge_folder) is OnnxFailureKind.UNSUPPORTED_MODEL


async def test_loading_emits_one_model_load_record(
    bge_folder: Path, collect_metrics, metrics_records
) -> None:
    async with await create(bge_folder, metrics=collect_metrics):
        pass
    with pytest.raises(OnnxEmbeddingError):
        await create(bge_folder / "absent", metrics=collect_metrics)
    loads = [r for r in metrics_records if r.operation is OnnxOperation.MODEL_LOAD]
    assert [r.succeeded for r in loads] == [True, False]
    assert loads[1].failure is OnnxFailureKind.INVALID_CONFIGURATION
    assert loads[0].total_milliseconds > 0 and loads[0].text_count == 0


@pytest.fixture
def slow_folder(tmp_path: Path, sentencepiece_bytes: bytes, tiny_weights: tiny.TinyWeights) -> Path:
    """A graph whose every run takes minutes unless onnxruntime is told to terminate."""
    return tiny.write_folder(
        tmp_path / "slow",
        sentencepiece_bytes,
        tiny.build_graph(tiny_weights, slow_iterations=2_000_000),
    )


async def wait_idle(provider: BgeM3OnnxEmbeddingProvider, seconds: float = 5.0) -> float:
    started = time.perf_counter()
    while provider.engine._active:
        assert time.perf_counter() - started < seconds, "the onnxruntime run was not terminated"
        await asyncio.sleep(0.005)
    return time.perf_counter() - started


async def test_cancelling_a_call_terminates_the_onnxruntime_run(slow_folder: Path) -> None:
    async with await create(slow_folder) as provider:
        task = asyncio.ensure_future(provider.embed_query("the guard"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await wait_idle(provider) < 2.0


async def test_the_inference_timeout_terminates_the_onnxruntime_run(slow_folder: Path) -> None:
    async with await create(slow_folder, inference_timeout=0.2) as provider:
        with pytest.raises(OnnxEmbeddingError) as caught:
            await provider.embed_documents(["the guard", "the thief"])
        assert caught.value.kind is OnnxFailureKind.TIMEOUT
        assert await wait_idle(provider) < 2.0


async def test_aclose_terminates_a_running_onnxruntime_run(slow_folder: Path) -> None:
    provider = await create(slow_folder)
    task = asyncio.ensure_future(provider.embed_query("the guard"))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    await provider.aclose()
    assert time.perf_counter() - started < 2.0
    with pytest.raises(OnnxEmbeddingError) as caught:
        await task
    assert caught.value.kind is OnnxFailureKind.CANCELLED
    with pytest.raises(OnnxEmbeddingError) as closed:
        await provider.embed_query("again")
    assert closed.value.kind is OnnxFailureKind.CLOSED
