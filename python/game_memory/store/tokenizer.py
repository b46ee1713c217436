"""The lexical tokenizer: words, plus CJK unigrams and bigrams.

It reproduces the reference tokenizer exactly, which walks UTF-16 code units:

* only the first 100,000 UTF-16 code units are read, and at most 4,096 tokens are emitted;
* a word is a maximal run of letters, decimal digits and ``_`` (Unicode categories Lu, Ll,
  Lt, Lm, Lo, Nd; .NET ``char.IsLetterOrDigit``), lower-cased one character at a time with
  the simple case mapping (no final-sigma or dotted-i expansion);
* a CJK ideograph (U+3400–U+4DBF, U+4E00–U+9FFF, U+F900–U+FAFF) ends the current word and
  is emitted alone, followed by the bigram with the previous ideograph when they touch;
* anything else, including characters outside the BMP (surrogate pairs in .NET), separates.

Example: ``一只猫`` gives ``一, 只, 一只, 猫, 只猫``; ``{"text":"Feline"}`` gives ``text, feline``.
The implementation scans with one compiled regular expression instead of a character loop.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

__all__ = ["MAXIMUM_TOKENS", "MAXIMUM_UTF16_UNITS", "tokenize"]

MAXIMUM_UTF16_UNITS = 100_000
MAXIMUM_TOKENS = 4_096

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Python's \w is a superset of the reference's word characters (it also takes No and Nl
# numbers such as "²"); non-ASCII runs are re-checked character by character below.
_PATTERN = re.compile(f"([^\\W{_CJK}\U00010000-\U0010ffff]+)|([{_CJK}]+)")
_WORD_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd"})


class _SimpleLower(dict[int, str]):
    """``str.translate`` table applying the simple one-to-one lower-case mapping per character.

    Filled lazily: ``str.lower`` on a whole word would apply the final-sigma rule and expand
    U+0130, which the reference (``char.ToLowerInvariant``) does not.
    """

    def __missing__(self, code: int) -> str:
        lowered = chr(code).lower()
        value = lowered[0] if lowered else chr(code)
        self[code] = value
        return value


_LOWER = _SimpleLower()


@cache
def _is_word_char(char: str) -> bool:
    return char == "_" or unicodedata.category(char) in _WORD_CATEGORIES


def _words(run: str) -> list[str]:
    if run.isascii():
        return [run.lower()]
    words: list[str] = []
    current: list[str] = []
    for char in run:
        if _is_word_char(char):
            current.append(char)
        elif current:
            words.append("".join(current).translate(_LOWER))
            current = []
    if current:
        words.append("".join(current).translate(_LOWER))
    return words


def _truncate_utf16(text: str) -> str:
    if len(text) <= MAXIMUM_UTF16_UNITS // 2:
        return text
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > MAXIMUM_UTF16_UNITS:
            return text[:index]
    return text


def tokenize(text: str | None) -> list[str]:
    """Split ``text`` into lexical tokens (see the module docstring for the exact rule).

    Returns an empty list for ``None`` or blank text. Never returns more than 4,096 tokens.
    """
    if not text or text.isspace():
        return []
    tokens: list[str] = []
    for match in _PATTERN.finditer(_truncate_utf16(text)):
        word = match.group(1)
        if word is not None:
            tokens.extend(_words(word))
            if len(tokens) >= MAXIMUM_TOKENS:
                break
            continue
        run = match.group(2)
        tokens.append(run[0])
        for index in range(1, len(run)):
            if len(tokens) >= MAXIMUM_TOKENS:
                break
            tokens.append(run[index])
            if len(tokens) >= MAXIMUM_TOKENS:
                break
            tokens.append(run[index - 1 : index + 1])
        if len(tokens) >= MAXIMUM_TOKENS:
            break
    return tokens[:MAXIMUM_TOKENS]
