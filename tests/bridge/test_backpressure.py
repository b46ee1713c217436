"""A client that does not read holds a bounded amount of answers, and the shutdown answers
every request it read, even those whose answers wait for room (over the fake service)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from game_memory.bridge import handlers
from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.server import BridgeServer, Session

from .conftest import FakeService, remember_params, request
from .test_response_budget import big_memory
from .test_server import INFO, drain, open_ready, queued, settle

#: Two memories of 10,000 characters: a recall answers about 40 kB (text and payload).
MEMORIES = 2
CHARACTERS = 10_000


def recall(request_id: Any, **params: Any) -> str:
    return request("memory.recall", {"session_id": "s", "limit": MEMORIES, **params}, request_id)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the recall answers built (one entry per answer)."""
    built: list[int] = []
    original = handlers.recall_to_json

    def counting(*args: Any) -> Any:
        built.append(1)
        return original(*args)

    monkeypatch.setattr(handlers, "recall_to_json", counting)
    return built


def silent_server(**limits: Any) -> BridgeServer:
    service = FakeService(memories=[big_memory(n, CHARACTERS) for n in range(MEMORIES)])
    return BridgeServer(service, INFO, BridgeLimits(**limits))


async def test_recalls_of_a_client_that_does_not_read_wait_for_room_before_building(
    builds: list[int],
) -> None:
    # Room for about one answer: the others must not be built while it is not read.
    session = await open_ready(silent_server(outbox_bytes=60_000))
    for number in range(6):
        await session.receive(recall(number))
    await settle()
    assert len(builds) == 1, "answers were built with no room for them"
    assert session.outbox.queued_bytes < 60_000
    # Reading has stopped: the next request is not taken until the client reads.
    reading = asyncio.create_task(session.receive(recall("late")))
    await settle()
    assert not reading.done()
    answers = await drain(session, 7)
    await asyncio.wait_for(reading, 1)
    assert sorted(str(answer["id"]) for answer in answers) == ["0", "1", "2", "3", "4", "5", "late"]
    assert all(len(answer["result"]["memories"]) == MEMORIES for answer in answers)


async def test_a_full_outbox_stops_reading_and_building(builds: list[int]) -> None:
    service = FakeService(memories=[big_memory(0, 100)])
    session = await open_ready(BridgeServer(service, INFO, BridgeLimits(outbox_messages=2)))
    await session.receive(recall(1))
    await session.receive(recall(2))
    await settle()
    assert len(queued(session)) == 2
    # The request already received is taken; the next read waits until the client reads,
    # and the answer is not built until there is room for it.
    reading = asyncio.create_task(session.receive(recall(3)))
    await settle()
    assert not reading.done()
    assert service.calls.count("recall") == 3 and len(builds) == 2
    answers = await drain(session, 3)
    await asyncio.wait_for(reading, 1)
    assert [answer["id"] for answer in answers] == [1, 2, 3]


async def test_recall_manys_that_each_need_more_room_never_wait_on_each_other() -> None:
    # Each recall_many needs room for three queries; the outbox has room for about one.
    session = await open_ready(silent_server(outbox_bytes=60_000))
    queries = [{"session_id": "s", "limit": MEMORIES}] * 3
    for number in range(3):
        await session.receive(request("memory.recall_many", {"queries": queries}, number))
    answers = await drain(session, 3, timeout=10)
    assert sorted(answer["id"] for answer in answers) == [0, 1, 2]
    for answer in answers:
        assert [entry["ok"] for entry in answer["result"]["results"]] == [True] * 3


async def test_batches_that_each_need_more_room_never_wait_on_each_other() -> None:
    session = await open_ready(silent_server(outbox_bytes=60_000))
    for batch in range(3):
        entries = [json.loads(recall(f"{batch}-{n}")) for n in range(3)]
        await session.receive(json.dumps(entries))
    answers = await drain(session, 3, timeout=10)
    ids = sorted(entry["id"] for answer in answers for entry in answer)
    assert ids == sorted(f"{batch}-{n}" for batch in range(3) for n in range(3))
    assert all("result" in entry for answer in answers for entry in answer)


async def feed(session: Session, messages: list[str]) -> None:
    for message in messages:
        await session.receive(message)


async def test_the_shutdown_answers_every_request_whose_answer_waits_for_room() -> None:
    # Two answers fill the outbox; a write's answer and a read then wait for room when the
    # shutdown's grace ends. The write is answered with its real outcome, the read with
    # SHUTTING_DOWN; both are queued for the final flush.
    server = silent_server(outbox_messages=2, shutdown_grace_seconds=0.05)
    session = await open_ready(server)
    service = server.executor._service
    assert isinstance(service, FakeService)
    remember = request("memory.remember", remember_params(memory_id="w"), "w")
    await feed(session, [recall("r0"), recall("r1"), remember, recall("r2")])
    await settle()
    assert len(queued(session)) == 2
    await asyncio.wait_for(server.shutdown(), 5)
    assert server.running_calls == 0
    session.outbox.close()  # as the transport does before its final flush
    answers = {str(answer["id"]): answer for answer in await drain(session, 4)}
    assert await session.outbox.get() is None
    assert set(answers) == {"r0", "r1", "w", "r2"}
    assert answers["w"]["result"]["created"] is True
    assert [memory.memory_id for memory in service.memories if memory.memory_id == "w"] == ["w"]
    assert answers["r2"]["error"]["code"] == -32009
    assert "result" in answers["r0"] and "result" in answers["r1"]
