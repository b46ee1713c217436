"""``belief_key`` over the bridge: remembered, carried by recalled memories, one version shown.

The server runs over the real front door (``open_memory``, lexical and hashing models), so
this also checks that the bridge passes the key through untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from game_memory import open_memory
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer
from game_memory.model import GameMemoryKind, GameMoment, content_memory_id

from .conftest import TOKEN, answered, initialize


def _remember(text: str, tick: int, key: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "text": text,
        "moment": {"timeline_id": "main", "tick": tick},
    }
    if key is not None:
        params["belief_key"] = key
    return params


@pytest.mark.parametrize("model", ["lexical", "hashing"])
async def test_recall_as_of_a_moment_answers_with_the_version_believed_then(
    tmp_path: Path, model: str
) -> None:
    memory = await open_memory(tmp_path / "save", model=model)
    server = BridgeServer(memory, ServerInfo(mode=memory.mode, model=None))
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await session.outbox.get()
    try:
        first = await answered(
            session, "memory.remember", _remember("The bridge to Eastmarch is open.", 100, "b"), 1
        )
        assert first["result"]["memory"]["belief_key"] == "b"
        await answered(
            session,
            "memory.remember",
            _remember("The bridge to Eastmarch collapsed in the storm.", 500, "b"),
            2,
        )
        answers = {}
        for request_id, tick in ((3, 300), (4, 900)):
            recalled = await answered(
                session,
                "memory.recall",
                {
                    "session_id": "save-1",
                    "owner_id": "npc-mira",
                    "text": "Can I cross the bridge to Eastmarch?",
                    "at_or_before": {"timeline_id": "main", "tick": tick},
                },
                request_id,
            )
            answers[tick] = [m["text"] for m in recalled["result"]["memories"]]
            assert all(m["belief_key"] == "b" for m in recalled["result"]["memories"])
        assert answers == {
            300: ["The bridge to Eastmarch is open."],
            900: ["The bridge to Eastmarch collapsed in the storm."],
        }
    finally:
        await server.shutdown()
        await memory.aclose()


def test_the_default_id_includes_the_key_and_is_unchanged_without_one() -> None:
    moment = GameMoment(timeline_id="main", tick=1)
    fields = ("s", "o", moment, GameMemoryKind.EVENT, "personal", "text", "{}")
    plain = content_memory_id(*fields)
    assert plain == content_memory_id(*fields, None)
    assert content_memory_id(*fields, "bridge") != plain
    assert content_memory_id(*fields, "bridge") != content_memory_id(*fields, "river")
