"""BERT WordPiece tokenization from a Hugging Face ``tokenizer.json``."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.tokens import TokenizedText

__all__ = ["WordPieceTokenizer"]


class WordPieceTokenizer:
    """Tokenize with the file's normalizer, pre-tokenizer and ``[CLS] ... [SEP]`` template.

    The file's own padding (all-MiniLM-L6-v2 pads every text to 128) is switched off:
    the engine pads each batch to its longest text, which is 5x faster for short queries.

    Args:
        tokenizer_path: ``tokenizer.json``.
        maximum_tokens: Ids per text, special tokens included.
        pad_id: The id padding uses (``pad_token_id`` of ``config.json``).

    Raises:
        OnnxEmbeddingError: ``TOKENIZATION`` if the file cannot be loaded or adds no
            special tokens.
    """

    def __init__(self, tokenizer_path: Path, maximum_tokens: int, pad_id: int) -> None:
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
            tokenizer.no_padding()
            tokenizer.enable_truncation(maximum_tokens)
            probe = tokenizer.encode("")
        except Exception as exc:
            raise onnx_error(
                OnnxFailureKind.TOKENIZATION,
                f"cannot load the tokenizer {tokenizer_path}: {exc}",
            ) from exc
        if len(probe.ids) < 2:
            raise onnx_error(
                OnnxFailureKind.TOKENIZATION,
                f"the tokenizer {tokenizer_path} adds no [CLS]/[SEP]; it has no post-processor",
            )
        self._tokenizer = tokenizer
        self._pad_id = pad_id

    @property
    def pad_id(self) -> int:
        """The padding id of the model."""
        return self._pad_id

    def tokenize(self, text: str) -> TokenizedText:
        """Encode ``text``; ``truncated`` when the tokenizer had to drop ids."""
        encoding = self._tokenizer.encode(text)
        return TokenizedText(ids=encoding.ids, truncated=bool(encoding.overflowing))
