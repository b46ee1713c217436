"""Blank ids are refused at the params edge, naming the parameter and saying what to do."""

from __future__ import annotations

from typing import Any

import pytest

from game_memory.bridge.server import BridgeServer

from .conftest import MOMENT, FakeService
from .test_server import INFO, call, open_ready

FORGET = {"session_id": "s", "owner_id": "npc", "memory_id": "m", "at": MOMENT}
ERASE = {"session_id": "s", "owner_id": "o"}
SUMMARY = {"text": "a summary", "moment": MOMENT}
CONSOLIDATE = {"session_id": "s", "owner_id": "npc", "memory_ids": ["m"], "summary": SUMMARY}


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("memory.forget", {**FORGET, "session_id": " "}, "session_id"),
        ("memory.forget", {**FORGET, "owner_id": "\t"}, "owner_id"),
        ("memory.forget", {**FORGET, "memory_id": "  "}, "memory_id"),
        ("memory.erase", {"session_id": " "}, "session_id"),
        ("memory.erase", {"session_id": "s", "owner_id": " "}, "owner_id"),
        (
            "memory.erase",
            {"session_id": "s", "owner_id": "o", "memory_ids": ["m", " "]},
            "memory_ids.1",
        ),
        ("memory.consolidate", {**CONSOLIDATE, "memory_ids": [" "]}, "memory_ids.0"),
        ("memory.status", {"session_id": "\u3000"}, "session_id"),
    ],
)
async def test_a_blank_id_names_its_parameter(
    method: str, params: dict[str, Any], field: str
) -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    error = (await call(session, method, params))["error"]
    assert error["code"] == -32602
    assert error["data"] == {"kind": "ValidationError", "field": field}
    assert error["message"].startswith(f"invalid params for {method}: {field}: must not be blank")
    assert "send a non-blank id" in error["message"]
    assert service.calls == []


async def test_a_consolidate_summary_of_another_kind_names_summary_kind() -> None:
    session = await open_ready(BridgeServer(FakeService(), INFO))
    params = {**CONSOLIDATE, "summary": {**SUMMARY, "kind": "event"}}
    error = (await call(session, "memory.consolidate", params))["error"]
    assert error["code"] == -32602
    assert error["data"]["field"] == "summary.kind"
    assert "memory.consolidate" in error["message"] and "leave it out" in error["message"]
