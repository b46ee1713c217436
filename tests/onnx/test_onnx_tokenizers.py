"""Tokenizers: XLM-R's fairseq mapping and truncation, BERT WordPiece without fixed padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import sentencepiece
import tiny_bert_model as bert

from game_memory.onnx import OnnxEmbeddingError, OnnxFailureKind
from game_memory.onnx.wordpiece_tokenizer import WordPieceTokenizer
from game_memory.onnx.xlmr_tokenizer import XlmRobertaTokenizer, fairseq_ids


def test_fairseq_mapping_shifts_pieces_and_maps_unknown_to_three() -> None:
    assert fairseq_ids([0, 1, 41]) == [0, 3, 2, 42, 2]
    assert fairseq_ids([]) == [0, 2]
    with pytest.raises(OnnxEmbeddingError) as caught:
        fairseq_ids([-1])
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION


@pytest.fixture
def spm_path(tmp_path: Path, sentencepiece_bytes: bytes) -> Path:
    path = tmp_path / "sentencepiece.bpe.model"
    path.write_bytes(sentencepiece_bytes)
    return path


def test_xlmr_tokenizer_adds_specials_and_matches_sentencepiece(
    spm_path: Path, sentencepiece_processor: sentencepiece.SentencePieceProcessor
) -> None:
    tokenizer = XlmRobertaTokenizer(spm_path, maximum_tokens=512)
    pieces = sentencepiece_processor.EncodeAsIds("the guard saw the thief")
    result = tokenizer.tokenize("the guard saw the thief")
    assert list(result.ids) == [0, *(piece + 1 for piece in pieces), 2]
    assert not result.truncated
    assert tokenizer.pad_id == 1


def test_xlmr_tokenizer_cuts_to_maximum_tokens(spm_path: Path) -> None:
    tokenizer = XlmRobertaTokenizer(spm_path, maximum_tokens=5)
    result = tokenizer.tokenize("the guard saw the thief near the old mill")
    assert len(result.ids) == 5 and result.ids[0] == 0 and result.ids[-1] == 2
    assert result.truncated
    exact = tokenizer.tokenize("the")
    assert not exact.truncated


def test_unknown_characters_become_unk_three(spm_path: Path) -> None:
    tokenizer = XlmRobertaTokenizer(spm_path, maximum_tokens=64)
    assert 3 in tokenizer.tokenize("漢字").ids


def test_a_damaged_sentencepiece_model_fails_tokenization(tmp_path: Path) -> None:
    path = tmp_path / "broken.model"
    path.write_bytes(b"garbage")
    with pytest.raises(OnnxEmbeddingError) as caught:
        XlmRobertaTokenizer(path, maximum_tokens=16)
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION


@pytest.fixture
def wordpiece_path(tmp_path: Path) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(bert.tokenizer_json())
    return path


def test_wordpiece_ignores_the_files_fixed_padding(wordpiece_path: Path) -> None:
    tokenizer = WordPieceTokenizer(wordpiece_path, maximum_tokens=16, pad_id=0)
    result = tokenizer.tokenize("The guard saw")
    vocabulary = bert.vocabulary()
    assert [vocabulary[i] for i in result.ids] == ["[CLS]", "the", "guard", "saw", "[SEP]"]
    assert not result.truncated


def test_wordpiece_truncates_and_keeps_sep(wordpiece_path: Path) -> None:
    tokenizer = WordPieceTokenizer(wordpiece_path, maximum_tokens=4, pad_id=0)
    result = tokenizer.tokenize("the guard saw the thief")
    assert len(result.ids) == 4 and bert.vocabulary()[result.ids[-1]] == "[SEP]"
    assert result.truncated


def test_a_tokenizer_without_special_tokens_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    path = tmp_path / "plain.json"
    path.write_text(Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]")).to_str())
    with pytest.raises(OnnxEmbeddingError) as caught:
        WordPieceTokenizer(path, maximum_tokens=8, pad_id=0)
    assert caught.value.kind is OnnxFailureKind.TOKENIZATION
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(OnnxEmbeddingError):
        WordPieceTokenizer(tmp_path / "bad.json", maximum_tokens=8, pad_id=0)
