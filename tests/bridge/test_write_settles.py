"""A write is answered once it has settled: a deadline or shutdown never hides a stored write.

The store finishes a write in a thread even when its awaiting task is cancelled, so an
error saying "cancelled" could be false; the answer waits for the real outcome instead.
"""

from __future__ import annotations

import asyncio

from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.server import BridgeServer

from .conftest import FakeService, remember_params, request
from .test_server import INFO, drain, open_ready, queued, settle


async def test_a_write_past_the_deadline_is_answered_with_its_real_outcome() -> None:
    gate = asyncio.Event()
    service = FakeService()
    server = BridgeServer(service, INFO, BridgeLimits(request_timeout_seconds=0.05))
    session = await open_ready(server)
    service.gate = gate
    await session.receive(request("memory.remember", remember_params(), 1))
    await asyncio.sleep(0.2)  # four deadlines
    assert queued(session) == [], "a write was answered before it settled"
    gate.set()
    (response,) = await drain(session, 1)
    assert response["result"]["created"] is True
    assert len(service.memories) == 1


async def test_a_read_past_the_deadline_is_still_cancelled() -> None:
    service = FakeService(gate=asyncio.Event())
    server = BridgeServer(service, INFO, BridgeLimits(request_timeout_seconds=0.05))
    session = await open_ready(server)
    await session.receive(request("memory.status", {"session_id": "s"}, 1))
    (response,) = await drain(session, 1)
    assert response["error"]["code"] == -32008


async def test_a_write_running_at_shutdown_is_answered_once_it_has_settled() -> None:
    gate = asyncio.Event()
    service = FakeService()
    server = BridgeServer(service, INFO, BridgeLimits(shutdown_grace_seconds=0.05))
    session = await open_ready(server)
    service.gate = gate
    await session.receive(request("memory.remember", remember_params(), 1))
    await session.receive(request("memory.status", {"session_id": "s"}, 2))
    await settle()
    stopping = asyncio.create_task(server.shutdown())
    await asyncio.sleep(0.2)  # past the grace: the read is abandoned, the write is not
    assert not stopping.done(), "shutdown did not wait for the write"
    (abandoned,) = queued(session)
    assert abandoned["id"] == 2 and abandoned["error"]["code"] == -32009
    gate.set()
    await stopping
    assert server.running_calls == 0
    _, written = await drain(session, 2)
    assert written["id"] == 1 and written["result"]["created"] is True
    assert len(service.memories) == 1


async def test_a_write_that_fails_after_the_deadline_reports_its_own_error() -> None:
    gate = asyncio.Event()
    service = FakeService(memories=[])
    server = BridgeServer(service, INFO, BridgeLimits(request_timeout_seconds=0.05))
    session = await open_ready(server)
    await session.receive(request("memory.remember", remember_params(memory_id="m1"), 1))
    await drain(session, 1)
    service.gate = gate
    other = remember_params(memory_id="m1", text="other content")
    await session.receive(request("memory.remember", other, 2))
    await asyncio.sleep(0.2)
    gate.set()
    (response,) = await drain(session, 1)
    assert response["error"]["code"] == -32002
