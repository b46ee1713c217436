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

#: How long queued messages may take to be sent when a connection ends.
_FLUSH_SECONDS = 5.0
#: How long a client may take to answer the closing handshake before it is disconnected.
_CLOSE_SECONDS = 2.0
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
        """Send queued messages, close every connection (1001) and stop listening.

        Bounded whatever the clients do: queued messages get ``_FLUSH_SECONDS`` to be
        sent; a client that has not taken them by then (it stopped reading, so no close
        frame could reach it either) is disconnected at once. The others are closed with
        1001 and get ``_CLOSE_SECONDS`` to answer; then they are disconnected too.
        Idempotent.
        """
        clients = list(self._clients.items())
        for _connection, (session, _pump) in clients:
            session.outbox.close()
        pumps = [pump for _connection, (_session, pump) in clients]
        if pumps:
            await asyncio.wait(pumps, timeout=_FLUSH_SECONDS)
        stuck = [connection for connection, (_session, pump) in clients if not pump.done()]
        if stuck:
            logger.warning(
                "disconnecting %d client(s) that did not read their last messages within %g s",
                len(stuck),
                _FLUSH_SECONDS,
            )
            for connection in stuck:
                connection.transport.abort()
        closing = [
            _close(connection, _GOING_AWAY, "server shutting down")
            for connection, (_session, pump) in clients
            if pump.done() and connection not in stuck
        ]
        await asyncio.gather(*closing)
        if self._ws_server is not None:
            self._ws_server.close(close_connections=True)
            await self._wait_closed()

    async def _wait_closed(self) -> None:
        """Wait for every connection handler to end; disconnect what still lingers."""
        assert self._ws_server is not None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._ws_server.wait_closed()), _CLOSE_SECONDS)
            return
        for connection in list(self._clients):
            connection.transport.abort()
        try:
            await asyncio.wait_for(asyncio.shield(self._ws_server.wait_closed()), _CLOSE_SECONDS)
        except TimeoutError:
            logger.warning("stopping with %d connection(s) still closing", len(self._clients))

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
                await _close(connection, close.code, close.reason)
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
            await _close(connection, UNAUTHORIZED_CLOSE_CODE, "initialize not received in time")


async def _close(connection: ServerConnection, code: int, reason: str) -> None:
    """Close ``connection`` with ``code``; a client that does not complete the closing
    handshake within ``_CLOSE_SECONDS`` (one that does not read never can) is
    disconnected without it."""
    try:
        async with asyncio.timeout(_CLOSE_SECONDS):
            await connection.close(code, reason)
    except TimeoutError:
        connection.transport.abort()
