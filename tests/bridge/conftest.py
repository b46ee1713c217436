"""Shared fixtures of the bridge tests: a fake memory service and JSON-RPC helpers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from game_memory import open_memory
from game_memory.bridge.protocol import BridgeConnection, Received, ServerInfo
from game_memory.bridge.server import BridgeServer, Session
from game_memory.bridge.service import ProgressCallback
from game_memory.errors import EmbeddingUnavailableError, MemoryConflictError, StoreBusyError
from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    memory_matches_query,
)

TOKEN = "test-token-0123456789"


@dataclass(frozen=True)
class FakeHit:
    memory: GameMemory
    lexical_rank: int | None
    vector_rank: int | None
    vector_score: float | None
    fused_score: float
    age_ticks: int | None


@dataclass(frozen=True)
class FakeRecall:
    snapshot: GameMemorySearchSnapshot
    hits: tuple[FakeHit, ...]
    fallback: bool


@dataclass(frozen=True)
class FakeStatus:
    mode: str
    state: str
    active_identity: str | None
    total_entries: int
    ready_entries: int
    pending_entries: int
    stale_entries: int
    orphan_entries: int
    requires_rebuild: bool


@dataclass(frozen=True)
class FakeMigration:
    migrated_entries: int = 2
    partitioned_entries: int = 1
    vector_entries: int = 0


@dataclass(frozen=True)
class FakeDiagnostic:
    code: str
    severity: str
    message: str
    session_id: str | None = None
    owner_id: str | None = None
    memory_id: str | None = None
    details: dict[str, Any] | None = None


@dataclass
class FakeService:
    """An in-memory stand-in for the front door (``VectorMemoryStore``) with hooks to fail
    or hold calls.

    ``errors[method]`` is raised by the next call of that method; ``gate``, when set, is
    awaited by every call (so tests can hold calls in flight); ``delays[text]`` makes a
    recall of that text sleep first (to force out-of-order completion).
    """

    mode: str = "hybrid"
    identity: str | None = "hashing/feature-hashing-words@v1:256"
    memories: list[GameMemory] = field(default_factory=list)
    errors: dict[str, BaseException] = field(default_factory=dict)
    gate: asyncio.Event | None = None
    delays: dict[str, float] = field(default_factory=dict)
    rebuild_steps: int = 3
    calls: list[str] = field(default_factory=list)
    rebuilding: set[str] = field(default_factory=set)

    async def _enter(self, method: str) -> None:
        self.calls.append(method)
        if self.gate is not None:
            await self.gate.wait()
        error = self.errors.pop(method, None)
        if error is not None:
            raise error

    async def append(self, memory: GameMemory) -> bool:
        await self._enter("remember")
        for existing in self.memories:
            if existing.key == memory.key:
                if existing == memory:
                    return False
                raise MemoryConflictError(f"memory {memory.memory_id} exists with other content")
        self.memories.append(memory)
        return True

    async def recall(self, query: GameMemoryQuery, *, require_semantic: bool = False) -> FakeRecall:
        await self._enter("recall")
        if query.text in self.delays:
            await asyncio.sleep(self.delays[query.text])
        if require_semantic and self.mode == "lexical":
            raise EmbeddingUnavailableError("no embedding model is loaded")
        visible = [memory for memory in self.memories if memory_matches_query(memory, query)]
        words = set((query.text or "").lower().split())
        visible.sort(
            key=lambda m: (
                -len(words & set((m.searchable_text or "").lower().split())),
                m.memory_id,
            )
        )
        chosen = visible[: query.limit]
        at = query.at_or_before
        hits = tuple(
            FakeHit(
                memory=memory,
                lexical_rank=rank,
                vector_rank=None,
                vector_score=None,
                fused_score=1.0 / (60 + rank),
                age_ticks=None if at is None else at.tick - memory.moment.tick,
            )
            for rank, memory in enumerate(chosen, start=1)
        )
        stage = GameMemorySearchStage(
            stage=GameMemorySearchStageKind.LEXICAL_SEARCH,
            duration_ms=0.5,
            scanned_count=len(self.memories),
            candidate_count=len(visible),
        )
        snapshot = GameMemorySearchSnapshot(
            memories=tuple(chosen), authoritative_memories=tuple(self.memories), stages=(stage,)
        )
        return FakeRecall(snapshot=snapshot, hits=hits, fallback=self.mode == "lexical")

    def _status(self, session_id: str) -> FakeStatus:
        count = sum(1 for memory in self.memories if memory.session_id == session_id)
        return FakeStatus(
            mode=self.mode,
            state="ready" if count else "empty",
            active_identity=self.identity,
            total_entries=count,
            ready_entries=count,
            pending_entries=0,
            stale_entries=0,
            orphan_entries=0,
            requires_rebuild=False,
        )

    async def get_status(self, session_id: str) -> FakeStatus:
        await self._enter("status")
        return self._status(session_id)

    async def rebuild(
        self, session_id: str, *, force: bool = False, progress: ProgressCallback | None = None
    ) -> FakeStatus:
        # The front door's contract: one rebuild of a session at a time.
        if session_id in self.rebuilding:
            raise StoreBusyError(f"a rebuild of session {session_id!r} is already running")
        self.rebuilding.add(session_id)
        try:
            await self._enter("rebuild")
            if self.mode == "lexical":
                raise EmbeddingUnavailableError("no embedding model is loaded; nothing to rebuild")
            for step in range(self.rebuild_steps + 1):
                if progress is not None:
                    progress(step, self.rebuild_steps)
                await asyncio.sleep(0)
            return self._status(session_id)
        finally:
            self.rebuilding.discard(session_id)

    async def migrate(self) -> FakeMigration:
        await self._enter("migrate")
        return FakeMigration()


def request(method: str, params: Any = None, request_id: Any = 1, **extra: Any) -> str:
    """Encode one request (``request_id=...`` omitted when it is the ``NOTIFY`` marker)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if request_id is not NOTIFY:
        message["id"] = request_id
    message.update(extra)
    return json.dumps(message)


NOTIFY: Any = object()


def initialize(token: str | None = TOKEN, request_id: Any = 0) -> str:
    params: dict[str, Any] = {"protocol_version": 1}
    if token is not None:
        params["token"] = token
    return request("initialize", params, request_id)


def decoded(messages: list[str]) -> list[Any]:
    return [json.loads(message) for message in messages]


def only(received: Received) -> dict[str, Any]:
    """The single response a received message produced."""
    assert not received.calls
    assert len(received.messages) == 1, received.messages
    value = json.loads(received.messages[0])
    assert isinstance(value, dict)
    return value


MOMENT = {"timeline_id": "main", "tick": 100}


def remember_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "text": "The blacksmith sold me a rusty sword",
        "moment": MOMENT,
    }
    params.update(overrides)
    return params


@pytest.fixture
def info() -> ServerInfo:
    return ServerInfo(mode="hybrid", model="hashing/feature-hashing-words@v1:256")


@pytest.fixture
def make_connection(info: ServerInfo) -> Callable[..., BridgeConnection]:
    def make(token: str | None = TOKEN, **kwargs: Any) -> BridgeConnection:
        return BridgeConnection(kwargs.pop("server_info", info), token=token, **kwargs)

    return make


@pytest.fixture
def ready(make_connection: Callable[..., BridgeConnection]) -> BridgeConnection:
    connection = make_connection()
    response = only(connection.receive(initialize()))
    assert "result" in response
    return connection


async def answered(session: Session, method: str, params: Any, request_id: int) -> Any:
    """Send one request to a bridge ``session``; its answer (notifications passed over)."""
    await session.receive(request(method, params, request_id))
    async with asyncio.timeout(10):
        while True:
            text = await session.outbox.get()
            assert text is not None
            message = json.loads(text)
            if message.get("id") == request_id:
                return message


#: ``await call(method, params)``: one request's answer (the ``call`` fixture).
Call = Callable[[str, Any], Awaitable[Any]]


@pytest.fixture(params=["lexical", "hashing"])
async def call(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Call]:
    """``await call(method, params)``: one request over a bridge session on the real front
    door (``open_memory`` in ``tmp/save``, lexical and hashing), its answer."""
    memory = await open_memory(tmp_path / "save", model=request.param)
    server = BridgeServer(memory, ServerInfo(mode=memory.mode, model=None))
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await session.outbox.get()
    counter = iter(range(1, 10_000))

    async def calling(method: str, params: Any) -> Any:
        return await answered(session, method, params, next(counter))

    try:
        yield calling
    finally:
        await server.shutdown()
        await memory.aclose()
