"""The plain-record fast path of decode_document never disagrees with the memory model.

Three claims, each checked against the full way (``json.loads`` + ``GameMemory.model_validate``,
``documents._decode_through_model``):

* every valid memory this store writes takes the fast path and comes back identical: the
  same values of the same types, the same fields set, the same bytes when encoded again;
* on any payload, valid or damaged, ``decode_document`` has the outcome of the full way:
  the same memory, or a ``DocumentError`` with the same message (the fast path never
  rejects, so every message comes from the model);
* ``pydantic_core.from_json``, which the fast path parses with, gives what ``json.loads``
  gives on everything it accepts.
"""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ConfigDict, field_validator
from pydantic_core import from_json, to_json

from game_memory import GameMemory, GameMemoryKind, GameMoment
from game_memory.model import sharing
from game_memory.store import plain_document
from game_memory.store.documents import (
    DocumentError,
    _decode_through_model,
    decode_document,
    encode_document,
)
from game_memory.store.plain_document import decode_plain_document

# -- helpers ---------------------------------------------------------------------------------


def assert_identical(fast: GameMemory, slow: GameMemory) -> None:
    """The two memories are the same object graph as far as anyone can tell."""
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert encode_document(fast) == encode_document(slow)
    assert list(fast.__dict__) == list(slow.__dict__)
    for name, value in slow.__dict__.items():
        assert type(fast.__dict__[name]) is type(value), name
    assert fast.__pydantic_fields_set__ == slow.__pydantic_fields_set__
    assert type(fast.__pydantic_fields_set__) is set
    assert fast.__pydantic_extra__ is None and slow.__pydantic_extra__ is None
    assert fast.__pydantic_private__ is None and slow.__pydantic_private__ is None
    assert math.copysign(1.0, fast.importance) == math.copysign(1.0, slow.importance)
    assert type(fast.tags) is tuple and type(fast.consolidates) is tuple
    assert type(fast.metadata) is MappingProxyType
    for fast_moment, slow_moment in (
        (fast.moment, slow.moment),
        (fast.expires_at, slow.expires_at),
    ):
        if slow_moment is None:
            assert fast_moment is None
            continue
        assert fast_moment is not None
        assert type(fast_moment) is GameMoment and type(fast_moment.tick) is int
        assert fast_moment.__dict__ == slow_moment.__dict__
        assert list(fast_moment.__dict__) == list(slow_moment.__dict__)
        assert fast_moment.__pydantic_fields_set__ == slow_moment.__pydantic_fields_set__
        assert fast_moment.__pydantic_extra__ is None and fast_moment.__pydantic_private__ is None
        assert hash(fast_moment) == hash(slow_moment)
    assert hash(fast) == hash(slow) == hash(slow.key)  # a memory hashes by its identity
    assert GameMemory.model_validate(fast.model_dump()) == fast


def outcome(decode: Any, payload: bytes) -> tuple[str, Any]:
    try:
        return ("memory", decode(payload))
    except DocumentError as exc:
        return ("error", str(exc))


def assert_same_outcome(payload: bytes) -> None:
    """decode_document decides ``payload`` as the full way does; a fast answer is the model's."""
    fast = decode_plain_document(payload)
    full = outcome(_decode_through_model, payload)
    got = outcome(decode_document, payload)
    assert got[0] == full[0], (payload, got, full)
    if full[0] == "error":
        assert got[1] == full[1]
    else:
        assert_identical(got[1], full[1])
    if fast is not None:  # what json.loads and model_validate make of the document
        document = json.loads(payload)
        assert set(document) == {"format_version", "memory"}
        version, memory = fast
        assert type(version) is int and version == document["format_version"]
        assert_identical(memory, GameMemory.model_validate(document["memory"]))


def same_json(a: Any, b: Any) -> bool:
    """Equal JSON values of equal types (``1`` is not ``1.0``, ``-0.0`` is not ``0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_json(a[k], b[k]) for k in a)
    return bool(a == b)


def assert_parsers_agree(data: bytes) -> None:
    """If from_json accepts ``data``, json.loads does too and gives the same value."""
    try:
        fast = from_json(data, cache_strings=False)  # as plain_document parses
    except ValueError:
        return
    slow = json.loads(data)
    assert same_json(fast, slow), (data, fast, slow)


# -- valid memories -------------------------------------------------------------------------

# ASCII, Latin, CJK, astral (beyond the BMP: UTF-16 order differs from code-point order),
# Unicode spaces inside, control characters, JSON-sensitive characters.
TEXT_CHARACTERS = st.sampled_from(
    [
        *"ab Z09-_.",
        *("é", "ü", "日", "本", "\u3000", "\u00a0", "\U0001f600", "\U00010000"),
        *("\uffff", "\ufeff", '"', "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "<", "&"),
    ]
)
texts = st.text(TEXT_CHARACTERS, max_size=12)
ids = st.text(TEXT_CHARACTERS, min_size=1, max_size=12).filter(lambda text: text.strip() != "")
long_ids = st.sampled_from(["x" * 1_024, "é" * 1_024, "\U0001f600" * 1_024])
payload_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=6,
)


@st.composite
def moments(draw: st.DrawFn, timeline: str, low: int = -(2**63)) -> GameMoment:
    calendar = draw(st.none() | payload_values.map(json.dumps))
    return GameMoment(
        timeline_id=timeline, tick=draw(st.integers(low, 2**63 - 1)), calendar_json=calendar
    )


@st.composite
def memories(draw: st.DrawFn) -> GameMemory:
    timeline = draw(ids | long_ids)
    moment = draw(moments(timeline))
    return GameMemory(
        memory_id=draw(ids | long_ids),
        session_id=draw(ids),
        owner_id=draw(ids),
        scope=draw(ids),
        kind=draw(st.sampled_from(list(GameMemoryKind))),
        payload_json=json.dumps(draw(payload_values), ensure_ascii=draw(st.booleans())),
        moment=moment,
        importance=draw(st.sampled_from([0, 1, 0.0, -0.0, 1.0, 0.5, 5e-324]) | st.floats(0, 1)),
        searchable_text=draw(st.none() | texts),
        tags=draw(st.lists(ids, max_size=5)),
        source_input_id=draw(st.none() | ids),
        expires_at=draw(st.none() | moments(timeline, moment.tick)),
        metadata=draw(st.dictionaries(ids, texts, max_size=4)),
        belief_key=draw(st.none() | ids),
        consolidates=draw(st.lists(ids, max_size=4)),
    )


@settings(max_examples=500, deadline=None)
@given(memories())
def test_every_valid_memory_takes_the_fast_path_and_comes_back_identical(
    memory: GameMemory,
) -> None:
    payload = encode_document(memory)
    fast = decode_plain_document(payload)
    assert fast is not None, payload
    assert_identical(fast[1], _decode_through_model(payload))
    assert decode_document(payload) == memory
    assert encode_document(fast[1]) == payload


def test_the_fast_path_is_on() -> None:
    # Off means GameMemory or GameMoment changed under plain_document.py: update its rules.
    assert plain_document.PLAIN_PATH_ENABLED


def test_the_fast_path_would_notice_a_new_validator_or_default() -> None:
    class Stricter(GameMemory):
        @field_validator("scope")
        @classmethod
        def _lowercase(cls, value: str) -> str:
            return value.lower()

    class Heavier(GameMemory):
        importance: float = 0.75

    class Looser(GameMemory):
        model_config = ConfigDict(extra="ignore")

    class Calendared(GameMoment):
        calendar_json: str | None = "{}"

    assert plain_document._model_matches(GameMemory, GameMoment)
    for memory_model, moment_model in [
        (Stricter, GameMoment),
        (Heavier, GameMoment),
        (Looser, GameMoment),
        (GameMemory, Calendared),
    ]:
        assert not plain_document._model_matches(memory_model, moment_model)


# -- damaged and unusual documents ---------------------------------------------------------

SURROGATE = "\ud800"
BAD_IDS: list[Any] = ["", " ", "\t\n", "\u3000", "x" * 1_025, "é" * 1_025, SURROGATE]
BAD_IDS += [f"a{SURROGATE}", 5, 1.5, True, None, [], {}, ["a"]]
ODD_NUMBERS: list[Any] = [True, False, 1.5, 3.0, -0.0, "3", None, 2**63, -(2**63) - 1]
ODD_NUMBERS += [2**63 - 1, -(2**63), 10**30, float("nan"), float("inf"), -float("inf")]
IMPORTANCES: list[Any] = [*ODD_NUMBERS, 0, 1, 2, -1, 0.5, 1.0000001, -1e-300, "0.5", 1e400]
BAD_PAYLOADS: list[Any] = ['{"a": 1, "a": 2}', "{", "NaN", '{"a": NaN}', "[" * 129 + "]" * 129]
BAD_PAYLOADS += ["[" * 128 + "]" * 128, f'"{SURROGATE}"', '"\\ud800"', "", " {} ", 7, None, []]
KINDS: list[Any] = ["event", "EVENT", "Fact", "fAcT", "procedure", "nope", "", 0, 5, 6, True]
KINDS += [None, "event ", "\u0130vent"]
TEXTS: list[Any] = [None, "", "x" * 1_000_001, SURROGATE, f"ok{SURROGATE}", 5, ["text"]]
TAGS: list[Any] = [None, [], ["a", "a"], ["b", "a"], [" "], [""], "tag", {}, 0, [5], [None]]
TAGS += [[SURROGATE], [f"t{i}" for i in range(257)], [f"t{i % 256}" for i in range(600)]]
TAGS += [["\U00010000", "\uffff"], ("a",), ["x" * 1_025]]
METADATA: list[Any] = [None, {}, {"": "v"}, {" ": "v"}, {"k" * 257: "v"}, {"k" * 256: "v"}]
METADATA += [{"k": 5}, {"k": None}, {"k": "v" * 65_537}, {"k": "v" * 65_536}, [], "meta", 0]
METADATA += [{f"k{i}": "" for i in range(257)}, {f"k{i}": "" for i in range(256)}]
METADATA += [{"k": SURROGATE}, {SURROGATE: "v"}]
CONSOLIDATES: list[Any] = [None, [], ["a", "a", "b"], ["b", "a"], [" "], "a", [1], [SURROGATE]]
CONSOLIDATES += [[f"m{i}" for i in range(1_025)], [f"m{i % 1_024}" for i in range(1_500)]]
MOMENTS: list[Any] = [None, [], "moment", {}, {"timeline_id": "main"}, {"tick": 1}]
MOMENTS += [{"timeline_id": "main", "tick": 1}, {"timeline_id": "main", "tick": 1, "extra": 1}]
MOMENTS += [{"timeline_id": "other", "tick": 1, "calendar_json": None}]
MOMENTS += [{"timeline_id": "main", "tick": 1, "calendar_json": "{}"}]
MOMENTS += [{"timeline_id": "main", "tick": 1, "calendar_json": '{"a":1,"a":2}'}]
MOMENTS += [{"timeline_id": "main", "tick": 1, "calendar_json": "x" * 65_537}]
MOMENTS += [{"timeline_id": "main", "tick": 1, "calendar_json": 5}]
MOMENTS += [{"timeline_id": "main", "tick": -5, "calendar_json": None}]
MOMENTS += [{"timeline_id": "main", "tick": 2**63, "calendar_json": None}]

REPLACEMENTS: dict[str, list[Any]] = {
    "memory_id": BAD_IDS,
    "session_id": BAD_IDS,
    "owner_id": BAD_IDS,
    "scope": BAD_IDS,
    "kind": KINDS,
    "payload_json": BAD_PAYLOADS,
    "moment": MOMENTS,
    "importance": IMPORTANCES,
    "searchable_text": TEXTS,
    "tags": TAGS,
    "source_input_id": BAD_IDS,
    "expires_at": MOMENTS,
    "metadata": METADATA,
    "belief_key": BAD_IDS,
    "consolidates": CONSOLIDATES,
}
VERSIONS: list[Any] = [1, 2, 1, 2, 0, 3, 1.0, 2.0, True, "1", None, -1, 2**70, float("nan")]


def tick_replacement(value: Any) -> dict[str, Any]:
    return {"timeline_id": "main", "tick": value, "calendar_json": None}


@st.composite
def damaged_documents(draw: st.DrawFn) -> bytes:
    """A valid memory's document with a few fields replaced, deleted or added, as bytes."""
    memory = draw(memories())
    document: dict[str, Any] = json.loads(encode_document(memory))
    fields: dict[str, Any] = document["memory"]
    if draw(st.booleans()):  # most moments on "main", so moment/expiry edits stay close
        fields["moment"] = tick_replacement(draw(st.integers(-10, 10)))
        fields["expires_at"] = None
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["replace", "replace", "tick", "delete", "add", "version"]))
        name = draw(st.sampled_from(list(REPLACEMENTS)))
        if action == "replace":
            fields[name] = draw(st.sampled_from(REPLACEMENTS[name]))
        elif action == "tick":
            which = draw(st.sampled_from(["moment", "expires_at"]))
            fields[which] = tick_replacement(draw(st.sampled_from([*ODD_NUMBERS, 0, 7, -7])))
        elif action == "delete":
            fields.pop(name, None)
        elif action == "add":
            target = draw(st.sampled_from(["memory", "document", "moment"]))
            extra = draw(st.sampled_from(["extra", "Memory_Id", "memoryId", "model_config"]))
            if target == "memory":
                fields[extra] = draw(st.sampled_from([None, 1, "x"]))
            elif target == "document":
                document[extra] = draw(st.sampled_from([None, 1, "x"]))
            elif type(fields.get("moment")) is dict:
                fields["moment"][extra] = None
        else:
            document["format_version"] = draw(st.sampled_from(VERSIONS))
    if draw(st.integers(0, 9)) == 0:
        document["memory"] = draw(st.sampled_from([None, [], "memory", 5, [fields]]))
    if draw(st.integers(0, 19)) == 0:
        del document[draw(st.sampled_from(["memory", "format_version"]))]
    ascii_only = draw(st.booleans())
    text = json.dumps(document, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate as (invalid) UTF-8


@settings(max_examples=1_500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_documents())
def test_any_document_decodes_exactly_as_the_model_decides(payload: bytes) -> None:
    assert_same_outcome(payload)


def memory_payload(**changes: Any) -> bytes:
    memory = GameMemory(
        memory_id="memory-1",
        session_id="save",
        owner_id="npc",
        scope="personal",
        kind="event",
        payload_json='{"n":1}',
        moment=GameMoment(timeline_id="main", tick=5),
        importance=0.25,
        searchable_text="the blacksmith",
        tags=["b", "a"],
        metadata={"mood": "calm"},
    )
    document = json.loads(encode_document(memory))
    document["memory"].update(changes)
    return json.dumps(document, separators=(",", ":")).encode("utf-8", "surrogatepass")


PLAIN = memory_payload()

# Raw payloads the dictionary route cannot spell: duplicate keys, spacing, encodings, NaN.
RAW_PAYLOADS = [
    PLAIN,
    PLAIN.replace(b'"memory":{', b'"memory":{"memory_id":"earlier",'),  # the last one wins
    PLAIN.replace(b'"memory":{', b'"memory":{"memory_id":"  ",'),
    PLAIN.replace(b'"memory":{', b'"memory":{"memory_id":5,'),
    PLAIN.replace(b'{"format_version":1,', b'{"format_version":1,"format_version":3,'),
    PLAIN.replace(b'{"format_version":1,', b'{"format_version":3,"format_version":1,'),
    PLAIN.replace(b'"mood":"calm"', b'"mood":"calm","mood":"angry"'),
    PLAIN.replace(b'"tick":5', b'"tick":5,"tick":6'),
    PLAIN.replace(b'"importance":0.25', b'"importance":NaN'),
    PLAIN.replace(b'"importance":0.25', b'"importance":Infinity'),
    PLAIN.replace(b'"importance":0.25', b'"importance":-0.0'),
    PLAIN.replace(b'"importance":0.25', b'"importance":1e-400'),
    PLAIN.replace(b'"importance":0.25', b'"importance":1E0'),
    PLAIN.replace(b'"importance":0.25', b'"importance":0.250000000000000000000000001'),
    PLAIN.replace(b'"importance":0.25', b'"importance":01'),
    PLAIN.replace(b'"tick":5', b'"tick":5.0'),
    PLAIN.replace(b'"tick":5', b'"tick":5e0'),
    PLAIN.replace(b'"tick":5', b'"tick":-0'),
    PLAIN.replace(b'"tick":5', b'"tick":' + b"9" * 5_000),
    PLAIN.replace(b'"blacksmith"', b'"black\\ud800smith"'),
    PLAIN.replace(b'"blacksmith"', b'"black\\ud83d\\ude00smith"'),
    PLAIN.replace(b'"blacksmith"', b'"black\xed\xa0\x80smith"'),  # a surrogate in UTF-8
    PLAIN.replace(b'"blacksmith"', b'"black\xc0\xafsmith"'),  # overlong UTF-8
    PLAIN.replace(b'"blacksmith"', b'"black\xffsmith"'),
    PLAIN.replace(b'"blacksmith"', b'"black\x01smith"'),  # a raw control character
    PLAIN.replace(b'"blacksmith"', b'"black\\u0001smith"'),
    PLAIN.replace(b'"blacksmith"', '"black\u00e9smith"'.encode()),
    PLAIN.replace(b'"npc"', b'"\\u0020"'),
    PLAIN.replace(b'"npc"', '"\u3000"'.encode()),
    PLAIN.replace(b'"b","a"', b'"b","a",]'),
    PLAIN.replace(b",", b" ,\n\t", 3),
    b"\xef\xbb\xbf" + PLAIN,  # a byte order mark: json.loads takes it, from_json does not
    b" " + PLAIN + b"\r\n",
    PLAIN + b"x",
    PLAIN + b"\x00",
    PLAIN.decode().encode("utf-16"),
    PLAIN.decode().encode("utf-16-le"),
    PLAIN.decode().encode("utf-32"),
    PLAIN[:-1],
    b"",
    b"null",
    b"[]",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":1,"b":2,"a":3}',  # a repeated key keeps its first place and takes the last value
    b'{"a":{"x":1},"b":2,"a":[3],"c":{},"b":{"y":[]}}',
]


@pytest.mark.parametrize("payload", RAW_PAYLOADS)
def test_raw_payloads_decode_exactly_as_the_model_decides(payload: bytes) -> None:
    assert_same_outcome(payload)
    assert_parsers_agree(payload)


CASES: list[tuple[str, dict[str, Any], str | None]] = [
    # (what, changes to the plain memory, the fast path's answer: "fast", None or "error")
    ("the plain shape", {}, "fast"),
    ("bool for a tick", {"moment": tick_replacement(True)}, "error"),
    ("whole float tick", {"moment": tick_replacement(5.0)}, "model"),
    ("numeric string tick", {"moment": tick_replacement("5")}, "model"),
    ("tick past int64", {"moment": tick_replacement(2**63)}, "error"),
    ("tick at int64's end", {"moment": tick_replacement(2**63 - 1)}, "fast"),
    ("bool importance", {"importance": True}, "error"),
    ("integer importance", {"importance": 1}, "fast"),
    ("string importance", {"importance": "0.5"}, "model"),
    ("NaN importance", {"importance": float("nan")}, "error"),
    ("infinite importance", {"importance": float("inf")}, "error"),
    ("huge integer importance", {"importance": 10**400}, "error"),
    ("a 1,025-character id", {"memory_id": "x" * 1_025}, "error"),
    ("a blank id", {"owner_id": " \t"}, "error"),
    ("an ideographic-space id", {"owner_id": "\u3000"}, "error"),
    ("an unpaired surrogate", {"searchable_text": SURROGATE}, "error"),
    ("payload not JSON", {"payload_json": "{"}, "error"),
    ("payload with a duplicate key", {"payload_json": '{"a":1,"a":2}'}, "error"),
    ("payload with NaN", {"payload_json": "[NaN]"}, "error"),
    ("an extra field", {"colour": "red"}, "error"),
    ("kind in capitals", {"kind": "EVENT"}, "model"),
    ("kind as an ordinal", {"kind": 1}, "model"),
    (
        "expiry on another timeline",
        {"expires_at": {**tick_replacement(9), "timeline_id": "x"}},
        "error",
    ),
    ("expiry before the moment", {"expires_at": tick_replacement(4)}, "error"),
    ("expiry at the moment", {"expires_at": tick_replacement(5)}, "fast"),
    ("tags as one string", {"tags": "a"}, "error"),
    ("257 distinct tags", {"tags": [f"t{i}" for i in range(257)]}, "error"),
    ("astral and BMP tags", {"tags": ["\U00010000", "\uffff"]}, "fast"),
    ("a belief key", {"belief_key": "bridge"}, "fast"),
    ("consolidated duplicates", {"consolidates": ["b", "a", "b"]}, "fast"),
]


@pytest.mark.parametrize(("what", "changes", "expected"), CASES, ids=[c[0] for c in CASES])
def test_hand_written_cases(what: str, changes: dict[str, Any], expected: str) -> None:
    for version in (1, 2):
        payload = memory_payload(**changes).replace(
            b'"format_version":1', b'"format_version":%d' % version
        )
        assert_same_outcome(payload)
        fast = decode_plain_document(payload)
        if expected == "fast":
            assert fast is not None, what
        else:
            assert fast is None, what
            if expected == "error":
                with pytest.raises(DocumentError):
                    decode_document(payload)


def test_a_format_1_record_with_a_belief_key_is_damage_though_plain() -> None:
    payload = memory_payload(belief_key="bridge")
    assert payload.startswith(b'{"format_version":1,')
    fast = decode_plain_document(payload)
    assert fast is not None and fast[0] == 1  # the memory is plain; its version is not
    with pytest.raises(DocumentError, match="format-1 record cannot hold"):
        decode_document(payload)
    consolidating = memory_payload(consolidates=["a"])
    with pytest.raises(DocumentError, match="format-1 record cannot hold"):
        decode_document(consolidating)


def test_missing_optional_keys_are_not_recorded_as_set() -> None:
    document = json.loads(PLAIN)
    for name in ("importance", "searchable_text", "tags", "source_input_id", "expires_at"):
        del document["memory"][name]
    del document["memory"]["metadata"]
    del document["memory"]["moment"]["calendar_json"]
    payload = json.dumps(document).encode()
    fast = decode_plain_document(payload)
    assert fast is not None
    memory = fast[1]
    assert memory.__pydantic_fields_set__ == {
        "memory_id",
        "session_id",
        "owner_id",
        "scope",
        "kind",
        "payload_json",
        "moment",
    }
    assert memory.moment.__pydantic_fields_set__ == {"timeline_id", "tick"}
    assert memory.importance == 0.5 and memory.metadata == {} and memory.tags == ()
    assert_same_outcome(payload)


def test_memories_decoded_with_the_usual_keys_share_one_fields_set_safely() -> None:
    # One set of names per usual key set (0.7 KB a memory otherwise): the models are
    # frozen, so nothing adds to it, and a copy with changes gets a set of its own.
    first, second = decode_plain_document(PLAIN), decode_plain_document(PLAIN)
    assert first is not None and second is not None
    one, other = first[1], second[1]
    assert one.__pydantic_fields_set__ is other.__pydantic_fields_set__
    assert one.moment.__pydantic_fields_set__ is other.moment.__pydantic_fields_set__
    before = set(one.model_fields_set)
    with pytest.raises(ValueError, match="frozen"):
        one.importance = 0.1  # type: ignore[misc]
    changed = one.model_copy(update={"importance": 0.9})
    assert changed.importance == 0.9 and changed.model_fields_set == before
    assert changed.__pydantic_fields_set__ is not one.__pydantic_fields_set__
    assert one.model_fields_set == other.model_fields_set == before


def test_the_ids_a_partition_repeats_are_one_string_each_within_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Session, owner, scope and timeline: about 60 bytes each a memory otherwise.
    first, second = decode_plain_document(PLAIN), decode_plain_document(PLAIN)
    assert first is not None and second is not None
    one, other = first[1], second[1]
    for name in ("session_id", "owner_id", "scope"):
        assert getattr(one, name) is getattr(other, name)
    assert one.moment.timeline_id is other.moment.timeline_id
    assert one.memory_id == other.memory_id and one.payload_json == other.payload_json
    monkeypatch.setattr(sharing, "SHARED_IDS", 8)
    for number in range(40):
        payload = memory_payload(owner_id=f"owner-{number}", session_id=f"session-{number}")
        decoded = decode_plain_document(payload)
        assert decoded is not None and decoded[1].owner_id == f"owner-{number}"
        assert len(sharing._IDS) <= 8
    # The same strings as a memory built through the model (GameMemory.model_post_init).
    built = GameMemory.model_validate(json.loads(PLAIN)["memory"])
    fast = decode_plain_document(PLAIN)
    assert fast is not None
    for name in ("session_id", "owner_id", "scope"):
        assert getattr(fast[1], name) is getattr(built, name)


def test_a_duplicate_key_takes_its_last_value_as_json_loads_does() -> None:
    payload = PLAIN.replace(b'"memory":{', b'"memory":{"memory_id":"earlier",')
    assert decode_document(payload).memory_id == "memory-1"
    assert decode_plain_document(payload) is not None


# -- the parser: from_json answers as json.loads does ---------------------------------------

ANY_CHARACTER = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, codec=None)
JSON_TEXT = st.text(ANY_CHARACTER | st.sampled_from(["\ud800", "\udfff", "\ud83d"]), max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | JSON_TEXT,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(JSON_TEXT, children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=1_000, deadline=None)
@given(json_values, st.booleans())
def test_from_json_agrees_with_json_loads_on_json_values(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert_parsers_agree(text.encode("utf-8", "surrogatepass"))


NUMBER = r"[-+]?(0|[0-9]{1,25}|[1-9][0-9]{0,25})?(\.[0-9]{0,30})?([eE][-+]?[0-9]{0,4})?"


@settings(max_examples=2_000, deadline=None)
@given(st.from_regex(NUMBER, fullmatch=True))
@example("2.2250738585072011e-308")
@example("2.2250738585072012e-308")
@example("4.9406564584124654e-324")
@example("2.4703282292062327e-324")
@example("2.4703282292062328e-324")
@example("1.7976931348623157e308")
@example("1.7976931348623159e308")
@example("0.1000000000000000055511151231257827021181583404541015625")
@example("9007199254740993")
@example("9007199254740993.0")
@example("0.30000000000000004")
@example("1e23")
@example("8.41e21")
def test_from_json_parses_numbers_as_json_loads_does(number: str) -> None:
    assert_parsers_agree(number.encode())
    assert_parsers_agree(b'{"n":' + number.encode() + b"}")


@settings(max_examples=500, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_importances_written_by_the_serializer_read_back_bit_for_bit(value: float) -> None:
    written = to_json({"x": value})  # pydantic-core's float writing, as in encode_document
    assert_parsers_agree(written)
    assert from_json(written, cache_strings=False)["x"] == value


ESCAPE = st.sampled_from(
    [
        *('\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t", "\\u0000", "\\u001f"),
        *("\\u00e9", "\\ud800", "\\udc00", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\uffff"),
        *("\\u", "\\x41", "\\", "\\ud83d", "\\ude00\\ud83d", "\\ud83d\\u0041", '"', "\x00"),
        *("\x1f", "\x7f", "a", "é"),
    ]
)
RAW_BYTES = st.sampled_from(
    [b"\xed\xa0\x80", b"\xc0\xaf", b"\xff", b"\xf4\x90\x80\x80", b"\xe2\x82"]
)


@settings(max_examples=1_000, deadline=None)
@given(st.lists(ESCAPE, max_size=6), st.lists(RAW_BYTES, max_size=1))
def test_from_json_reads_string_escapes_as_json_loads_does(
    pieces: list[str], raw: list[bytes]
) -> None:
    body = "".join(pieces).encode("utf-8") + b"".join(raw)
    assert_parsers_agree(b'"' + body + b'"')
    assert_parsers_agree(b'{"k":"' + body + b'"}')


MUTATION_BYTES = st.sampled_from(
    [*b'{}[]:,"\\ u0d8e-+.5eE9nNaIt\x00\x0c\t\n', 0xED, 0xA0, 0x80, 0xC3, 0xA9, 0xFF]
)


@settings(max_examples=1_500, deadline=None)
@given(
    memories(),
    st.lists(
        st.tuples(
            st.integers(0, 10_000), st.sampled_from(["set", "insert", "delete"]), MUTATION_BYTES
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_byte_damage_decodes_exactly_as_the_model_decides(
    memory: GameMemory, edits: list[tuple[int, str, int]]
) -> None:
    data = bytearray(encode_document(memory))
    for position, action, byte in edits:
        at = position % len(data)
        if action == "set":
            data[at] = byte
        elif action == "insert":
            data.insert(at, byte)
        else:
            del data[at]
    payload = bytes(data)
    assert_parsers_agree(payload)
    assert_same_outcome(payload)
