"""Memory documents: the store's record payload and the reference's v1 format, round trips."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory import GameMemory, GameMemoryKind, GameMoment
from game_memory.store.documents import (
    DocumentError,
    decode_document,
    decode_legacy_document,
    encode_document,
    encode_legacy_document,
)

texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12
).filter(lambda text: text.strip() != "")


@st.composite
def memories(draw: st.DrawFn) -> GameMemory:
    tick = draw(st.integers(-(2**63), 2**63 - 2))
    timeline = draw(texts)
    expiry = draw(st.none() | st.integers(tick, 2**63 - 1))
    payload = draw(st.dictionaries(texts, texts | st.integers() | st.none(), max_size=3))
    return GameMemory(
        memory_id=draw(texts),
        session_id=draw(texts),
        owner_id=draw(texts),
        scope=draw(texts),
        kind=draw(st.sampled_from(list(GameMemoryKind))),
        payload_json=json.dumps(payload, ensure_ascii=draw(st.booleans())),
        moment=GameMoment(
            timeline_id=timeline,
            tick=tick,
            calendar_json=draw(st.none() | st.just('{"day": 2, "note": "<&>"}')),
        ),
        importance=draw(st.floats(0.0, 1.0)),
        searchable_text=draw(st.none() | st.text(max_size=30)),
        tags=draw(st.lists(texts, max_size=4)),
        source_input_id=draw(st.none() | texts),
        expires_at=None if expiry is None else GameMoment(timeline_id=timeline, tick=expiry),
        metadata=draw(st.dictionaries(texts, st.text(max_size=10).filter(str.isprintable))),
    )


@settings(max_examples=200, deadline=None)
@given(memories())
def test_a_record_payload_round_trips_exactly(memory: GameMemory) -> None:
    assert decode_document(encode_document(memory)) == memory


@settings(max_examples=200, deadline=None)
@given(memories())
def test_a_legacy_document_round_trips_exactly(memory: GameMemory) -> None:
    data = encode_legacy_document(memory)
    assert data.isascii()  # every non-ASCII character is \\u-escaped, as System.Text.Json does
    assert decode_legacy_document(data) == memory
    assert decode_legacy_document(b"\xef\xbb\xbf" + data) == memory  # with a byte order mark


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(memories(), st.dictionaries(st.sampled_from(list(GameMemory.model_fields)), json_values))
def test_a_damaged_record_payload_raises_a_document_error_and_nothing_else(
    memory: GameMemory, damage: dict[str, Any]
) -> None:
    document = json.loads(encode_document(memory))
    document["memory"].update(damage)
    try:
        decoded = decode_document(json.dumps(document).encode())
    except DocumentError:
        return
    assert isinstance(decoded, GameMemory)
