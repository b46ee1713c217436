"""The WebSocket transport on real loopback sockets, over the fake service."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from game_memory.bridge import websocket
from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer
from game_memory.bridge.websocket import WebSocketTransport, check_loopback

from .conftest import TOKEN, FakeService, initialize, remember_params, request
from .test_response_budget import big_memory

INFO = ServerInfo(mode="hybrid", model="hashing/feature-hashing-words@v1:256")


@asynccontextmanager
async def serving(
    service: FakeService, limits: BridgeLimits | None = None
) -> AsyncIterator[tuple[str, BridgeServer, WebSocketTransport]]:
    server = BridgeServer(service, INFO, limits or BridgeLimits())
    transport = WebSocketTransport(server, TOKEN)
    url = await transport.start("127.0.0.1", 0)
    try:
        yield url, server, transport
    finally:
        await server.shutdown()
        await transport.aclose()


async def receive(client: ClientConnection) -> Any:
    async with asyncio.timeout(5):
        return json.loads(await client.recv())


async def ask(client: ClientConnection, method: str, params: Any, request_id: Any = 1) -> Any:
    await client.send(request(method, params, request_id))
    return await receive(client)


async def closed_code(client: ClientConnection) -> int | None:
    async with asyncio.timeout(5):
        await client.wait_closed()
    assert client.close_code is not None
    return client.close_code


async def test_a_client_initializes_remembers_and_recalls() -> None:
    async with serving(FakeService()) as (url, _server, _transport):
        assert url.startswith("ws://127.0.0.1:")
        async with connect(url) as client:
            response = await ask(client, "initialize", {"protocol_version": 1, "token": TOKEN}, 0)
            assert response["result"]["mode"] == "hybrid"
            remembered = await ask(client, "memory.remember", remember_params())
            assert remembered["result"]["created"] is True
            recalled = await ask(client, "memory.recall", {"session_id": "save-1"}, 2)
            assert len(recalled["result"]["memories"]) == 1


@pytest.mark.parametrize("token", ["wrong", None])
async def test_a_wrong_or_missing_token_gets_an_error_then_close_4001(token: str | None) -> None:
    service = FakeService()
    async with serving(service) as (url, _server, _transport), connect(url) as client:
        await client.send(initialize(token=token))
        response = await receive(client)
        assert response["error"]["code"] == -32001
        with pytest.raises(ConnectionClosed):
            await client.send(request("memory.recall", {"session_id": "save-1"}))
            await client.recv()
        assert await closed_code(client) == 4001
    assert service.calls == []  # no memory was read


async def test_a_request_before_initialize_is_refused_and_closes_with_4001() -> None:
    service = FakeService()
    async with serving(service) as (url, _server, _transport), connect(url) as client:
        refused = await ask(client, "memory.status", {"session_id": "s"})
        assert refused["error"]["code"] == -32001
        assert "initialize first" in refused["error"]["message"]
        assert await closed_code(client) == 4001
    assert service.calls == []


async def test_a_binary_frame_is_refused_and_the_connection_stays() -> None:
    async with serving(FakeService()) as (url, _server, _transport), connect(url) as client:
        await client.send(initialize())
        await receive(client)
        await client.send(b'{"jsonrpc": "2.0", "id": 1, "method": "memory.migrate"}')
        refused = await receive(client)
        assert refused["error"]["code"] == -32600 and refused["id"] is None
        assert "result" in await ask(client, "memory.status", {"session_id": "s"}, 2)


async def test_a_frame_over_one_mebibyte_closes_the_connection_with_1009() -> None:
    async with serving(FakeService()) as (url, _server, _transport):
        async with connect(url, max_size=None) as client:
            await client.send(initialize())
            await receive(client)
            await client.send("x" * (1_048_576 + 1))
            assert await closed_code(client) == 1009
        async with connect(url) as other:  # the server and other clients carry on
            await other.send(initialize())
            assert "result" in await receive(other)


async def test_a_frame_of_exactly_one_mebibyte_is_read() -> None:
    async with (
        serving(FakeService()) as (url, _server, _transport),
        connect(url, max_size=None) as client,
    ):
        await client.send(initialize())
        await receive(client)
        base = request("memory.status", {"session_id": "s"}, 1)
        await client.send(base[:-1] + " " * (1_048_576 - len(base)) + "}")
        assert "result" in await receive(client)


async def test_a_client_that_never_initializes_is_closed_after_the_deadline() -> None:
    limits = BridgeLimits(initialize_timeout_seconds=0.1)
    async with serving(FakeService(), limits) as (url, _server, _transport), connect(url) as c:
        assert await closed_code(c) == 4001


async def test_connections_over_the_limit_are_refused_with_503() -> None:
    async with serving(FakeService(), BridgeLimits(maximum_connections=2)) as (url, _s, _t):
        async with connect(url), connect(url):
            with pytest.raises(InvalidStatus) as caught:
                async with connect(url):
                    pass
            assert caught.value.response.status_code == 503
        async with connect(url) as client:  # room again once they left
            await client.send(initialize())
            assert "result" in await receive(client)


async def test_twenty_clients_times_twenty_requests_never_mix_up() -> None:
    service = FakeService()

    async def client_run(number: int, url: str) -> None:
        async with connect(url) as client:
            await client.send(initialize())
            await receive(client)
            for step in range(20):
                text = f"client {number} step {step}"
                params = remember_params(owner_id=f"npc-{number}", text=text)
                await client.send(request("memory.remember", params, f"{number}-r{step}"))
                await client.send(
                    request(
                        "memory.recall",
                        {"session_id": "save-1", "owner_id": f"npc-{number}", "limit": 100},
                        f"{number}-q{step}",
                    )
                )
            seen: dict[str, Any] = {}
            while len(seen) < 40:
                message = await receive(client)
                seen[message["id"]] = message
            for step in range(20):
                remembered = seen[f"{number}-r{step}"]["result"]
                assert remembered["memory"]["owner_id"] == f"npc-{number}"
                assert remembered["memory"]["text"] == f"client {number} step {step}"
                recalled = seen[f"{number}-q{step}"]["result"]["memories"]
                assert {memory["owner_id"] for memory in recalled} <= {f"npc-{number}"}

    async with serving(service) as (url, _server, _transport):
        await asyncio.gather(*(client_run(number, url) for number in range(20)))
    assert len(service.memories) == 400


async def test_shutdown_sends_queued_responses_then_closes_with_1001() -> None:
    gate = asyncio.Event()
    service = FakeService(gate=gate)
    server = BridgeServer(service, INFO, BridgeLimits(shutdown_grace_seconds=5))
    transport = WebSocketTransport(server, TOKEN)
    url = await transport.start("127.0.0.1", 0)
    async with connect(url) as client:
        await client.send(initialize())
        await receive(client)
        await client.send(request("memory.migrate", {}, 1))
        await asyncio.sleep(0.05)
        stopping = asyncio.create_task(server.shutdown())
        await asyncio.sleep(0.05)
        gate.set()
        await stopping
        await transport.aclose()
        assert (await receive(client))["result"]["migrated_entries"] == 2
        assert await closed_code(client) == 1001


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.0.0.2", "::1", "[::1]"])
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert check_loopback(host) in {"127.0.0.1", "127.0.0.2", "::1"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "example.com", ""])
def test_other_hosts_are_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        check_loopback(host)


async def test_starting_on_a_public_address_binds_nothing() -> None:
    transport = WebSocketTransport(BridgeServer(FakeService(), INFO), TOKEN)
    with pytest.raises(ValueError, match="loopback"):
        await transport.start("0.0.0.0", 0)
    await transport.aclose()


async def test_shutdown_ends_in_bounded_time_when_a_client_stopped_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(websocket, "_FLUSH_SECONDS", 0.2)
    monkeypatch.setattr(websocket, "_CLOSE_SECONDS", 0.2, raising=False)
    # Answers of about 4 MB each: twelve are far more than the socket buffers hold.
    service = FakeService(memories=[big_memory(number, 990_000) for number in range(2)])
    limits = BridgeLimits(shutdown_grace_seconds=0.1)
    server = BridgeServer(service, INFO, limits)
    transport = WebSocketTransport(server, TOKEN)
    url = await transport.start("127.0.0.1", 0)
    frozen = await connect(url, max_size=None, max_queue=1)
    reader = await connect(url)
    try:
        await frozen.send(initialize())
        await receive(frozen)
        await reader.send(initialize())
        await receive(reader)
        frozen.transport.pause_reading()  # a stopped process: it never reads again
        for number in range(12):
            await frozen.send(request("memory.recall", {"session_id": "s", "limit": 2}, number))
        await asyncio.sleep(0.5)
        async with asyncio.timeout(15):
            await server.shutdown()
            await transport.aclose()
        assert await closed_code(reader) == 1001  # a client that reads is closed properly
        assert len(service.memories) == 2
    finally:
        frozen.transport.abort()
        reader.transport.abort()
