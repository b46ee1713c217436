"""Params to core models: the remember digest, payload defaults and field names in errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError
from game_memory.bridge.convert import build_memory, build_query, build_summary
from game_memory.bridge.params import ConsolidateParams, RecallParams, RememberParams
from game_memory.model import GameMemoryKind, GameMoment, content_memory_id

from .conftest import remember_params


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


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
    # An unpaired surrogate in the payload is refused by the core model's payload_json.
    with pytest.raises(RpcError) as caught:
        build_memory(remember(payload={"line": "bad \ud800"}), "memory.remember_many", "memories.4")
    assert caught.value.code is ErrorCode.INVALID_PARAMS
    assert caught.value.data == {"kind": "ValidationError", "field": "memories.4.payload"}
    assert caught.value.message.startswith(
        "invalid params for memory.remember_many: memories.4.payload: "
    )


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"owner_id": "   "}, ("owner_id",)),
        ({"expires_at": {"timeline_id": "main", "tick": 5}}, ("expires_at",)),
        ({"expires_at": {"timeline_id": "alt", "tick": 500}}, ("expires_at",)),
        ({"payload": nested(129)}, ("payload",)),
        ({"payload": nested(300)}, ("payload",)),
    ],
)
def test_the_params_model_names_what_the_core_would_refuse_unnamed_or_unbounded(
    change: dict[str, Any], loc: tuple[str, ...]
) -> None:
    # Checked at the params edge so the error names the field: the core's expiry rule is a
    # model-level check whose error has no location, and pydantic's own limit on nesting
    # (about 255 levels) would answer a deep payload with a path of its type names.
    with pytest.raises(ValidationError) as refused:
        remember(**change)
    assert refused.value.errors()[0]["loc"] == loc


def summary_params(**summary: Any) -> ConsolidateParams:
    return ConsolidateParams.model_validate(
        {
            "session_id": "save-1",
            "owner_id": "npc-mira",
            "memory_ids": ["m1"],
            "summary": {"text": "a summary", "moment": {"timeline_id": "main", "tick": 100}}
            | summary,
        }
    )


@pytest.mark.parametrize(
    ("summary", "field"),
    [
        ({"expires_at": {"timeline_id": "main", "tick": 5}}, "summary.expires_at"),
        ({"expires_at": {"timeline_id": "alt", "tick": 500}}, "summary.expires_at"),
        ({"payload": nested(129)}, "summary.payload"),
        ({"payload": nested(400)}, "summary.payload"),
    ],
)
def test_a_summary_error_names_the_summary_field(summary: dict[str, Any], field: str) -> None:
    with pytest.raises(RpcError) as caught:
        build_summary(summary_params(**summary))
    assert caught.value.data == {"kind": "ValidationError", "field": field}
    assert caught.value.message.startswith(f"invalid params for memory.consolidate: {field}: ")


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
