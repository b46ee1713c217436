"""JSON-RPC 2.0 envelopes: strict parsing of inbound text and encoding of outbound messages.

Pure functions. Parsing refuses what JSON allows but a game never means: duplicate keys,
``NaN``/``Infinity`` and nesting deep enough to exhaust the parser.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from game_memory.bridge.codes import ErrorCode, RpcError

__all__ = [
    "RequestId",
    "encode_message",
    "error_response",
    "notification",
    "parse_message",
    "success_response",
]

#: A JSON-RPC id: a string, a number or null.
RequestId: TypeAlias = str | int | float | None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key[:64]!r}")
        result[key] = value
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_message(text: str | bytes) -> Any:
    """Parse one message (already within the size cap) into Python values.

    Raises:
        RpcError: ``PARSE_ERROR`` when the text is not UTF-8 or not one strict JSON value.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RpcError(
                ErrorCode.PARSE_ERROR,
                f"parse error: the message is not valid UTF-8 (byte {exc.start}); "
                "send UTF-8 JSON text",
            ) from exc
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except RecursionError as exc:
        raise RpcError(
            ErrorCode.PARSE_ERROR, "parse error: the JSON is nested too deeply; flatten it"
        ) from exc
    except ValueError as exc:
        raise RpcError(
            ErrorCode.PARSE_ERROR,
            f"parse error: {str(exc)[:200]}; send one complete JSON value per message",
        ) from exc


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


def success_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """Return a response object carrying ``result``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId, error: RpcError) -> dict[str, Any]:
    """Return a response object carrying ``error``."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Return a server notification (no id)."""
    return {"jsonrpc": "2.0", "method": method, "params": params}
