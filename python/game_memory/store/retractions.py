"""Retraction records: what ``forget`` writes to an owner's retraction log.

A retraction says "memory ``memory_id`` is forgotten from game moment ``at`` on" (see
``store/view.py`` for what a query then sees). Its payload is compact UTF-8 JSON,
``{"format_version": 1, "retraction": {"memory_id": ..., "at": {timeline_id, tick,
calendar_json}}}``, framed as one record (``records.py``) in the owner's retraction log
``r-<sha256(owner)>.log`` (continued in segments, like the memory log). A retraction holds
no text of the memory, only its id and the moment.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from game_memory.model import GameMoment, check_bounded_id
from game_memory.model.memory import STORED
from game_memory.store.documents import DocumentError

__all__ = ["RETRACTION_FORMAT_VERSION", "Retraction", "decode_retraction", "encode_retraction"]

RETRACTION_FORMAT_VERSION = 1

#: ``(memory_id, at)``: the memory forgotten and the moment from which it is.
Retraction = tuple[str, GameMoment]

_MOMENT = GameMoment.__pydantic_serializer__


def encode_retraction(memory_id: str, at: GameMoment) -> bytes:
    """The record payload of a retraction (compact UTF-8 JSON)."""
    return (
        b'{"format_version":1,"retraction":{"memory_id":'
        + json.dumps(memory_id, ensure_ascii=False, separators=(",", ":")).encode()
        + b',"at":'
        + _MOMENT.to_json(at)
        + b"}}"
    )


def decode_retraction(payload: bytes) -> Retraction:
    """Decode and validate a payload written by :func:`encode_retraction`.

    Raises:
        DocumentError: not a retraction of a supported version, or invalid fields.
    """
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise DocumentError(f"the record is not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("format_version") != 1:
        raise DocumentError("the record is not a retraction of format version 1")
    body = document.get("retraction")
    if not isinstance(body, dict) or set(body) != {"memory_id", "at"}:
        raise DocumentError("the record holds an invalid retraction")
    try:
        memory_id = check_bounded_id(body["memory_id"], "the retracted memory id")
        at = GameMoment.model_validate(body["at"], context=STORED)
    except (ValueError, ValidationError) as exc:
        raise DocumentError(f"the record holds an invalid retraction: {exc}") from exc
    return memory_id, at
