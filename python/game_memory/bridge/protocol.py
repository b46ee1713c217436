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
closes the connection (close code 4001) before any memory is read. So does any other
request (or client notification) sent before a successful ``initialize``: it is refused
with -32001 and the connection is closed, because a client that skips the handshake is
not speaking this protocol.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pydantic import BaseModel, ValidationError

from game_memory.bridge.batches import Batch
from game_memory.bridge.budget import ResponseBudget
from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception, params_not_object
from game_memory.bridge.handlers import METHODS as _METHOD_TABLE
from game_memory.bridge.handshake import (
    ServerInfo,
    initialize_result,
    read_initialize,
    refused_before_initialize,
    token_accepted,
    token_refused,
)
from game_memory.bridge.limits import DEFAULT_LIMITS, BridgeLimits
from game_memory.bridge.messages import (
    EnvelopeError,
    RequestId,
    encode_message,
    encode_response,
    error_response,
    notification,
    parse_message,
    read_envelope,
    success_response,
    utf8_size,
)

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
METHODS: tuple[str, ...] = tuple(_METHOD_TABLE)
#: Every notification the server sends.
NOTIFICATIONS: tuple[str, ...] = ("memory.diagnostic", "memory.rebuild_progress")
#: The WebSocket close code after a wrong or missing token.
UNAUTHORIZED_CLOSE_CODE = 4001


class ConnectionState(Enum):
    """Where a connection is in its life."""

    #: Only ``initialize`` is served.
    AWAITING_INITIALIZE = "awaiting_initialize"
    #: Initialized: every method is served.
    READY = "ready"
    #: Refused (bad token) or gone: nothing more is read or sent.
    CLOSED = "closed"


@dataclass(frozen=True)
class CloseIntent:
    """The transport must send what is queued, then close with this code and reason."""

    code: int
    reason: str


@dataclass(eq=False)
class Call:
    """A validated request (or client notification) for the dispatcher to run.

    Attributes:
        method: The method name (never ``initialize``).
        params: The validated params model of that method.
        request_id: The id to answer with (``None`` for a notification or a null id).
        is_notification: ``True`` when the client sent no id and wants no response.
        budget: What the result may take of the response cap while it is built; the
            members of one batch share one (they are sent as one array).
    """

    method: str
    params: BaseModel
    request_id: RequestId
    is_notification: bool
    budget: ResponseBudget = field(
        default_factory=lambda: ResponseBudget(DEFAULT_LIMITS.maximum_response_bytes)
    )
    _batch: Batch | None = None
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
        self._token = None if token is None else token.encode("utf-8", "surrogatepass")
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
        size = utf8_size(data, self._limits.maximum_message_bytes)
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
                out.messages.append(self._encode(response))
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

    def encode_result(self, call: Call, result: Any) -> str:
        """Encode the success response of ``call`` for :meth:`complete`, capped in size.

        Touches no connection state, so it is safe to run in a worker thread: the server
        encodes big results (megabytes) there, off the event loop.
        """
        try:
            return encode_response(
                success_response(call.request_id, result), self._limits.maximum_response_bytes
            )
        except (TypeError, ValueError) as exc:  # a result JSON cannot carry (NaN, a set)
            logger.error("the result of %s is not JSON", call.method, exc_info=exc)
            return encode_message(error_response(call.request_id, error_from_exception(exc)))

    def complete(self, call: Call, result: Any, *, encoded: str | None = None) -> list[str]:
        """Finish ``call`` with a JSON-ready ``result``; return the messages to send.

        A batch member returns nothing until the last member of its batch finishes; then
        the whole batch response. A notification returns nothing.

        Args:
            call: The call to finish.
            result: Its result.
            encoded: What :meth:`encode_result` returned for it, when the caller already
                encoded it (in a worker thread); ``result`` is then not encoded again.

        Raises:
            RuntimeError: ``call`` was already finished (a dispatcher bug).
        """
        self._finish(call)
        if call.is_notification or self._state is ConnectionState.CLOSED:
            return []
        text = encoded if encoded is not None else self.encode_result(call, result)
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
        batch = Batch.of_size(len(entries))
        budget = ResponseBudget(self._limits.maximum_response_bytes)
        for slot, entry in enumerate(entries):
            response, call = self._handle(entry, out, batch.after)
            if call is not None:
                out.calls.append(call)
                call.budget = budget
                if not call.is_notification:
                    call._batch, call._slot = batch, slot
                    batch.ids[slot] = call.request_id
                    batch.pending += 1
            elif response is not None:
                batch.ids[slot] = response["id"]
                batch.slots[slot] = self._encode(response)
        if batch.pending == 0:
            out.messages.extend(batch.emit(self._limits.maximum_response_bytes))

    def _handle(
        self, entry: Any, out: Received, after: list[str]
    ) -> tuple[dict[str, Any] | None, Call | None]:
        """Check one request object; return an immediate response or a call (or neither)."""
        try:
            envelope = read_envelope(entry)
        except EnvelopeError as invalid:
            return error_response(invalid.request_id, invalid), None
        request_id, method = envelope.request_id, envelope.method
        is_notification, raw_params = envelope.is_notification, envelope.params

        def reply(error: RpcError) -> tuple[dict[str, Any] | None, None]:
            return (None if is_notification else error_response(request_id, error)), None

        if self._state is ConnectionState.CLOSED:
            return reply(refused_before_initialize(method, closing=True))
        if method == "initialize":
            refusal, result = self._initialize(raw_params, out, after)
            if refusal is not None:
                return reply(refusal)
            return (None if is_notification else success_response(request_id, result)), None
        if self._state is not ConnectionState.READY:
            # Refuse and close: nothing of a client that skips the handshake is served.
            self._state = ConnectionState.CLOSED
            out.close = CloseIntent(UNAUTHORIZED_CLOSE_CODE, "initialize first")
            return reply(refused_before_initialize(method, closing=False))
        if self._shutting_down:
            return reply(
                RpcError(
                    ErrorCode.SHUTTING_DOWN,
                    "the server is shutting down and accepts no new requests; start a new "
                    "server and reconnect",
                    {"kind": "ShuttingDown"},
                )
            )
        spec = _METHOD_TABLE.get(method)
        if spec is None:
            names = ", ".join(METHODS)
            return reply(
                RpcError(
                    ErrorCode.METHOD_NOT_FOUND,
                    f"method {method[:64]!r} does not exist; the methods are {names}",
                    {"kind": "MethodNotFound"},
                )
            )
        if not isinstance(raw_params, dict):
            return reply(params_not_object(method))
        try:
            params = spec.params.model_validate(raw_params)
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
        budget = ResponseBudget(self._limits.maximum_response_bytes)
        request = None if is_notification else request_id
        return None, Call(method, params, request, is_notification, budget)

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
        # The token comes first: a refused client learns nothing and is closed.
        if self._state is ConnectionState.CLOSED or not token_accepted(self._token, raw_params):
            self._state = ConnectionState.CLOSED
            out.close = CloseIntent(UNAUTHORIZED_CLOSE_CODE, "unauthorized")
            return token_refused(), None
        try:
            read_initialize(raw_params)
        except RpcError as refusal:
            return refusal, None
        self._state = ConnectionState.READY
        for diagnostic in self._info.startup_diagnostics:
            after.append(encode_message(notification("memory.diagnostic", diagnostic)))
        return None, initialize_result(self._info)

    def _encode(self, response: dict[str, Any]) -> str:
        return encode_response(response, self._limits.maximum_response_bytes)

    def _deliver(self, call: Call, text: str) -> list[str]:
        batch = call._batch
        if batch is None:
            return [text]
        if batch.fill(call._slot, text):
            return batch.emit(self._limits.maximum_response_bytes)
        return []
