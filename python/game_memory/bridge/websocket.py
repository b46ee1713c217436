"""The WebSocket transport: many clients on a loopback port, one message per text frame.

Built on the ``websockets`` asyncio server with ``max_size`` = the message cap: a frame
over it is refused by the library before its payload is read, and the connection is
closed with code 1009. Binary frames are answered with INVALID_REQUEST; the connection
stays. A client that has not sent ``initialize`` within the deadline, or that sends a
wrong token, is closed with code 4001. Compression and keepalive pings are off: on
loopback they cost CPU, and the operating system reports a dead peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from http import HTTPStatus

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from game_memory.bridge.protocol import UNAUTHORIZED_CLOSE_CODE, ConnectionState
from game_memory.bridge.server import BridgeServer, Session

__all__ = ["WebSocketTransport", "check_loopback"]

logger = logging.getLogger("game_memory.bridge")

_FLUSH_SECONDS = 5.0
_GOING_AWAY = 1001


def check_loopback(host: str) -> str:
    """Return ``host`` as a loopback IP literal, or raise ``ValueError``.

    ``localhost`` means ``127.0.0.1``; any other name or address is refused, because the
    server must never be reachable from another machine.
    """
    literal = "127.0.0.1" if host == "localhost" else host.strip("[]")
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ValueError(
            f"refusing to listen on {host!r}: the server binds loopback addresses only; "
            "use 127.0.0.1 (or ::1)"
        )
    return str(address)


class WebSocketTransport:
    """Serve a :class:`BridgeServer` on a loopback WebSocket.

    Args:
        server: The bridge server.
        token: The token each client must present in ``initialize``.
    """

    def __init__(self, server: BridgeServer, token: str) -> None:
        self._server = server
        self._token = token
        self._ws_server: Server | None = None
        self._clients: dict[ServerConnection, tuple[Session, asyncio.Task[None]]] = {}

    async def start(self, host: str, port: int) -> str:
        """Bind ``host:port`` (port 0 picks a free one); return the ``ws://`` URL.

        Raises:
            ValueError: ``host`` is not a loopback address.
            OSError: The address cannot be bound.
        """
        address = check_loopback(host)
        self._ws_server = await serve(
            self._handle,
            address,
            port,
            max_size=self._server.limits.maximum_message_bytes,
            compression=None,
            ping_interval=None,
            process_request=self._admit,
        )
        bound_port = self._ws_server.sockets[0].getsockname()[1]
        shown = f"[{address}]" if ":" in address else address
        return f"ws://{shown}:{bound_port}"

    async def aclose(self) -> None:
        """Send queued messages, close every connection (1001) and stop listening."""
        for session, _pump in self._clients.values():
            session.outbox.close()
        pumps = [pump for _session, pump in self._clients.values()]
        if pumps:
            await asyncio.wait(pumps, timeout=_FLUSH_SECONDS)
        if self._ws_server is not None:
            self._ws_server.close(close_connections=True)
            await self._ws_server.wait_closed()

    def _admit(self, connection: ServerConnection, request: Request) -> Response | None:
        if len(self._clients) >= self._server.limits.maximum_connections:
            return connection.respond(
                HTTPStatus.SERVICE_UNAVAILABLE, "too many connections; try again later\n"
            )
        return None

    async def _handle(self, connection: ServerConnection) -> None:
        session = self._server.open_session(token=self._token)
        loop = asyncio.get_running_loop()
        pump = loop.create_task(self._send_all(session, connection))
        watchdog = loop.create_task(self._expect_initialize(session, connection))
        self._clients[connection] = (session, pump)
        close = None
        try:
            async for message in connection:
                if isinstance(message, str):
                    close = await session.receive(message)
                else:
                    close = await session.receive_binary(len(message))
                if close is not None:
                    break
        except ConnectionClosed:
            pass
        finally:
            watchdog.cancel()
            if close is not None:
                session.outbox.close()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(pump), _FLUSH_SECONDS)
                await connection.close(close.code, close.reason)
            session.detach()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            del self._clients[connection]

    async def _send_all(self, session: Session, connection: ServerConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            while (message := await session.outbox.get()) is not None:
                await connection.send(message)

    async def _expect_initialize(self, session: Session, connection: ServerConnection) -> None:
        await asyncio.sleep(self._server.limits.initialize_timeout_seconds)
        if session.connection.state is ConnectionState.AWAITING_INITIALIZE:
            seconds = self._server.limits.initialize_timeout_seconds
            logger.info("closing a client that sent no initialize within %g s", seconds)
            await connection.close(UNAUTHORIZED_CLOSE_CODE, "initialize not received in time")
