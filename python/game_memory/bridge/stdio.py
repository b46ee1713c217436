"""The stdio transport: one client, one JSON-RPC message per line on stdin and stdout.

No token is needed (the parent process owns the pipes), but ``initialize`` still comes
first. Lines over the size cap are skipped without being held in memory and answered with
INVALID_REQUEST. Only protocol messages go to stdout; logs go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat

from game_memory.bridge.framing import LineFramer, Oversized
from game_memory.bridge.server import BridgeServer, Session
from game_memory.bridge.stdin import StdinReader

__all__ = ["StdioTransport"]

logger = logging.getLogger("game_memory.bridge")

_FLUSH_SECONDS = 5.0


class _LineWriter:
    """Write lines to a descriptor: through the event loop for pipes, directly otherwise."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        mode = os.fstat(self._fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return
        loop = asyncio.get_running_loop()
        pipe = os.fdopen(os.dup(self._fd), "wb", buffering=0)
        try:
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), pipe
            )
        except (OSError, ValueError, NotImplementedError):
            pipe.close()  # an event loop without pipe support: write directly instead
            return
        self._writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write(self, data: bytes) -> None:
        if self._writer is not None:
            self._writer.write(data)
            await self._writer.drain()
            return
        view = memoryview(data)
        while view:  # a regular file or terminal: writes do not block for long
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


class StdioTransport:
    """Serve one client over a pair of descriptors (stdin and stdout by default).

    Args:
        server: The bridge server.
        input_fd: Where requests come from.
        output_fd: Where responses and notifications go.
    """

    def __init__(self, server: BridgeServer, *, input_fd: int = 0, output_fd: int = 1) -> None:
        self._server = server
        self._input_fd = input_fd
        self._writer = _LineWriter(output_fd)
        self._session: Session | None = None
        self._pump: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve until the input reaches end of file, the client must be closed (a request
        before ``initialize``), or this task is cancelled.

        Calls still running keep their session; :meth:`aclose` sends their responses.
        """
        await self._writer.open()
        session = self._server.open_session(token=None)
        self._session = session
        self._pump = asyncio.get_running_loop().create_task(self._send_all(session))
        reader = StdinReader(self._input_fd)
        reader.start()
        framer = LineFramer(self._server.limits.maximum_message_bytes)
        try:
            while True:
                chunk = await reader.read()
                for item in framer.feed(chunk) if chunk else framer.end():
                    if isinstance(item, Oversized):
                        close = await session.receive_oversized(item.size)
                    else:
                        close = await session.receive(item)
                    if close is not None:
                        # The one client broke the protocol (a request before initialize):
                        # its session ends here; what is queued is still sent.
                        logger.warning("closing the stdio session: %s", close.reason)
                        return
                if not chunk:
                    return
        finally:
            reader.stop()

    async def aclose(self) -> None:
        """Send what is queued (within a few seconds), then stop writing. Idempotent."""
        if self._session is not None:
            self._session.outbox.close()
        if self._pump is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._pump), _FLUSH_SECONDS)
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        if self._session is not None:
            self._session.detach()
        self._writer.close()

    async def _send_all(self, session: Session) -> None:
        try:
            while (message := await session.outbox.get()) is not None:
                await self._writer.write(message.encode("utf-8") + b"\n")
        except (BrokenPipeError, ConnectionResetError):
            # Requests still arrive on stdin and still run (a write sent now is executed,
            # as the protocol promises); only their answers have nowhere to go.
            logger.warning(
                "stdout was closed by the client; dropping further output, serving stdin "
                "until it ends"
            )
            session.drop_output()
