"""Whatever a client sends, the core answers with valid JSON and never raises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory.bridge.protocol import BridgeConnection, ServerInfo

from .conftest import TOKEN, initialize

INFO = ServerInfo(mode="lexical", model=None)
METHODS = st.sampled_from(
    [
        "initialize",
        "memory.remember",
        "memory.recall",
        "memory.recall_many",
        "memory.status",
        "memory.rebuild",
        "memory.migrate",
        "other",
    ]
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
REQUESTS = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": METHODS},
    optional={"id": st.none() | st.integers() | st.text(max_size=8), "params": JSON},
)


def check(connection: BridgeConnection, data: str | bytes) -> None:
    received = connection.receive(data)
    for message in received.messages:
        value: Any = json.loads(message)
        assert isinstance(value, dict | list)
    for call in received.calls:
        for message in connection.complete(call, {"ok": True}):
            json.loads(message)
    assert connection.in_flight == 0


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON.map(json.dumps), st.text(max_size=200), st.binary(max_size=200)))
def test_arbitrary_input_is_answered_with_json(data: str | bytes) -> None:
    connection = BridgeConnection(INFO, token=TOKEN)
    connection.receive(initialize())
    check(connection, data)


@settings(max_examples=300, deadline=None)
@given(st.lists(REQUESTS, min_size=1, max_size=5), st.booleans(), st.booleans())
def test_arbitrary_requests_and_batches_are_answered_with_json(
    requests: list[dict[str, Any]], as_batch: bool, initialized: bool
) -> None:
    connection = BridgeConnection(INFO, token=TOKEN)
    if initialized:
        connection.receive(initialize())
    if as_batch:
        check(connection, json.dumps(requests))
    else:
        for request in requests:
            check(connection, json.dumps(request))
