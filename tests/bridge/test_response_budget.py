"""The response cap holds while a result is built: a big result stops early with -32003."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from game_memory.bridge import handlers, results
from game_memory.bridge.budget import ResponseBudget, ResponseTooLargeError
from game_memory.bridge.limits import BridgeLimits
from game_memory.bridge.messages import encode_message
from game_memory.bridge.protocol import BridgeConnection
from game_memory.bridge.results import memory_json_bound, memory_to_json
from game_memory.bridge.server import BridgeServer
from game_memory.model import GameMemory, GameMemoryKind, GameMoment

from .conftest import FakeService, request
from .test_server import INFO, call, drain, open_ready


def big_memory(number: int, characters: int) -> GameMemory:
    text = f"memory {number} " + "x" * characters
    return GameMemory(
        memory_id=f"m{number}",
        session_id="s",
        owner_id="npc",
        scope="personal",
        kind=GameMemoryKind.EVENT,
        payload_json=json.dumps({"text": text}, separators=(",", ":")),
        moment=GameMoment(timeline_id="main", tick=number),
        searchable_text=text,
        tags=("a", "b"),
        metadata={"k": ""},
    )


def test_a_memory_bound_is_never_below_its_encoded_size() -> None:
    for memory in (big_memory(1, 10), big_memory(2, 5_000)):
        item = memory_to_json(memory)
        item["why"] = {"lexical_rank": 1, "vector_rank": None, "vector_score": None}
        assert len(encode_message(item).encode("utf-8")) <= memory_json_bound(memory)


def test_a_budget_refuses_once_the_exact_size_passes_the_cap() -> None:
    budget = ResponseBudget(10_000)
    piece = {"text": "x" * 3_000}
    for _ in range(3):
        budget.charge(piece, 3_100)
    with pytest.raises(ResponseTooLargeError) as raised:
        budget.charge(piece, 3_100)
    assert raised.value.code == -32003
    assert raised.value.data == {"kind": "ResponseTooLarge", "bound": "maximum_response_bytes"}


def test_a_budget_does_not_refuse_on_an_overestimate() -> None:
    # Bounds twelve times the real size would pass the cap; the exact sizes do not.
    budget = ResponseBudget(10_000)
    for _ in range(8):
        budget.charge({"text": "x" * 1_000}, 12_000)
    assert budget.charged <= 10_000


async def test_recall_many_stops_building_once_the_cap_is_passed() -> None:
    # 64 queries of 8 memories of 10 kB would build 5 MB; the cap is 100 kB.
    service = FakeService(memories=[big_memory(number, 10_000) for number in range(8)])
    limits = BridgeLimits(maximum_response_bytes=100_000)
    session = await open_ready(BridgeServer(service, INFO, limits))
    queries: list[dict[str, Any]] = [{"session_id": "s", "limit": 8}] * 64
    response = await call(session, "memory.recall_many", {"queries": queries})
    assert response["error"]["code"] == -32003
    assert response["error"]["data"]["bound"] == "maximum_response_bytes"
    assert service.calls.count("recall") <= 2, "queries after the cap was passed still ran"


async def test_a_result_under_the_cap_is_answered_whole() -> None:
    service = FakeService(memories=[big_memory(number, 10_000) for number in range(8)])
    limits = BridgeLimits(maximum_response_bytes=100_000)
    session = await open_ready(BridgeServer(service, INFO, limits))
    queries: list[dict[str, Any]] = [{"session_id": "s", "limit": 2}] * 2
    response = await call(session, "memory.recall_many", {"queries": queries})
    results = response["result"]["results"]
    assert [len(entry["memories"]) for entry in results] == [2, 2]


async def test_a_big_result_is_built_and_encoded_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: dict[str, set[int]] = {"build": set(), "encode": set()}
    build, encode = results.recall_to_json, BridgeConnection.encode_result

    def recording_build(*args: Any) -> Any:
        threads["build"].add(threading.get_ident())
        return build(*args)

    def recording_encode(self: BridgeConnection, *args: Any) -> str:
        threads["encode"].add(threading.get_ident())
        return encode(self, *args)

    monkeypatch.setattr(handlers, "recall_to_json", recording_build)
    monkeypatch.setattr(BridgeConnection, "encode_result", recording_encode)
    # Two memories of 600 k characters: past the offload threshold, under the 16 MiB cap.
    service = FakeService(memories=[big_memory(number, 600_000) for number in range(2)])
    session = await open_ready(BridgeServer(service, INFO))
    response = await call(session, "memory.recall", {"session_id": "s", "limit": 2})
    assert [item["memory_id"] for item in response["result"]["memories"]] == ["m0", "m1"]
    loop_thread = threading.get_ident()
    assert threads["build"] and loop_thread not in threads["build"]
    assert threads["encode"] and loop_thread not in threads["encode"]
    # A small result stays on the loop: no thread hop on the fast path.
    threads["build"].clear()
    service.memories[:] = [big_memory(9, 10)]
    await call(session, "memory.recall", {"session_id": "s"}, 2)
    assert threads["build"] == {loop_thread}


async def test_the_members_of_a_batch_share_one_budget() -> None:
    # Each recall alone fits the cap; together they do not, so a member stops early.
    service = FakeService(memories=[big_memory(number, 10_000) for number in range(8)])
    limits = BridgeLimits(maximum_response_bytes=100_000)
    session = await open_ready(BridgeServer(service, INFO, limits))
    entries = [json.loads(request("memory.recall", {"session_id": "s"}, n)) for n in range(4)]
    await session.receive(json.dumps(entries))
    (answer,) = await drain(session, 1)
    codes = [entry.get("error", {}).get("code") for entry in answer]
    assert -32003 in codes
    assert len(json.dumps(answer)) <= 100_000
