"""Params to core models: the remember digest, payload defaults and field names in errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError
from game_memory.bridge.convert import build_memory, build_query
from game_memory.bridge.params import RecallParams, RememberParams
from game_memory.model import GameMemoryKind, GameMoment, content_memory_id

from .conftest import remember_params


def remember(**overrides: Any) -> RememberParams:
    return RememberParams.model_validate(remember_params(**overrides))


def test_text_becomes_searchable_text_and_the_default_payload() -> None:
    memory = build_memory(remember())
    assert memory.searchable_text == "The blacksmith sold me a rusty sword"
    assert json.loads(memory.payload_json) == {"text": "The blacksmith sold me a rusty sword"}
    assert memory.kind is GameMemoryKind.EVENT
    assert memory.scope == "personal"
    assert memory.importance == 0.5


def test_an_explicit_null_payload_is_kept() -> None:
    assert build_memory(remember(payload=None)).payload_json == "null"


def test_the_payload_is_stored_canonically() -> None:
    first = build_memory(remember(payload={"b": 1, "a": [1, {"d": 2, "c": "é"}]}))
    second = build_memory(remember(payload={"a": [1, {"c": "é", "d": 2}], "b": 1}))
    assert first.payload_json == '{"a":[1,{"c":"é","d":2}],"b":1}'
    assert first == second


def test_the_default_id_is_a_deterministic_content_digest() -> None:
    memory = build_memory(remember())
    assert memory.memory_id.startswith("gm-")
    assert len(memory.memory_id) == 35
    int(memory.memory_id[3:], 16)
    assert build_memory(remember()).memory_id == memory.memory_id


@pytest.mark.parametrize(
    "change",
    [
        {"session_id": "save-2"},
        {"owner_id": "npc-other"},
        {"moment": {"timeline_id": "alt", "tick": 100}},
        {"moment": {"timeline_id": "main", "tick": 101}},
        {"kind": "fact"},
        {"scope": "shared"},
        {"text": "The blacksmith sold me a shiny sword"},
        {"payload": {"text": "other"}},
    ],
)
def test_the_default_id_changes_with_every_content_field(change: dict[str, Any]) -> None:
    assert build_memory(remember(**change)).memory_id != build_memory(remember()).memory_id


def test_the_digest_is_length_prefixed_so_fields_cannot_shift() -> None:
    moment = GameMoment(timeline_id="t", tick=1)
    kind = GameMemoryKind.EVENT
    assert content_memory_id("ab", "c", moment, kind, "s", "x", "{}") != content_memory_id(
        "a", "bc", moment, kind, "s", "x", "{}"
    )


def test_an_explicit_id_is_kept() -> None:
    assert build_memory(remember(memory_id="quest-42")).memory_id == "quest-42"


def test_a_core_validation_error_names_the_protocol_field() -> None:
    with pytest.raises(RpcError) as caught:
        build_memory(remember(expires_at={"timeline_id": "main", "tick": 5}))
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert "expires_at" in caught.value.message

    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    with pytest.raises(RpcError) as caught:
        build_memory(remember(payload=deep))
    assert caught.value.data == {"kind": "ValidationError", "field": "payload"}

    # A blank id is refused earlier, by the params model, which names it.
    with pytest.raises(ValidationError) as refused:
        remember(owner_id="   ")
    assert refused.value.errors()[0]["loc"] == ("owner_id",)


def test_a_query_carries_every_filter() -> None:
    params = RecallParams.model_validate(
        {
            "session_id": "s",
            "owner_id": "o",
            "text": "sword",
            "at_or_before": {"timeline_id": "main", "tick": 7},
            "limit": 3,
            "scopes": ["personal"],
            "kinds": ["fact", "event"],
            "tags": ["shop"],
            "minimum_importance": 0.25,
        }
    )
    query = build_query(params)
    assert query.session_id == "s" and query.owner_id == "o" and query.text == "sword"
    assert query.at_or_before == GameMoment(timeline_id="main", tick=7)
    assert query.limit == 3
    assert query.scopes == ("personal",)
    assert query.kinds == (GameMemoryKind.FACT, GameMemoryKind.EVENT)
    assert query.tags == ("shop",)
    assert query.minimum_importance == 0.25


def test_a_blank_session_in_a_query_is_invalid_params() -> None:
    with pytest.raises(ValidationError) as refused:
        RecallParams.model_validate({"session_id": "  "})
    assert refused.value.errors()[0]["loc"] == ("session_id",)
