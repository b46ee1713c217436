"""The stdio transport on real pipes, in-process, over the fake service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer
from game_memory.bridge.stdio import StdioTransport

from .conftest import FakeService, initialize, remember_params, request

INFO = ServerInfo(mode="lexical", model=None)


class Pipes:
    """The client's ends: write requests, read responses line by line."""

    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd = write_fd
        self.read_fd = read_fd
        self.buffer = b""

    def send(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode() + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def close_input(self) -> None:
        os.close(self.write_fd)

    async def line(self) -> Any:
        while b"\n" not in self.buffer:
            chunk = await asyncio.wait_for(asyncio.to_thread(os.read, self.read_fd, 65_536), 5)
            assert chunk, "the server closed its output"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


@asynccontextmanager
async def stdio_server(
    service: FakeService, limits: BridgeLimits | None = None
) -> AsyncIterator[tuple[Pipes, asyncio.Task[None], StdioTransport, BridgeServer]]:
    server_in, client_out = os.pipe()
    client_in, server_out = os.pipe()
    server = BridgeServer(service, INFO, limits or BridgeLimits())
    transport = StdioTransport(server, input_fd=server_in, output_fd=server_out)
    task = asyncio.create_task(transport.run())
    pipes = Pipes(client_out, client_in)
    try:
        yield pipes, task, transport, server
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await server.shutdown()
        await transport.aclose()
        with contextlib.suppress(OSError):
            pipes.close_input()  # first, so the reading thread sees end of file
        for fd in (server_in, server_out, client_in):
            os.close(fd)


async def test_stdio_needs_no_token_but_initialize_first() -> None:
    async with stdio_server(FakeService()) as (pipes, _task, _transport, _server):
        pipes.send(initialize(token=None))
        assert (await pipes.line())["result"]["mode"] == "lexical"
        pipes.send(request("memory.remember", remember_params(), 2))
        assert (await pipes.line())["result"]["created"] is True


async def test_a_request_before_initialize_is_refused_and_ends_the_stdio_session() -> None:
    service = FakeService()
    async with stdio_server(service) as (pipes, task, _transport, _server):
        pipes.send(request("memory.status", {"session_id": "s"}, 1))
        assert (await pipes.line())["error"]["code"] == -32001
        await asyncio.wait_for(task, 10)  # the transport stops reading: the session is over
    assert service.calls == []


async def test_an_oversized_line_is_refused_and_the_next_line_is_served() -> None:
    async with stdio_server(FakeService()) as (pipes, _task, _transport, _server):
        pipes.send(initialize(token=None))
        await pipes.line()
        writer = asyncio.create_task(asyncio.to_thread(pipes.send, b"x" * 3_000_000 + b"\n"))
        refused = await pipes.line()
        await writer
        assert refused["error"]["code"] == -32600
        assert "3,000,000" in refused["error"]["message"]
        pipes.send(request("memory.status", {"session_id": "s"}, 5))
        assert (await pipes.line())["id"] == 5


async def test_end_of_input_ends_the_run_and_close_flushes_running_calls() -> None:
    gate = asyncio.Event()
    async with stdio_server(FakeService(gate=gate)) as (pipes, task, transport, server):
        pipes.send(initialize(token=None))
        await pipes.line()
        pipes.send(request("memory.migrate", {}, 7))
        pipes.close_input()
        await asyncio.wait_for(task, 5)
        gate.set()
        await server.shutdown()
        await transport.aclose()
        assert (await pipes.line())["result"]["migrated_entries"] == 2


async def test_an_unterminated_last_line_is_still_served() -> None:
    async with stdio_server(FakeService()) as (pipes, task, transport, server):
        pipes.send(initialize(token=None))
        await pipes.line()
        pipes.send(request("memory.migrate", {}, 8).encode())
        pipes.close_input()
        await asyncio.wait_for(task, 5)
        await server.shutdown()
        await transport.aclose()
        assert (await pipes.line())["id"] == 8


async def test_a_client_that_closes_its_end_of_stdout_ends_nothing_but_its_output() -> None:
    service = FakeService()
    async with stdio_server(service) as (pipes, task, _transport, _server):
        pipes.send(initialize(token=None))
        assert (await pipes.line())["result"]["mode"] == "lexical"
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, pipes.read_fd)  # the pipe's read end is gone: every write breaks
        os.close(devnull)
        for number in range(3):
            pipes.send(request("memory.remember", remember_params(), number + 2))
        await asyncio.sleep(0.2)
        assert not task.done()  # still reading: the requests were served, answers dropped
        pipes.close_input()
        await asyncio.wait_for(task, 10)
    assert task.exception() is None and len(service.calls) >= 1


async def test_requests_sent_after_stdout_broke_are_still_executed() -> None:
    service = FakeService()
    async with stdio_server(service) as (pipes, task, transport, _server):
        pipes.send(initialize(token=None))
        assert (await pipes.line())["result"]["mode"] == "lexical"
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, pipes.read_fd)  # the pipe's read end is gone: every write breaks
        os.close(devnull)
        pipes.send(request("memory.remember", remember_params(text="first"), 2))
        session = transport._session
        assert session is not None
        async with asyncio.timeout(5):  # its answer met the broken pipe
            while not session.outbox.closed:
                await asyncio.sleep(0.01)
        for number in range(3, 6):
            pipes.send(request("memory.remember", remember_params(text=f"later {number}"), number))
        pipes.close_input()
        await asyncio.wait_for(task, 10)
    # Writes sent after the output broke were executed all the same (answers dropped).
    assert sorted(memory.searchable_text or "" for memory in service.memories) == [
        "first",
        "later 3",
        "later 4",
        "later 5",
    ]
