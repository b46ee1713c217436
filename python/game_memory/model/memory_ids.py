"""Idempotent memory ids: the same logical "remember" always gets the same id.

Two rules, both here so no layer mints ids of its own: :func:`derive_memory_id` (the
reference's id of one agent call) and :func:`content_memory_id` (the bridge's default id, a
digest of the content).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from game_memory.model.fields import check_bounded_id
from game_memory.model.memory import GameMemoryKind, GameMoment

__all__ = ["content_memory_id", "derive_memory_id"]

_MEMORY_ID_DOMAIN = "OpenGameAgent.ExtensionOperationId.v1"
_MEMORY_ID_PREFIX = "oga-memory-v1:"
_DIGEST_DOMAIN = "game-memory.bridge.remember.v1"
#: Put before a summary's source count and ids in its digest.
_SOURCES_MARKER = "\x1fconsolidates"


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


def content_memory_id(
    session_id: str,
    owner_id: str,
    moment: GameMoment,
    kind: GameMemoryKind,
    scope: str,
    text: str,
    payload_json: str,
    belief_key: str | None = None,
    consolidates: Sequence[str] = (),
) -> str:
    """Return the default id of a remembered memory: ``"gm-"`` and 32 hex digits.

    The digest is SHA-256 over a domain string and then session, owner, timeline, tick
    (decimal), kind (lower case), scope, text and canonical payload JSON (and the belief
    key, when there is one: ids of memories without a key are unchanged; and for a
    summary, the marker ``"\x1fconsolidates"``, the number of sources (decimal) and each
    source id in order, so two summaries of one text and moment over other sources get
    other ids; the count keeps the fields unambiguous whatever the ids hold), each as UTF-8
    preceded by its byte length as a 4-byte big-endian integer; the id keeps the first
    32 hex digits (128 bits). Equal content always yields the equal id.
    """
    digest = hashlib.sha256()
    for field in (
        _DIGEST_DOMAIN,
        session_id,
        owner_id,
        moment.timeline_id,
        str(moment.tick),
        kind.value,
        scope,
        text,
        payload_json,
        *(() if belief_key is None else (belief_key,)),
        *(() if not consolidates else (_SOURCES_MARKER, str(len(consolidates)), *consolidates)),
    ):
        data = field.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return "gm-" + digest.hexdigest()[:32]
