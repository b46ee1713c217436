"""XLM-RoBERTa tokenization: a SentencePiece BPE model with the fairseq id mapping."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import sentencepiece

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.tokens import TokenizedText

__all__ = ["XLMR_PREPROCESSING", "XlmRobertaTokenizer", "fairseq_ids"]

#: Fairseq's special ids: ``<s>``, ``<pad>``, ``</s>``, ``<unk>``.
BOS_ID, PAD_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

#: Names the preprocessing in the identity (followed by ``-max<maximum_tokens>``).
XLMR_PREPROCESSING = "xlm-roberta-spm-fairseq-offset-cls-l2-v1"


def fairseq_ids(pieces: Sequence[int]) -> list[int]:
    """Map SentencePiece ids to XLM-R ids and add ``<s>``/``</s>``.

    SentencePiece's ``<unk>`` (0) becomes 3 and every other id ``p`` becomes ``p + 1``,
    so ``[0, 1, 41]`` gives ``[0, 3, 2, 42, 2]``.

    Raises:
        OnnxEmbeddingError: ``TOKENIZATION`` for a negative piece id.
    """
    ids = [BOS_ID]
    for piece in pieces:
        if piece < 0:
            raise onnx_error(
                OnnxFailureKind.TOKENIZATION, f"SentencePiece returned a negative id {piece}"
            )
        ids.append(UNK_ID if piece == 0 else piece + 1)
    ids.append(EOS_ID)
    return ids


class XlmRobertaTokenizer:
    """Tokenize like ``XLMRobertaTokenizer``: queries and documents alike, no prefix.

    Args:
        model_path: ``sentencepiece.bpe.model``.
        maximum_tokens: Ids per text including ``<s>`` and ``</s>``; at least 3.

    Raises:
        OnnxEmbeddingError: ``TOKENIZATION`` if the model cannot be loaded.
    """

    def __init__(self, model_path: Path, maximum_tokens: int) -> None:
        try:
            processor = sentencepiece.SentencePieceProcessor()
            processor.Load(str(model_path))
        except Exception as exc:
            raise onnx_error(
                OnnxFailureKind.TOKENIZATION,
                f"cannot load the SentencePiece model {model_path}: {exc}",
            ) from exc
        self._processor = processor
        self._content_limit = maximum_tokens - 2

    @property
    def pad_id(self) -> int:
        """``<pad>`` = 1."""
        return PAD_ID

    @property
    def vocabulary_size(self) -> int:
        """SentencePiece pieces; model ids run to ``vocabulary_size`` (offset by one)."""
        return int(self._processor.GetPieceSize())

    def tokenize(self, text: str) -> TokenizedText:
        """Encode with the model's normalization; cut to ``maximum_tokens - 2`` pieces."""
        pieces = self._processor.EncodeAsIds(text)
        truncated = len(pieces) > self._content_limit
        return TokenizedText(ids=fairseq_ids(pieces[: self._content_limit]), truncated=truncated)
