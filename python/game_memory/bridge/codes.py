"""The one table from failures to stable JSON-RPC error codes.

Every error the bridge sends is built here. :data:`ERROR_TABLE` maps each
:class:`~game_memory.errors.GameMemoryError` (and pydantic's ``ValidationError``) to its
:class:`ErrorCode`; anything else becomes ``INTERNAL_ERROR`` with a fixed message, so a
traceback never reaches a client. The most specific class comes first in the table:
``EmbeddingTimeoutError`` and ``StoreBusyError`` come before ``EmbeddingUnavailableError``,
so an ONNX provider's timeout or full queue (subclasses of both) maps to timeout or busy.
"""

from __future__ import annotations

import errno
import re
from enum import IntEnum
from typing import Any

from pydantic import ValidationError

from game_memory.durable import fs
from game_memory.errors import (
    CapacityExceededError,
    DerivedIndexError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    InvalidArgumentError,
    MemoryConflictError,
    MemoryNotFoundError,
    PersistenceError,
    StoreBusyError,
    StoreClosedError,
)

__all__ = [
    "ERROR_ADVICE",
    "ERROR_TABLE",
    "ErrorCode",
    "RpcError",
    "describe_validation_error",
    "error_from_exception",
    "params_not_object",
]

_MAXIMUM_DETAIL_CHARACTERS = 300
_MAXIMUM_MESSAGE_CHARACTERS = 2_000
_MAXIMUM_LISTED_FIELDS = 3
#: A field path names a parameter, not a client's whole key: a name sent by the client (an
#: unknown parameter, a metadata key) may be any length.
_MAXIMUM_PATH_SEGMENT_CHARACTERS = 64
_MAXIMUM_PATH_CHARACTERS = 128
#: pydantic's errors for input nested past its own validation limit (about 255 levels).
#: Their location runs through every level, with the type of each container in between
#: (``payload.dict.a.dict.a...``), and their message names a Python recursion error.
_TOO_DEEP_ERRORS = frozenset({"recursion_depth_exceeded", "recursion_loop"})
#: The members of ``JsonValue``'s union, which pydantic puts in a location after the field.
_JSON_VALUE_LABELS = frozenset({"dict", "list", "str", "int", "float", "bool"})
#: A location segment pydantic adds itself, never a name a client sent: a validator or a
#: union member (``function-after[_not_blank(), constrained-str]``, ``list[str]``) or a
#: refused dict key (``[key]``).
_SCHEMA_LABEL = re.compile(r"(?:[a-z][a-z-]*)?\[.*\]", re.DOTALL)


class ErrorCode(IntEnum):
    """The stable error codes of protocol version 1."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    UNAUTHORIZED = -32001
    CONFLICT = -32002
    CAPACITY_EXCEEDED = -32003
    REBUILD_REQUIRED = -32004
    EMBEDDING_UNAVAILABLE = -32005
    STORAGE_CORRUPT = -32006
    BUSY = -32007
    TIMEOUT = -32008
    SHUTTING_DOWN = -32009
    NOT_FOUND = -32010


#: What a person should do about each code. Appended to the messages of foreign failures
#: (validation, a bare ``TimeoutError``, internal errors); a ``GameMemoryError`` message
#: already says what to do and is sent as it is.
ERROR_ADVICE: dict[ErrorCode, str] = {
    ErrorCode.PARSE_ERROR: "send one complete UTF-8 JSON value per line or text frame",
    ErrorCode.INVALID_REQUEST: "send a JSON-RPC 2.0 request object as docs/protocol.md shows",
    ErrorCode.METHOD_NOT_FOUND: "call one of the methods listed in docs/protocol.md",
    ErrorCode.INVALID_PARAMS: "fix the named parameter and send the request again",
    ErrorCode.INTERNAL_ERROR: "the server log (stderr) has the details; report it as a bug",
    ErrorCode.UNAUTHORIZED: "call initialize first, with the token from the ready line",
    ErrorCode.CONFLICT: (
        "use a new memory_id, or omit it to get a content digest (a remember that differs "
        "only in importance, tags, metadata, expires_at or source_input_id gets the same "
        "digest: give it a memory_id of its own)"
    ),
    ErrorCode.CAPACITY_EXCEEDED: "stay under the named bound (data.bound)",
    ErrorCode.REBUILD_REQUIRED: "call memory.rebuild for the session, then try again",
    ErrorCode.EMBEDDING_UNAVAILABLE: (
        "run 'game-memory models prepare' and restart the server, or recall without "
        "require_semantic"
    ),
    ErrorCode.STORAGE_CORRUPT: (
        "the save was not changed; run 'game-memory check' to see the damage, then "
        "'game-memory check --fix --accept-loss' to keep every intact memory, or restore the "
        "save from a backup ('check --fix' alone repairs only interrupted writes)"
    ),
    ErrorCode.BUSY: "wait for running requests to finish, then try again",
    ErrorCode.TIMEOUT: "try again later, or ask for less (a smaller limit or batch)",
    ErrorCode.SHUTTING_DOWN: "the server is stopping; start a new one and reconnect",
    ErrorCode.NOT_FOUND: "check the memory ids (memory.recall lists what the NPC remembers)",
}

#: Codes whose core messages give Python-API advice (``derive_memory_id``, ``enumerate``);
#: a bridge client gets the protocol's own advice from :data:`ERROR_ADVICE` instead. The
#: core's messages stay as they are: they are right for Python callers.
_PROTOCOL_ADVICE_CODES = frozenset({ErrorCode.CONFLICT, ErrorCode.NOT_FOUND})
#: The closing advice sentence of such a core message ("Use a new id (derive_memory_id
#: ...).", "Check the id (enumerate ...)").
_PYTHON_ADVICE = re.compile(r"[.;]?\s*(?:Use a new id|Check the ids?)\b.*$", re.DOTALL)

#: The one mapping from exception classes to codes, most specific first.
ERROR_TABLE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (ValidationError, ErrorCode.INVALID_PARAMS),
    (InvalidArgumentError, ErrorCode.INVALID_PARAMS),
    (MemoryConflictError, ErrorCode.CONFLICT),
    (MemoryNotFoundError, ErrorCode.NOT_FOUND),
    (CapacityExceededError, ErrorCode.CAPACITY_EXCEEDED),
    (DerivedIndexError, ErrorCode.REBUILD_REQUIRED),
    (EmbeddingTimeoutError, ErrorCode.TIMEOUT),
    (StoreBusyError, ErrorCode.BUSY),
    (EmbeddingUnavailableError, ErrorCode.EMBEDDING_UNAVAILABLE),
    (PersistenceError, ErrorCode.STORAGE_CORRUPT),
    (StoreClosedError, ErrorCode.SHUTTING_DOWN),
    (TimeoutError, ErrorCode.TIMEOUT),
)


class RpcError(Exception):
    """A JSON-RPC error the bridge sends as it is: code, message and optional ``data``.

    Raised by the bridge itself (unknown method, bad token, busy, deadline) and built by
    :func:`error_from_exception` from any other failure.
    """

    def __init__(self, code: ErrorCode, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-RPC ``error`` object."""
        error: dict[str, Any] = {"code": int(self.code), "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def _clip(text: str, limit: int = _MAXIMUM_DETAIL_CHARACTERS) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def _with_advice(message: str, code: ErrorCode) -> str:
    message = message.rstrip().rstrip(".")
    return f"{message}; {ERROR_ADVICE[code]}"


def _field_path(
    location: tuple[int | str, ...], renames: dict[str, str], prefix: str, too_deep: bool
) -> str:
    """The dotted protocol path of a pydantic location (see describe_validation_error)."""
    names: list[str] = []
    for position, item in enumerate(location):
        segment = str(item)
        if isinstance(item, str) and _SCHEMA_LABEL.fullmatch(segment):
            continue
        if too_deep and position > 0 and segment in _JSON_VALUE_LABELS:
            break  # the rest is the nesting itself: name the value that is too deep
        names.append(_clip(renames.get(segment, segment), _MAXIMUM_PATH_SEGMENT_CHARACTERS))
    path = ".".join([prefix, *names] if prefix else names) or "params"
    return _clip(path, _MAXIMUM_PATH_CHARACTERS)


def describe_validation_error(
    error: ValidationError, renames: dict[str, str] | None = None, prefix: str = ""
) -> tuple[str, str]:
    """Summarize a pydantic error as ``(message, first_field)`` without echoing inputs.

    Args:
        error: The validation error.
        renames: Model field names to show under their protocol names
            (``{"payload_json": "payload"}``).
        prefix: The dotted path of the object that was validated within the params
            (``"memories.3"``, ``"summary"``), put before every field.

    Returns:
        A message naming up to three fields with what is wrong with each, and the dotted
        path of the first field (``prefix``, or ``"params"`` without one, when the error is
        about the whole object). Paths hold only names and indexes, never pydantic's type
        labels, and are at most 128 characters; so the message is bounded too.
    """
    renames = renames or {}
    parts: list[str] = []
    fields: list[str] = []
    for detail in error.errors(include_url=False, include_input=False):
        too_deep = detail["type"] in _TOO_DEEP_ERRORS
        path = _field_path(detail["loc"], renames, prefix, too_deep)
        fields.append(path)
        if len(parts) < _MAXIMUM_LISTED_FIELDS:
            reason = "nested too deeply" if too_deep else str(detail["msg"])
            if reason.startswith("Value error, "):
                reason = reason[len("Value error, ") :]
            parts.append(f"{path}: {_clip(reason)}")
    more = len(fields) - len(parts)
    text = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return text, (fields[0] if fields else "params")


def error_from_exception(error: BaseException, method: str | None = None) -> RpcError:
    """Translate a failure into the error the client receives.

    Args:
        error: What the method raised (or the bridge's own :class:`RpcError`).
        method: The method that failed, named in validation messages.

    Returns:
        The :class:`RpcError`; ``data.kind`` names the failure class, ``data.bound`` the
        bound of a capacity error, ``data.field`` the first invalid parameter and
        ``data.reason`` a failure that is not damage (``"not_permitted"``,
        ``"disk_full"``, ``"unreachable"``).
        Unknown exceptions map to ``INTERNAL_ERROR`` with a message that leaks nothing.
    """
    if isinstance(error, RpcError):
        return error
    code = next((code for kind, code in ERROR_TABLE if isinstance(error, kind)), None)
    if code is None:
        return RpcError(
            ErrorCode.INTERNAL_ERROR,
            _with_advice("internal error", ErrorCode.INTERNAL_ERROR),
            {"kind": "InternalError"},
        )
    data: dict[str, Any] = {"kind": type(error).__name__}
    if isinstance(error, ValidationError):
        text, field = describe_validation_error(error)
        where = f" for {method}" if method else ""
        data["field"] = field
        return RpcError(code, _with_advice(f"invalid params{where}: {text}", code), data)
    message = _clip(str(error), _MAXIMUM_MESSAGE_CHARACTERS) or type(error).__name__
    if isinstance(error, CapacityExceededError):
        data["bound"] = error.bound
    refused = fs.refused_access(error) if isinstance(error, PersistenceError) else None
    if refused is not None:
        data["reason"] = "not_permitted"
        return RpcError(code, _not_permitted_message(message, refused), data)
    full = fs.disk_full(error) if isinstance(error, GameMemoryError) else None
    if full is not None:
        data["reason"] = "disk_full"
        return RpcError(code, _disk_full_message(message, error, full), data)
    reason = _reason(error)
    if reason is not None:
        data["reason"] = reason  # the message already says what to do about it
    if code in _PROTOCOL_ADVICE_CODES:
        message = _with_advice(_PYTHON_ADVICE.sub("", message), code)
    elif not isinstance(error, GameMemoryError):
        message = _with_advice(message, code)
    return RpcError(code, message, data)


def _reason(error: BaseException) -> str | None:
    """The ``data.reason`` an error carries as its ``reason`` (a string), else ``None``.

    It marks a failure that is not damage, whatever its code says: ``"unreachable"`` for a
    database the server could not reach (the PostgreSQL backends'
    ``DatabaseUnreachableError`` and ``IndexDatabaseUnreachableError``). Read by name, so
    the bridge never imports the optional backend; the error's message says what to do.
    """
    if not isinstance(error, GameMemoryError):
        return None
    reason = getattr(error, "reason", None)
    return reason if isinstance(reason, str) else None


def _not_permitted_message(message: str, refused: OSError) -> str:
    """Say that the save is refused to this process, not damaged, and what to do.

    The storage-corrupt advice (check, ``--fix``, restore) cannot help here: nothing is
    damaged, the server's user may not write (or read) the save's files.
    """
    why = (
        "the save folder is on a read-only file system"
        if refused.errno == errno.EROFS
        else "the server's user has no permission to write (or read) the save folder"
    )
    return (
        f"{message.rstrip().rstrip('.')}: {why}. The save is not damaged and was not changed "
        "(a save the server can read but not write answers recalls and refuses writes); give "
        "the user that runs the server write access to the save folder and its files, or "
        "serve a writable copy of it, then send the request again"
    )


def _disk_full_message(message: str, error: BaseException, full: OSError) -> str:
    """Say that the disk is full, not the save damaged, and what to do.

    The storage's own :class:`~game_memory.durable.fs.DiskFullError` says all of it; an
    error that wraps one (a layer that adds its own words) gets the cause and what to do
    first added, since no advice its code carries (check, restore, rebuild) can help until
    there is room.
    """
    if isinstance(error, fs.DiskFullError):
        return message
    why = "the disk is full" if full.errno == errno.ENOSPC else "the disk quota is used up"
    return (
        f"{message.rstrip().rstrip('.')}. The cause: {why} ({full.strerror or full}); free "
        "space on that disk first, then send the request again"
    )


def params_not_object(method: str) -> RpcError:
    """The error for params that are not a JSON object (by-position params are refused)."""
    return RpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params for {method}: params must be a JSON object of named parameters",
        {"kind": "ValidationError", "field": "params"},
    )
