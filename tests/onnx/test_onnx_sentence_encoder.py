"""The BERT graph builder, INT8 quantization and the sentence-encoder provider, on a tiny BERT."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tiny_bert_model as bert

from game_memory.onnx import (
    BgeM3OnnxEmbeddingProvider,
    MiniLmOnnxEmbeddingProvider,
    ModelPreparationError,
    OnnxEmbeddingError,
    OnnxFailureKind,
    SentenceEncoderOnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingProvider,
    load_default_provider,
    load_provider_from_directory,
)
from game_memory.onnx.bert_config import BertConfig
from game_memory.onnx.build.bert_graph import build_bert_graph
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import build_sentence_encoder_folder
from game_memory.onnx.prepared_manifest import PreparedModelManifest

TEXTS = ["the guard saw the thief", "a dragon flew over the village at dawn", "wolves", ""]


def ids_of(text: str) -> list[int]:
    """[CLS] words [SEP], looked up by hand (every test word is in the vocabulary)."""
    vocabulary = bert.vocabulary()
    return [2, *(vocabulary.index(word) for word in text.lower().split()), 3]


async def create(folder: Path, **options: object) -> SentenceEncoderOnnxEmbeddingProvider:
    return await SentenceEncoderOnnxEmbeddingProvider.create(
        SentenceEncoderOnnxEmbeddingOptions(folder, **options)
    )


def test_safetensors_round_trip(tiny_bert_weights: dict[str, np.ndarray]) -> None:
    tensors = read_safetensors(bert.safetensors_bytes(tiny_bert_weights))
    assert tensors.keys() == tiny_bert_weights.keys()
    for name, array in tiny_bert_weights.items():
        np.testing.assert_array_equal(tensors[name], array)
        assert tensors[name].dtype == array.dtype


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff" * 8 + b"{}", b"\x02\0\0\0\0\0\0\0{]", b"\x02\0\0\0\0\0\0\0[]"],
    ids=["empty", "huge-header", "bad-json", "not-object"],
)
def test_malformed_safetensors_fail_the_build(data: bytes) -> None:
    with pytest.raises(ModelPreparationError) as caught:
        read_safetensors(data)
    assert caught.value.stage == "build"


def test_a_tensor_outside_the_file_fails_the_build() -> None:
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with pytest.raises(ModelPreparationError):
        read_safetensors(len(header).to_bytes(8, "little") + header + b"\0" * 8)


def run_graph(model_bytes: bytes, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    session = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    rows = [ids_of(text) for text in texts]
    longest = max(map(len, rows))
    ids = np.zeros((len(rows), longest), np.int64)
    mask = np.zeros_like(ids)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = row
        mask[index, : len(row)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (hidden,) = session.run(["last_hidden_state"], feeds)
    return hidden, mask


def test_the_built_graph_matches_a_numpy_bert(tiny_bert_weights: dict[str, np.ndarray]) -> None:
    model = build_bert_graph(tiny_bert_weights, BertConfig.from_document(bert.config()))
    hidden, mask = run_graph(model.SerializeToString(), TEXTS)
    for row, text in enumerate(TEXTS):
        real = int(mask[row].sum())
        expected = bert.reference_hidden(tiny_bert_weights, ids_of(text))
        np.testing.assert_allclose(hidden[row, :real], expected, atol=2e-4)


def test_the_build_is_deterministic_and_accepts_a_bert_prefix(
    tiny_bert_weights: dict[str, np.ndarray],
) -> None:
    config = BertConfig.from_document(bert.config())
    first = build_bert_graph(tiny_bert_weights, config).SerializeToString()
    prefixed = {f"bert.{name}": array for name, array in tiny_bert_weights.items()}
    assert build_bert_graph(tiny_bert_weights, config).SerializeToString() == first
    assert build_bert_graph(prefixed, config).SerializeToString() == first


def test_missing_or_misshapen_weights_fail_the_build(
    tiny_bert_weights: dict[str, np.ndarray],
) -> None:
    config = BertConfig.from_document(bert.config())
    missing = dict(tiny_bert_weights)
    del missing["encoder.layer.1.output.dense.bias"]
    with pytest.raises(ModelPreparationError, match=r"output\.dense\.bias"):
        build_bert_graph(missing, config)
    misshapen = dict(tiny_bert_weights)
    misshapen["encoder.layer.0.attention.self.query.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ModelPreparationError, match="shape"):
        build_bert_graph(misshapen, config)


@pytest.mark.parametrize(
    "change",
    [
        {"model_type": "roberta"},
        {"hidden_act": "relu"},
        {"position_embedding_type": "relative_key"},
        {"num_attention_heads": 5},
        {"vocab_size": 0},
        {"layer_norm_eps": "tiny"},
    ],
)
def test_configs_outside_the_supported_family_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        BertConfig.from_document(bert.config(**change))


async def test_fp32_vectors_are_mean_pooled_like_the_reference(
    tiny_prepared: Path, tiny_bert_weights: dict[str, np.ndarray]
) -> None:
    async with await create(tiny_prepared, precision="fp32") as provider:
        vectors = await provider.embed_documents(TEXTS)
        query = await provider.embed_query(TEXTS[0])
    for text, vector in zip(TEXTS, vectors, strict=True):
        assert vector.shape == (bert.HIDDEN,) and vector.dtype == np.float32
        expected = bert.reference_embedding(tiny_bert_weights, ids_of(text))
        np.testing.assert_allclose(vector, expected, atol=2e-4)
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)


async def test_int8_agrees_with_fp32(tiny_prepared: Path) -> None:
    async with await create(tiny_prepared, precision="fp32") as fp32:
        full = np.array(await fp32.embed_documents(TEXTS))
    async with await create(tiny_prepared) as int8:
        quantized = np.array(await int8.embed_documents(TEXTS))
    cosines = (full * quantized).sum(axis=1)
    assert cosines.min() > 0.95, cosines


def test_int8_weights_fit_in_seven_bits(tiny_prepared: Path) -> None:
    """Every int8 weight a MatMulInteger multiplies lies in -64..64, so onnxruntime's AVX2
    kernel (int16 sums of two uint8 × int8 products) cannot saturate on a CPU without
    VNNI and the vectors do not depend on the player's CPU (see ``quantize_int8``)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(tiny_prepared / "onnx" / "model_int8.onnx")).graph
    weights = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    multiplied = [
        weights[node.input[1]]
        for node in graph.node
        if node.op_type == "MatMulInteger" and node.input[1] in weights
    ]
    assert multiplied and all(w.dtype == np.int8 for w in multiplied)
    assert min(int(w.min()) for w in multiplied) >= -64
    assert max(int(w.max()) for w in multiplied) <= 64
    assert max(int(np.abs(w).max()) for w in multiplied) > 32  # the range is used


async def test_a_text_embeds_the_same_alone_and_beside_longer_texts(tiny_prepared: Path) -> None:
    async with await create(tiny_prepared, precision="fp32") as provider:
        alone = await provider.embed_query("wolves")
        (beside, *_) = await provider.embed_documents(["wolves", TEXTS[1], " ".join(TEXTS)])
    np.testing.assert_allclose(beside, alone, atol=1e-5)


async def test_identity_names_precision_weights_tokenizer_and_preprocessing(
    tiny_prepared: Path,
) -> None:
    prepared = PreparedModelManifest.read(tiny_prepared)
    onnx_sha = prepared.file("onnx/model_int8.onnx").sha256
    tokenizer_sha = prepared.file("tokenizer.json").sha256
    async with await create(tiny_prepared) as provider:
        assert str(provider.identity) == (
            f"onnx-in-process/tiny/bert@int8-{onnx_sha[:16]}-{tokenizer_sha[:16]}"
            f"+bert-wordpiece-mean-l2-v1-max32:{bert.HIDDEN}"
        )
        int8_identity = provider.identity
    async with await create(tiny_prepared, maximum_tokens=16) as provider:
        assert provider.identity.version.endswith("-max16")
    async with await create(tiny_prepared, precision="fp32") as provider:
        assert provider.identity.version.startswith("fp32-")
        assert provider.identity != int8_identity


async def test_maximum_tokens_beyond_the_position_limit_is_an_invalid_configuration(
    tiny_prepared: Path,
) -> None:
    """An option out of its range for this model (docs/embeddings.md's options table), not
    a model this library cannot run: the kind says which to fix."""
    with pytest.raises(OnnxEmbeddingError, match="maximum_tokens") as caught:
        await create(tiny_prepared, maximum_tokens=bert.POSITIONS + 1)
    assert caught.value.kind is OnnxFailureKind.INVALID_CONFIGURATION


async def test_long_texts_are_truncated_within_the_position_limit(tiny_prepared: Path) -> None:
    async with await create(tiny_prepared, maximum_tokens=bert.POSITIONS) as provider:
        (vector,) = await provider.embed_documents(["the guard " * 200])
    assert np.isfinite(vector).all()


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        ("tamper-model", OnnxFailureKind.MODEL_INTEGRITY),
        ("tamper-tokenizer", OnnxFailureKind.MODEL_INTEGRITY),
        ("delete-model", OnnxFailureKind.MISSING_MODEL_FILE),
        ("delete-manifest", OnnxFailureKind.MISSING_MODEL_FILE),
        ("garble-manifest", OnnxFailureKind.MODEL_INTEGRITY),
        ("unlist-model", OnnxFailureKind.MODEL_INTEGRITY),
    ],
)
async def test_a_damaged_prepared_folder_is_refused(
    prepared_copy: Path, damage: str, kind: OnnxFailureKind
) -> None:
    manifest = prepared_copy / "game-memory-model.json"
    if damage == "tamper-model":
        path = prepared_copy / "onnx" / "model_int8.onnx"
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
    elif damage == "tamper-tokenizer":
        path = prepared_copy / "tokenizer.json"
        path.write_text(path.read_text().replace('"[UNK]"', '"[UNK2]"', 1))
    elif damage == "delete-model":
        (prepared_copy / "onnx" / "model_int8.onnx").unlink()
    elif damage == "delete-manifest":
        manifest.unlink()
    elif damage == "garble-manifest":
        manifest.write_text('{"format": "something-else"}')
    else:
        document = json.loads(manifest.read_text())
        document["files"] = [f for f in document["files"] if f["path"] != "onnx/model_int8.onnx"]
        manifest.write_text(json.dumps(document))
    with pytest.raises(OnnxEmbeddingError) as caught:
        await create(prepared_copy)
    assert caught.value.kind is kind


async def test_host_supplied_hashes_also_bind_a_prepared_folder(prepared_copy: Path) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        await create(prepared_copy, expected_sha256={"tokenizer.json": "1" * 64})
    assert caught.value.kind is OnnxFailureKind.MODEL_INTEGRITY


async def test_load_provider_from_directory_opens_both_kinds(
    tiny_prepared: Path, bge_folder: Path, tmp_path: Path
) -> None:
    async with await load_provider_from_directory(tiny_prepared) as provider:
        assert type(provider) is SentenceEncoderOnnxEmbeddingProvider
    async with await load_provider_from_directory(str(bge_folder), maximum_tokens=64) as provider:
        assert isinstance(provider, BgeM3OnnxEmbeddingProvider)
        assert provider.identity.version.endswith("max64")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OnnxEmbeddingError) as neither:
        await load_provider_from_directory(tmp_path / "empty")
    assert neither.value.kind is OnnxFailureKind.UNSUPPORTED_MODEL
    with pytest.raises(OnnxEmbeddingError) as absent:
        await load_provider_from_directory(tmp_path / "absent")
    assert absent.value.kind is OnnxFailureKind.INVALID_CONFIGURATION


async def test_load_default_provider_says_how_to_prepare_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_default_provider(tmp_path)
    assert caught.value.kind is OnnxFailureKind.MISSING_MODEL_FILE
    assert "game-memory models prepare" in str(caught.value)


async def test_load_default_provider_opens_the_folder_under_home(
    tiny_bert_files: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_sentence_encoder_folder(
        tmp_path / "models" / "all-MiniLM-L6-v2",
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        config=tiny_bert_files["config.json"],
        tokenizer_files={"tokenizer.json": tiny_bert_files["tokenizer.json"]},
        weights=read_safetensors(tiny_bert_files["model.safetensors"]),
        default_maximum_tokens=32,
    )
    monkeypatch.setenv("GAME_MEMORY_HOME", str(tmp_path))
    async with await load_default_provider() as provider:
        assert isinstance(provider, MiniLmOnnxEmbeddingProvider)
        assert len(await provider.embed_query("the guard")) == bert.HIDDEN


async def test_a_named_folder_holding_another_model_is_refused(
    tiny_prepared: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_prepared, tmp_path / "models" / "all-MiniLM-L6-v2")
    with pytest.raises(OnnxEmbeddingError) as caught:
        await load_default_provider(tmp_path)
    assert caught.value.kind is OnnxFailureKind.UNSUPPORTED_MODEL
    assert "holds tiny/bert" in str(caught.value)
    assert "game-memory models prepare default --force" in str(caught.value)
