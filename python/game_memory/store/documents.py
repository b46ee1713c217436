"""Memory documents: this store's own record payload, and the reference's v1 JSON format.

Our payload is ``{"format_version": V, "memory": <GameMemory as snake_case JSON>}``: ``V``
is 1 for a memory without a ``belief_key`` or ``consolidates`` (the bytes every release
wrote before those fields existed, so older saves and content digests are unchanged) and 2
for one with either. Both are read; a version-1 record carrying one of them is damage.
The legacy format is what the C# runtime writes (``System.Text.Json`` defaults): PascalCase
properties, ``FormatVersion`` 1, the kind as its PascalCase name, ``PayloadJson`` as a JSON
string, non-ASCII and HTML-sensitive characters ``\\u``-escaped. Legacy documents are read
strictly (case-sensitive names, duplicate properties rejected, unknown properties ignored)
and written byte-for-byte like the C# runtime, so tests and benchmarks can produce
faithful legacy saves.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from game_memory.model import GameMemory, GameMemoryKind, GameMoment
from game_memory.model.memory import STORED
from game_memory.store.plain_document import decode_plain_document
from game_memory.store.plain_legacy import decode_plain_legacy
from game_memory.strict_json import parse_strict_json

__all__ = [
    "DOCUMENT_FORMAT_VERSION",
    "DocumentError",
    "decode_document",
    "decode_legacy_document",
    "encode_document",
    "encode_legacy_document",
    "validate_legacy",
]

DOCUMENT_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_LEGACY_MAXIMUM_DEPTH = 64
_LEGACY_KINDS = {kind.reference_name: kind for kind in GameMemoryKind}


class DocumentError(Exception):
    """A document that cannot be decoded; the caller names the file and fails closed."""


_SERIALIZER = GameMemory.__pydantic_serializer__


def encode_document(memory: GameMemory) -> bytes:
    """Serialize ``memory`` as this store's record payload (compact UTF-8 JSON)."""
    # The serializer's bytes are exactly model_dump_json() encoded, without the round trip.
    version = b"1" if memory.belief_key is None and not memory.consolidates else b"2"
    return b'{"format_version":' + version + b',"memory":' + _SERIALIZER.to_json(memory) + b"}"


def decode_document(payload: bytes) -> GameMemory:
    """Decode and fully validate a record payload written by :func:`encode_document`.

    A payload of the plain, common shape is checked by ``plain_document`` (the model's
    rules, faster); any other, and any the fast path is unsure of, goes through
    ``json.loads`` and the memory model, which name the damage.

    Raises:
        DocumentError: invalid JSON, an unreadable format version, an invalid memory, or
            a format-1 record holding a ``belief_key`` or ``consolidates``.
    """
    plain = decode_plain_document(payload)
    if plain is not None:
        version, memory = plain
        if version in _READABLE_VERSIONS and _fits_version(version, memory):
            return memory
    return _decode_through_model(payload)


def _fits_version(version: object, memory: GameMemory) -> bool:
    """Format 1 predates ``belief_key`` and ``consolidates``: a record of it holding one is
    damage."""
    return version != 1 or (memory.belief_key is None and not memory.consolidates)


def _decode_through_model(payload: bytes) -> GameMemory:
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise DocumentError(f"the record is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise DocumentError("the record is not a JSON object")
    version = document.get("format_version")
    if version not in _READABLE_VERSIONS or isinstance(version, bool):
        raise DocumentError(
            f"the record has format version {version!r}; this game-memory reads versions "
            "1 and 2 (a newer release may have written it)"
        )
    try:
        memory = GameMemory.model_validate(document.get("memory"), context=STORED)
    except ValidationError as exc:
        raise DocumentError(f"the record holds an invalid memory: {exc}") from exc
    if not _fits_version(version, memory):
        raise DocumentError("a format-1 record cannot hold a belief_key or consolidates")
    return memory


def _legacy_moment(value: Any, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise DocumentError(f"{name} must be an object")
    return {
        "timeline_id": value.get("TimelineId"),
        "tick": _integer(value.get("Tick"), f"{name}.Tick"),
        "calendar_json": value.get("CalendarJson"),
    }


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DocumentError(f"{name} must be an integer")
    return value


def decode_legacy_document(data: bytes) -> GameMemory:
    """Decode a v1 memory document as written by the reference C# runtime.

    A document of the plain, common shape is checked by ``plain_legacy`` (the same rules,
    faster); any other goes through the memory model.

    Raises:
        DocumentError: invalid JSON, duplicate properties, wrong ``FormatVersion``, an
            unknown kind, or data the memory model rejects.
    """
    try:
        text = data.decode("utf-8-sig")
        document = parse_strict_json(text, "the legacy document", _LEGACY_MAXIMUM_DEPTH)
    except (UnicodeDecodeError, ValueError) as exc:
        raise DocumentError(str(exc)) from exc
    if not isinstance(document, dict):
        raise DocumentError("the legacy document is not a JSON object")
    if document.get("FormatVersion") != 1:
        raise DocumentError(
            f"unsupported legacy format version {document.get('FormatVersion')!r} (expected 1)"
        )
    kind_name = document.get("Kind")
    kind = _LEGACY_KINDS.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None:
        raise DocumentError(f"unsupported memory kind {kind_name!r}")
    return decode_plain_legacy(document, kind) or validate_legacy(document, kind)


def validate_legacy(document: dict[str, Any], kind: GameMemoryKind) -> GameMemory:
    """Build the memory of a parsed legacy document through the model's full validation."""
    if "Moment" not in document or document["Moment"] is None:
        raise DocumentError("the legacy document has no Moment")
    importance = document.get("Importance", 0.0)
    if isinstance(importance, bool) or not isinstance(importance, int | float):
        raise DocumentError("Importance must be a number")
    if isinstance(importance, int) and not 0 <= importance <= 1:
        raise DocumentError("Importance must be a number between 0 and 1")
    fields = {
        "memory_id": document.get("MemoryId"),
        "session_id": document.get("SessionId"),
        "owner_id": document.get("OwnerId"),
        "scope": document.get("Scope"),
        "kind": kind,
        "payload_json": document.get("PayloadJson"),
        "moment": _legacy_moment(document["Moment"], "Moment"),
        "importance": float(importance),
        "searchable_text": document.get("SearchableText"),
        "tags": document.get("Tags") or (),
        "source_input_id": document.get("SourceInputId"),
        "expires_at": _legacy_moment(document.get("ExpiresAt"), "ExpiresAt"),
        "metadata": document.get("Metadata") or {},
    }
    try:
        return GameMemory.model_validate(fields, context=STORED)
    except ValidationError as exc:
        raise DocumentError(f"the legacy document contains invalid data: {exc}") from exc


_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", "\\": "\\\\"}
_HTML_SENSITIVE = frozenset("\"&'+<>`")


def _unicode_escape(code: int) -> str:
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"


def _legacy_string(value: str) -> str:
    parts = ['"']
    for char in value:
        code = ord(char)
        if char in _SHORT_ESCAPES:
            parts.append(_SHORT_ESCAPES[char])
        elif code < 0x20 or code > 0x7E or char in _HTML_SENSITIVE:
            parts.append(_unicode_escape(code))
        else:
            parts.append(char)
    parts.append('"')
    return "".join(parts)


def _legacy_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return _legacy_string(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_legacy_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{_legacy_string(k)}:{_legacy_value(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(f"cannot encode {type(value).__name__}")


def _legacy_moment_dict(moment: GameMoment | None) -> dict[str, Any] | None:
    if moment is None:
        return None
    return {
        "TimelineId": moment.timeline_id,
        "Tick": moment.tick,
        "CalendarJson": moment.calendar_json,
    }


def encode_legacy_document(memory: GameMemory) -> bytes:
    """Serialize ``memory`` exactly as the reference C# runtime writes a v1 document."""
    document: dict[str, Any] = {
        "FormatVersion": 1,
        "MemoryId": memory.memory_id,
        "SessionId": memory.session_id,
        "OwnerId": memory.owner_id,
        "Scope": memory.scope,
        "Kind": memory.kind.reference_name,
        "PayloadJson": memory.payload_json,
        "Moment": _legacy_moment_dict(memory.moment),
        "Importance": memory.importance,
        "SearchableText": memory.searchable_text,
        "Tags": list(memory.tags),
        "SourceInputId": memory.source_input_id,
        "ExpiresAt": _legacy_moment_dict(memory.expires_at),
        "Metadata": dict(memory.metadata),
    }
    return _legacy_value(document).encode("utf-8")
