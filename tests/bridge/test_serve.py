"""End to end: the real ``game-memory serve`` process on temp folders, over real sockets.

These tests start ``sys.executable -m game_memory.cli serve`` with the real file store and
``--model hashing`` or ``--model lexical`` (the default model may not be prepared here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from game_memory.store.file_store import FileGameMemoryStore

STARTUP_SECONDS = 60
MOMENT = {"timeline_id": "main", "tick": 100}
#: Longest stdout line the tests read: a response may be up to 16 MiB.
RESPONSE_LINE_LIMIT = 17 * 2**20


class ServeProcess:
    """A running ``game-memory serve`` and what it printed."""

    def __init__(self, process: asyncio.subprocess.Process, ready: dict[str, Any], log: Path):
        self.process = process
        self.ready = ready
        self.log = log

    @property
    def url(self) -> str:
        return str(self.ready["url"])

    @property
    def token(self) -> str:
        return str(self.ready["token"])

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def wait(self, timeout: float = 30) -> int:
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await self.process.stdin.wait_closed()


def serve_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "game_memory.cli", "serve", *arguments]


async def start(tmp_path: Path, *arguments: str, env: dict[str, str] | None = None) -> ServeProcess:
    log = tmp_path / f"serve-{len(list(tmp_path.glob('serve-*.log')))}.log"
    with log.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *serve_command(*arguments),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **(env or {})},
            limit=RESPONSE_LINE_LIMIT,
        )
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), STARTUP_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    if not line:
        await process.wait()
        pytest.fail(f"serve exited {process.returncode}: {log.read_text()}")
    return ServeProcess(process, json.loads(line), log)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, *arguments: str, **kwargs: Any) -> AsyncIterator[ServeProcess]:
    if not any(a.startswith("--save-dir") for a in arguments):
        arguments = ("--save-dir", str(tmp_path / "save"), *arguments)
    server = await start(tmp_path, *arguments, **kwargs)
    try:
        yield server
    finally:
        if server.process.returncode is None:
            await server.close_stdin()
            try:
                await server.wait(30)
            except TimeoutError:
                server.process.kill()
                await server.process.wait()
                pytest.fail("serve did not stop after stdin closed:\n" + server.stderr())


def websocket_args(*extra: str) -> tuple[str, ...]:
    return ("--websocket", "127.0.0.1:0", *extra)


class Client:
    """A JSON-RPC client over one WebSocket, keeping notifications apart from responses."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.notifications: list[dict[str, Any]] = []
        self._next = 0

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            message["params"] = params
        await self.connection.send(json.dumps(message))
        while True:
            async with asyncio.timeout(30):
                reply: dict[str, Any] = json.loads(await self.connection.recv())
            if "id" not in reply:
                self.notifications.append(reply)
                continue
            assert reply["id"] == self._next
            return reply

    async def result(self, method: str, params: Any = None) -> Any:
        reply = await self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]


@contextlib.asynccontextmanager
async def client(server: ServeProcess, token: str | None = None) -> AsyncIterator[Client]:
    async with connect(server.url, max_size=None) as connection:
        rpc = Client(connection)
        result = await rpc.result(
            "initialize", {"protocol_version": 1, "token": token or server.token}
        )
        assert result["protocol_version"] == 1
        yield rpc


def remember(text: str, tick: int, owner: str = "npc-mira", **extra: Any) -> dict[str, Any]:
    return {
        "session_id": "save-1",
        "owner_id": owner,
        "text": text,
        "moment": {"timeline_id": "main", "tick": tick},
        **extra,
    }


async def test_ready_line_names_a_loopback_url_a_token_and_the_version(tmp_path: Path) -> None:
    async with serving(tmp_path, *websocket_args(), "--model", "hashing") as server:
        assert set(server.ready) == {"event", "url", "token", "protocol_version"}
        assert server.ready["event"] == "ready"
        assert server.ready["protocol_version"] == 1
        assert server.url.startswith("ws://127.0.0.1:")
        assert len(server.token) >= 32


async def test_happy_path_in_hybrid_mode(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, *websocket_args(), "--model", "hashing") as server,
        client(server) as rpc,
    ):
        assert rpc.notifications == []
        sword = await rpc.result(
            "memory.remember", remember("Bought a rusty sword at the forge", 100)
        )
        assert sword["created"] is True and sword["memory_id"].startswith("gm-")
        again = await rpc.result(
            "memory.remember", remember("Bought a rusty sword at the forge", 100)
        )
        assert again == {**sword, "created": False}
        await rpc.result("memory.remember", remember("The forge burned down", 300, tags=["fire"]))
        await rpc.result(
            "memory.remember", remember("Sword lessons with the guard", 200, owner="npc-tom")
        )

        past = await rpc.result(
            "memory.recall",
            {
                "session_id": "save-1",
                "owner_id": "npc-mira",
                "text": "forge sword",
                "at_or_before": {"timeline_id": "main", "tick": 250},
            },
        )
        texts = [memory["text"] for memory in past["memories"]]
        assert texts == ["Bought a rusty sword at the forge"]  # the fire (tick 300) is future
        why = past["memories"][0]["why"]
        assert why["age_ticks"] == 150
        assert why["lexical_rank"] == 1
        assert isinstance(why["fused_score"], float)
        assert {stage["stage"] for stage in past["stages"]} >= {"lexical_search"}

        later = await rpc.result(
            "memory.recall",
            {
                "session_id": "save-1",
                "owner_id": "npc-mira",
                "text": "forge",
                "at_or_before": {"timeline_id": "main", "tick": 400},
            },
        )
        assert len(later["memories"]) == 2

        many = await rpc.result(
            "memory.recall_many",
            {
                "queries": [
                    {"session_id": "save-1", "owner_id": "npc-tom", "text": "sword"},
                    {"session_id": "save-1", "limit": -1},
                    {"session_id": "save-1", "text": "fire", "tags": ["fire"]},
                ]
            },
        )
        first, bad, third = many["results"]
        assert [m["owner_id"] for m in first["memories"]] == ["npc-tom"]
        assert bad["ok"] is False and bad["error"]["code"] == -32602
        assert [m["text"] for m in third["memories"]] == ["The forge burned down"]

        status = await rpc.result("memory.status", {"session_id": "save-1"})
        assert status["mode"] == "hybrid"
        assert status["total_entries"] == 3

        rebuilt = await rpc.result("memory.rebuild", {"session_id": "save-1", "force": True})
        progress = [
            n["params"] for n in rpc.notifications if n["method"] == "memory.rebuild_progress"
        ]
        assert progress[0]["done"] == 0
        assert progress[-1]["done"] == progress[-1]["total"]
        assert {p["session_id"] for p in progress} == {"save-1"}
        assert rebuilt["state"] == "ready"
        assert rebuilt["ready_entries"] == 3 and rebuilt["requires_rebuild"] is False

        semantic = await rpc.result(
            "memory.recall", {"session_id": "save-1", "text": "forge", "require_semantic": True}
        )
        assert semantic["fallback"] is False
        assert any(m["why"]["vector_rank"] is not None for m in semantic["memories"])

        migrated = await rpc.result("memory.migrate", {})
        assert migrated["migrated_entries"] == 0
        assert migrated["partitioned_entries"] == 3


async def test_lexical_mode_recalls_and_refuses_semantic_work(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, *websocket_args(), "--model", "lexical") as server,
        client(server) as rpc,
    ):
        await rpc.result("memory.remember", remember("A wolf howled at night", 10))
        recalled = await rpc.result("memory.recall", {"session_id": "save-1", "text": "wolf"})
        assert [m["why"]["lexical_rank"] for m in recalled["memories"]] == [1]
        assert recalled["memories"][0]["why"]["vector_rank"] is None
        assert recalled["fallback"] is False
        status = await rpc.result("memory.status", {"session_id": "save-1"})
        assert status == {
            "mode": "lexical",
            "state": "lexical",
            "active_identity": None,
            "total_entries": 1,
            "ready_entries": 1,
            "pending_entries": 0,
            "stale_entries": 0,
            "orphan_entries": 0,
            "requires_rebuild": False,
        }
        rebuild = await rpc.call("memory.rebuild", {"session_id": "save-1"})
        assert rebuild["error"]["code"] == -32005
        assert "no embedding model" in rebuild["error"]["message"]
        semantic = await rpc.call(
            "memory.recall", {"session_id": "save-1", "text": "wolf", "require_semantic": True}
        )
        assert semantic["error"]["code"] == -32005


async def test_default_model_missing_falls_back_to_lexical_with_a_diagnostic(
    tmp_path: Path,
) -> None:
    home = tmp_path / "empty-model-home"
    home.mkdir()
    async with (
        serving(
            tmp_path, *websocket_args(), "--model", "default", env={"GAME_MEMORY_HOME": str(home)}
        ) as server,
        connect(server.url) as connection,
    ):
        await connection.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocol_version": 1, "token": server.token},
                }
            )
        )
        response = json.loads(await asyncio.wait_for(connection.recv(), 10))
        assert response["result"]["mode"] == "lexical"
        assert response["result"]["model"] is None
        notice = json.loads(await asyncio.wait_for(connection.recv(), 10))
        assert notice["method"] == "memory.diagnostic"
        assert notice["params"]["code"] == "embedding_model_unavailable"
        assert notice["params"]["severity"] == "warning"
        assert "game-memory models prepare" in notice["params"]["message"]


@pytest.mark.parametrize("token", ["wrong-token", None])
async def test_a_client_with_a_wrong_or_no_token_is_refused_and_closed(
    tmp_path: Path, token: str | None
) -> None:
    async with serving(tmp_path, *websocket_args(), "--model", "lexical") as server:
        async with connect(server.url) as connection:
            params: dict[str, Any] = {"protocol_version": 1}
            if token is not None:
                params["token"] = token
            await connection.send(
                json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
            )
            response = json.loads(await asyncio.wait_for(connection.recv(), 10))
            assert response["error"]["code"] == -32001
            await asyncio.wait_for(connection.wait_closed(), 10)
            assert connection.close_code == 4001
        async with client(server) as rpc:  # the server serves the next client
            assert (await rpc.result("memory.status", {"session_id": "s"}))["state"] == "lexical"


async def test_the_token_file_sets_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("  my-shared-secret-1234\n", encoding="utf-8")
    async with serving(
        tmp_path, *websocket_args("--token-file", str(token_file)), "--model", "lexical"
    ) as server:
        assert server.token == "my-shared-secret-1234"
        async with client(server, token="my-shared-secret-1234") as rpc:
            await rpc.result("memory.status", {"session_id": "s"})


async def test_oversized_and_binary_frames(tmp_path: Path) -> None:
    async with serving(tmp_path, *websocket_args(), "--model", "lexical") as server:
        async with client(server) as rpc:
            await rpc.connection.send(b"\x00\x01binary")
            refused = json.loads(await asyncio.wait_for(rpc.connection.recv(), 10))
            assert refused["error"]["code"] == -32600
            await rpc.result("memory.status", {"session_id": "s"})  # still open
            await rpc.connection.send("x" * (1_048_576 + 1))
            await asyncio.wait_for(rpc.connection.wait_closed(), 10)
            assert rpc.connection.close_code == 1009
        async with client(server) as other:
            await other.result("memory.status", {"session_id": "s"})


async def test_closing_stdin_stops_the_server_cleanly_and_the_save_reopens(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    async with serving(tmp_path, *websocket_args(), "--model", "hashing") as server:
        async with client(server) as rpc:
            for tick in range(5):
                await rpc.result("memory.remember", remember(f"memory number {tick}", tick))
        await server.close_stdin()
        assert await server.wait() == 0, server.stderr()
    async with FileGameMemoryStore(save) as store:
        memories = await store.enumerate("save-1")
    assert sorted(m.searchable_text or "" for m in memories) == [
        f"memory number {tick}" for tick in range(5)
    ]
    assert (tmp_path / "save.index").is_dir()  # derived data lives beside the save


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
async def test_a_termination_signal_stops_the_server_with_exit_code_0(
    tmp_path: Path, number: signal.Signals
) -> None:
    async with serving(tmp_path, *websocket_args(), "--model", "hashing") as server:
        async with client(server) as rpc:
            await rpc.result("memory.remember", remember("before the signal", 1))
        server.process.send_signal(number)
        assert await server.wait() == 0, server.stderr()
        assert "Traceback" not in server.stderr()


async def test_twenty_clients_times_twenty_requests(tmp_path: Path) -> None:
    async with serving(tmp_path, *websocket_args(), "--model", "hashing") as server:

        async def one_client(number: int) -> None:
            async with client(server) as rpc:
                owner = f"npc-{number}"
                pending = {}
                for step in range(10):
                    params = remember(f"client {number} saw thing {step}", step, owner=owner)
                    pending[f"r{step}"] = ("memory.remember", params)
                    query = {"session_id": "save-1", "owner_id": owner, "limit": 100}
                    pending[f"q{step}"] = ("memory.recall", query)
                for request_id, (method, params) in pending.items():
                    await rpc.connection.send(
                        json.dumps(
                            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                        )
                    )
                replies: dict[str, Any] = {}
                while len(replies) < len(pending):
                    reply = json.loads(await asyncio.wait_for(rpc.connection.recv(), 60))
                    replies[reply["id"]] = reply
                for step in range(10):
                    memory = replies[f"r{step}"]["result"]["memory"]
                    assert memory["owner_id"] == owner
                    assert memory["text"] == f"client {number} saw thing {step}"
                    recalled = replies[f"q{step}"]["result"]["memories"]
                    assert {m["owner_id"] for m in recalled} <= {owner}

        await asyncio.gather(*(one_client(number) for number in range(20)))
        async with client(server) as rpc:
            status = await rpc.result("memory.status", {"session_id": "save-1"})
            assert status["total_entries"] == 200


async def test_a_non_loopback_host_is_refused_before_binding(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *serve_command("--websocket", "0.0.0.0:0", "--save-dir", str(tmp_path / "s")),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert stdout == b""
    assert b"loopback" in stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (["--request-timeout", "0"], "--request-timeout"),  # 0 is not "not given"
        (["--request-timeout", "nan"], "--request-timeout"),
        ([], "GAME_MEMORY_REQUEST_TIMEOUT"),  # the environment's value, named as such
    ],
)
async def test_a_request_timeout_that_is_not_positive_is_refused_naming_its_source(
    tmp_path: Path, given: list[str], named: str
) -> None:
    environment = {**os.environ, "GAME_MEMORY_REQUEST_TIMEOUT": "-1" if not given else "5"}
    process = await asyncio.create_subprocess_exec(
        *serve_command("--websocket", "127.0.0.1:0", "--save-dir", str(tmp_path / "s"), *given),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2, stderr
    assert stdout == b""
    assert f"{named} must be a positive number of seconds".encode() in stderr


async def test_stdio_serves_one_client_line_by_line(tmp_path: Path) -> None:
    async with serving(tmp_path, "--stdio", "--model", "lexical") as server:
        assert server.ready == {"event": "ready", "transport": "stdio", "protocol_version": 1}
        stdin, stdout = server.process.stdin, server.process.stdout
        assert stdin is not None and stdout is not None

        async def ask(request_id: int, method: str, params: Any) -> dict[str, Any]:
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            stdin.write(json.dumps(message).encode() + b"\n")
            await stdin.drain()
            reply: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), 30))
            return reply

        initialized = (await ask(2, "initialize", {"protocol_version": 1}))["result"]
        assert initialized["mode"] == "lexical"
        # The server's own deadlines: a client that gives up sooner knows how long the
        # server may still run the request (the addon keeps its slot that long).
        assert initialized["deadlines"] == {"request_seconds": 120.0, "rebuild_seconds": 3600.0}
        created = await ask(3, "memory.remember", remember("Heard a song at the inn", 5))
        assert created["result"]["created"] is True
        recalled = await ask(4, "memory.recall", {"session_id": "save-1", "text": "song"})
        assert len(recalled["result"]["memories"]) == 1
        await server.close_stdin()
        assert await server.wait() == 0, server.stderr()
        assert await stdout.read() == b""


async def test_store_diagnostics_are_broadcast_to_every_initialized_client(
    tmp_path: Path,
) -> None:
    from game_memory.embedding.hashing import HashingEmbeddingProvider
    from game_memory.index.file_index import FileVectorMemoryIndex
    from game_memory.memory import VectorMemoryStore
    from game_memory.model import GameMemory, GameMemoryKind, GameMoment

    # Vectors written by another model version make the session's index stale.
    authoritative = FileGameMemoryStore(tmp_path / "save")
    provider = HashingEmbeddingProvider(version="older")
    index = FileVectorMemoryIndex(tmp_path / "save.index")
    async with VectorMemoryStore(authoritative, index, provider) as older:
        await older.append(
            GameMemory(
                memory_id="m-1",
                session_id="save-1",
                owner_id="npc-mira",
                scope="personal",
                kind=GameMemoryKind.EVENT,
                payload_json="{}",
                moment=GameMoment(timeline_id="main", tick=1),
                searchable_text="A wolf howled at the moon",
            )
        )

    async with (
        serving(tmp_path, *websocket_args(), "--model", "hashing") as server,
        client(server) as asking,
        client(server) as watching,
    ):
        status = await asking.result("memory.status", {"session_id": "save-1"})
        assert status["state"] == "rebuild_required" and status["requires_rebuild"] is True
        recalled = await asking.result("memory.recall", {"session_id": "save-1", "text": "wolf"})
        assert recalled["fallback"] is True
        assert [m["memory_id"] for m in recalled["memories"]] == ["m-1"]
        refused = await asking.call(
            "memory.recall", {"session_id": "save-1", "text": "wolf", "require_semantic": True}
        )
        assert refused["error"]["code"] == -32004
        async with asyncio.timeout(10):
            notice = json.loads(await watching.connection.recv())
        assert notice["method"] == "memory.diagnostic"
        assert notice["params"]["code"] == "memory_vector_rebuild_required"
        assert notice["params"]["session_id"] == "save-1"
        assert any(n["method"] == "memory.diagnostic" for n in asking.notifications)


async def test_stdio_answers_requests_sent_during_shutdown_with_shutting_down(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--stdio", "--model", "hashing") as server:
        stdin, stdout = server.process.stdin, server.process.stdout
        assert stdin is not None and stdout is not None

        async def send(request_id: str, method: str, params: Any) -> None:
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            stdin.write(json.dumps(message).encode() + b"\n")
            await stdin.drain()

        async def reply() -> dict[str, Any]:
            answer: dict[str, Any] = json.loads(await asyncio.wait_for(stdout.readline(), 60))
            return answer

        await send("init", "initialize", {"protocol_version": 1})
        assert "result" in await reply()
        words = " ".join(f"w{number}" for number in range(600))
        batch = [remember(f"slow {n} {words}", n, owner=f"npc-{n % 4}") for n in range(256)]
        await send("seed", "memory.remember_many", {"memories": batch})
        assert "result" in await reply()
        # Recalls that keep the server busy for a while after the signal.
        queries = [{"session_id": "save-1", "text": "w1 w2 slow", "limit": 5}] * 64
        for number in range(20):
            await send(f"slow-{number}", "memory.recall_many", {"queries": queries})
        # Its answer (ahead of the slow ones) shows that the server has read them all.
        await send("marker", "memory.status", {"session_id": "save-1"})
        answers = {}
        while "marker" not in answers:
            answer = await reply()
            answers[answer["id"]] = answer
        server.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            while "stopping: finishing running requests" not in server.stderr():
                await asyncio.sleep(0.01)
        await send("late", "memory.status", {"session_id": "save-1"})
        while line := await asyncio.wait_for(stdout.readline(), 60):
            answer = json.loads(line)
            answers[answer["id"]] = answer
        assert answers["late"]["error"]["code"] == -32009, (sorted(answers), server.stderr())
        assert all("result" in answers[f"slow-{number}"] for number in range(20))
        assert await server.wait() == 0, server.stderr()


async def test_initialize_reports_the_request_deadline_the_server_was_given(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path, "--stdio", "--model", "lexical", "--request-timeout", "7.5") as (
        server
    ):
        stdin, stdout = server.process.stdin, server.process.stdout
        assert stdin is not None and stdout is not None
        params = {"protocol_version": 1}
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()
        reply = json.loads(await asyncio.wait_for(stdout.readline(), 30))
        assert reply["result"]["deadlines"] == {"request_seconds": 7.5, "rebuild_seconds": 3600.0}
        await server.close_stdin()
        assert await server.wait() == 0, server.stderr()
