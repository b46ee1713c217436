"""``memory.forget``, ``memory.erase`` and ``memory.consolidate`` over the bridge.

The server runs over the real front door (``open_memory``, lexical and hashing models), so
this checks the params, the results and the error codes end to end: an unknown memory is
``-32010`` (not found), a bad summary or an erase of listed memories without an NPC is
``-32602`` naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Call


def moment(tick: int) -> dict[str, Any]:
    return {"timeline_id": "main", "tick": tick}


async def remember(call: Call, memory_id: str, text: str, tick: int, **fields: Any) -> None:
    params = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "memory_id": memory_id,
        "text": text,
        "moment": moment(tick),
        **fields,
    }
    answer = await call("memory.remember", params)
    assert answer["result"]["created"] is True, answer


async def recalled(call: Call, tick: int, text: str = "the fire at the mill") -> list[str]:
    answer = await call(
        "memory.recall",
        {
            "session_id": "save-1",
            "owner_id": "npc-mira",
            "text": text,
            "at_or_before": moment(tick),
        },
    )
    return sorted(memory["memory_id"] for memory in answer["result"]["memories"])


async def test_a_forgotten_memory_is_recalled_before_its_moment_only(call: Call) -> None:
    await remember(call, "rumour", "a rumour of a fire at the mill", 100)
    await remember(call, "smoke", "smoke over the mill", 200)
    params = {"session_id": "save-1", "owner_id": "npc-mira", "memory_id": "rumour"}
    answer = await call("memory.forget", {**params, "at": moment(300)})
    assert answer["result"] == {"memory_id": "rumour", "forgotten": True}
    again = await call("memory.forget", {**params, "at": moment(400)})
    assert again["result"]["forgotten"] is False
    assert await recalled(call, 350) == ["smoke"]
    assert await recalled(call, 250) == ["rumour", "smoke"]  # an earlier save remembers
    unknown = await call("memory.forget", {**params, "memory_id": "nope", "at": moment(1)})
    assert unknown["error"]["code"] == -32010
    assert unknown["error"]["data"]["kind"] == "MemoryNotFoundError"
    assert "'nope'" in unknown["error"]["message"]
    missing = await call("memory.forget", params)
    assert missing["error"]["code"] == -32602 and missing["error"]["data"]["field"] == "at"


async def test_a_consolidation_answers_with_the_summary_and_its_sources(call: Call) -> None:
    await remember(call, "m1", "smoke over the mill", 100)
    await remember(call, "m2", "the miller wept by the mill", 200)
    params = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "memory_ids": ["m1", "m2"],
        "summary": {
            "memory_id": "fire",
            "text": "The fire at the mill was no accident",
            "moment": moment(500),
            "importance": 0.9,
        },
    }
    answer = await call("memory.consolidate", params)
    result = answer["result"]
    assert (result["memory_id"], result["created"]) == ("fire", True)
    assert result["memory"]["kind"] == "reflection"
    assert result["memory"]["consolidates"] == ["m1", "m2"]
    assert await recalled(call, 600) == ["fire"]
    assert await recalled(call, 400) == ["m1", "m2"]
    recall = await call(
        "memory.recall",
        {"session_id": "save-1", "text": "fire mill", "at_or_before": moment(600)},
    )
    assert recall["result"]["memories"][0]["consolidates"] == ["m1", "m2"]
    assert (await call("memory.consolidate", params))["result"]["created"] is False


async def test_summaries_of_one_text_over_other_sources_get_their_own_default_ids(
    call: Call,
) -> None:
    # A daily "A quiet day." over the day's memories: the default id covered the text and
    # the moment only, so the second day's summary at one moment was a -32002 conflict
    # whose advice ("omit memory_id") the caller had already followed.
    await remember(call, "m1", "the fire at the mill", 100)
    await remember(call, "m2", "the fire at the well", 200)
    summary = {"text": "A quiet day.", "moment": moment(500)}
    ids = []
    for sources in (["m1"], ["m2"], ["m1", "m2"]):
        params = {"session_id": "save-1", "owner_id": "npc-mira", "memory_ids": sources}
        answer = await call("memory.consolidate", params | {"summary": summary})
        assert answer["result"]["created"] is True, answer
        assert answer["result"]["memory"]["consolidates"] == sources
        ids.append(answer["result"]["memory_id"])
        resent = await call("memory.consolidate", params | {"summary": summary})
        assert (resent["result"]["memory_id"], resent["result"]["created"]) == (ids[-1], False)
    assert len(set(ids)) == 3


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"memory_ids": ["m1", "ghost"]}, -32010, None),
        ({"summary": {"text": "t", "moment": moment(5), "kind": "event"}}, -32602, None),
        (
            {"summary": {"text": "t", "moment": moment(5), "owner_id": "npc-tomas"}},
            -32602,
            "summary.owner_id",
        ),
        ({"summary": {"moment": moment(5)}}, -32602, "summary.text"),
        ({"memory_ids": []}, -32602, "memory_ids"),
    ],
    ids=["unknown source", "not a reflection", "another owner", "no text", "no sources"],
)
async def test_a_consolidation_that_cannot_be_is_refused_with_its_code(
    call: Call, change: dict[str, Any], code: int, field: str | None
) -> None:
    await remember(call, "m1", "smoke over the mill", 100)
    params = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "memory_ids": ["m1"],
        "summary": {"text": "a summary", "moment": moment(5)},
        **change,
    }
    answer = await call("memory.consolidate", params)
    assert answer["error"]["code"] == code, answer
    if field is not None:
        assert answer["error"]["data"]["field"] == field
    assert await recalled(call, 600, "smoke mill") == ["m1"]  # nothing changed


async def test_erase_removes_listed_memories_an_npc_or_a_session(call: Call) -> None:
    for number in range(3):
        await remember(call, f"m{number}", f"memory {number} of the mill", 100 + number)
    listed = await call(
        "memory.erase",
        {"session_id": "save-1", "owner_id": "npc-mira", "memory_ids": ["m0", "ghost"]},
    )
    assert listed["result"] == {"erased": 1}
    assert await recalled(call, 900, "memory mill") == ["m1", "m2"]
    refused = await call("memory.erase", {"session_id": "save-1", "memory_ids": ["m1"]})
    assert refused["error"]["code"] == -32602 and refused["error"]["data"]["field"] == "owner_id"
    assert (await call("memory.erase", {"session_id": "save-1"}))["result"] == {"erased": 2}
    assert await recalled(call, 900, "memory mill") == []
    status = await call("memory.status", {"session_id": "save-1"})
    assert status["result"]["total_entries"] == 0
