"""The memories of the SIGKILL campaign: which memory each id stands for.

A child process and the parent agree on every byte of a memory from its id alone, so no
memory is passed between them.
"""

from __future__ import annotations

import hashlib
import json

from game_memory import GameMemory, GameMoment

__all__ = ["OWNERS", "SESSIONS", "memory", "summary"]

SESSIONS = ("village", "keep")
OWNERS = ("mira", "jory", "tomas", "elda")


def memory(memory_id: str) -> GameMemory:
    """The one memory each id stands for (its partition and size follow from the id)."""
    digest = hashlib.sha256(memory_id.encode()).digest()
    return GameMemory(
        memory_id=memory_id,
        session_id=SESSIONS[digest[0] % 2],
        owner_id=OWNERS[digest[1] % 4],
        scope="campaign",
        kind="event",
        payload_json=json.dumps({"id": memory_id, "pad": "p" * (digest[2] % 5 * 200)}),
        moment=GameMoment(timeline_id="world", tick=digest[3]),
        searchable_text=f"memory {memory_id} of the kill campaign",
    )


def summary(memory_id: str, session_id: str, owner_id: str, tick: int) -> GameMemory:
    """The summary a consolidation appends (``consolidates`` is set by the store)."""
    return GameMemory(
        memory_id=memory_id,
        session_id=session_id,
        owner_id=owner_id,
        scope="campaign",
        kind="reflection",
        payload_json=json.dumps({"id": memory_id}),
        moment=GameMoment(timeline_id="world", tick=tick),
        searchable_text=f"memory {memory_id} of the kill campaign",
    )
