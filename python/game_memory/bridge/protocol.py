"""The sans-I/O core of the bridge: one connection's JSON-RPC state machine.

:class:`BridgeConnection` takes what a transport received (a text frame or line, a binary
frame, or the news that a message was too big) and returns :class:`Received`: the encoded
messages to send now, the validated :class:`Call` objects to run, and whether to close the
connection. When a call finishes, :meth:`BridgeConnection.complete` or
:meth:`BridgeConnection.fail` returns what to send then. It does no I/O and knows nothing
of asyncio or sockets, so it is tested synchronously.

Order of checks for every request: envelope (-32600), ``initialize`` first (-32001),
shutting down (-32009), method known (-32601), params valid (-32602), in-flight bound
(-32007). The WebSocket token is compared in constant time, and a wrong or missing token
closes the connection (close code 4001) before any memory is read.
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception
from game_memory.bridge.limits import DEFAULT_LIMITS, PROTOCOL_VERSION, SERVER_NAME, BridgeLimits
from game_memory.bridge.messages import (
    RequestId,
    encode_message,
    error_response,
    notification,
    parse_message,
    success_response,
)
from game_memory.bridge.params import METHOD_PARAMS, InitializeParams

__all__ = [
    "METHODS",
    "NOTIFICATIONS",
    "UNAUTHORIZED_CLOSE_CODE",
    "BridgeConnection",
    "Call",
    "CloseIntent",
    "ConnectionState",
    "Received",
    "ServerInfo",
]

logger = logging.getLogger("game_memory.bridge")

#: Every method a client may call, ``initialize`` first.
METHODS: tuple[str, ...] = tuple(METHOD_PARAMS)
#: Every notification the server sends.
NOTIFICATIONS: tuple[str, ...] = ("memory.diagnostic", "memory.rebuild_progress")
#: The WebSocket close code after a wrong or missing token.
UNAUTHORIZED_CLOSE_CODE = 4001

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})


class ConnectionState(Enum):
    """Where a connection is in its life."""

    #: Only ``initialize`` is served.
    AWAITING_INITIALIZE = "awaiting_initialize"
    #: Initialized: every method is served.
    READY = "ready"
    #: Refused (bad token) or gone: nothing more is read or sent.
    CLOSED = "closed"


@dataclass(frozen=True)
class ServerInfo:
    """What ``initialize`` reports, and the diagnostics sent right after it.

    Attributes:
        mode: ``"hybrid"`` or ``"lexical"``.
        model: The embedding model's identity, or ``None``.
        startup_diagnostics: Params of ``memory.diagnostic`` notifications every
            connection receives right after its successful ``initialize`` response.
        server: The server name and version.
    """

    mode: str
    model: str | None
    startup_diagnostics: tuple[dict[str, Any], ...] = ()
    server: str = SERVER_NAME


@dataclass(frozen=True)
class CloseIntent:
    """The transport must send what is queued, then close with this code and reason."""

    code: int
    reason: str


@dataclass(eq=False)
class _Batch:
    ids: list[RequestId]
    slots: list[str | None]
    pending: int = 0
    after: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Call:
    """A validated request (or client notification) for the dispatcher to run.

    Attributes:
        method: The method name (never ``initialize``).
        params: The validated params model of that method.
        request_id: The id to answer with (``None`` for a notification or a null id).
        is_notification: ``True`` when the client sent no id and wants no response.
    """

    method: str
    params: BaseModel
    request_id: RequestId
    is_notification: bool
    _batch: _Batch | None = None
    _slot: int = -1
    _finished: bool = False


@dataclass
class Received:
    """What a transport must do after feeding a message to the core.

    Attributes:
        messages: Encoded messages to send now, in order.
        calls: Calls to run; each must end with ``complete`` or ``fail``.
        close: When set, send ``messages`` and then close the connection.
    """

    messages: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    close: CloseIntent | None = None


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


class BridgeConnection:
    """The protocol state of one client connection.

    Args:
        info: What ``initialize`` reports.
        token: The token a client must present in ``initialize``; ``None`` on stdio.
        limits: The bounds to enforce.

    Not thread-safe: drive one instance from one task or thread.
    """

    def __init__(
        self, info: ServerInfo, *, token: str | None, limits: BridgeLimits = DEFAULT_LIMITS
    ) -> None:
        self._info = info
        self._token = None if token is None else token.encode("utf-8")
        self._limits = limits
        self._state = ConnectionState.AWAITING_INITIALIZE
        self._shutting_down = False
        self._in_flight = 0

    @property
    def state(self) -> ConnectionState:
        """The connection's state."""
        return self._state

    @property
    def in_flight(self) -> int:
        """Calls handed out and not yet completed or failed."""
        return self._in_flight

    def receive(self, data: str | bytes) -> Received:
        """Handle one inbound text frame or line (``bytes`` must be UTF-8).

        Returns:
            What to send, run and whether to close. Never raises for bad input: every
            problem becomes an error response (or nothing, for a client notification).
        """
        out = Received()
        if self._state is ConnectionState.CLOSED:
            return out
        size = _utf8_size(data, self._limits.maximum_message_bytes)
        if size > self._limits.maximum_message_bytes:
            return self.receive_oversized(size)
        try:
            message = parse_message(data)
        except RpcError as error:
            out.messages.append(encode_message(error_response(None, error)))
            return out
        if isinstance(message, list):
            self._receive_batch(message, out)
        else:
            after: list[str] = []
            response, call = self._handle(message, out, after)
            if call is not None:
                out.calls.append(call)
            if response is not None:
                out.messages.append(self._encode_response(response))
            out.messages.extend(after)
        return out

    def receive_binary(self, size: int) -> Received:
        """Handle a binary WebSocket frame of ``size`` bytes: refused, connection kept."""
        if self._state is ConnectionState.CLOSED:
            return Received()
        error = RpcError(
            ErrorCode.INVALID_REQUEST,
            f"invalid request: a binary frame of {size} bytes was refused; send JSON "
            "messages as text frames",
            {"kind": "BinaryFrame"},
        )
        return Received(messages=[encode_message(error_response(None, error))])

    def receive_oversized(self, size: int | None = None) -> Received:
        """Handle a message over the size cap (``size`` bytes if known), not parsed."""
        if self._state is ConnectionState.CLOSED:
            return Received()
        bound = self._limits.maximum_message_bytes
        what = "a message" if size is None else f"a message of {size:,} bytes"
        error = RpcError(
            ErrorCode.INVALID_REQUEST,
            f"invalid request: {what} exceeds the limit of {bound:,} bytes and was not "
            "read; send smaller messages (fewer batch entries, shorter text)",
            {"kind": "MessageTooLarge", "bound": "maximum_message_bytes"},
        )
        return Received(messages=[encode_message(error_response(None, error))])

    def complete(self, call: Call, result: Any) -> list[str]:
        """Finish ``call`` with a JSON-ready ``result``; return the messages to send.

        A batch member returns nothing until the last member of its batch finishes; then
        the whole batch response. A notification returns nothing.

        Raises:
            RuntimeError: ``call`` was already finished (a dispatcher bug).
        """
        self._finish(call)
        if call.is_notification or self._state is ConnectionState.CLOSED:
            return []
        try:
            text = self._encode_response(success_response(call.request_id, result))
        except (TypeError, ValueError) as exc:  # a result JSON cannot carry (NaN, a set)
            logger.error("the result of %s is not JSON", call.method, exc_info=exc)
            text = encode_message(error_response(call.request_id, error_from_exception(exc)))
        return self._deliver(call, text)

    def fail(self, call: Call, error: BaseException) -> list[str]:
        """Finish ``call`` with a failure, translated by the one error table.

        Unexpected exceptions are logged with their traceback (stderr) and answered with
        ``INTERNAL_ERROR``, which says nothing about them.

        Raises:
            RuntimeError: ``call`` was already finished (a dispatcher bug).
        """
        self._finish(call)
        rpc_error = error_from_exception(error, call.method)
        if rpc_error.code is ErrorCode.INTERNAL_ERROR and not isinstance(error, RpcError):
            logger.error("%s failed unexpectedly", call.method, exc_info=error)
        if call.is_notification or self._state is ConnectionState.CLOSED:
            return []
        return self._deliver(call, encode_message(error_response(call.request_id, rpc_error)))

    def notification(self, method: str, params: dict[str, Any]) -> str | None:
        """Encode a server notification, or return ``None`` when the client may not get one.

        Only initialized, open connections receive notifications.
        """
        if self._state is not ConnectionState.READY:
            return None
        return encode_message(notification(method, params))

    def begin_shutdown(self) -> None:
        """Refuse every later call with ``SHUTTING_DOWN``; calls already out may finish."""
        self._shutting_down = True

    def close(self) -> None:
        """Mark the connection gone: later input is ignored and later output dropped."""
        self._state = ConnectionState.CLOSED

    # -- internals ---------------------------------------------------------------------

    def _finish(self, call: Call) -> None:
        if call._finished:
            raise RuntimeError(f"the {call.method} call was already finished")
        call._finished = True
        self._in_flight -= 1

    def _receive_batch(self, entries: list[Any], out: Received) -> None:
        bound = self._limits.maximum_batch_entries
        if not entries or len(entries) > bound:
            reason = "an empty batch" if not entries else f"a batch of {len(entries)} entries"
            error = RpcError(
                ErrorCode.INVALID_REQUEST,
                f"invalid request: {reason} was refused; send 1 to {bound} requests per batch",
                {"kind": "BatchSize", "bound": "maximum_batch_entries"},
            )
            out.messages.append(encode_message(error_response(None, error)))
            return
        batch = _Batch(ids=[None] * len(entries), slots=[None] * len(entries))
        for slot, entry in enumerate(entries):
            response, call = self._handle(entry, out, batch.after)
            if call is not None:
                out.calls.append(call)
                if not call.is_notification:
                    call._batch, call._slot = batch, slot
                    batch.ids[slot] = call.request_id
                    batch.pending += 1
            elif response is not None:
                batch.ids[slot] = response["id"]
                batch.slots[slot] = self._encode_response(response)
        if batch.pending == 0:
            out.messages.extend(self._emit_batch(batch))

    def _handle(
        self, entry: Any, out: Received, after: list[str]
    ) -> tuple[dict[str, Any] | None, Call | None]:
        """Check one request object; return an immediate response or a call (or neither)."""
        if not isinstance(entry, dict):
            return self._invalid(None, "a request must be a JSON object"), None
        request_id = entry.get("id")
        if not _valid_id(request_id):
            return self._invalid(None, "the id must be a string, a number or null"), None
        if entry.get("jsonrpc") != "2.0":
            return self._invalid(request_id, 'the "jsonrpc" member must be "2.0"'), None
        method = entry.get("method")
        if not isinstance(method, str):
            return self._invalid(request_id, 'the "method" member must be a string'), None
        unknown = sorted(set(entry) - _ENVELOPE_KEYS)
        if unknown:
            names = ", ".join(repr(name[:64]) for name in unknown[:5])
            return self._invalid(request_id, f"unknown request members {names}"), None
        is_notification = "id" not in entry
        raw_params = entry.get("params", {})

        def reply(error: RpcError) -> tuple[dict[str, Any] | None, None]:
            return (None if is_notification else error_response(request_id, error)), None

        if method == "initialize":
            error, result = self._initialize(raw_params, out, after)
            if error is not None:
                return reply(error)
            return (None if is_notification else success_response(request_id, result)), None
        if self._state is not ConnectionState.READY:
            return reply(
                RpcError(
                    ErrorCode.UNAUTHORIZED,
                    f"unauthorized: {method[:64]} was sent before a successful initialize; "
                    "call initialize first (with the token from the ready line over WebSocket)",
                    {"kind": "Unauthorized"},
                )
            )
        if self._shutting_down:
            return reply(
                RpcError(
                    ErrorCode.SHUTTING_DOWN,
                    "the server is shutting down and accepts no new requests; start a new "
                    "server and reconnect",
                    {"kind": "ShuttingDown"},
                )
            )
        model = METHOD_PARAMS.get(method)
        if model is None:
            names = ", ".join(METHODS)
            return reply(
                RpcError(
                    ErrorCode.METHOD_NOT_FOUND,
                    f"method {method[:64]!r} does not exist; the methods are {names}",
                    {"kind": "MethodNotFound"},
                )
            )
        if not isinstance(raw_params, dict):
            return reply(_params_not_object(method))
        try:
            params = model.model_validate(raw_params)
        except ValidationError as exc:
            return reply(error_from_exception(exc, method))
        if self._in_flight >= self._limits.maximum_in_flight:
            bound = self._limits.maximum_in_flight
            return reply(
                RpcError(
                    ErrorCode.BUSY,
                    f"busy: this connection already has {bound} requests running; wait for "
                    "some responses before sending more",
                    {"kind": "TooManyInFlight", "bound": "maximum_in_flight"},
                )
            )
        self._in_flight += 1
        return None, Call(method, params, None if is_notification else request_id, is_notification)

    def _initialize(
        self, raw_params: Any, out: Received, after: list[str]
    ) -> tuple[RpcError | None, dict[str, Any] | None]:
        if self._state is ConnectionState.READY:
            return RpcError(
                ErrorCode.INVALID_REQUEST,
                "invalid request: this connection is already initialized; send initialize "
                "once per connection",
                {"kind": "AlreadyInitialized"},
            ), None
        if self._state is ConnectionState.CLOSED or not self._token_accepted(raw_params):
            self._state = ConnectionState.CLOSED
            out.close = CloseIntent(UNAUTHORIZED_CLOSE_CODE, "unauthorized")
            return RpcError(
                ErrorCode.UNAUTHORIZED,
                "unauthorized: the token is missing or wrong, so the connection is closed; "
                "send the token printed in the server's ready line (or the --token-file "
                "contents)",
                {"kind": "Unauthorized"},
            ), None
        if not isinstance(raw_params, dict):
            return _params_not_object("initialize"), None
        try:
            params = InitializeParams.model_validate(raw_params)
        except ValidationError as exc:
            return error_from_exception(exc, "initialize"), None
        if params.protocol_version != PROTOCOL_VERSION:
            return RpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params for initialize: protocol_version {params.protocol_version} "
                f"is not supported; this server supports protocol_version {PROTOCOL_VERSION}",
                {"kind": "UnsupportedProtocolVersion", "field": "protocol_version"},
            ), None
        self._state = ConnectionState.READY
        for diagnostic in self._info.startup_diagnostics:
            after.append(encode_message(notification("memory.diagnostic", diagnostic)))
        return None, {
            "protocol_version": PROTOCOL_VERSION,
            "server": self._info.server,
            "mode": self._info.mode,
            "model": self._info.model,
        }

    def _token_accepted(self, raw_params: Any) -> bool:
        if self._token is None:
            return True
        supplied = raw_params.get("token") if isinstance(raw_params, dict) else None
        if not isinstance(supplied, str):
            return False
        return hmac.compare_digest(supplied.encode("utf-8", "surrogatepass"), self._token)

    def _invalid(self, request_id: RequestId, reason: str) -> dict[str, Any]:
        return error_response(
            request_id,
            RpcError(
                ErrorCode.INVALID_REQUEST,
                f"invalid request: {reason}; send a JSON-RPC 2.0 request object "
                '({"jsonrpc": "2.0", "id": 1, "method": ..., "params": {...}})',
                {"kind": "InvalidRequest"},
            ),
        )

    def _encode_response(self, response: dict[str, Any]) -> str:
        text = encode_message(response)
        bound = self._limits.maximum_response_bytes
        size = _utf8_size(text, bound)
        if size <= bound:
            return text
        return encode_message(error_response(response.get("id"), _too_big(size, bound)))

    def _deliver(self, call: Call, text: str) -> list[str]:
        batch = call._batch
        if batch is None:
            return [text]
        batch.slots[call._slot] = text
        batch.pending -= 1
        return self._emit_batch(batch) if batch.pending == 0 else []

    def _emit_batch(self, batch: _Batch) -> list[str]:
        parts = {slot: text for slot, text in enumerate(batch.slots) if text is not None}
        if not parts:
            return list(batch.after)
        bound = self._limits.maximum_response_bytes
        sizes = {slot: _utf8_size(text, 0) for slot, text in parts.items()}
        total = sum(sizes.values()) + len(parts) + 1
        # Replace the largest entries by small errors until the whole array fits.
        for slot in sorted(sizes, key=sizes.__getitem__, reverse=True):
            if total <= bound:
                break
            error = error_response(batch.ids[slot], _too_big(total, bound))
            parts[slot] = encode_message(error)
            total += len(parts[slot]) - sizes[slot]
        return ["[" + ",".join(parts[slot] for slot in sorted(parts)) + "]", *batch.after]


def _params_not_object(method: str) -> RpcError:
    return RpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params for {method}: params must be a JSON object of named parameters",
        {"kind": "ValidationError", "field": "params"},
    )


def _too_big(size: int, bound: int) -> RpcError:
    return RpcError(
        ErrorCode.CAPACITY_EXCEEDED,
        f"the response would be {size:,} bytes, over the limit of {bound:,} bytes; ask for "
        "less (a smaller limit, fewer queries or batch entries)",
        {"kind": "ResponseTooLarge", "bound": "maximum_response_bytes"},
    )


def _utf8_size(data: str | bytes, bound: int) -> int:
    """Return the UTF-8 size of ``data``; exact unless it is obviously within ``bound``."""
    if isinstance(data, bytes | bytearray):
        return len(data)
    if len(data) * 4 <= bound:
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))
