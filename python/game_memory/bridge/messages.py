"""JSON-RPC 2.0 envelopes: strict parsing and checking of inbound messages, size-capped
encoding of outbound ones.

Pure functions. Parsing refuses what JSON allows but a game never means: duplicate keys,
``NaN``/``Infinity``, numbers too large for a 64-bit float (``1e400``, or an integer of
400 digits, which would become infinity and could never be answered in JSON), and nesting
deep enough to exhaust the parser. An envelope must have exactly the members ``jsonrpc``
("2.0"), ``method`` (a string) and optionally ``id`` (a string, a number a 64-bit float
holds exactly, at most 2^53 in magnitude, or null) and ``params``. A parse error's
``data.kind`` names what was refused: one of :data:`PARSE_ERROR_KINDS`.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from typing import Any, TypeAlias

from game_memory.bridge.codes import ErrorCode, RpcError

__all__ = [
    "PARSE_ERROR_KINDS",
    "Envelope",
    "EnvelopeError",
    "RequestId",
    "encode_message",
    "encode_response",
    "error_response",
    "notification",
    "parse_message",
    "read_envelope",
    "response_too_large",
    "success_response",
    "utf8_size",
]

#: A JSON-RPC id: a string, a number or null.
RequestId: TypeAlias = str | int | float | None

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


@dataclass(frozen=True)
class Envelope:
    """A well-formed request object (its params not yet checked).

    Attributes:
        request_id: The id (``None`` for a notification, or a null id).
        method: The method name.
        params: The raw ``params`` value (``{}`` when absent).
        is_notification: ``True`` when the object has no ``id`` member.
    """

    request_id: RequestId
    method: str
    params: Any
    is_notification: bool


class EnvelopeError(RpcError):
    """A malformed request object; ``request_id`` is its id when that could be read."""

    def __init__(self, request_id: RequestId, reason: str) -> None:
        super().__init__(
            ErrorCode.INVALID_REQUEST,
            f"invalid request: {reason}; send a JSON-RPC 2.0 request object "
            '({"jsonrpc": "2.0", "id": 1, "method": ..., "params": {...}})',
            {"kind": "InvalidRequest"},
        )
        self.request_id = request_id


#: The largest id magnitude a 64-bit float (Godot's and JavaScript's numbers) holds exactly.
MAXIMUM_ID_MAGNITUDE = 2**53


def _valid_id(value: Any) -> bool:
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= MAXIMUM_ID_MAGNITUDE
    return isinstance(value, float) and math.isfinite(value) and abs(value) <= MAXIMUM_ID_MAGNITUDE


def read_envelope(entry: Any) -> Envelope:
    """Check one request object of a message (or of a batch).

    Raises:
        EnvelopeError: It is not an object, or a member is missing, unknown or mistyped.
    """
    if not isinstance(entry, dict):
        raise EnvelopeError(None, "a request must be a JSON object")
    request_id = entry.get("id")
    if not _valid_id(request_id):
        raise EnvelopeError(
            None,
            "the id must be a string, null, or a number of magnitude at most 2^53 (what a "
            "64-bit float holds exactly)",
        )
    if entry.get("jsonrpc") != "2.0":
        raise EnvelopeError(request_id, 'the "jsonrpc" member must be "2.0"')
    method = entry.get("method")
    if not isinstance(method, str):
        raise EnvelopeError(request_id, 'the "method" member must be a string')
    unknown = sorted(set(entry) - _ENVELOPE_KEYS)
    if unknown:
        names = ", ".join(repr(name[:64]) for name in unknown[:5])
        raise EnvelopeError(request_id, f"unknown request members {names}")
    is_notification = "id" not in entry
    return Envelope(request_id, method, entry.get("params", {}), is_notification)


#: The ``data.kind`` of each parse error (-32700), documented in docs/protocol.md › Errors.
PARSE_ERROR_KINDS = (
    "InvalidUtf8",  # the bytes are not UTF-8
    "InvalidJson",  # not one JSON value: bad syntax, trailing data, NaN or Infinity
    "DuplicateKey",  # an object names a key twice
    "NumberOutOfRange",  # a number beyond a 64-bit float (1e400, 400 digits)
    "NestedTooDeeply",  # nesting deep enough to exhaust the parser
)


class _Refused(ValueError):
    """Text Python's parser reads that ours refuses; ``kind`` is the parse error's kind."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused("DuplicateKey", f"duplicate key {key[:64]!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise _Refused("InvalidJson", f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 24 else f"{text[:20]}… ({len(text)} characters)"
        raise _Refused(
            "NumberOutOfRange", f"the number {shown} is out of range (beyond a 64-bit float)"
        )
    return value


#: The largest magnitude a 64-bit float holds; ints are compared with it exactly.
_FLOAT_MAXIMUM = sys.float_info.max
#: Digits of the largest integer a 64-bit float holds (about 1.8e308).
_FLOAT_MAXIMUM_DIGITS = 309


def _float_range_int(text: str) -> int:
    # Refuse before int() when the digits alone say it is too big: int() of more than
    # 4,300 digits raises with CPython's own advice, which means nothing to a game client.
    digits = len(text) - text.startswith("-")
    if digits > _FLOAT_MAXIMUM_DIGITS or abs(value := int(text)) > _FLOAT_MAXIMUM:
        shown = text if len(text) <= 24 else f"{text[:20]}… ({digits:,} digits)"
        raise _Refused(
            "NumberOutOfRange",
            f"the integer {shown} is out of range (beyond a 64-bit float, which Godot and "
            "JavaScript would read as infinity)",
        )
    return value


def parse_message(text: str | bytes) -> Any:
    """Parse one message (already within the size cap) into Python values.

    Raises:
        RpcError: ``PARSE_ERROR`` when the text is not UTF-8 or not one strict JSON value;
            its ``data.kind`` is one of :data:`PARSE_ERROR_KINDS`.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _parse_error(
                "InvalidUtf8",
                f"parse error: the message is not valid UTF-8 (byte {exc.start}); "
                "send UTF-8 JSON text",
            ) from exc
    try:
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
            parse_float=_finite_float,
            parse_int=_float_range_int,
        )
    except RecursionError as exc:
        raise _parse_error(
            "NestedTooDeeply", "parse error: the JSON is nested too deeply; flatten it"
        ) from exc
    except ValueError as exc:  # a syntax error, or one of ours (_Refused)
        kind = exc.kind if isinstance(exc, _Refused) else "InvalidJson"
        raise _parse_error(
            kind, f"parse error: {str(exc)[:200]}; send one complete JSON value per message"
        ) from exc


def _parse_error(kind: str, message: str) -> RpcError:
    return RpcError(ErrorCode.PARSE_ERROR, message, {"kind": kind})


def encode_message(message: Any) -> str:
    """Encode an outbound message as compact JSON text on one line.

    Non-ASCII text is kept as is unless the message holds a lone surrogate (from a
    ``\\ud800`` escape a client sent), which only ``\\u`` escapes can carry.
    """
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def utf8_size(data: str | bytes, bound: int = 0) -> int:
    """Return the UTF-8 size of ``data``; exact unless it is obviously within ``bound``."""
    if isinstance(data, bytes | bytearray):
        return len(data)
    if len(data) * 4 <= bound:
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


def response_too_large(size: int, bound: int) -> RpcError:
    """The error that replaces a response of ``size`` bytes over ``bound``."""
    return RpcError(
        ErrorCode.CAPACITY_EXCEEDED,
        f"the response would be {size:,} bytes, over the limit of {bound:,} bytes; ask for "
        "less (a smaller limit, fewer queries or batch entries)",
        {"kind": "ResponseTooLarge", "bound": "maximum_response_bytes"},
    )


def encode_response(response: dict[str, Any], maximum_bytes: int) -> str:
    """Encode a response; one over ``maximum_bytes`` becomes a capacity error for its id.

    Raises:
        ValueError, TypeError: The response holds something JSON cannot carry (NaN, a set).
    """
    text = encode_message(response)
    size = utf8_size(text, maximum_bytes)
    if size <= maximum_bytes:
        return text
    return encode_message(
        error_response(response.get("id"), response_too_large(size, maximum_bytes))
    )


def success_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """Return a response object carrying ``result``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId, error: RpcError) -> dict[str, Any]:
    """Return a response object carrying ``error``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Return a server notification (no id)."""
    return {"jsonrpc": "2.0", "method": method, "params": params}
