"""Errors of the core's own checks name the entry and the method called, not memory.remember."""

from __future__ import annotations

from typing import Any

import pytest

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


@pytest.mark.parametrize("expires_at", [EARLY, {"timeline_id": "other", "tick": 500}])
async def test_a_remember_many_entry_with_a_wrong_expiry_names_its_expires_at(
    expires_at: dict[str, Any],
) -> None:
    entries = [remember_params(text=f"memory {n}") for n in range(3)]
    entries[2] = remember_params(expires_at=expires_at)
    error = await refusal("memory.remember_many", {"memories": entries})
    assert error["data"] == {"kind": "ValidationError", "field": "memories.2.expires_at"}
    assert error["message"].startswith(
        "invalid params for memory.remember_many: memories.2.expires_at: must "
    )
    assert "memory.remember:" not in error["message"]


SUMMARY = {"text": "a summary", "moment": {"timeline_id": "main", "tick": 100}}
CONSOLIDATE = {"session_id": "save-1", "owner_id": "npc-mira", "memory_ids": ["m1"]}


@pytest.mark.parametrize("expires_at", [EARLY, {"timeline_id": "other", "tick": 500}])
async def test_a_consolidate_summary_with_a_wrong_expiry_names_summary_expires_at(
    expires_at: dict[str, Any],
) -> None:
    summary = {**SUMMARY, "expires_at": expires_at}
    error = await refusal("memory.consolidate", {**CONSOLIDATE, "summary": summary})
    assert error["data"] == {"kind": "ValidationError", "field": "summary.expires_at"}
    assert error["message"].startswith(
        "invalid params for memory.consolidate: summary.expires_at: must "
    )


@pytest.mark.parametrize("depth", [129, 255, 300, 600])
async def test_a_deep_payload_is_named_by_its_path_with_the_limit_message(depth: int) -> None:
    summary = {**SUMMARY, "payload": nested(depth)}
    error = await refusal("memory.consolidate", {**CONSOLIDATE, "summary": summary})
    assert error["data"] == {"kind": "ValidationError", "field": "summary.payload"}
    assert "summary.payload: nested deeper than 128 levels" in error["message"]
    assert len(error["message"]) < 200
    entries = [remember_params(text="one"), remember_params(payload=nested(depth))]
    error = await refusal("memory.remember_many", {"memories": entries})
    assert error["data"] == {"kind": "ValidationError", "field": "memories.1.payload"}
    assert "memories.1.payload: nested deeper than 128 levels" in error["message"]
    assert len(error["message"]) < 200
