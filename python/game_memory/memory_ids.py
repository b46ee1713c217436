"""Idempotent memory ids: the same logical "remember" call always gets the same id."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from game_memory.model import GameMoment, check_bounded_id

__all__ = ["derive_memory_id"]

_MEMORY_ID_DOMAIN = "OpenGameAgent.ExtensionOperationId.v1"
_MEMORY_ID_PREFIX = "oga-memory-v1:"


def derive_memory_id(
    session_id: str,
    owner_id: str,
    source_input_id: str,
    moment: GameMoment,
    turn: int = 1,
    call_index: int = 0,
    operation: str = "remember_game_memory",
) -> str:
    """Derive the idempotent id of one logical "remember" call.

    The id is a versioned SHA-256 digest of the session, owner (actor), source input,
    game moment, agent turn (first turn is 1) and call position within the turn, each
    length-prefixed (4-byte big-endian) so no two field lists collide. Retrying the same
    logical call yields the same id, so a retry is a no-op and a retry with different
    content fails closed with ``MemoryConflictError``. Compatible with the reference.
    """
    if turn < 1:
        raise ValueError("turn starts at 1")
    if call_index < 0:
        raise ValueError("call_index starts at 0")
    fields: Iterable[str] = (
        _MEMORY_ID_DOMAIN,
        check_bounded_id(session_id, "session_id"),
        check_bounded_id(owner_id, "owner_id"),
        check_bounded_id(source_input_id, "source_input_id"),
        moment.timeline_id,
        str(moment.tick),
        str(turn),
        str(call_index),
        operation,
    )
    digest = hashlib.sha256()
    for field in fields:
        data = field.encode("utf-8")
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return _MEMORY_ID_PREFIX + digest.hexdigest()
