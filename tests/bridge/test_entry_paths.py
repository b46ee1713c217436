"""Errors of the core's own checks name the entry and the method called, not memory.remember."""

from __future__ import annotations

from typing import Any

from game_memory.bridge.server import BridgeServer

from .conftest import FakeService, remember_params
from .test_server import INFO, call, open_ready


def nested(levels: int) -> Any:
    value: Any = "deep"
    for _ in range(levels):
        value = [value]
    return value


EARLY = {"timeline_id": "main", "tick": 50}


async def refusal(method: str, params: dict[str, Any]) -> dict[str, Any]:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    response = await call(session, method, params)
    assert service.calls == [], "an invalid call reached the store"
    error: dict[str, Any] = response["error"]
    assert error["code"] == -32602
    return error


async def test_a_remember_many_entry_refused_by_the_core_is_named_by_its_path() -> None:
    entries = [remember_params(text=f"memory {n}") for n in range(4)]
    entries[3] = remember_params(payload=nested(129))
    error = await refusal("memory.remember_many", {"memories": entries})
    assert error["data"]["field"] == "memories.3.payload"
    assert error["message"].startswith("invalid params for memory.remember_many: memories.3.")


async def test_a_remember_many_entry_wrong_as_a_whole_names_the_entry() -> None:
    entries = [remember_params(text=f"memory {n}") for n in range(3)]
    entries[2] = remember_params(expires_at=EARLY)
    error = await refusal("memory.remember_many", {"memories": entries})
    assert error["data"]["field"] == "memories.2"
    assert "memory.remember_many" in error["message"] and "memory.remember:" not in error["message"]


async def test_a_consolidate_summary_refused_by_the_core_is_named_under_summary() -> None:
    summary = {"text": "a summary", "moment": {"timeline_id": "main", "tick": 100}}
    params = {"session_id": "save-1", "owner_id": "npc-mira", "memory_ids": ["m1"]}
    error = await refusal(
        "memory.consolidate", {**params, "summary": {**summary, "expires_at": EARLY}}
    )
    assert error["data"]["field"] == "summary"
    assert error["message"].startswith("invalid params for memory.consolidate: summary:")
    deep = {**summary, "payload": nested(129)}
    error = await refusal("memory.consolidate", {**params, "summary": deep})
    assert error["data"]["field"] == "summary.payload"
