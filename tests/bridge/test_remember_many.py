"""``memory.remember_many`` over the bridge, on the real front door (lexical and hashing).

One atomic batch: results in order (``created`` false for a repeat), a conflict anywhere is
``-32002`` with nothing stored, an invalid entry is ``-32602`` naming it (nothing stored),
and a batch over 256 memories is refused with ``-32602``.
"""

from __future__ import annotations

from typing import Any

from game_memory.bridge.params import MAXIMUM_REMEMBER_MANY_MEMORIES

from .conftest import Call


def entry(text: str, tick: int, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": "save-1",
        "owner_id": fields.pop("owner_id", "npc-mira"),
        "text": text,
        "moment": {"timeline_id": "main", "tick": tick},
        **fields,
    }


async def recalled(call: Call) -> list[str]:
    """Every memory of the session (a recall without text ranks them all)."""
    answer = await call("memory.recall", {"session_id": "save-1", "limit": 100})
    return sorted(memory["memory_id"] for memory in answer["result"]["memories"])


async def test_a_batch_is_stored_and_answers_one_result_per_memory_in_order(call: Call) -> None:
    batch = [
        entry("the smith sold a sword", 1, memory_id="a"),
        entry("the river flooded", 2),
        entry("the smith sold a sword", 1, memory_id="a"),
        entry("the miller owes coin", 3, owner_id="npc-tom", memory_id="c"),
    ]
    answer = await call("memory.remember_many", {"memories": batch})
    results = answer["result"]["results"]
    assert [r["created"] for r in results] == [True, True, False, True]
    assert results[0]["memory_id"] == "a" and results[1]["memory_id"].startswith("gm-")
    stored = sorted(r["memory_id"] for r in results[:2] + results[3:])
    assert await recalled(call) == stored
    again = await call("memory.remember_many", {"memories": batch})
    assert [r["created"] for r in again["result"]["results"]] == [False] * 4


async def test_a_conflict_anywhere_stores_nothing_of_the_batch(call: Call) -> None:
    await call("memory.remember", entry("original", 1, memory_id="m1"))
    batch = [
        entry("a new harvest memory", 2, memory_id="n1"),
        entry("rewritten", 1, memory_id="m1"),
    ]
    answer = await call("memory.remember_many", {"memories": batch})
    assert answer["error"]["code"] == -32002
    assert await recalled(call) == ["m1"]


async def test_an_invalid_entry_is_named_and_nothing_is_stored(call: Call) -> None:
    batch = [entry("a harvest memory", 1), entry("bad", 2, importance=3)]
    answer = await call("memory.remember_many", {"memories": batch})
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["field"] == "memories.1.importance"
    assert await recalled(call) == []


async def test_an_empty_or_oversized_batch_is_refused(call: Call) -> None:
    empty = await call("memory.remember_many", {"memories": []})
    assert empty["error"]["code"] == -32602
    many = [entry(f"m {i}", i) for i in range(MAXIMUM_REMEMBER_MANY_MEMORIES + 1)]
    over = await call("memory.remember_many", {"memories": many})
    assert over["error"]["code"] == -32602
    assert over["error"]["data"]["field"] == "memories"
