"""A memory row decodes through the file store's fast decoder exactly as the model decodes it.

``decode_row`` once validated every row with ``GameMemory.model_validate_json`` (about 36 µs a
memory: 4 s for the first recall of an NPC with 100k memories). It now tries the fast
decoder on the row's document wrapped as a record payload; these tests hold it to the model:
the same memory for every valid one, the same outcome for damaged ones.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from game_memory import GameMemory, PersistenceError
from game_memory.postgres.rows import decode_row, encode_memory, sql_key
from store.test_plain_document import assert_identical, damaged_documents, memories


def _row(document: bytes) -> tuple[bytes, bytes]:
    return document, hashlib.sha256(document).digest()


def _keys(memory: GameMemory) -> tuple[str, str, str]:
    return sql_key(memory.session_id), sql_key(memory.owner_id), sql_key(memory.memory_id)


@settings(max_examples=400, deadline=None)
@given(memories())
def test_every_valid_row_decodes_to_what_the_model_builds(memory: GameMemory) -> None:
    document, digest = encode_memory(memory)
    decoded = decode_row(document, digest, *_keys(memory), "a test table")
    assert_identical(decoded, GameMemory.model_validate_json(document))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_documents(), st.data())
def test_a_damaged_row_fails_or_decodes_exactly_as_the_model_decides(
    payload: bytes, data: st.DataObject
) -> None:
    try:
        inner: Any = json.loads(payload)["memory"]
    except (ValueError, KeyError, TypeError):
        return
    document = json.dumps(inner, ensure_ascii=data.draw(st.booleans())).encode(
        "utf-8", "surrogatepass"
    )
    try:
        expected: GameMemory | None = GameMemory.model_validate_json(document)
    except ValueError:
        expected = None
    keys = _keys(expected) if expected is not None else ("s", "o", "m")
    if expected is None:
        with pytest.raises(PersistenceError, match="not a valid memory"):
            decode_row(*_row(document), *keys, "a test table")
    else:
        assert_identical(decode_row(*_row(document), *keys, "a test table"), expected)


def test_a_plain_row_never_reaches_the_model(
    monkeypatch: pytest.MonkeyPatch, make_memory: Any
) -> None:
    memory = make_memory("m1", belief_key="bridge.eastmarch", tags=["a"])
    document, digest = encode_memory(memory)

    def refused(*_: object, **__: object) -> GameMemory:
        raise AssertionError("the model was asked")

    monkeypatch.setattr(GameMemory, "model_validate_json", refused)
    assert decode_row(document, digest, *_keys(memory), "a test table") == memory
