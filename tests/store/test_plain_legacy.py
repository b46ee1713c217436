"""The plain-document fast path of legacy decoding never disagrees with the memory model."""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory import GameMemory, GameMemoryKind
from game_memory.store.documents import (
    DocumentError,
    decode_legacy_document,
    encode_legacy_document,
    validate_legacy,
)
from game_memory.store.plain_legacy import decode_plain_legacy

# Mostly valid values (so both paths build memories), sometimes ones that break a rule.
GOOD_IDS = ["a", "npc-1", "x" * 1_024, "é", "with space"]
BAD_IDS = [" ", "", "\t", "x" * 1_025, 5, None, True]
GOOD_TEXTS = [None, "", "plain text", "naïve", "\x1c"]
BAD_TEXTS = ["y" * 1_000_001, 3]
GOOD_PAYLOADS = ["{}", "[]", '{"a": 1}', '"\u00e9"', "[" * 128 + "]" * 128]
BAD_PAYLOADS = ['{"a": 1, "a": 2}', "{", "[" * 129 + "]" * 129, 7, None]
GOOD_TICKS = [0, -5, 7, 2**63 - 1, -(2**63)]
BAD_TICKS = [2**63, -(2**63) - 1, True, 1.5, "3", None]
GOOD_IMPORTANCES = [0, 1, 0.5, 0.0, 1.0, 0.25]
BAD_IMPORTANCES = [-0.1, 1.5, 1e400, 10**400, 2, -1, True, "0.5", None]


def pick(draw: st.DrawFn, good: list[Any], bad: list[Any]) -> Any:
    """Mostly a good value; in a "plain" document an ASCII one (as the C# runtime writes)."""
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(bad))
    if draw(plain):
        good = [value for value in good if not isinstance(value, str) or value.isascii()]
    return draw(st.sampled_from(good))


plain = st.shared(st.booleans(), key="plain")


@st.composite
def moments(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 29)) == 0:
        return draw(st.sampled_from([None, [], "moment", {}]))
    moment: dict[str, Any] = {
        "TimelineId": pick(draw, ["world", "w2", "wörld"], BAD_IDS),
        "Tick": pick(draw, GOOD_TICKS, BAD_TICKS),
    }
    if draw(st.booleans()):
        calendars = [None] if draw(plain) else [None, "{}", '{"day": 1}']
        moment["CalendarJson"] = pick(draw, calendars, ["oops", 4])
    return moment


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {
        "FormatVersion": 1,
        "MemoryId": pick(draw, GOOD_IDS, BAD_IDS),
        "SessionId": pick(draw, GOOD_IDS, BAD_IDS),
        "OwnerId": pick(draw, GOOD_IDS, BAD_IDS),
        "Scope": pick(draw, GOOD_IDS, BAD_IDS),
        "Kind": "Fact",
        "PayloadJson": pick(draw, GOOD_PAYLOADS, BAD_PAYLOADS),
        "Moment": draw(moments()),
        "Importance": pick(draw, GOOD_IMPORTANCES, BAD_IMPORTANCES),
        "SearchableText": pick(draw, GOOD_TEXTS, BAD_TEXTS),
        "Tags": draw(
            st.lists(st.sampled_from(["a", "npc-1", "b", "A"]), max_size=4)
            | st.sampled_from([None, ["a", "a"], [" "], ["é"], "tag", {}, 0, [5]])
        ),
        "SourceInputId": pick(draw, [None, "input", "é"], BAD_IDS[:-2]),
        "ExpiresAt": draw(st.none() | moments()),
        "Metadata": draw(
            st.dictionaries(st.sampled_from(["k", "mood", "é"]), st.sampled_from(["", "v", "ü"]))
            | st.dictionaries(st.sampled_from(["k", "mood"]), st.sampled_from(["", "v"]))
            | st.sampled_from([None, {"": "v"}, {"k" * 257: "v"}, {"k": 5}, [], "meta", 0])
        ),
    }
    for name in list(document):
        if name != "FormatVersion" and draw(st.integers(0, 40)) == 0:
            del document[name]  # a missing property
    return document


def model_result(document: dict[str, Any]) -> GameMemory | None:
    try:
        return validate_legacy(document, GameMemoryKind.FACT)
    except DocumentError:
        return None


@settings(max_examples=800, deadline=None)
@given(documents())
def test_the_fast_path_accepts_only_what_the_model_accepts_and_builds_the_same(
    document: dict[str, Any],
) -> None:
    fast = decode_plain_legacy(document, GameMemoryKind.FACT)
    if fast is None:
        return
    slow = model_result(document)
    assert slow is not None, document
    assert fast == slow
    assert fast.model_dump_json() == slow.model_dump_json()
    assert type(fast.metadata) is MappingProxyType and type(fast.tags) is tuple
    assert type(fast.importance) is float and type(fast.moment.tick) is int
    assert GameMemory.model_validate(fast.model_dump()) == fast


def test_a_typical_csharp_document_takes_the_fast_path() -> None:
    memory = GameMemory(
        memory_id="memory-1",
        session_id="save",
        owner_id="npc",
        scope="fact",
        kind="fact",
        payload_json='{"target": true}',
        moment={"timeline_id": "world", "tick": 5},
        importance=1.0,
        searchable_text="the blacksmith",
        tags=["b", "a"],
        source_input_id="input",
        expires_at={"timeline_id": "world", "tick": 9},
        metadata={"mood": "calm"},
    )
    document = json.loads(encode_legacy_document(memory))
    assert decode_plain_legacy(document, GameMemoryKind.FACT) == memory
    assert decode_legacy_document(encode_legacy_document(memory)) == memory


def test_documents_outside_the_plain_shape_fall_back_to_the_model() -> None:
    memory = GameMemory(
        memory_id="mémoire",
        session_id="save",
        owner_id="npc",
        scope="fact",
        kind="event",
        payload_json="{}",
        moment={"timeline_id": "world", "tick": 5, "calendar_json": "{}"},
    )
    document = json.loads(encode_legacy_document(memory))
    assert decode_plain_legacy(document, GameMemoryKind.EVENT) is None
    assert decode_legacy_document(encode_legacy_document(memory)) == memory


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["MemoryId", "SessionId", "OwnerId", "Scope", "Kind", "PayloadJson", "Moment"]
FIELDS += ["Importance", "SearchableText", "Tags", "SourceInputId", "ExpiresAt", "Metadata"]


@settings(max_examples=300, deadline=None)
@given(documents(), st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=3))
def test_any_json_document_decodes_or_raises_a_document_error_never_anything_else(
    document: dict[str, Any], replaced: dict[str, Any]
) -> None:
    data = json.dumps({**document, **replaced}).encode()
    try:
        memory = decode_legacy_document(data)
    except DocumentError:
        return
    assert isinstance(memory, GameMemory)
