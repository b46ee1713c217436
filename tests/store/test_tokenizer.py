"""The lexical tokenizer against the reference rule (§2.3), spelled out as a character loop.

The deliberate changes are spelled out here too, independently of the implementation:
Japanese kana split by script with hiragana as uni- and bigrams (``split_kana``), and for
text that is not ASCII NFKC with what joins words removed (``fold``, NFKC again after a
removal), combining marks continuing a word (never starting one), ``ß``/``ς`` folded, and
Hangul syllables as uni- and bigrams.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory.store.tokenizer import MAXIMUM_TOKENS, MAXIMUM_UTF16_UNITS, tokenize

_LETTER_OR_DIGIT = {"Lu", "Ll", "Lt", "Lm", "Lo", "Nd"}  # .NET char.IsLetterOrDigit
_MARKS = {"Mn", "Mc", "Me"}  # continue a word (the change): a Devanagari vowel sign
#: Removed from text that is not ASCII (the change): soft hyphen, zero-width joiner, word
#: joiner, U+FEFF, Arabic tatweel, and the Arabic and Hebrew vowel marks.
_JOINERS = {0x00AD, 0x200D, 0x2060, 0xFEFF, 0x0640}
_VOWEL_BLOCKS = ((0x0591, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670))
_VOWEL_MARKS = {
    code
    for start, end in (*_VOWEL_BLOCKS, (0x06D6, 0x06ED))
    for code in range(start, end + 1)
    if unicodedata.category(chr(code)) == "Mn"
}


def fold(text: str) -> str:
    """Text that is not ASCII as the changed rule reads it."""
    if text.isascii():
        return text
    removed = _JOINERS | _VOWEL_MARKS
    normal = unicodedata.normalize("NFKC", text)
    while True:  # a removal lets what the removed character stood between compose
        kept = "".join(c for c in normal if ord(c) not in removed)
        if kept == normal:
            return normal
        normal = unicodedata.normalize("NFKC", kept)


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def _is_cjk(unit: int) -> bool:
    return (
        0x3400 <= unit <= 0x4DBF
        or 0x4E00 <= unit <= 0x9FFF
        or 0xF900 <= unit <= 0xFAFF
        or 0xAC00 <= unit <= 0xD7A3  # Hangul syllables (the change)
    )


def _lower_invariant(unit: int) -> str:
    """The simple (one unit to one unit) lower-case mapping of .NET ``ToLowerInvariant``,
    with ``ß``, ``ẞ`` and ``ς`` folded (the change)."""
    if unit in (0xDF, 0x1E9E):
        return "ss"
    if unit == 0x3C2:
        return "\u03c3"
    lowered = chr(unit).lower()
    if len(lowered) == 1:
        return lowered
    # Only U+0130 lower-cases to two characters in full mapping; its simple mapping is "i".
    assert unit == 0x130
    return "i"


def reference_tokenize(text: str | None) -> list[str]:
    """§2.3 of the reference, one UTF-16 code unit at a time."""
    if text is None or text.strip() == "":
        return []
    tokens: list[str] = []
    word: list[str] = []
    previous_cjk: str | None = None

    def flush() -> None:
        if word:
            tokens.extend(split_kana("".join(word)))
            word.clear()

    cut = _utf16_units(text)[:MAXIMUM_UTF16_UNITS]
    if 0xD800 <= cut[-1] <= 0xDBFF:
        cut = cut[:-1]  # half of an astral character: dropped whole
    read = b"".join(unit.to_bytes(2, "little") for unit in cut).decode("utf-16-le")
    for unit in _utf16_units(fold(read)):
        if len(tokens) >= MAXIMUM_TOKENS:
            break
        if _is_cjk(unit):
            flush()
            character = chr(unit)
            if len(tokens) < MAXIMUM_TOKENS:
                tokens.append(character)
            if previous_cjk is not None and len(tokens) < MAXIMUM_TOKENS:
                tokens.append(previous_cjk + character)
            previous_cjk = character
            continue
        previous_cjk = None
        category = "Cs" if 0xD800 <= unit <= 0xDFFF else unicodedata.category(chr(unit))
        # A mark continues a word, never starts one (the change).
        is_word = (
            unit == ord("_") or category in _LETTER_OR_DIGIT or (category in _MARKS and bool(word))
        )
        if is_word:
            word.append(_lower_invariant(unit))
        else:
            flush()
    if len(tokens) < MAXIMUM_TOKENS:
        flush()
    return tokens[:MAXIMUM_TOKENS]


def _kind(character: str) -> str:
    code = ord(character)
    if 0x3041 <= code <= 0x309F:
        return "hiragana"
    if 0x30A0 <= code <= 0x30FF or 0x31F0 <= code <= 0x31FF or 0xFF66 <= code <= 0xFF9F:
        return "katakana"
    return "other"


def split_kana(word: str) -> list[str]:
    """A word split where kana script changes (ー continues kana); hiragana as 1- and 2-grams."""
    if all(_kind(character) == "other" for character in word):
        return [word]
    segments: list[tuple[str, str]] = []
    for character in word:
        if unicodedata.category(character) in _MARKS:  # continues its segment (the change)
            if segments[-1][0] == "hiragana":
                segments.append(("separated", ""))  # ...but separates hiragana, as ideographs
            else:
                segments[-1] = (segments[-1][0], segments[-1][1] + character)
            continue
        kind = _kind(character)
        if character == "ー" and segments and segments[-1][0] in ("hiragana", "katakana"):
            kind = segments[-1][0]
        if segments and segments[-1][0] == kind:
            segments[-1] = (kind, segments[-1][1] + character)
        else:
            segments.append((kind, character))
    tokens: list[str] = []
    for kind, text in segments:
        if kind == "separated":
            continue
        if kind != "hiragana":
            tokens.append(text)
            continue
        for index, character in enumerate(text):
            tokens.append(character)
            if index:
                tokens.append(text[index - 1] + character)
    return tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ドラゴンは", ["ドラゴン", "は"]),  # a particle no longer glues to a katakana word
        ("ドラゴンはどこ", ["ドラゴン", "は", "ど", "はど", "こ", "どこ"]),
        ("ラーメンを食べた", ["ラーメン", "を", "食", "べ", "た", "べた"]),
        ("Tシャツ", ["t", "シャツ"]),
        ("ｶﾀｶﾅです", ["カタカナ", "で", "す", "です"]),  # NFKC: half-width kana are kana
        ("一只猫", ["一", "只", "一只", "猫", "只猫"]),
        ('{"text":"Feline"}', ["text", "feline"]),
        ("Hello, World_42!", ["hello", "world_42"]),
        ("猫a猫", ["猫", "a", "猫"]),
        ("ΣΑΣ", ["σασ"]),  # simple mapping: no final sigma
        ("İstanbul", ["istanbul"]),  # simple mapping: no combining dot
        ("x²y", ["x2y"]),  # NFKC: superscript two is 2
        ("a\U0001d400b", ["aab"]),  # NFKC: mathematical bold A is A
        ("a\U0001f600b", ["a", "b"]),  # an astral character is two surrogates: a separator
        ("e\u0301te", ["éte"]),  # NFKC composes the accent
        ("ＨＰが１０回復した", ["hp", "が", "10", "回", "復", "回復", "し", "た", "した"]),
        ("ﬁre", ["fire"]),  # NFKC: the ligature is two letters
        ("Hauptstraße HAUPTSTRASSE", ["hauptstrasse", "hauptstrasse"]),
        ("ΟΔΥΣΣΕΥΣ Οδυσσευς", ["οδυσσευσ", "οδυσσευσ"]),  # the final sigma folded
        ("Dampf\u00adschiff", ["dampfschiff"]),  # a soft hyphen joins
        ("dra\u200bgon", ["dra", "gon"]),  # a zero-width space still separates
        ("राजा आ गए", ["राजा", "आ", "गए"]),  # vowel signs continue the word
        ("مَلِك ملك", ["ملك", "ملك"]),  # Arabic vowel marks removed
        ("용은 산에", ["용", "은", "용은", "산", "에", "산에"]),  # Hangul as uni- and bigrams
        ("٣٤ apples", ["٣٤", "apples"]),  # Arabic-Indic digits are Nd
        ("   ", []),
        ("", []),
        (None, []),
    ],
)
def test_tokenizer_reproduces_the_reference_examples(text: str | None, expected: list[str]) -> None:
    assert tokenize(text) == expected
    assert reference_tokenize(text) == expected


_ASCII = list("aZz09_ -,.\n\"'{}:")
_CJK_EDGES = [
    "一",
    "只",
    "猫",
    "\u3400",
    "\u4dbf",
    "\u9fff",
    "\uf900",
    "\ufaff",
    "\u33ff",
    "\ufb00",
]
_TRICKY = ["Σ", "ς", "İ", "ı", "ß", "ǅ", "ʰ", "²", "Ⅻ", "\u0301", "٣", "\u00a0", "\u2028"]
_ASTRAL = ["\U0001d400", "\U0001f600", "\U00020000"]
_KANA = ["ド", "ラ", "ー", "は", "を", "ゝ", "ヿ", "\u30a0", "\u3041", "\u309f", "ｶ", "ﾞ", "ㇰ"]
_ALPHABET = st.sampled_from([*_ASCII, *_CJK_EDGES, *_TRICKY, *_ASTRAL, *_KANA])


@settings(max_examples=400)
@given(st.lists(_ALPHABET, max_size=40).map("".join))
def test_tokenizer_matches_the_reference_loop_on_mixed_scripts(text: str) -> None:
    assert tokenize(text) == reference_tokenize(text)


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_tokenizer_matches_the_reference_loop_on_any_text(text: str) -> None:
    assert tokenize(text) == reference_tokenize(text)


@settings(max_examples=300)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_takes_the_fast_path_with_the_reference_loop_s_tokens(text: str) -> None:
    assert tokenize(text) == reference_tokenize(text)


def test_at_most_4096_tokens_are_emitted() -> None:
    text = " ".join(f"w{index}" for index in range(5_000))
    tokens = tokenize(text)
    assert len(tokens) == MAXIMUM_TOKENS
    assert tokens == reference_tokenize(text)
    assert tokens[-1] == f"w{MAXIMUM_TOKENS - 1}"


def test_the_token_cap_holds_inside_a_run_of_ideographs() -> None:
    text = "猫" * 3_000  # 3,000 unigrams and 2,999 bigrams
    tokens = tokenize(text)
    assert len(tokens) == MAXIMUM_TOKENS
    assert tokens == reference_tokenize(text)


def test_only_the_first_100000_utf16_units_are_read() -> None:
    filler = " " * (MAXIMUM_UTF16_UNITS - 2)
    assert tokenize(filler + "xy tail") == ["xy"]
    # An astral character (an emoji: NFKC keeps it) counts two units: "zz" is past the limit.
    assert tokenize(filler + "\U0001f600" + "zz") == []
    assert tokenize(filler[:-1] + "z\U0001f600" + "zz") == ["z"]
    # An astral character straddling the limit is dropped whole (its first unit separates).
    assert tokenize(filler + "y\U0001f600" + "zz") == ["y"]
    text = "b" * 60_000 + " " + "c" * 60_000
    assert tokenize(text) == ["b" * 60_000, "c" * (MAXIMUM_UTF16_UNITS - 60_001)]
    assert tokenize(text) == reference_tokenize(text)
