"""Fuzzing the transports: whatever a client sends over stdio or a WebSocket, every message
the server writes is one valid JSON-RPC message, nothing is left unanswered for a request
that had an id, and the server never fails (no dead task, no close code 1011).

Numbers out of range are part of the input on purpose: ``1e400``, 400-digit integers and
fractions, anywhere (ids, params, nested payloads).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer
from game_memory.bridge.stdio import StdioTransport
from game_memory.bridge.websocket import WebSocketTransport

from .conftest import TOKEN, FakeService

INFO = ServerInfo(mode="lexical", model=None)
METHODS = [
    "initialize",
    "memory.remember",
    "memory.recall",
    "memory.recall_many",
    "memory.status",
    "memory.rebuild",
    "memory.migrate",
    "nope",
]
#: Numeric literals JSON allows and a 64-bit float does not hold (or barely does).
HUGE = st.sampled_from(
    ["1e400", "-1e999", "1" + "0" * 400, "-" + "9" * 400, "1" + "0" * 400 + ".5", "1e308", "2e-400"]
)


SCALARS = st.one_of(
    st.none().map(json.dumps),
    st.booleans().map(json.dumps),
    st.integers().map(json.dumps),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.text(max_size=20).map(json.dumps),
    HUGE,
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.dictionaries(st.text(max_size=10), children, max_size=4).map(
            lambda pairs: "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs.items()) + "}"
        ),
    ),
    max_leaves=12,
)
NUMBERS = st.one_of(st.integers().map(json.dumps), st.floats(allow_nan=False).map(json.dumps), HUGE)


@st.composite
def method_params(draw: st.DrawFn) -> str:
    """Params shaped like the methods', with numbers out of range where numbers go."""
    fields = {
        "session_id": draw(st.one_of(st.text(max_size=8).map(json.dumps), HUGE)),
        "owner_id": draw(st.text(max_size=8).map(json.dumps)),
        "text": draw(st.text(max_size=30).map(json.dumps)),
        "limit": draw(NUMBERS),
        "importance": draw(NUMBERS),
        "moment": '{"timeline_id":"w","tick":' + draw(NUMBERS) + "}",
        "protocol_version": draw(NUMBERS),
        "payload": draw(VALUES),
    }
    chosen = draw(st.sets(st.sampled_from(sorted(fields))))
    return "{" + ",".join(f"{json.dumps(k)}:{fields[k]}" for k in sorted(chosen)) + "}"


PARAMS = st.one_of(VALUES, method_params())


@st.composite
def requests(draw: st.DrawFn) -> str:
    """One request object as JSON text, its id and params possibly out of range."""
    parts = ['"jsonrpc":"2.0"', f'"method":{json.dumps(draw(st.sampled_from(METHODS)))}']
    if draw(st.booleans()):
        parts.append(f'"id":{draw(st.one_of(SCALARS, HUGE))}')
    if draw(st.booleans()):
        parts.append(f'"params":{draw(PARAMS)}')
    return "{" + ",".join(draw(st.permutations(parts))) + "}"


MESSAGES = st.one_of(
    requests(),
    st.lists(requests(), min_size=0, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
    VALUES,
    st.text(max_size=60),
)
INITIALIZE = json.dumps(
    {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocol_version": 1}}
)


def check_output(lines: list[bytes]) -> list[Any]:
    """Every line the server wrote is one JSON-RPC message (or batch); return them."""
    decoded: list[Any] = []
    for line in lines:
        value = json.loads(line)
        entries = value if isinstance(value, list) else [value]
        for entry in entries:
            assert entry["jsonrpc"] == "2.0"
            assert ("result" in entry) != ("error" in entry) or "method" in entry
            if "error" in entry:
                assert entry["error"]["code"] != -32603, entry  # no internal error
        decoded.append(value)
    return decoded


async def stdio_session(chunks: list[bytes]) -> list[bytes]:
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    server = BridgeServer(FakeService(), INFO, BridgeLimits(maximum_message_bytes=4_096))
    transport = StdioTransport(server, input_fd=server_in, output_fd=server_out)
    output: list[bytes] = []

    def drain() -> None:
        while chunk := os.read(client_in, 65_536):
            output.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    task = asyncio.create_task(transport.run())
    try:
        for chunk in chunks:
            await asyncio.to_thread(os.write, client_out, chunk)
        os.close(client_out)
        await asyncio.wait_for(task, 30)
        await server.shutdown()
        await transport.aclose()
    finally:
        os.close(server_out)
        await asyncio.to_thread(reader.join, 30)
        os.close(server_in)
        os.close(client_in)
    assert task.exception() is None
    return [line for line in b"".join(output).split(b"\n") if line]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.booleans(),
    st.lists(
        st.one_of(
            MESSAGES.map(lambda text: text.encode("utf-8", "surrogatepass") + b"\n"),
            st.binary(max_size=40),
            st.just(b"\r\n"),
            st.just(b"x" * 5_000 + b"\n"),
        ),
        max_size=6,
    ),
)
def test_stdio_answers_anything_with_json_rpc_and_never_fails(
    initialized: bool, chunks: list[bytes]
) -> None:
    sent = ([INITIALIZE.encode() + b"\n"] if initialized else []) + chunks
    lines = asyncio.run(stdio_session(sent))
    check_output(lines)


async def websocket_session(frames: list[str | bytes], initialized: bool) -> tuple[list[Any], int]:
    server = BridgeServer(FakeService(), INFO, BridgeLimits(maximum_message_bytes=4_096))
    transport = WebSocketTransport(server, TOKEN)
    url = await transport.start("127.0.0.1", 0)
    received: list[str | bytes] = []
    code = 1000
    try:
        async with connect(url, max_size=None) as client:
            if initialized:
                params = {"protocol_version": 1, "token": TOKEN}
                await client.send(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
                    )
                )
            try:
                for frame in frames:
                    await client.send(frame)
                while True:
                    async with asyncio.timeout(0.3):
                        received.append(await client.recv())
            except TimeoutError:
                pass
            except ConnectionClosed:
                pass
            code = client.close_code or 1000
    finally:
        await server.shutdown()
        await transport.aclose()
    lines = [item if isinstance(item, bytes) else item.encode() for item in received]
    return check_output(lines), code


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.booleans(),
    st.lists(st.one_of(MESSAGES, st.binary(max_size=30), st.just("y" * 5_000)), max_size=5),
)
def test_websocket_answers_anything_with_json_rpc_and_never_fails(
    initialized: bool, frames: list[str | bytes]
) -> None:
    _, code = asyncio.run(websocket_session(frames, initialized))
    assert code in (1000, 1001, 1009, 4001), code  # never 1011 (an internal error)


def test_an_id_that_overflows_a_float_is_answered_over_the_websocket() -> None:
    frames: list[str | bytes] = [
        '{"jsonrpc":"2.0","id":1e400,"method":"memory.status","params":{"session_id":"s"}}',
        '{"jsonrpc":"2.0","id":1' + "0" * 400 + ',"method":"memory.status","params":{}}',
        '{"jsonrpc":"2.0","id":1' + "0" * 20 + ',"method":"memory.status","params":{}}',
        '{"jsonrpc":"2.0","id":7,"method":"memory.status","params":{"session_id":"s"}}',
    ]
    answers, code = asyncio.run(websocket_session(frames, initialized=True))
    codes = [a.get("error", {}).get("code") for a in answers[1:]]
    # Beyond a float anywhere (1e400, a 401-digit integer) is -32700; beyond 2^53, -32600.
    assert codes == [-32700, -32700, -32600, None] and answers[-1]["id"] == 7
    assert "out of range" in answers[1]["error"]["message"]
    assert code == 1000
