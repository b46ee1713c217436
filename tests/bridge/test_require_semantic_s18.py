"""``require_semantic`` on a session whose memories have no vector yet (remembered while the
server ran in lexical mode, then restarted with a model): ``-32004`` (a rebuild, or the
catch-up the recall started, repairs it), not ``-32005`` ("retry", which never helps)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from game_memory import VectorMemoryStore, open_memory
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.server import BridgeServer

from .conftest import TOKEN, answered, initialize, remember_params

RECALL = {"session_id": "save-1", "owner_id": "npc-mira", "text": "blade", "limit": 3}


async def caught_up(memory: VectorMemoryStore) -> None:
    """Wait for the front door's catch-ups to end (a front door without them: at once)."""
    catch_ups = getattr(memory, "_catch_ups", None)
    if catch_ups is not None:
        await catch_ups.idle()


async def test_require_semantic_on_memories_without_vectors_is_rebuild_required(
    tmp_path: Path,
) -> None:
    lexical = await open_memory(tmp_path / "save", model="lexical")
    server = BridgeServer(lexical, ServerInfo(mode=lexical.mode, model=None))
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await session.outbox.get()
    remembered = await answered(session, "memory.remember", remember_params(), 1)
    assert remembered["result"]["created"] is True
    await server.shutdown()
    await lexical.aclose()

    memory = await open_memory(tmp_path / "save", model="hashing")
    server = BridgeServer(memory, ServerInfo(mode=memory.mode, model=None))
    session = server.open_session(token=TOKEN)
    await session.receive(initialize())
    await session.outbox.get()
    try:
        refused: Any = await answered(
            session, "memory.recall", {**RECALL, "require_semantic": True}, 2
        )
        assert refused["error"]["code"] == -32004
        assert refused["error"]["data"]["kind"] == "DerivedIndexError"
        assert "memory.rebuild" in refused["error"]["message"]
        assert "retry" not in refused["error"]["message"]

        await caught_up(memory)
        recalled = await answered(session, "memory.recall", {**RECALL, "require_semantic": True}, 3)
        assert recalled["result"]["fallback"] is False
        assert [m["why"]["vector_rank"] for m in recalled["result"]["memories"]] == [1]
    finally:
        await server.shutdown()
        await memory.aclose()
