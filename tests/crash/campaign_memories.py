"""The memories of the SIGKILL campaign: which memory each id stands for.

A child process and the parent agree on every byte of a memory from its id alone, so no
memory is passed between them.

Each text ends with four words drawn from the id's hash, so that no two memories share a
vector under the hashing model: with the id's own words alone (``c4-198`` and ``c4-295``)
the model's 256 signed buckets gave two memories one vector often enough that a kept
memory's row passed for an erased one's in the erase check.
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
        searchable_text=_text(memory_id),
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
        searchable_text=_text(memory_id),
    )


def _text(memory_id: str) -> str:
    """The memory's text: its id, then four words from the id's hash (see the docstring)."""
    digest = hashlib.sha256(b"words " + memory_id.encode()).hexdigest()
    words = " ".join(f"w{digest[start : start + 8]}" for start in range(0, 32, 8))
    return f"memory {memory_id} of the kill campaign {words}"
