"""Numbers where the protocol wants names, and strings where it wants numbers, are refused.

The core model is lenient where saves need it (a kind by its reference ordinal, a tick
written as a numeric string); a protocol client sending those by mistake would see a
memory stored as another kind, or forgotten at a moment it never meant, without an error.
"""

from __future__ import annotations

from typing import Any

import pytest

from game_memory.bridge.server import BridgeServer

from .conftest import MOMENT, FakeService
from .test_server import INFO, call, open_ready

REMEMBER = {"session_id": "s", "owner_id": "npc", "text": "the bridge is open", "moment": MOMENT}
FORGET = {"session_id": "s", "owner_id": "npc", "memory_id": "m", "at": MOMENT}
RECALL = {"session_id": "s", "owner_id": "npc", "text": "bridge"}


def stringly(moment: dict[str, Any]) -> dict[str, Any]:
    return {**moment, "tick": str(moment["tick"])}


@pytest.mark.parametrize(
    ("method", "params", "field"),
    [
        ("memory.remember", {**REMEMBER, "kind": 3}, "kind"),
        ("memory.remember", {**REMEMBER, "kind": 1.0}, "kind"),
        ("memory.recall", {**RECALL, "kinds": ["fact", 2]}, "kinds.1"),
        ("memory.remember", {**REMEMBER, "moment": stringly(MOMENT)}, "moment"),
        ("memory.remember", {**REMEMBER, "expires_at": stringly(MOMENT)}, "expires_at"),
        ("memory.forget", {**FORGET, "at": stringly(MOMENT)}, "at"),
        ("memory.recall", {**RECALL, "at_or_before": stringly(MOMENT)}, "at_or_before"),
    ],
)
async def test_a_number_for_a_kind_or_a_string_for_a_tick_is_refused(
    method: str, params: dict[str, Any], field: str
) -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    error = (await call(session, method, params))["error"]
    assert error["code"] == -32602
    assert error["data"]["field"] == field
    assert service.calls == []


async def test_kinds_by_name_and_ticks_as_numbers_still_work() -> None:
    service = FakeService()
    session = await open_ready(BridgeServer(service, INFO))
    whole = {**MOMENT, "tick": float(MOMENT["tick"])}  # Godot sends a float for a number
    for method, params in (
        ("memory.remember", {**REMEMBER, "kind": "fact", "moment": whole}),
        ("memory.recall", {**RECALL, "kinds": ["fact", "event"], "at_or_before": whole}),
    ):
        reply = await call(session, method, params)
        assert "error" not in reply, reply


async def test_an_expiry_tick_out_of_range_names_the_expiry() -> None:
    session = await open_ready(BridgeServer(FakeService(), INFO))
    params = {**REMEMBER, "expires_at": {**MOMENT, "tick": 2**63}}
    error = (await call(session, "memory.remember", params))["error"]
    assert error["code"] == -32602
    assert error["data"]["field"].startswith("expires_at")
