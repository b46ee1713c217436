"""The async dispatcher over a fake service: concurrency, deadlines, shutdown, notifications."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer, Session
from game_memory.errors import PersistenceError

from .conftest import (
    MOMENT,
    NOTIFY,
    TOKEN,
    FakeDiagnostic,
    FakeService,
    initialize,
    remember_params,
    request,
)

INFO = ServerInfo(mode="hybrid", model="hashing/feature-hashing-words@v1:256")


async def drain(session: Session, count: int, timeout: float = 5.0) -> list[Any]:
    """Read ``count`` messages from the session's outbox."""
    messages = []
    async with asyncio.timeout(timeout):
        for _ in range(count):
            text = await session.outbox.get()
            assert text is not None
            messages.append(json.loads(text))
    return messages


def queued(session: Session) -> list[Any]:
    """Everything already queued, without waiting."""
    return [json.loads(text) for text in list(session.outbox._queue)]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def open_ready(server: BridgeServer) -> Session:
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    (response,) = await drain(session, 1)
    assert "result" in response
    return session


async def call(session: Session, method: str, params: Any, request_id: Any = 1) -> Any:
    await session.receive(request(method, params, request_id))
    (response,) = await drain(session, 1)
    return response


async def test_remember_then_recall_as_of_a_moment_round_trips() -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    remembered = await call(session, "memory.remember", remember_params(tags=["shop"]))
    result = remembered["result"]
    assert result["created"] is True
    assert result["memory"] == {
        "memory_id": result["memory_id"],
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "text": "The blacksmith sold me a rusty sword",
        "kind": "event",
        "scope": "personal",
        "moment": MOMENT,
        "importance": 0.5,
        "tags": ["shop"],
        "payload": {"text": "The blacksmith sold me a rusty sword"},
        "expires_at": None,
        "metadata": {},
        "source_input_id": None,
        "belief_key": None,
        "consolidates": [],
    }
    again = await call(session, "memory.remember", remember_params(tags=["shop"]), 2)
    assert again["result"]["created"] is False
    assert again["result"]["memory_id"] == result["memory_id"]

    await call(
        session,
        "memory.remember",
        remember_params(text="later", moment={"timeline_id": "main", "tick": 500}),
        3,
    )
    recalled = await call(
        session,
        "memory.recall",
        {
            "session_id": "save-1",
            "text": "sword",
            "at_or_before": {"timeline_id": "main", "tick": 250},
        },
        4,
    )
    memories = recalled["result"]["memories"]
    assert [memory["text"] for memory in memories] == ["The blacksmith sold me a rusty sword"]
    assert memories[0]["why"] == {
        "lexical_rank": 1,
        "vector_rank": None,
        "vector_score": None,
        "fused_score": pytest.approx(1 / 61),
        "age_ticks": 150,
    }
    assert recalled["result"]["stages"] == [
        {
            "stage": "lexical_search",
            "duration_ms": 0.5,
            "scanned_count": 2,
            "candidate_count": 1,
            "reused": False,
        }
    ]
    assert recalled["result"]["fallback"] is False


async def test_a_conflicting_remember_is_a_conflict() -> None:
    session = await open_ready(BridgeServer(FakeService(), INFO))
    await call(session, "memory.remember", remember_params(memory_id="m1"))
    response = await call(
        session, "memory.remember", remember_params(memory_id="m1", text="other"), 2
    )
    assert response["error"]["code"] == -32002


async def test_requests_of_one_connection_run_concurrently_and_answer_out_of_order() -> None:
    service = FakeService(delays={"slow": 0.2})
    session = await open_ready(BridgeServer(service, INFO))
    await session.receive(request("memory.recall", {"session_id": "s", "text": "slow"}, "slow"))
    await session.receive(request("memory.recall", {"session_id": "s", "text": "fast"}, "fast"))
    first, second = await drain(session, 2)
    assert (first["id"], second["id"]) == ("fast", "slow")


async def test_a_call_over_the_deadline_is_a_timeout_and_the_server_goes_on() -> None:
    service = FakeService(delays={"stuck": 30})
    server = BridgeServer(service, INFO, BridgeLimits(request_timeout_seconds=0.05))
    session = await open_ready(server)
    response = await call(session, "memory.recall", {"session_id": "s", "text": "stuck"})
    assert response["error"]["code"] == -32008
    assert response["error"]["data"]["bound"] == "request_timeout_seconds"
    await settle()
    assert server.running_calls == 0
    assert "result" in await call(session, "memory.status", {"session_id": "s"}, 2)


async def test_a_rebuild_over_its_deadline_names_the_rebuild_deadline_and_the_resume() -> None:
    # It named request_timeout_seconds (which --request-timeout sets, not the rebuild's)
    # and advised asking for less, which a rebuild cannot.
    service = FakeService()
    server = BridgeServer(service, INFO, BridgeLimits(rebuild_timeout_seconds=0.05))
    session = await open_ready(server)
    service.gate = asyncio.Event()  # never set: the rebuild runs past its deadline
    response = await call(session, "memory.rebuild", {"session_id": "s"})
    assert response["error"]["code"] == -32008
    assert response["error"]["data"]["bound"] == "rebuild_timeout_seconds"
    assert "resumes" in response["error"]["message"]
    assert "ask for less" not in response["error"]["message"]


async def test_service_errors_are_mapped_and_do_not_end_the_session() -> None:
    service = FakeService(errors={"status": PersistenceError("journal is torn")})
    session = await open_ready(BridgeServer(service, INFO))
    response = await call(session, "memory.status", {"session_id": "s"})
    assert response["error"]["code"] == -32006
    assert "journal is torn" in response["error"]["message"]
    assert "result" in await call(session, "memory.status", {"session_id": "s"}, 2)


async def test_shutdown_refuses_new_calls_and_cancels_stuck_ones_after_the_grace() -> None:
    service = FakeService(gate=asyncio.Event())
    server = BridgeServer(service, INFO, BridgeLimits(shutdown_grace_seconds=0.05))
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await drain(session, 1)
    await session.receive(request("memory.status", {"session_id": "s"}, 1))
    await settle()
    await server.shutdown()
    assert server.running_calls == 0
    (abandoned,) = await drain(session, 1)
    assert abandoned["id"] == 1 and abandoned["error"]["code"] == -32009
    refused = await call(session, "memory.status", {"session_id": "s"}, 2)
    assert refused["error"]["code"] == -32009
    late = server.open_session(token=TOKEN)
    await late.receive(initialize())
    await drain(late, 1)
    assert (await call(late, "memory.migrate", {}, 3))["error"]["code"] == -32009


async def test_shutdown_lets_calls_finish_within_the_grace() -> None:
    gate = asyncio.Event()
    server = BridgeServer(FakeService(gate=gate), INFO, BridgeLimits(shutdown_grace_seconds=5))
    session = await open_ready(server)
    await session.receive(request("memory.migrate", {}, 1))
    await settle()
    stopping = asyncio.create_task(server.shutdown())
    await settle()
    gate.set()
    await stopping
    (response,) = await drain(session, 1)
    assert response["result"]["migrated_entries"] == 2


async def test_diagnostics_are_broadcast_to_initialized_sessions_only() -> None:
    server = BridgeServer(FakeService(), INFO)
    first = await open_ready(server)
    second = await open_ready(server)
    stranger = server.open_session(token=TOKEN)
    server.broadcast_diagnostic(
        FakeDiagnostic("index_stale", "warning", "rebuild it", session_id="s", details={"n": 1})
    )
    expected = {
        "jsonrpc": "2.0",
        "method": "memory.diagnostic",
        "params": {
            "code": "index_stale",
            "severity": "warning",
            "message": "rebuild it",
            "session_id": "s",
            "owner_id": None,
            "memory_id": None,
            "details": {"n": 1},
        },
    }
    assert await drain(first, 1) == [expected]
    assert await drain(second, 1) == [expected]
    assert queued(stranger) == []


async def test_diagnostics_from_another_thread_reach_the_loop() -> None:
    server = BridgeServer(FakeService(), INFO)
    session = await open_ready(server)
    await asyncio.to_thread(server.broadcast_diagnostic, FakeDiagnostic("c", "error", "m"))
    (message,) = await drain(session, 1)
    assert message["params"]["severity"] == "error"


async def test_a_client_that_does_not_read_loses_diagnostics_but_never_blocks() -> None:
    server = BridgeServer(FakeService(), INFO, BridgeLimits(outbox_messages=4))
    silent = await open_ready(server)
    reader = await open_ready(server)
    for number in range(50):
        server.broadcast_diagnostic(FakeDiagnostic(f"d{number}", "information", "m"))
    assert len(queued(silent)) == 4
    assert silent.outbox.dropped == 46
    assert [message["params"]["code"] for message in await drain(reader, 4)] == [
        "d0",
        "d1",
        "d2",
        "d3",
    ]


async def test_rebuild_sends_progress_from_zero_to_total_then_the_status() -> None:
    service = FakeService(rebuild_steps=5)
    server = BridgeServer(service, INFO)
    session = await open_ready(server)
    other = await open_ready(server)
    await session.receive(request("memory.rebuild", {"session_id": "s"}, 9))
    messages = await drain(session, 7)
    progress = [m["params"] for m in messages if m.get("method") == "memory.rebuild_progress"]
    assert progress[0] == {"session_id": "s", "done": 0, "total": 5}
    assert progress[-1] == {"session_id": "s", "done": 5, "total": 5}
    assert [p["done"] for p in progress] == [0, 1, 2, 3, 4, 5]
    assert messages[-1]["id"] == 9 and messages[-1]["result"]["state"] == "empty"
    assert queued(other) == []  # progress goes to the requesting connection only


async def test_rebuild_progress_brackets_even_a_silent_store() -> None:
    service = FakeService(rebuild_steps=-1)  # never calls progress
    session = await open_ready(BridgeServer(service, INFO))
    await session.receive(request("memory.rebuild", {"session_id": "s"}, 1))
    start, end, response = await drain(session, 3)
    assert start["params"]["done"] == 0 and end["params"]["done"] == end["params"]["total"]
    assert "result" in response


async def test_a_second_rebuild_of_the_same_session_is_busy() -> None:
    gate = asyncio.Event()
    server = BridgeServer(FakeService(gate=gate), INFO)
    first = await open_ready(server)
    second = await open_ready(server)
    await first.receive(request("memory.rebuild", {"session_id": "s"}, 1))
    await settle()
    busy = await call(second, "memory.rebuild", {"session_id": "s"}, 2)
    assert busy["error"]["code"] == -32007
    await second.receive(request("memory.rebuild", {"session_id": "other"}, 3))
    gate.set()
    (done,) = [m for m in await drain(second, 5) if "id" in m]
    assert done["id"] == 3 and "result" in done


async def test_rebuild_in_lexical_mode_is_embedding_unavailable() -> None:
    session = await open_ready(BridgeServer(FakeService(mode="lexical"), INFO))
    response = await call(session, "memory.rebuild", {"session_id": "s"})
    assert response["error"]["code"] == -32005
    assert queued(session) == []


async def test_recall_many_answers_each_query_on_its_own() -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    await call(session, "memory.remember", remember_params())
    response = await call(
        session,
        "memory.recall_many",
        {
            "queries": [
                {"session_id": "save-1", "text": "sword"},
                {"session_id": "save-1", "limit": 500},
                {"session_id": "other"},
            ]
        },
        2,
    )
    first, second, third = response["result"]["results"]
    assert first["ok"] is True and len(first["memories"]) == 1
    assert set(first) == {"ok", "memories", "stages", "fallback"}
    assert second["ok"] is False and second["error"]["code"] == -32602
    assert "limit" in second["error"]["message"]
    assert third == {"ok": True, "memories": [], "stages": third["stages"], "fallback": False}


@pytest.mark.parametrize("bad", [5, None, "s", [{"session_id": "save-1"}], True, 2.5])
async def test_recall_many_answers_a_query_that_is_not_an_object_in_its_own_entry(
    bad: Any,
) -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    await call(session, "memory.remember", remember_params())
    queries = [{"session_id": "save-1", "text": "sword"}, bad, {"session_id": "save-1"}]
    response = await call(session, "memory.recall_many", {"queries": queries}, 2)
    first, second, third = response["result"]["results"]
    assert first["ok"] is True and len(first["memories"]) == 1
    assert third["ok"] is True and len(third["memories"]) == 1
    assert second == {"ok": False, "error": {"code": -32602, "message": second["error"]["message"]}}
    message = second["error"]["message"]
    assert message.startswith("invalid params for memory.recall_many: queries.1: ")
    assert "must be a JSON object of recall params" in message
    assert "dictionary" not in message and "RecallParams" not in message
    assert service.calls.count("recall") == 2


async def test_recall_many_maps_a_failing_query_and_keeps_the_rest() -> None:
    service = FakeService(errors={"recall": PersistenceError("torn")})
    session = await open_ready(BridgeServer(service, INFO))
    response = await call(
        session,
        "memory.recall_many",
        {"queries": [{"session_id": "a"}, {"session_id": "b"}]},
    )
    failed, succeeded = response["result"]["results"]
    assert failed == {"ok": False, "error": {"code": -32006, "message": failed["error"]["message"]}}
    assert succeeded["ok"] is True


async def test_require_semantic_without_a_model_is_embedding_unavailable() -> None:
    session = await open_ready(BridgeServer(FakeService(mode="lexical"), INFO))
    response = await call(session, "memory.recall", {"session_id": "s", "require_semantic": True})
    assert response["error"]["code"] == -32005


async def test_a_client_notification_runs_without_a_response() -> None:
    service = FakeService()
    server = BridgeServer(service, INFO)
    session = await open_ready(server)
    await session.receive(request("memory.remember", remember_params(), NOTIFY))
    await settle()
    assert len(service.memories) == 1
    assert queued(session) == []


async def test_a_detached_session_drops_output_but_its_calls_finish() -> None:
    gate = asyncio.Event()
    service = FakeService(gate=gate)
    server = BridgeServer(service, INFO)
    session = await open_ready(server)
    await session.receive(request("memory.remember", remember_params(), 1))
    await settle()
    session.detach()
    assert server.session_count == 0
    gate.set()
    await settle()
    assert len(service.memories) == 1
    assert server.running_calls == 0
    assert await session.outbox.get() is None


async def test_responses_wait_for_room_which_stops_reading_from_a_silent_client() -> None:
    server = BridgeServer(FakeService(), INFO, BridgeLimits(outbox_messages=2))
    session = await open_ready(server)
    await session.receive("bad json 1")
    # The second answer fills the outbox: the client is not read again until it reads.
    blocked = asyncio.create_task(session.receive("bad json 2"))
    await settle()
    assert not blocked.done()
    assert len(queued(session)) == 2
    await drain(session, 1)
    await asyncio.wait_for(blocked, 1)
    assert len(queued(session)) == 1
