"""The async dispatcher: drives each connection's protocol core and awaits the service.

:class:`BridgeServer` is transport-independent. A transport opens a :class:`Session` per
client, feeds it what it receives, and sends what the session's outbox yields. Calls run
as tasks, so one connection's requests may run concurrently and answer out of order (ids
match them). Each call has a server-side deadline (TIMEOUT, -32008); on shutdown new calls
are refused (SHUTTING_DOWN, -32009), running ones get a grace period and are then
cancelled and answered with SHUTTING_DOWN.

Writes (``Method.writes``) are the exception to both: the store finishes a write in a
thread even when the task awaiting it is cancelled, so an error answer could not say
whether it was applied. A write is therefore never cancelled; past the deadline, or past
the shutdown grace, its answer waits until it has settled and carries its real outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception
from game_memory.bridge.handlers import OFFLOAD_BYTES, CallContext, MethodExecutor
from game_memory.bridge.limits import DEFAULT_LIMITS, BridgeLimits
from game_memory.bridge.messages import encode_message, error_response
from game_memory.bridge.outbox import Outbox
from game_memory.bridge.protocol import BridgeConnection, Call, CloseIntent, Received, ServerInfo
from game_memory.bridge.results import diagnostic_to_json
from game_memory.bridge.service import BridgeService, DiagnosticView

__all__ = ["BridgeServer", "Session"]

logger = logging.getLogger("game_memory.bridge")


class Session:
    """One client connection: its protocol core, its outbox and its running calls.

    Created by :meth:`BridgeServer.open_session`; the transport must call :meth:`detach`
    when the client is gone.
    """

    def __init__(self, server: BridgeServer, connection: BridgeConnection) -> None:
        self._server = server
        self.connection = connection
        limits = server.limits
        self.outbox = Outbox(limits.outbox_messages, limits.outbox_bytes)

    async def receive(self, data: str | bytes) -> CloseIntent | None:
        """Feed one text frame or line; return a close intent if the client must go.

        The core never raises for bad input; should a bug make it raise, the client gets
        ``INTERNAL_ERROR`` (id null) and the connection goes on, never a dead task.
        """
        try:
            received = self.connection.receive(data)
        except Exception as exc:
            logger.error("the protocol core failed on a message", exc_info=exc)
            error = error_response(None, error_from_exception(exc))
            received = Received(messages=[encode_message(error)])
        return await self._apply(received)

    async def receive_binary(self, size: int) -> CloseIntent | None:
        """Feed the news of a binary frame of ``size`` bytes (refused)."""
        return await self._apply(self.connection.receive_binary(size))

    async def receive_oversized(self, size: int | None) -> CloseIntent | None:
        """Feed the news of a message over the size cap (refused, not read)."""
        return await self._apply(self.connection.receive_oversized(size))

    def notify(self, method: str, params: dict[str, Any], force: bool = False) -> None:
        """Queue a notification for this client if it is initialized; never waits."""
        text = self.connection.notification(method, params)
        if text is not None and not self.outbox.offer(text, force=force):
            logger.debug("dropped a %s notification for a client that is not reading", method)

    def detach(self) -> None:
        """Forget the client: drop queued and later output; running calls still finish."""
        self.connection.close()
        self.outbox.close(discard=True)
        self._server._sessions.discard(self)

    async def _apply(self, received: Received) -> CloseIntent | None:
        for call in received.calls:
            self._server._start(self, call)
        # Waiting here when the outbox is full stops reading from a client that does not read.
        for message in received.messages:
            await self.outbox.put(message)
        return received.close

    async def _run(self, call: Call) -> None:
        limits = self._server.limits
        seconds = (
            limits.rebuild_timeout_seconds
            if call.method == "memory.rebuild"
            else limits.request_timeout_seconds
        )
        executor = self._server.executor
        context = CallContext(self.notify, call.budget, asyncio.to_thread)
        work = asyncio.ensure_future(executor.execute(call.method, call.params, context))
        # A write is never cancelled midway: the store would finish it in a thread anyway,
        # so an error answer could not say whether it was applied. Its answer waits for it.
        writes = executor.writes(call.method)
        deadline = asyncio.timeout(seconds)
        cancelled = False
        encoded = None
        try:
            try:
                async with deadline:
                    result = await (asyncio.shield(work) if writes else work)
            except asyncio.CancelledError:  # shutdown, past the grace period
                if not writes:
                    raise
                cancelled = True
                result = await _settled(work)
            except TimeoutError:
                if not (writes and deadline.expired()):
                    raise
                result = await _settled(work)  # past the deadline: its real outcome
            if call.budget.charged > OFFLOAD_BYTES and not call.is_notification:
                # Megabytes of JSON take tens of milliseconds to encode: not on the loop.
                encoded = await asyncio.to_thread(self.connection.encode_result, call, result)
        except asyncio.CancelledError:
            work.cancel()
            for message in self.connection.fail(call, _shutting_down(call.method)):
                self.outbox.offer(message, force=True)
            raise
        except TimeoutError as exc:
            error: BaseException = exc
            if deadline.expired():
                error = RpcError(
                    ErrorCode.TIMEOUT,
                    f"timeout: {call.method} did not finish within the server's deadline of "
                    f"{seconds:g} s and was cancelled; try again or ask for less",
                    {"kind": "RequestTimeout", "bound": "request_timeout_seconds"},
                )
            messages = self.connection.fail(call, error)
        except Exception as exc:
            messages = self.connection.fail(call, exc)
        else:
            messages = self.connection.complete(call, result, encoded=encoded)
        if cancelled:  # shutdown: the settled answer is queued even for a full outbox
            for message in messages:
                self.outbox.offer(message, force=True)
            raise asyncio.CancelledError
        for message in messages:
            await self.outbox.put(message)


async def _settled(work: asyncio.Future[Any]) -> Any:
    """Wait for a write to finish, through any cancellation of the waiter; return its result.

    Raises:
        Exception: What the write raised.
    """
    while True:
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            if work.done():
                return work.result()  # the write itself was cancelled: raises that


def _shutting_down(method: str) -> RpcError:
    return RpcError(
        ErrorCode.SHUTTING_DOWN,
        f"{method} was abandoned because the server is shutting down; it changes nothing "
        "(a write is never abandoned: it is answered once it has settled); start a new "
        "server and send it again",
        {"kind": "ShuttingDown"},
    )


class BridgeServer:
    """Serve one memory to many sessions.

    Args:
        service: The memory to serve.
        info: What ``initialize`` reports.
        limits: The bounds to enforce.

    Use from one event loop; only :meth:`broadcast_diagnostic` may be called from another
    thread.
    """

    def __init__(
        self, service: BridgeService, info: ServerInfo, limits: BridgeLimits = DEFAULT_LIMITS
    ) -> None:
        self.info = info
        self.limits = limits
        self.executor = MethodExecutor(service)
        self._sessions: set[Session] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._shutting_down = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        with contextlib.suppress(RuntimeError):  # created outside a loop: bound on first use
            self._bind_loop()

    @property
    def session_count(self) -> int:
        """Connected sessions."""
        return len(self._sessions)

    @property
    def running_calls(self) -> int:
        """Calls running on behalf of any session, detached or not."""
        return len(self._tasks)

    def open_session(self, *, token: str | None) -> Session:
        """Start a session for a new client; ``token`` is what it must present (``None``: none)."""
        if self._loop is None:
            self._bind_loop()
        connection = BridgeConnection(self.info, token=token, limits=self.limits)
        if self._shutting_down:
            connection.begin_shutdown()
        session = Session(self, connection)
        self._sessions.add(session)
        return session

    def broadcast_diagnostic(self, diagnostic: DiagnosticView) -> None:
        """Send ``memory.diagnostic`` to every initialized session; never blocks.

        Safe to call from any thread. A session whose queue is full loses it.
        """
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self.broadcast_diagnostic, diagnostic)
            return
        params = diagnostic_to_json(diagnostic)
        for session in list(self._sessions):
            session.notify("memory.diagnostic", params)

    def _bind_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    async def shutdown(self) -> None:
        """Refuse new calls, let running ones finish within the grace period, cancel the rest.

        Idempotent. Afterwards no call is running, so the service can be closed.
        """
        self._shutting_down = True
        for session in self._sessions:
            session.connection.begin_shutdown()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.limits.shutdown_grace_seconds)
        remaining = set(self._tasks)
        for task in remaining:
            task.cancel()
        if remaining:
            await asyncio.wait(remaining)

    def _start(self, session: Session, call: Call) -> None:
        task = asyncio.get_running_loop().create_task(session._run(call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
