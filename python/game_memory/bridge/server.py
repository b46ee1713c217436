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
import functools
import logging
import threading
from typing import Any

from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception
from game_memory.bridge.handlers import OFFLOAD_BYTES, CallContext, MethodExecutor
from game_memory.bridge.limits import DEFAULT_LIMITS, BridgeLimits
from game_memory.bridge.messages import encode_message, error_response
from game_memory.bridge.outbox import Outbox
from game_memory.bridge.protocol import (
    BridgeConnection,
    Call,
    CloseIntent,
    ConnectionState,
    Received,
    ServerInfo,
)
from game_memory.bridge.results import diagnostic_to_json
from game_memory.bridge.room import AnswerRoom
from game_memory.bridge.service import BridgeService, DiagnosticView

__all__ = ["BridgeServer", "Session"]

logger = logging.getLogger("game_memory.bridge")


class Session:
    """One client connection: its protocol core, its outbox and its running calls.

    Created by :meth:`BridgeServer.open_session`; the transport must call :meth:`detach`
    when the client is gone.

    Every call is answered exactly once: with its result or error, with TIMEOUT past its
    deadline (a read), or with SHUTTING_DOWN when the shutdown cancels it (a read); a write
    with its real outcome in every case. The answers of a client that does not read are
    bounded: a recall takes room in the outbox before it builds its answer
    (:class:`~game_memory.bridge.room.AnswerRoom`), and the session stops reading from the
    client while the outbox is full or an answer waits for room.
    """

    def __init__(self, server: BridgeServer, connection: BridgeConnection) -> None:
        self._server = server
        self.connection = connection
        limits = server.limits
        self.outbox = Outbox(limits.outbox_messages, limits.outbox_bytes)
        self._room = AnswerRoom(self.outbox)

    async def receive(self, data: str | bytes) -> CloseIntent | None:
        """Feed one text frame or line; return a close intent if the client must go.

        Returns only once the client may be read again (see the class docstring): the
        transport's next read waits meanwhile, which pushes back on the client.

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

    def drop_output(self) -> None:
        """Drop queued and later output, and keep serving: the client's input is still
        read and its requests run (their answers are dropped) until its input ends.

        For a client that closed its reading end (a broken stdout pipe): a write it sent
        afterwards is still executed, as it would have been had its answer arrived.
        """
        self.outbox.close(discard=True)

    async def _apply(self, received: Received) -> CloseIntent | None:
        for call in received.calls:
            self._server._start(self, call)
        for message in received.messages:
            await self.outbox.put(message)
        # Stop reading from a client that does not read: while its outbox is full, or an
        # answer waits for room. Shutting down, only a full outbox stops reading, so that
        # requests sent meanwhile are read and refused with SHUTTING_DOWN.
        while not self.outbox.has_room(behind_waiting=not self._server.shutting_down):
            await self.outbox.changed()
        return received.close

    async def _run(self, call: Call) -> None:
        """Run ``call`` and queue its answer, whatever happens.

        Cancelled by the shutdown (past its grace), the answer (SHUTTING_DOWN for a read,
        the real outcome of a write) is still queued, past the outbox's bound if need be,
        for the transport's final flush; the task then ends cancelled.
        """
        try:
            messages, cancelled = await self._outcome(call)
            held = self._give_back_room(call)
            # An answer that held room goes in at once: its room was waited for already.
            if await self._queue(messages, at_once=held or cancelled):
                cancelled = True
        finally:
            self._give_back_room(call)
        if cancelled:
            raise asyncio.CancelledError

    async def _outcome(self, call: Call) -> tuple[list[str], bool]:
        """Run ``call``; return its messages and whether the shutdown cancelled it."""
        limits = self._server.limits
        seconds = (
            limits.rebuild_timeout_seconds
            if call.method == "memory.rebuild"
            else limits.request_timeout_seconds
        )
        executor = self._server.executor
        context = CallContext(
            self.notify, call.budget, asyncio.to_thread, functools.partial(self._reserve, call)
        )
        work = asyncio.ensure_future(executor.execute(call.method, call.params, context))
        # A write is never cancelled midway: the store would finish it in a thread anyway,
        # so an error answer could not say whether it was applied. Its answer waits for it.
        writes = executor.writes(call.method)
        deadline = asyncio.timeout(seconds)
        cancelled = False
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
        except asyncio.CancelledError:
            work.cancel()
            return self.connection.fail(call, _shutting_down(call.method)), True
        except TimeoutError as exc:
            error: BaseException = exc
            if deadline.expired() and not writes:
                rebuild = call.method == "memory.rebuild"
                error = RpcError(
                    ErrorCode.TIMEOUT,
                    f"timeout: {call.method} did not finish within the server's deadline of "
                    f"{seconds:g} s and was cancelled; "
                    + (
                        f"{_REBUILD_KEEPS} (the deadline is the server's rebuild deadline)"
                        if rebuild
                        else "try again or ask for less"
                    ),
                    {
                        "kind": "RequestTimeout",
                        "bound": "rebuild_timeout_seconds"
                        if rebuild
                        else "request_timeout_seconds",
                    },
                )
            return self.connection.fail(call, error), cancelled
        except Exception as exc:
            return self.connection.fail(call, exc), cancelled
        encoded, interrupted = await self._encode(call, result)
        return self.connection.complete(call, result, encoded=encoded), cancelled or interrupted

    async def _encode(self, call: Call, result: Any) -> tuple[str | None, bool]:
        """Encode a big result off the loop; return it and whether the shutdown came
        meanwhile (the encoding is then finished all the same: the answer is built)."""
        if call.budget.charged <= OFFLOAD_BYTES or call.is_notification:
            return None, False
        # Megabytes of JSON take tens of milliseconds to encode: not on the loop.
        encoding = asyncio.ensure_future(
            asyncio.to_thread(self.connection.encode_result, call, result)
        )
        try:
            return await asyncio.shield(encoding), False
        except asyncio.CancelledError:
            return await _settled(encoding), True

    async def _queue(self, messages: list[str], *, at_once: bool) -> bool:
        """Queue ``messages``; return whether the shutdown cancelled the wait for room.

        Without ``at_once`` each message waits for room; cancelled meanwhile, it and the
        rest are queued at once all the same, so that no answer is lost.
        """
        for position, message in enumerate(messages):
            if at_once:
                self.outbox.offer(message, force=True)
                continue
            try:
                await self.outbox.put(message)
            except asyncio.CancelledError:
                for rest in messages[position:]:
                    self.outbox.offer(rest, force=True)
                return True
        return False

    async def _reserve(self, call: Call, upper_bound: int) -> None:
        """Take room for ``upper_bound`` more characters of ``call``'s answer (see
        :class:`~game_memory.bridge.room.AnswerRoom`); a notification needs none."""
        if call.is_notification:
            return
        budget = call.budget
        await self._room.take(budget, upper_bound, budget.maximum_bytes)

    def _give_back_room(self, call: Call) -> bool:
        """Give back the room ``call``'s response holds once that response is complete;
        return whether it held any. A batch's response is complete with its last member
        (a notification in a batch takes no room and gives back none of the batch's)."""
        batch = call._batch
        if call.is_notification or (
            batch is not None
            and batch.pending > 0
            and self.connection.state is not ConnectionState.CLOSED
        ):
            return False
        return self._room.give_back(call.budget)


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


#: What a cancelled ``memory.rebuild`` leaves: the only read whose work outlives it (each
#: batch's vectors are written before the next starts, ``rebuild.py``).
_REBUILD_KEEPS = "the batches it wrote stay, so calling it again resumes where it stopped"


def _shutting_down(method: str) -> RpcError:
    """The answer of a read the shutdown cancelled past its grace; it says what stays."""
    outcome = (
        _REBUILD_KEEPS
        if method == "memory.rebuild"
        else "it changes nothing (a write is never abandoned: it is answered once it has settled)"
    )
    return RpcError(
        ErrorCode.SHUTTING_DOWN,
        f"{method} was abandoned because the server is shutting down; {outcome}; start a "
        "new server and send it again",
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
    def shutting_down(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._shutting_down

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
            session.outbox.wake()  # a reader held back by waiting answers reads again
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
