"""The lexical tokenizer: words, plus CJK unigrams and bigrams, with Japanese kana split by script.

It reproduces the reference tokenizer, which walks UTF-16 code units, with one deliberate
change for Japanese (below):

* only the first 100,000 UTF-16 code units are read, and at most 4,096 tokens are emitted;
* a word is a maximal run of letters, decimal digits and ``_`` (Unicode categories Lu, Ll,
  Lt, Lm, Lo, Nd; .NET ``char.IsLetterOrDigit``), lower-cased one character at a time with
  the simple case mapping (no final-sigma or dotted-i expansion);
* a CJK ideograph (U+3400–U+4DBF, U+4E00–U+9FFF, U+F900–U+FAFF) ends the current word and
  is emitted alone, followed by the bigram with the previous ideograph when they touch;
* anything else, including characters outside the BMP (surrogate pairs in .NET), separates.

**Kana** (the change). The reference glues a katakana word and the hiragana particle after
it into one word (``ドラゴンは``), so a query ``ドラゴン`` finds nothing lexically. Here a
word is also split where its script changes between katakana (U+30A0–U+30FF, U+31F0–U+31FF,
half-width U+FF66–U+FF9F; the prolonged sound mark ``ー`` continues either kana), hiragana
(U+3041–U+309F) and any other letters; katakana segments stay words (``ドラゴン``, loanwords
and names), and hiragana segments are emitted like ideographs, as unigrams and bigrams, so
particles (``は``, ``を``, ``に``) become tokens of their own instead of gluing to a word
and a hiragana word still matches inside a longer run: ``ドラゴンはどこ`` gives ``ドラゴン,
は, ど, はど, こ, どこ``. Text without kana tokenizes exactly as the reference does.

Example: ``一只猫`` gives ``一, 只, 一只, 猫, 只猫``; ``{"text":"Feline"}`` gives ``text, feline``.
The implementation scans with one compiled regular expression instead of a character loop.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

__all__ = ["MAXIMUM_TOKENS", "MAXIMUM_UTF16_UNITS", "joined_ascii", "tokenize", "tokenize_joined"]

MAXIMUM_UTF16_UNITS = 100_000
MAXIMUM_TOKENS = 4_096

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# Python's \w is a superset of the reference's word characters (it also takes No and Nl
# numbers such as "²"); non-ASCII runs are re-checked character by character below.
_PATTERN = re.compile(f"([^\\W{_CJK}\U00010000-\U0010ffff]+)|([{_CJK}]+)")
# ASCII text has no CJK, kana or astral characters, and its words are exactly the runs of
# ``[0-9A-Za-z_]`` (Python's ``\w`` on ASCII), lower-cased by ``str.lower``: one
# ``findall`` gives the same tokens as the general scan, about four times faster (a bulk
# ingest tokenizes every memory once for its read file: many at once, below).
_ASCII_WORD = re.compile("[0-9A-Za-z_]+")
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


_OTHER, _KATAKANA, _HIRAGANA = 0, 1, 2
_PROLONGED = "\u30fc"
_KANA = re.compile("[\u3041-\u309f\u30a0-\u30ff\u31f0-\u31ff\uff66-\uff9f]")


def _script(char: str) -> int:
    code = ord(char)
    if 0x3041 <= code <= 0x309F:
        return _HIRAGANA
    if 0x30A0 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F:
        return _KATAKANA
    return _OTHER


def _kana_tokens(word: str) -> list[str]:
    """Split a word where its script changes; hiragana segments become unigrams and bigrams."""
    tokens: list[str] = []
    segment: list[str] = []
    kind = _OTHER

    def flush() -> None:
        if not segment:
            return
        text = "".join(segment)
        if kind == _HIRAGANA:
            tokens.append(text[0])
            for index in range(1, len(text)):
                tokens.append(text[index])
                tokens.append(text[index - 1 : index + 1])
        else:
            tokens.append(text.translate(_LOWER))
        segment.clear()

    for char in word:
        script = kind if char == _PROLONGED and segment and kind != _OTHER else _script(char)
        if script != kind and segment:
            flush()
        kind = script
        segment.append(char)
    flush()
    return tokens


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
    if _KANA.search(run) is None:
        return words
    return [token for word in words for token in _kana_tokens(word)]


def _truncate_utf16(text: str) -> str:
    if len(text) <= MAXIMUM_UTF16_UNITS // 2:
        return text
    units = 0
    for index, char in enumerate(text):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > MAXIMUM_UTF16_UNITS:
            return text[:index]
    return text


#: Separates the texts of :func:`joined_ascii` (not a word character, so no token spans it).
_MARK = "\x00"
_JOINT = f" {_MARK} "  # what joins the texts: the separator splits off as a token
#: ASCII's non-word characters but the separator as spaces: ``str.split`` then gives
#: ``_ASCII_WORD``'s matches and the separators, scanning in C only (over many texts at
#: once, about half the time of ``findall`` on each; on one short text, slower).
_ASCII_SPACES_BUT_MARKS = str.maketrans(
    {chr(code): " " for code in range(1, 128) if not (chr(code).isalnum() or chr(code) == "_")}
)


def joined_ascii(texts: list[str]) -> str | None:
    """``texts`` lower-cased and joined by a separator that :func:`tokenize_joined` turns
    back into boundaries, when all of them take :func:`tokenize`'s ASCII path uncut (ASCII,
    at most ``MAXIMUM_UTF16_UNITS`` characters, no separator inside); else ``None``."""
    joined = _JOINT.join(texts)
    if not joined.isascii() or joined.count(_MARK) != len(texts) - 1:
        return None
    if any(len(text) > MAXIMUM_UTF16_UNITS for text in texts):
        return None
    return joined.lower()


def tokenize_joined(joined: str) -> list[str]:
    """The tokens of :func:`joined_ascii`'s texts in one scan, each text's followed by the
    separator (a NUL character, never a token): the tokens :func:`tokenize` gives each text, as
    long as none has more than ``MAXIMUM_TOKENS`` (the caller checks)."""
    found = joined.translate(_ASCII_SPACES_BUT_MARKS).split()
    found.append(_MARK)
    return found


def tokenize(text: str | None) -> list[str]:
    """Split ``text`` into lexical tokens (see the module docstring for the exact rule).

    Returns an empty list for ``None`` or blank text. Never returns more than 4,096 tokens.
    """
    if not text or text.isspace():
        return []
    if text.isascii():  # one UTF-16 unit per character: the cut is a plain slice
        return _ASCII_WORD.findall(text[:MAXIMUM_UTF16_UNITS].lower())[:MAXIMUM_TOKENS]
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
