"""The lexical tokenizer: words, plus CJK unigrams and bigrams, with Japanese kana split by script.

It reproduces the reference tokenizer, which walks UTF-16 code units, with deliberate
changes for text that is not ASCII (below; ASCII text tokenizes exactly as the reference):

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

**Text that is not ASCII** (the other changes, 7 December 2026; until then a player typing
on another keyboard, or a localized string, missed memories a player would call the same
words):

* it is brought to **NFKC** first, so the forms a keyboard or a font makes of one text
  match: full-width Latin letters and digits as Japanese and Chinese input methods type them
  (``ＨＰ１０`` is ``hp10``), half-width katakana (``ﾄﾞﾗｺﾞﾝ`` is ``ドラゴン``), ligatures
  (``ﬁre``), and decomposed accents (``e`` + U+0301 is ``é``, in memories as in queries);
* characters that join or stretch a word without changing it are removed: the soft hyphen
  (U+00AD, in localized German), the zero-width joiner, the word joiner and U+FEFF, the
  Arabic tatweel, and the optional vowel marks of Arabic (harakat) and Hebrew (niqqud); the
  zero-width space and non-joiner still separate (they mark word breaks in Thai and Khmer,
  and in Persian); the text is brought to NFKC again where one was removed, so what it
  stood between composes (``cafe`` + U+00AD + U+0301 is ``café``, as typed without it);
* combining marks continue a word (categories Mn, Mc, Me: a Devanagari vowel sign, a Thai
  tone mark), where the reference split words at them (``राजा`` gave ``र, ज``); they only
  continue one: a mark after anything but a letter, a digit or ``_`` (a space, an emoji's
  variation selector U+FE0F, an ideograph, a Hangul syllable, hiragana) separates, as in
  the reference, so no token is made of marks alone (``I ❤️ you`` gives ``i, you``: a
  variation selector as a token matched every emoji memory to every emoji query);
* ``ß`` and ``ẞ`` lower to ``ss``, and the final sigma ``ς`` to ``σ``, so a word written in
  capitals matches it written in lower case (``STRASSE``, ``ΟΔΥΣΣΕΥΣ``);
* **Hangul** syllables (U+AC00–U+D7A3) are emitted like ideographs, as unigrams and
  bigrams, so a Korean particle does not glue to its noun (``용은`` gives ``용, 은, 용은``:
  ``용`` finds it).

What the tokens depend on besides this code (the Unicode database Python carries) is
:data:`TOKENIZER_ID`; read files record it with their postings (``read_files.py``).

Example: ``一只猫`` gives ``一, 只, 一只, 猫, 只猫``; ``{"text":"Feline"}`` gives ``text, feline``.
The implementation scans with one compiled regular expression instead of a character loop.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

__all__ = [
    "MAXIMUM_TOKENS",
    "MAXIMUM_UTF16_UNITS",
    "TOKENIZER_ID",
    "folded",
    "joined_ascii",
    "tokenize",
    "tokenize_joined",
]

MAXIMUM_UTF16_UNITS = 100_000
MAXIMUM_TOKENS = 4_096
#: The rule's version and the Unicode database its categories, case mappings and NFKC come
#: from: tokens of text that is not ASCII may differ under another (a read file written
#: under another is not used). The rule is this module's and the text it is given
#: (``postings.document_text``); version 3 (the sixteenth session, 7 December 2026): marks
#: no longer make a token alone, NFKC again after a removal, and every JSON escape of a
#: payload decoded (``strict_json.readable_json``), so the read files of 2 are rebuilt.
TOKENIZER_ID = f"3/unicode-{unicodedata.unidata_version}"

# Ideographs, and Hangul syllables, emitted as unigrams and bigrams.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7a3"
# Python's \\w is a superset of the reference's word characters (it also takes No and Nl
# numbers such as "²"); non-ASCII runs are re-checked character by character below.
_WORD = f"[^\\W{_CJK}\U00010000-\U0010ffff]"
_PATTERN = re.compile(f"({_WORD}+)|([{_CJK}]+)")
# Where the BMP's combining marks lie (none below U+0300, nor among the ideographs, Hangul,
# surrogates and private use).
_MARK_BLOCKS = ((0x0300, 0x3400), (0xA000, 0xAC00), (0xF900, 0x10000))
# ASCII text has no CJK, kana or astral characters, and its words are exactly the runs of
# ``[0-9A-Za-z_]`` (Python's ``\w`` on ASCII), lower-cased by ``str.lower``: one
# ``findall`` gives the same tokens as the general scan, about four times faster (a bulk
# ingest tokenizes every memory once for its read file: many at once, below).
_ASCII_WORD = re.compile("[0-9A-Za-z_]+")
_WORD_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Mn", "Mc", "Me"})
#: Lowered to more than one character, or to another than ``str.lower`` gives alone.
_FOLDED = {0xDF: "ss", 0x1E9E: "ss", 0x3C2: "\u03c3"}


class _SimpleLower(dict[int, str]):
    """``str.translate`` table applying the simple one-to-one lower-case mapping per character.

    Filled lazily: ``str.lower`` on a whole word would apply the final-sigma rule and expand
    U+0130, which the reference (``char.ToLowerInvariant``) does not.
    """

    def __missing__(self, code: int) -> str:
        folded = _FOLDED.get(code)
        if folded is not None:
            self[code] = folded
            return folded
        lowered = chr(code).lower()
        value = lowered[0] if lowered else chr(code)
        self[code] = value
        return value


_LOWER = _SimpleLower()


_SEPARATOR, _LETTER, _MARK_CHAR = 0, 1, 2  # what a character is to a word


@cache
def _char_class(char: str) -> int:
    """A letter, a decimal digit or ``_`` (a word); a combining mark (continues a word only);
    anything else (separates)."""
    if char == "_":
        return _LETTER
    category = unicodedata.category(char)
    if category not in _WORD_CATEGORIES:
        return _SEPARATOR
    return _MARK_CHAR if category[0] == "M" else _LETTER


#: Where the optional vowel marks of Hebrew (niqqud) and Arabic (harakat) are.
_VOWEL_MARK_BLOCKS = ((0x0591, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670),
                      (0x06D6, 0x06ED))  # fmt: skip


def _ignored() -> re.Pattern[str]:
    """What joins or stretches a word without changing it (the module docstring), removed:
    a regular expression, since ``str.translate`` with a table looks up every character
    (3 µs for a sentence against 0.3)."""
    codes = [0x00AD, 0x200D, 0x2060, 0xFEFF, 0x0640]
    for start, end in _VOWEL_MARK_BLOCKS:
        codes.extend(c for c in range(start, end + 1) if unicodedata.category(chr(c)) == "Mn")
    return re.compile("[" + "".join(re.escape(chr(code)) for code in codes) + "]")


_IGNORED = _ignored()


@cache
def _marked() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Any combining mark, and :data:`_PATTERN` with marks continuing word runs, never
    starting one (a word is re-checked per character in :func:`_words`). Built at the first
    text that is not ASCII: the marks are found in the Unicode database (a few ms), which
    the reference never read."""
    ranges: list[tuple[int, int]] = []
    category = unicodedata.category
    for first, last in _MARK_BLOCKS:
        for code in range(first, last):
            if category(chr(code))[0] == "M":
                if ranges and ranges[-1][1] == code - 1:
                    ranges[-1] = (ranges[-1][0], code)
                else:
                    ranges.append((code, code))
    marks = (
        "["
        + "".join(
            re.escape(chr(start)) + (f"-{re.escape(chr(end))}" if end > start else "")
            for start, end in ranges
        )
        + "]"
    )
    return re.compile(marks), re.compile(f"({_WORD}(?:{_WORD}|{marks})*)|([{_CJK}]+)")


#: NFKC and removal rounds :func:`folded` makes at most (two but for contrived text: a
#: removal only lets what the removed character stood between compose).
_FOLD_ROUNDS = 4


def folded(text: str) -> str:
    """``text`` as :func:`tokenize` reads it before splitting it into words: ASCII as it is;
    other text in NFKC without what joins words (the module docstring), in NFKC again after
    a removal, so a removed joiner leaves no uncomposed letter and accent that the word
    typed without it does not give. Lexical search reads a query without tokens so too."""
    if text.isascii():
        return text
    normal = unicodedata.normalize("NFKC", text)
    for _ in range(_FOLD_ROUNDS):
        kept = _IGNORED.sub("", normal)
        if len(kept) == len(normal):
            break
        normal = unicodedata.normalize("NFKC", kept)
    return normal


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
    """Split a word where its script changes; hiragana segments become unigrams and bigrams.

    A combining mark continues the segment it follows (a word never starts with one), but
    after hiragana, emitted character by character like ideographs, it separates, as after
    an ideograph: it is no token of its own."""
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
        if _char_class(char) == _MARK_CHAR:
            if kind == _HIRAGANA:
                flush()
            else:
                segment.append(char)
            continue
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
        found = _char_class(char)
        if found == _LETTER or (found == _MARK_CHAR and current):
            current.append(char)
        elif current:  # a mark with no letter before it separates, as anything else
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
    read = folded(_truncate_utf16(text))
    any_mark, marked = _marked()
    # The plain pattern where no mark is (Latin text is composed by NFKC): about twice as fast.
    pattern = marked if any_mark.search(read) is not None else _PATTERN
    for match in pattern.finditer(read):
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
