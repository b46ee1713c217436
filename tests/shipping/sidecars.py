"""Talk to a sidecar (the bundled one or the installed package) over stdio or WebSocket.

Both transports go through one ``Rpc`` interface so a test can run the same remember/recall
script against the frozen bundle and against ``python -m game_memory.cli serve`` and compare
the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from websockets.asyncio.client import connect

__all__ = [
    "MEMORIES",
    "QUESTIONS",
    "Rpc",
    "installed_command",
    "recall_script",
    "scrubbed_environment",
    "started",
    "stdio_rpc",
    "websocket_rpc",
]

STARTUP_SECONDS = 120
CALL_SECONDS = 60

#: What the NPCs saw: the thief's memory shares no content word with the question asked
#: about it, so only semantic recall (the bundled model) finds it first.
MEMORIES: tuple[tuple[str, str, int], ...] = (
    ("mira", "A hooded thief grabbed the coin purse off the miller's cart at the well.", 10),
    ("mira", "The blacksmith sang loudly while hammering a horseshoe.", 20),
    ("mira", "Rain flooded the lower road near the mill.", 30),
    ("tom", "A stranger with a scarred face rented the attic room at the inn.", 15),
    ("tom", "The baker burned three loaves and blamed the oven.", 25),
)
#: (owner, question, tick, the memory text expected first).
QUESTIONS: tuple[tuple[str, str, int, str], ...] = (
    ("mira", "Who took our money?", 100, MEMORIES[0][1]),
    ("tom", "Is there a newcomer in town?", 100, MEMORIES[3][1]),
    ("mira", "What happened to the street by the river?", 100, MEMORIES[2][1]),
)


class Rpc(Protocol):
    """A JSON-RPC connection that already sent ``initialize``."""

    server_info: dict[str, Any]

    async def result(self, method: str, params: Mapping[str, Any]) -> Any: ...


def scrubbed_environment(home: Path, empty_path: Path) -> dict[str, str]:
    """``env -i`` plus an empty HOME and a PATH of one empty folder: no Python, no cache."""
    return {"HOME": str(home), "PATH": str(empty_path)}


def installed_command() -> list[str]:
    """The installed package's sidecar, run by this test's Python."""
    return [sys.executable, "-m", "game_memory.cli"]


@contextlib.asynccontextmanager
async def started(
    command: Sequence[str], env: Mapping[str, str], log: Path
) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """Start ``command`` (a ``serve``), read its ready line, stop it at the end (stdin EOF)."""
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env=dict(env),
        )
    assert process.stdin is not None and process.stdout is not None
    try:
        async with asyncio.timeout(STARTUP_SECONDS):
            line = await process.stdout.readline()
        ready = json.loads(line) if line else {}
        assert ready.get("event") == "ready", f"no ready line: {line!r}\n{log.read_text()}"
        yield process, ready
    finally:
        if process.returncode is None:
            process.stdin.close()
            try:
                async with asyncio.timeout(30):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
                raise AssertionError(
                    f"the sidecar did not stop at EOF:\n{log.read_text()}"
                ) from None


class _StdioRpc:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self._next = 0
        self.server_info: dict[str, Any] = {}

    async def call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": dict(params)}
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        await self._process.stdin.drain()
        while True:
            async with asyncio.timeout(CALL_SECONDS):
                line = await self._process.stdout.readline()
            assert line, "the sidecar closed stdout"
            reply: dict[str, Any] = json.loads(line)
            if reply.get("id") == self._next:
                return reply

    async def result(self, method: str, params: Mapping[str, Any]) -> Any:
        reply = await self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]


@contextlib.asynccontextmanager
async def stdio_rpc(
    command: Sequence[str], save: Path, env: Mapping[str, str], log: Path
) -> AsyncIterator[Rpc]:
    """``serve --stdio`` on ``save`` with the default model, initialized."""
    arguments = [*command, "serve", "--stdio", "--save-dir", str(save), "--model", "default"]
    async with started(arguments, env, log) as (process, _ready):
        rpc = _StdioRpc(process)
        rpc.server_info = await rpc.result("initialize", {"protocol_version": 1})
        yield rpc


class _WebSocketRpc:
    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._next = 0
        self.server_info: dict[str, Any] = {}

    async def result(self, method: str, params: Mapping[str, Any]) -> Any:
        self._next += 1
        message = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": dict(params)}
        await self._connection.send(json.dumps(message))
        while True:
            async with asyncio.timeout(CALL_SECONDS):
                reply: dict[str, Any] = json.loads(await self._connection.recv())
            if reply.get("id") == self._next:
                assert "result" in reply, reply
                return reply["result"]


@contextlib.asynccontextmanager
async def websocket_rpc(
    command: Sequence[str], save: Path, env: Mapping[str, str], log: Path
) -> AsyncIterator[Rpc]:
    """``serve --websocket 127.0.0.1:0`` on ``save`` with the default model, initialized."""
    arguments = [
        *[*command, "serve", "--websocket", "127.0.0.1:0"],
        *["--save-dir", str(save), "--model", "default"],
    ]
    async with (
        started(arguments, env, log) as (_process, ready),
        connect(str(ready["url"]), max_size=None) as connection,
    ):
        rpc = _WebSocketRpc(connection)
        rpc.server_info = await rpc.result(
            "initialize", {"protocol_version": 1, "token": ready["token"]}
        )
        yield rpc


async def recall_script(rpc: Rpc) -> list[dict[str, Any]]:
    """Remember :data:`MEMORIES`, then ask :data:`QUESTIONS`; return each recall's memories
    (ids, texts and the evidence of each rank, without the timings)."""
    for owner, text, tick in MEMORIES:
        await rpc.result(
            "memory.remember",
            {
                "session_id": "slot",
                "owner_id": owner,
                "text": text,
                "moment": {"timeline_id": "main", "tick": tick},
            },
        )
    answers = []
    for owner, question, tick, _expected in QUESTIONS:
        result = await rpc.result(
            "memory.recall",
            {
                "session_id": "slot",
                "owner_id": owner,
                "text": question,
                "at_or_before": {"timeline_id": "main", "tick": tick},
                "limit": 3,
            },
        )
        assert result["fallback"] is False, result
        answers.append({"memories": result["memories"]})
    return answers
