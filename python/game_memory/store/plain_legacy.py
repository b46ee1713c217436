"""A fast decoder for legacy documents of the plain, common shape; the model decides the rest.

A migration validates every legacy document, and pydantic's validation of a parsed document
costs as much again as reading and parsing it. Most documents are plain: ASCII text, no
calendar. For those, this module applies exactly the model's rules by hand and assembles
the memory without a second pass. It only ever says "valid, here is the memory" or "not
plain, ask the model" (``None``); it never rejects, so every error message still comes from
the model. ``tests/store/test_plain_legacy.py`` checks against the model that it accepts
nothing the model refuses and builds exactly what the model builds.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from game_memory.model import (
    GameMemory,
    GameMemoryKind,
    GameMoment,
    assemble_validated,
)
from game_memory.model.fields import (
    MAXIMUM_ID_CHARACTERS,
    MAXIMUM_METADATA_ENTRIES,
    MAXIMUM_METADATA_KEY_CHARACTERS,
    MAXIMUM_METADATA_VALUE_CHARACTERS,
    MAXIMUM_PAYLOAD_CHARACTERS,
    MAXIMUM_PAYLOAD_DEPTH,
    MAXIMUM_SEARCHABLE_TEXT_CHARACTERS,
    MAXIMUM_TAGS,
)
from game_memory.strict_json import parse_strict_json

__all__ = ["decode_plain_legacy"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _plain_id(value: Any, maximum: int = MAXIMUM_ID_CHARACTERS) -> bool:
    # For ASCII text, "blank after strip()" is exactly "all whitespace".
    return (
        type(value) is str and 0 < len(value) <= maximum and value.isascii() and not value.isspace()
    )


def _plain_text(value: Any, maximum: int) -> bool:
    return type(value) is str and len(value) <= maximum and value.isascii()


def _moment(value: Any) -> GameMoment | None:
    if type(value) is not dict or value.get("CalendarJson") is not None:
        return None
    timeline, tick = value.get("TimelineId"), value.get("Tick")
    if not _plain_id(timeline) or type(tick) is not int or not _INT64_MIN <= tick <= _INT64_MAX:
        return None
    return assemble_validated(
        GameMoment, {"timeline_id": timeline, "tick": tick, "calendar_json": None}
    )


def _tags(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if type(value) is not list or not all(_plain_id(tag) for tag in value):
        return None
    unique = set(value)
    if len(unique) > MAXIMUM_TAGS:
        return None
    return tuple(sorted(unique))  # ASCII: code-point order is UTF-16 (ordinal) order


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return {}
    if type(value) is not dict or len(value) > MAXIMUM_METADATA_ENTRIES:
        return None
    for key, item in value.items():
        if not _plain_id(key, MAXIMUM_METADATA_KEY_CHARACTERS) or not _plain_text(
            item, MAXIMUM_METADATA_VALUE_CHARACTERS
        ):
            return None
    return dict(value)


def decode_plain_legacy(document: dict[str, Any], kind: GameMemoryKind) -> GameMemory | None:
    """The memory a parsed legacy document holds, if it is plain; ``None`` otherwise.

    Args:
        document: The parsed document, its ``FormatVersion`` already checked.
        kind: Its kind, already resolved from ``Kind``.
    """
    memory_id, session_id = document.get("MemoryId"), document.get("SessionId")
    owner_id, scope = document.get("OwnerId"), document.get("Scope")
    if not (_plain_id(memory_id) and _plain_id(session_id) and _plain_id(owner_id)):
        return None
    payload: Any = document.get("PayloadJson")
    if not _plain_id(scope) or not _plain_text(payload, MAXIMUM_PAYLOAD_CHARACTERS):
        return None
    importance = document.get("Importance", 0.0)
    if type(importance) is int and 0 <= importance <= 1:
        importance = float(importance)
    if type(importance) is not float or not 0.0 <= importance <= 1.0:
        return None
    text = document.get("SearchableText")
    if text is not None and not _plain_text(text, MAXIMUM_SEARCHABLE_TEXT_CHARACTERS):
        return None
    source = document.get("SourceInputId")
    if source is not None and not _plain_id(source):
        return None
    moment = _moment(document.get("Moment"))
    tags = _tags(document.get("Tags") or None)
    metadata = _metadata(document.get("Metadata") or None)
    if moment is None or tags is None or metadata is None:
        return None
    expiry_value = document.get("ExpiresAt")
    expiry = None if expiry_value is None else _moment(expiry_value)
    if expiry_value is not None and (
        expiry is None or expiry.timeline_id != moment.timeline_id or expiry.tick < moment.tick
    ):
        return None
    try:
        parse_strict_json(payload, "payload_json", MAXIMUM_PAYLOAD_DEPTH)
    except ValueError:
        return None
    return assemble_validated(
        GameMemory,
        {
            "memory_id": memory_id,
            "session_id": session_id,
            "owner_id": owner_id,
            "scope": scope,
            "kind": kind,
            "payload_json": payload,
            "moment": moment,
            "importance": importance,
            "searchable_text": text,
            "tags": tags,
            "source_input_id": source,
            "expires_at": expiry,
            "metadata": MappingProxyType(metadata),
            "belief_key": None,
            "consolidates": (),
        },
    )
