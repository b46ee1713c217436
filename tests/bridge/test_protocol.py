"""The sans-I/O protocol core, driven synchronously: no event loop, no socket."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from game_memory.bridge.codes import ErrorCode, RpcError
from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.messages import PARSE_ERROR_KINDS
from game_memory.bridge.params import (
    RecallManyParams,
    RecallParams,
    RememberManyParams,
    StatusParams,
)
from game_memory.bridge.protocol import (
    UNAUTHORIZED_CLOSE_CODE,
    BridgeConnection,
    ConnectionState,
    Received,
    ServerInfo,
)
from game_memory.errors import StoreBusyError

from .conftest import (
    MOMENT,
    NOTIFY,
    TOKEN,
    decoded,
    initialize,
    only,
    remember_params,
    request,
)

Make = Callable[..., BridgeConnection]


def error_code(response: dict[str, Any]) -> int:
    return int(response["error"]["code"])


# -- initialize first ------------------------------------------------------------------


def test_initialize_reports_protocol_server_mode_model_and_deadlines(make_connection: Make) -> None:
    response = only(make_connection().receive(initialize(request_id=7)))
    assert response == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "protocol_version": 1,
            "server": "game-memory 0.1.0",
            "mode": "hybrid",
            "model": "hashing/feature-hashing-words@v1:256",
            "deadlines": {"request_seconds": 120.0, "rebuild_seconds": 3600.0},
        },
    }


def only_text(received: Received) -> str:
    (message,) = received.messages
    return message


@pytest.mark.parametrize(
    "method", ["memory.status", "memory.remember", "memory.migrate", "no.such.method"]
)
def test_any_method_before_initialize_is_refused_and_closes_the_connection(
    make_connection: Make, method: str
) -> None:
    connection = make_connection()
    received = connection.receive(request(method, {"session_id": "s"}, 3))
    response = only(received)
    assert error_code(response) == -32001
    assert response["id"] == 3
    assert "initialize first" in response["error"]["message"]
    assert received.close is not None and received.close.code == UNAUTHORIZED_CLOSE_CODE
    assert connection.state is ConnectionState.CLOSED
    later = connection.receive(initialize())  # nothing more is read
    assert later.messages == [] and later.calls == []


def test_a_client_notification_before_initialize_closes_the_connection_unanswered(
    make_connection: Make,
) -> None:
    connection = make_connection()
    received = connection.receive(json.dumps({"jsonrpc": "2.0", "method": "memory.status"}))
    assert received.messages == [] and received.calls == []
    assert received.close is not None and connection.state is ConnectionState.CLOSED


def test_a_malformed_message_before_initialize_is_answered_and_the_connection_stays(
    make_connection: Make,
) -> None:
    connection = make_connection()
    assert error_code(only(connection.receive("{not json"))) == -32700
    assert error_code(only(connection.receive(json.dumps({"id": 1})))) == -32600
    assert "result" in only(connection.receive(initialize()))


@pytest.mark.parametrize(
    "params",
    [
        {"protocol_version": 1, "token": "wrong"},
        {"protocol_version": 1},
        {"protocol_version": 1, "token": 12345},
        {"protocol_version": 1, "token": TOKEN + "x"},
        {"protocol_version": 1, "token": TOKEN[:-1]},
        [1, TOKEN],
    ],
)
def test_a_wrong_or_missing_token_is_refused_and_closes_with_4001(
    make_connection: Make, params: Any
) -> None:
    connection = make_connection()
    received = connection.receive(request("initialize", params, 1))
    response = only(received)
    assert error_code(response) == -32001
    assert "token" in response["error"]["message"]
    assert received.close is not None
    assert received.close.code == UNAUTHORIZED_CLOSE_CODE == 4001
    assert connection.state is ConnectionState.CLOSED
    # Nothing more is read from a refused client, not even a correct initialize.
    later = connection.receive(initialize())
    assert later.messages == [] and later.calls == []


def test_the_token_is_checked_before_the_protocol_version(make_connection: Make) -> None:
    received = make_connection().receive(
        request("initialize", {"protocol_version": 2, "token": "bad"})
    )
    assert error_code(only(received)) == -32001
    assert received.close is not None


def test_without_a_configured_token_initialize_needs_none(make_connection: Make) -> None:
    connection = make_connection(token=None)
    assert "result" in only(connection.receive(initialize(token=None)))
    assert connection.state is ConnectionState.READY


def test_an_unsupported_protocol_version_names_the_supported_one(make_connection: Make) -> None:
    connection = make_connection()
    received = connection.receive(request("initialize", {"protocol_version": 2, "token": TOKEN}))
    response = only(received)
    assert error_code(response) == -32602
    assert "protocol_version 1" in response["error"]["message"]
    assert received.close is None
    assert connection.state is ConnectionState.AWAITING_INITIALIZE


def test_initialize_params_are_validated(make_connection: Make) -> None:
    response = only(
        make_connection().receive(
            request("initialize", {"protocol_version": "1", "token": TOKEN, "extra": 1})
        )
    )
    assert error_code(response) == -32602
    assert response["error"]["data"]["field"] == "protocol_version"
    assert "extra" in response["error"]["message"]


def test_a_second_initialize_is_an_invalid_request(ready: BridgeConnection) -> None:
    response = only(ready.receive(initialize(request_id=9)))
    assert error_code(response) == -32600
    assert ready.state is ConnectionState.READY


def test_startup_diagnostics_follow_the_initialize_response(make_connection: Make) -> None:
    diagnostic = {"code": "embedding_model_unavailable", "severity": "warning", "message": "m"}
    info = ServerInfo(mode="lexical", model=None, startup_diagnostics=(diagnostic,))
    connection = make_connection(server_info=info)
    first, second = decoded(connection.receive(initialize()).messages)
    assert first["result"]["mode"] == "lexical"
    assert first["result"]["model"] is None
    assert second == {"jsonrpc": "2.0", "method": "memory.diagnostic", "params": diagnostic}


def test_notifications_reach_only_initialized_connections(make_connection: Make) -> None:
    connection = make_connection()
    assert connection.notification("memory.diagnostic", {"code": "x"}) is None
    connection.receive(initialize())
    text = connection.notification("memory.diagnostic", {"code": "x"})
    assert text is not None
    assert json.loads(text) == {
        "jsonrpc": "2.0",
        "method": "memory.diagnostic",
        "params": {"code": "x"},
    }
    connection.close()
    assert connection.notification("memory.diagnostic", {"code": "x"}) is None


# -- malformed input -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "not json",
        '{"jsonrpc": "2.0", "id": 1, "method": "initialize"} trailing',
        '{"jsonrpc": "2.0", "id": NaN, "method": "x"}',
        '{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "x"}',
        "[" * 100_000 + "]" * 100_000,
        "",
    ],
)
def test_malformed_json_is_a_parse_error_with_a_null_id(ready: BridgeConnection, text: str) -> None:
    response = only(ready.receive(text))
    assert error_code(response) == -32700
    assert response["id"] is None
    assert "Traceback" not in response["error"]["message"]
    assert ready.state is ConnectionState.READY


def test_bytes_that_are_not_utf8_are_a_parse_error(ready: BridgeConnection) -> None:
    response = only(ready.receive(b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}'))
    assert error_code(response) == -32700
    assert "UTF-8" in response["error"]["message"]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("{", "InvalidJson"),
        ("", "InvalidJson"),
        ('{"jsonrpc": "2.0", "id": 1, "method": "initialize"} trailing', "InvalidJson"),
        ('{"jsonrpc": "2.0", "id": NaN, "method": "x"}', "InvalidJson"),
        ('{"jsonrpc": "2.0", "id": -Infinity, "method": "x"}', "InvalidJson"),
        ('{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "x"}', "DuplicateKey"),
        ('{"jsonrpc": "2.0", "id": 1e400, "method": "x"}', "NumberOutOfRange"),
        ('{"jsonrpc": "2.0", "id": ' + "9" * 400 + ', "method": "x"}', "NumberOutOfRange"),
        ("[" * 100_000 + "]" * 100_000, "NestedTooDeeply"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', "InvalidUtf8"),
    ],
)
def test_a_parse_error_carries_data_whose_kind_names_the_failure(
    ready: BridgeConnection, text: str | bytes, kind: str
) -> None:
    error = only(ready.receive(text))["error"]
    assert error["code"] == -32700
    assert error["data"] == {"kind": kind}
    assert kind in PARSE_ERROR_KINDS


def test_utf8_bytes_are_accepted_like_text(ready: BridgeConnection) -> None:
    received = ready.receive(request("memory.status", {"session_id": "sauvegarde-é"}).encode())
    (call,) = received.calls
    assert isinstance(call.params, StatusParams)
    assert call.params.session_id == "sauvegarde-é"


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ("5", None),
        ('"initialize"', None),
        ("null", None),
        ('{"id": 4, "method": "memory.status"}', 4),
        ('{"jsonrpc": "1.0", "id": 4, "method": "memory.status"}', 4),
        ('{"jsonrpc": "2.0", "id": "a", "method": 17}', "a"),
        ('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "memory.status"}', None),
        ('{"jsonrpc": "2.0", "id": true, "method": "memory.status"}', None),
        ('{"jsonrpc": "2.0", "id": 4, "method": "memory.status", "param": {}}', 4),
        ('{"jsonrpc": "2.0", "method": 5}', None),
    ],
)
def test_invalid_request_shapes_are_invalid_requests(
    ready: BridgeConnection, message: str, expected_id: Any
) -> None:
    response = only(ready.receive(message))
    assert error_code(response) == -32600
    assert response["id"] == expected_id


def test_params_that_are_not_an_object_are_invalid_params(ready: BridgeConnection) -> None:
    response = only(ready.receive(request("memory.status", ["save-1"])))
    assert error_code(response) == -32602
    assert response["error"]["data"]["field"] == "params"


def test_an_unknown_method_is_method_not_found(ready: BridgeConnection) -> None:
    response = only(ready.receive(request("memory.teleport", {})))
    assert error_code(response) == -32601
    assert "memory.recall" in response["error"]["message"]


def test_ids_of_every_json_type_are_echoed(ready: BridgeConnection) -> None:
    for request_id in ["abc", 12, 1.5, None]:
        (call,) = ready.receive(request("memory.migrate", {}, request_id)).calls
        (text,) = ready.complete(call, {"done": True})
        assert json.loads(text)["id"] == request_id


# -- size limits -----------------------------------------------------------------------


def test_a_message_over_one_mebibyte_is_refused_without_being_parsed(
    ready: BridgeConnection,
) -> None:
    # Not JSON at all: a parse error would prove the server tried to read it.
    response = only(ready.receive("x" * (1_048_576 + 1)))
    assert error_code(response) == -32600
    assert response["error"]["data"]["bound"] == "maximum_message_bytes"
    assert "1,048,576" in response["error"]["message"]


def test_the_size_cap_counts_utf8_bytes_not_characters(ready: BridgeConnection) -> None:
    text = "é" * (1_048_576 // 2 + 1)  # fewer characters than the cap, more bytes
    assert len(text) < 1_048_576 < len(text.encode())
    assert error_code(only(ready.receive(text))) == -32600


def test_a_message_of_exactly_the_cap_is_read(ready: BridgeConnection) -> None:
    base = request("memory.status", {"session_id": "s"}, 1)
    padded = base[:-1] + " " * (1_048_576 - len(base)) + "}"
    assert len(padded.encode()) == 1_048_576
    assert len(ready.receive(padded).calls) == 1


def test_oversized_news_from_a_transport_is_an_invalid_request(ready: BridgeConnection) -> None:
    response = only(ready.receive_oversized(5_000_000))
    assert error_code(response) == -32600
    assert "5,000,000" in response["error"]["message"]


def test_a_binary_frame_is_refused_and_the_connection_stays(ready: BridgeConnection) -> None:
    response = only(ready.receive_binary(10))
    assert error_code(response) == -32600
    assert "text frames" in response["error"]["message"]
    assert ready.state is ConnectionState.READY


def test_a_response_over_the_cap_becomes_a_capacity_error(make_connection: Make) -> None:
    connection = make_connection(limits=BridgeLimits(maximum_response_bytes=1_000))
    connection.receive(initialize())
    (call,) = connection.receive(request("memory.migrate", {}, 5)).calls
    (text,) = connection.complete(call, {"blob": "x" * 2_000})
    response = json.loads(text)
    assert response["id"] == 5
    assert error_code(response) == -32003
    assert response["error"]["data"]["bound"] == "maximum_response_bytes"


# -- batches ---------------------------------------------------------------------------


def batch(*messages: str) -> str:
    return "[" + ",".join(messages) + "]"


def test_a_batch_answers_in_one_array_in_request_order(ready: BridgeConnection) -> None:
    received = ready.receive(
        batch(
            request("memory.status", {"session_id": "a"}, 1),
            request("memory.nothing", {}, 2),
            request("memory.status", {"session_id": "b"}, 3),
            request("memory.status", {"session_id": "c"}, NOTIFY),
            "17",
        )
    )
    assert received.messages == []  # held until every call of the batch has finished
    first, second, third = received.calls
    assert third.is_notification
    assert ready.complete(second, {"n": 3}) == []
    assert ready.complete(third, {"ignored": True}) == []
    (text,) = ready.complete(first, {"n": 1})
    responses = json.loads(text)
    assert [response["id"] for response in responses] == [1, 2, 3, None]
    assert responses[0]["result"] == {"n": 1}
    assert error_code(responses[1]) == -32601
    assert responses[2]["result"] == {"n": 3}
    assert error_code(responses[3]) == -32600


def test_a_batch_without_calls_is_answered_at_once(ready: BridgeConnection) -> None:
    (text,) = ready.receive(batch(request("memory.nothing", {}, 1), "[]")).messages
    assert [error_code(response) for response in json.loads(text)] == [-32601, -32600]


def test_a_batch_of_notifications_gets_no_response(ready: BridgeConnection) -> None:
    received = ready.receive(
        batch(request("memory.nothing", {}, NOTIFY), request("memory.migrate", {}, NOTIFY))
    )
    assert received.messages == []
    (call,) = received.calls
    assert ready.complete(call, {}) == []


def test_an_empty_batch_is_one_invalid_request(ready: BridgeConnection) -> None:
    response = only(ready.receive("[]"))
    assert error_code(response) == -32600


def test_a_batch_over_64_entries_is_refused_whole(ready: BridgeConnection) -> None:
    entries = [request("memory.status", {"session_id": "s"}, i) for i in range(65)]
    response = only(ready.receive(batch(*entries)))
    assert error_code(response) == -32600
    assert response["error"]["data"]["bound"] == "maximum_batch_entries"
    assert len(ready.receive(batch(*entries[:64])).calls) == 64


def test_initialize_inside_a_batch_authorizes_what_follows(make_connection: Make) -> None:
    diagnostic = {"code": "embedding_model_unavailable", "severity": "warning", "message": "m"}
    connection = make_connection(
        server_info=ServerInfo(mode="lexical", model=None, startup_diagnostics=(diagnostic,))
    )
    received = connection.receive(batch(initialize(), request("memory.migrate", {}, 2)))
    (call,) = received.calls
    assert call.request_id == 2
    batch_text, notice = connection.complete(call, {"ok": True})
    responses = json.loads(batch_text)
    assert responses[0]["result"]["protocol_version"] == 1
    assert responses[1]["result"] == {"ok": True}
    assert json.loads(notice)["method"] == "memory.diagnostic"


def test_a_request_before_initialize_in_a_batch_refuses_the_batch_and_closes(
    make_connection: Make,
) -> None:
    connection = make_connection()
    received = connection.receive(
        batch(request("memory.migrate", {}, 1), initialize(), request("memory.migrate", {}, 2))
    )
    assert received.calls == [] and received.close is not None
    responses = json.loads(only_text(received))
    assert [error_code(response) for response in responses] == [-32001, -32001, -32001]
    assert connection.state is ConnectionState.CLOSED


def test_a_batch_response_over_the_cap_replaces_the_largest_entries(make_connection: Make) -> None:
    connection = make_connection(limits=BridgeLimits(maximum_response_bytes=3_000))
    connection.receive(initialize())
    calls = connection.receive(batch(*(request("memory.migrate", {}, i) for i in range(3)))).calls
    connection.complete(calls[0], {"blob": "a" * 1_400})
    connection.complete(calls[1], {"blob": "b" * 10})
    (text,) = connection.complete(calls[2], {"blob": "c" * 1_500})
    assert len(text) <= 3_000
    responses = json.loads(text)
    assert responses[0]["result"]["blob"] == "a" * 1_400
    assert responses[1]["result"]["blob"] == "b" * 10
    assert error_code(responses[2]) == -32003


# -- client notifications --------------------------------------------------------------


def test_client_notifications_run_but_get_no_response_even_on_error(
    ready: BridgeConnection,
) -> None:
    assert ready.receive(request("memory.nothing", {}, NOTIFY)).messages == []
    assert ready.receive(request("memory.status", {"bad": 1}, NOTIFY)).messages == []
    received = ready.receive(request("memory.migrate", {}, NOTIFY))
    (call,) = received.calls
    assert received.messages == []
    assert call.is_notification
    assert ready.fail(call, StoreBusyError("busy")) == []
    assert ready.in_flight == 0


def test_an_initialize_notification_initializes_silently(make_connection: Make) -> None:
    connection = make_connection()
    received = connection.receive(
        request("initialize", {"protocol_version": 1, "token": TOKEN}, NOTIFY)
    )
    assert received.messages == []
    assert connection.state is ConnectionState.READY


# -- params ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("memory.remember", remember_params(owner_id=None), "owner_id"),
        ("memory.remember", {k: v for k, v in remember_params().items() if k != "text"}, "text"),
        ("memory.remember", remember_params(moment={"timeline_id": "main"}), "moment.tick"),
        ("memory.remember", remember_params(kind="dream"), "kind"),
        ("memory.remember", remember_params(importance=1.5), "importance"),
        ("memory.remember", remember_params(importance="0.5"), "importance"),
        ("memory.remember", remember_params(tags="one-tag"), "tags"),
        ("memory.remember", remember_params(metadata={"k": 1}), "metadata.k"),
        ("memory.remember", remember_params(colour="red"), "colour"),
        ("memory.recall", {"session_id": "s", "limit": 101}, "limit"),
        ("memory.recall", {"session_id": "s", "limit": 2.5}, "limit"),
        ("memory.recall", {"session_id": "s", "limit": "8"}, "limit"),
        ("memory.recall", {"session_id": "s", "limit": True}, "limit"),
        ("memory.recall", {"session_id": "s", "require_semantic": "yes"}, "require_semantic"),
        ("memory.recall", {"session_id": "s", "kinds": ["event", "nope"]}, "kinds.1"),
        ("memory.recall", {"session_id": "s", "at_or_before": {"tick": 1}}, "at_or_before"),
        ("memory.recall", {"session_id": ""}, "session_id"),
        ("memory.recall", {}, "session_id"),
        ("memory.recall_many", {"queries": []}, "queries"),
        ("memory.recall_many", {"queries": [{"session_id": "s"}] * 65}, "queries"),
        ("memory.recall_many", {"queries": "s"}, "queries"),
        ("memory.recall_many", {"queries": None}, "queries"),
        ("memory.status", {}, "session_id"),
        ("memory.rebuild", {"session_id": "s", "force": 1}, "force"),
        ("memory.migrate", {"session_id": "s"}, "session_id"),
    ],
)
def test_params_are_validated_and_the_error_names_the_field(
    ready: BridgeConnection, method: str, params: dict[str, Any], field: str
) -> None:
    response = only(ready.receive(request(method, params, 11)))
    assert error_code(response) == -32602, response
    assert response["id"] == 11
    assert response["error"]["data"]["field"].startswith(field)
    assert field.split(".")[0] in response["error"]["message"]
    assert ready.in_flight == 0


def test_recall_many_queries_that_are_not_objects_are_left_to_their_own_entries(
    ready: BridgeConnection,
) -> None:
    # Each query is validated on its own (docs/protocol.md): a bad one fails only itself.
    queries = [{"session_id": "s"}, 5, None, "s", [1], True]
    (call,) = ready.receive(request("memory.recall_many", {"queries": queries})).calls
    assert isinstance(call.params, RecallManyParams)
    assert list(call.params.queries) == queries


def nested(depth: int, shape: str = "dict") -> Any:
    """A JSON value ``depth`` containers deep (``depth`` levels, as the limit counts them)."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value} if shape == "dict" else [value]
    return value


@pytest.mark.parametrize("shape", ["dict", "list"])
@pytest.mark.parametrize("depth", [129, 200, 255, 256, 300, 600])
def test_a_payload_nested_past_128_levels_gets_the_limit_message_naming_payload(
    ready: BridgeConnection, depth: int, shape: str
) -> None:
    response = only(
        ready.receive(request("memory.remember", remember_params(payload=nested(depth, shape))))
    )
    error = response["error"]
    assert error["code"] == -32602
    assert error["data"] == {"kind": "ValidationError", "field": "payload"}
    assert error["message"] == (
        "invalid params for memory.remember: payload: nested deeper than 128 levels; fix the "
        "named parameter and send the request again"
    )


@pytest.mark.parametrize("depth", [129, 300, 600])
def test_a_deep_payload_in_a_batch_entry_names_the_entry_payload(
    ready: BridgeConnection, depth: int
) -> None:
    memories = [remember_params(), remember_params(text="two", payload=nested(depth))]
    response = only(ready.receive(request("memory.remember_many", {"memories": memories})))
    assert response["error"]["data"] == {"kind": "ValidationError", "field": "memories.1.payload"}
    assert "memories.1.payload: nested deeper than 128 levels" in response["error"]["message"]


@pytest.mark.parametrize("shape", ["dict", "list"])
def test_a_payload_nested_exactly_128_levels_is_accepted(
    ready: BridgeConnection, shape: str
) -> None:
    payload = nested(128, shape)
    (call,) = ready.receive(request("memory.remember", remember_params(payload=payload))).calls
    assert call.params.payload == payload  # type: ignore[attr-defined]
    memories = [remember_params(), remember_params(text="two", payload=payload)]
    (call,) = ready.receive(request("memory.remember_many", {"memories": memories}, 2)).calls
    assert isinstance(call.params, RememberManyParams)
    assert call.params.memories[1].payload == payload


@pytest.mark.parametrize(
    ("expires_at", "reason"),
    [
        ({"timeline_id": "main", "tick": 99}, "expires_at: must not be before moment"),
        ({"timeline_id": "other", "tick": 500}, "expires_at: must be on the same timeline"),
    ],
)
def test_an_invalid_expiry_names_expires_at(
    ready: BridgeConnection, expires_at: dict[str, Any], reason: str
) -> None:
    response = only(
        ready.receive(request("memory.remember", remember_params(expires_at=expires_at)))
    )
    assert response["error"]["code"] == -32602
    assert response["error"]["data"] == {"kind": "ValidationError", "field": "expires_at"}
    assert response["error"]["message"].startswith(f"invalid params for memory.remember: {reason}")
    memories = [remember_params(), remember_params(text="two", expires_at=expires_at)]
    response = only(ready.receive(request("memory.remember_many", {"memories": memories})))
    assert response["error"]["data"] == {
        "kind": "ValidationError",
        "field": "memories.1.expires_at",
    }
    assert f"memories.1.{reason}" in response["error"]["message"]


def test_an_expiry_at_the_moment_itself_is_accepted(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.remember", remember_params(expires_at=MOMENT))).calls
    assert call.params.expires_at.tick == MOMENT["tick"]  # type: ignore[attr-defined]


def test_whole_floats_are_accepted_where_integers_are_expected(ready: BridgeConnection) -> None:
    # Godot's JSON parser turns every number into a float.
    (call,) = ready.receive(
        request("memory.recall", {"session_id": "s", "limit": 8.0, "kinds": ["Fact"]})
    ).calls
    assert isinstance(call.params, RecallParams)
    assert call.params.limit == 8
    assert call.params.kinds[0].value == "fact"


def test_recall_defaults_match_the_protocol(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.recall", {"session_id": "s"})).calls
    params = call.params
    assert isinstance(params, RecallParams)
    assert (params.limit, params.minimum_importance, params.require_semantic) == (8, 0.0, False)
    assert params.owner_id is None and params.text is None and params.at_or_before is None


# -- in flight, shutdown, completion ---------------------------------------------------


def test_more_than_64_calls_in_flight_are_refused_as_busy(ready: BridgeConnection) -> None:
    calls = []
    for i in range(64):
        calls.extend(ready.receive(request("memory.status", {"session_id": "s"}, i)).calls)
    assert ready.in_flight == 64
    response = only(ready.receive(request("memory.status", {"session_id": "s"}, 64)))
    assert error_code(response) == -32007
    assert response["error"]["data"]["bound"] == "maximum_in_flight"
    ready.complete(calls[0], {})
    assert len(ready.receive(request("memory.status", {"session_id": "s"}, 65)).calls) == 1


def test_after_shutdown_begins_new_calls_are_refused(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {}, 1)).calls
    ready.begin_shutdown()
    response = only(ready.receive(request("memory.migrate", {}, 2)))
    assert error_code(response) == -32009
    (text,) = ready.complete(call, {"ok": True})
    assert json.loads(text)["result"] == {"ok": True}


def test_a_call_cannot_be_finished_twice(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {})).calls
    ready.complete(call, {})
    with pytest.raises(RuntimeError, match="already finished"):
        ready.fail(call, RuntimeError("again"))


def test_output_for_a_closed_connection_is_dropped(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {})).calls
    ready.close()
    assert ready.complete(call, {}) == []
    assert ready.in_flight == 0
    assert ready.receive(request("memory.migrate", {})).messages == []


def test_an_unexpected_failure_is_an_internal_error_without_details(
    ready: BridgeConnection, caplog: pytest.LogCaptureFixture
) -> None:
    (call,) = ready.receive(request("memory.migrate", {}, 4)).calls
    (text,) = ready.fail(call, KeyError("secret/path/on/disk"))
    response = json.loads(text)
    assert error_code(response) == -32603
    assert "secret" not in text
    assert "KeyError" in caplog.text  # the traceback goes to the log (stderr), not the client


def test_a_result_that_is_not_json_becomes_an_internal_error(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {}, 4)).calls
    (text,) = ready.complete(call, {"score": float("nan")})
    assert error_code(json.loads(text)) == -32603


def test_a_bridge_error_is_sent_as_it_is(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {}, 4)).calls
    (text,) = ready.fail(call, RpcError(ErrorCode.TIMEOUT, "too slow", {"kind": "X"}))
    assert json.loads(text)["error"] == {
        "code": -32008,
        "message": "too slow",
        "data": {"kind": "X"},
    }


def test_a_lone_surrogate_in_a_response_is_escaped_not_fatal(ready: BridgeConnection) -> None:
    (call,) = ready.receive(request("memory.migrate", {}, 4)).calls
    (text,) = ready.complete(call, {"text": "bad \ud800 char", "ok": "é"})
    text.encode("utf-8")
    assert json.loads(text)["result"]["ok"] == "é"


@pytest.mark.parametrize("digits", [310, 400, 5_000])
def test_an_integer_beyond_a_float_is_a_parse_error_without_python_advice(
    ready: BridgeConnection, digits: int
) -> None:
    huge = "9" * digits
    params = '{"session_id": "s", "limit": 1, "x": ' + huge + "}"
    line = '{"jsonrpc": "2.0", "id": 1, "method": "memory.recall", "params": ' + params + "}"
    response = only(ready.receive(line))
    assert response["id"] is None and response["error"]["code"] == -32700
    message = response["error"]["message"]
    assert "out of range (beyond a 64-bit float" in message and f"{digits:,} digits" in message
    assert "sys." not in message and "set_int_max_str_digits" not in message


def test_an_integer_beyond_a_float_inside_a_payload_is_refused(ready: BridgeConnection) -> None:
    payload = '{"big": -' + "2" * 309 + "}"  # 309 digits, yet over 1.8e308
    params = remember_params()
    text = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "memory.remember", "params": params})
    line = text[:-2] + ', "payload": ' + payload + "}}"
    response = only(ready.receive(line))
    assert response["error"]["code"] == -32700


def test_a_large_integer_a_float_can_hold_is_kept_exact(ready: BridgeConnection) -> None:
    exact = 2**80 + 1
    line = request("memory.remember", {**remember_params(), "payload": {"n": exact}})
    (call,) = ready.receive(line).calls
    assert call.params.payload == {"n": exact}  # type: ignore[attr-defined]
