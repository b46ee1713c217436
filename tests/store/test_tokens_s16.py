"""The tokens of a memory and a query are the words a player reads in them (sixteenth session).

Each case was a confirmed bug: a lone combining mark (an emoji's variation selector) was a
token, so any emoji query matched every emoji memory; a word after an escaped line break in
a payload was glued to the escape's letter (``nbertram``); a query without tokens was looked
for in the payload's raw JSON (its syntax matched every memory, an escaped emoji none); a
payload's numbers tokenized otherwise when it held a ``\\u`` escape elsewhere; and a joiner
removed after NFKC left an accent uncomposed. The tokens are persisted in read files, so a
read file written with the tokens before these changes must be rebuilt, never read.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from game_memory import FileGameMemoryStore, GameMemoryQuery
from game_memory.store import postings, read_path
from game_memory.store import read_files as read_file_module
from game_memory.store.postings import document_text
from game_memory.store.tokenizer import TOKENIZER_ID, tokenize
from game_memory.strict_json import readable_json

from .helpers import DATA, MemoryFactory, StoreFactory

#: What every build before these changes wrote in a read file's header.
OLD_TOKENIZER_ID = f"2/unicode-{unicodedata.unidata_version}"
LETTER = json.dumps({"text": "Dear Mira,\nBertram owes you gold"})  # "\n" written escaped


async def found(store: FileGameMemoryStore, text: str, limit: int = 10) -> list[str]:
    """The ids the store's lexical ranking gives for ``text``, best first."""
    query = GameMemoryQuery(session_id="session", owner_id="owner", text=text, limit=limit)
    return [hit.memory.memory_id for hit in (await store.snapshot(query)).lexical]


# 1. A combining mark continues a word, never makes one.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I \u2764\ufe0f you", ["i", "you"]),  # an emoji's variation selector is no token
        ("\u2600\ufe0f sunny day", ["sunny", "day"]),
        ("\u2764\ufe0f", []),
        (" \u0301 x", ["x"]),  # a mark after a space
        ("\uac00\u0301", ["\uac00"]),  # after a Hangul syllable (emitted alone)
        ("\u304b\u309b", ["\u304b"]),  # "か゛": NFKC makes the sound mark a space and a mark
        ("\u3042\u3099\u3044", ["\u3042", "\u3044"]),  # after hiragana it separates
        ("\u30c9\uff9e", ["\u30c9\u3099"]),  # after katakana it continues the word
        ("\u0930\u093e\u091c\u093e", ["\u0930\u093e\u091c\u093e"]),  # राजा: still one word
        ("e\u0301te", ["\u00e9te"]),
    ],
)
def test_a_mark_continues_a_word_but_is_never_a_token_by_itself(
    text: str, expected: list[str]
) -> None:
    assert tokenize(text) == expected


_MARKED = [
    *"ae _1\u00b2",
    *"\u0301\u0308\u3099\u309a\ufe0f\u20dd",  # marks (U+20DD enclosing: Me)
    *"\u00ad\u200d\u2060\u0640\u064e",  # removed: joiners, tatweel, a vowel mark
    *"\uac00\u4e00\u304b\u30c9\u0915\u093e\u2764\U0001f600",
]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40) | st.lists(st.sampled_from(_MARKED), max_size=30).map("".join))
def test_no_token_is_made_of_marks_alone(text: str) -> None:
    for token in tokenize(text):
        assert any(unicodedata.category(char)[0] != "M" for char in token), ascii(token)


async def test_an_emoji_query_finds_its_own_memory_only(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("heart", text="Mira \u2764\ufe0f the blacksmith", tick=1))
    await store.append(make_memory("sun", text="\u2600\ufe0f sunny day at the market", tick=2))
    await store.append(make_memory("phone", text="call me \u260e\ufe0f later", tick=3))
    await store.append(make_memory("plain", text="nothing here", tick=4))
    assert await found(store, "\u2600\ufe0f") == ["sun"]
    assert await found(store, "\u2764\ufe0f") == ["heart"]


# 2 and 4. Every JSON escape is read as its character; numbers as written.


@pytest.mark.parametrize(
    ("escape", "character"),
    [("\\n", "\n"), ("\\t", "\t"), ("\\r", "\r"), ("\\b", "\b"), ("\\f", "\f"), ("\\/", "/")],
)
def test_a_word_after_an_escape_is_a_word_of_its_own(
    make_memory: MemoryFactory, escape: str, character: str
) -> None:
    payload = '{"note": "Met the king.' + escape + 'Bertram was angry"}'
    assert readable_json(payload) == '{"note": "Met the king.' + character + 'Bertram was angry"}'
    tokens = tokenize(document_text(make_memory(text=None, payload_json=payload)))
    assert "bertram" in tokens
    assert not any(token.endswith("bertram") and token != "bertram" for token in tokens)


def test_quotes_backslashes_and_surrogate_pairs_are_read_as_their_characters() -> None:
    assert readable_json('{"q": "say \\"hello\\" now"}') == '{"q": "say "hello" now"}'
    assert readable_json('["C:\\\\new"]') == '["C:\\new"]'  # an escaped backslash, then "n"
    assert readable_json('{"mood": "\\ud83d\\udc09"}') == '{"mood": "\U0001f409"}'
    assert readable_json('["\\u00e9p\\u00C9e"]') == '["\u00e9p\u00c9e"]'
    assert readable_json('["\\ud83d"]') == '["\ud83d"]'  # a lone surrogate, as json.loads
    assert readable_json('{"a": 1}') == '{"a": 1}'


def test_a_payload_s_numbers_tokenize_alike_with_or_without_an_escape_elsewhere(
    make_memory: MemoryFactory,
) -> None:
    escaped = '{"price":2.50,"weight":1E3,"item":"\\u00e9p\\u00e9e"}'
    raw = '{"price":2.50,"weight":1E3,"item":"\u00e9p\u00e9e"}'
    assert readable_json(escaped) == raw  # nothing but the escapes changes
    expected = ["price", "2", "50", "weight", "1e3", "item", "\u00e9p\u00e9e"]
    for payload in (escaped, raw):
        assert tokenize(document_text(make_memory(text=None, payload_json=payload))) == expected


async def test_a_word_after_an_escaped_line_break_is_found(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("letter", text="a letter", payload_json=LETTER))
    await store.append(make_memory("other", text="nothing", tick=2))
    assert await found(store, "Bertram") == ["letter"]
    assert await found(store, "nbertram") == []


# 3. A query without tokens is looked for in the text the tokens come from.


@pytest.mark.parametrize("filler", [0, 70], ids=["small-snapshot", "large-snapshot"])
async def test_a_query_without_tokens_reads_the_payload_s_text_not_its_json(
    make_store: StoreFactory, make_memory: MemoryFactory, filler: int
) -> None:
    store = make_store()
    rows = [
        ("a", "the smith forged a sword", '{"who":"smith","what":"sword"}'),
        ("b", "rain all day", '{"weather":"rain"}'),
        ("c", "a dragon \U0001f409 flew over", "{}"),
        ("d", "the bard sang", json.dumps({"icon": "\U0001f409"})),  # escaped
        ("e", "a greeting", json.dumps({"q": 'say "hello"'})),  # a quote inside a value
        ("f", "ready\uff01", "{}"),  # a full-width exclamation mark
    ]
    for tick, (memory_id, text, payload) in enumerate(rows):
        await store.append(make_memory(memory_id, text=text, payload_json=payload, tick=tick))
    for number in range(filler):
        await store.append(make_memory(f"z{number:03d}", text="plain words", tick=100 + number))
    assert await found(store, ":") == []  # JSON's syntax is no text
    assert await found(store, "{") == []
    assert await found(store, ",") == []
    assert await found(store, '"') == ["e"]
    assert await found(store, "\U0001f409") == ["d", "c"]  # newest first on ties
    assert await found(store, "!") == ["f"]  # NFKC, both sides
    assert await found(store, "\uff01") == ["f"]


# 5. What a removed joiner stood between composes.


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cafe\u00ad\u0301", ["caf\u00e9"]),  # a soft hyphen between a letter and its accent
        ("cafe\u200d\u0301", ["caf\u00e9"]),
        ("\u1100\u2060\u1161", ["\uac00"]),  # a word joiner between two jamo
    ],
)
def test_a_removed_joiner_leaves_the_word_as_typed_without_it(
    text: str, expected: list[str]
) -> None:
    assert tokenize(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*_MARKED, "\u1100", "\u1161", "\u0627", "\u0653"]), max_size=30))
@example(list("e\u00ad\u0301"))
@example(list("\u1100\u2060\u1161"))
def test_every_token_is_found_by_the_token_itself(characters: list[str]) -> None:
    # Without kana: a prolonged-sound mark or a hiragana bigram cut out of its text reads
    # otherwise by design.
    for token in tokenize("".join(characters)):
        assert token in tokenize(token), ascii(token)


async def test_a_word_typed_with_a_joiner_is_found_by_the_word(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("shy", text="the cafe\u00ad\u0301 by the sea"))
    await store.append(make_memory("ko", text="\u1100\u2060\u1161", tick=2))
    assert await found(store, "caf\u00e9") == ["shy"]
    assert await found(store, "cafe\u0301") == ["shy"]
    assert await found(store, "\uac00") == ["ko"]


# The read files: postings written with the tokens before these changes are never read.


async def test_a_read_file_of_the_tokens_before_is_not_read_but_rebuilt(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read file as the build before wrote it (the payload's ``\\n`` glued to the next
    word, its header naming that build's tokenizer) is trusted by that build, and ignored
    and rebuilt by this one: trusted, "Bertram" would find nothing."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)
    assert TOKENIZER_ID != OLD_TOKENIZER_ID
    with monkeypatch.context() as before:
        before.setattr(postings, "readable_json", lambda text: text)  # escapes as written
        before.setattr(read_file_module, "TOKENIZER_ID", OLD_TOKENIZER_ID)
        first = make_store()
        await first.append(make_memory("letter", text="a letter", payload_json=LETTER))
        for number in range(80):  # above lexical.SMALL_SNAPSHOT: postings are read
            await first.append(make_memory(f"m{number:03d}", text=f"word {number}", tick=2))
        await first.aclose()
        (path,) = (tmp_path / "save" / DATA / "read").glob("s-*/o-*.read")
        stale = path.read_bytes()
        assert OLD_TOKENIZER_ID.encode() in stale[:4096]
    with monkeypatch.context() as old_build:  # the build before reads it as it wrote it
        old_build.setattr(read_file_module, "TOKENIZER_ID", OLD_TOKENIZER_ID)
        second = make_store()
        assert await found(second, "nbertram") == ["letter"]
        await second.aclose()
    third = make_store()
    assert await found(third, "Bertram") == ["letter"]
    assert await found(third, "nbertram") == []
    await third.aclose()
    assert path.read_bytes() != stale  # rebuilt from the records, with today's header
    assert TOKENIZER_ID.encode() in path.read_bytes()[:4096]
