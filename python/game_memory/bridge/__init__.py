"""The Godot contract: JSON-RPC 2.0 over stdio and loopback WebSocket.

A sans-I/O core under thin transports (``docs/protocol.md`` is the contract)::

    command      game-memory serve: settings, ready line, signals, shutdown
    websocket    transport: loopback WebSocket server (websockets asyncio API)
    stdio        transport: one client, one message per line
      └─ server      async dispatcher: sessions, call tasks, deadlines, broadcast, shutdown
           ├─ handlers   runs one call against the BridgeService, shapes its JSON
           ├─ outbox     bounded per-connection queue of outgoing messages
           └─ protocol   sans-I/O core: initialize first, token, caps, batches, routing
                ├─ params, convert, results   method params in, memories out
                ├─ handshake                  initialize: token first, then the version
                ├─ batches                    one array answer per batch, size-capped
                ├─ messages                   strict JSON-RPC envelopes
                └─ codes                      the one table of error codes
    framing, stdin   bounded line splitting and a thread-fed stdin reader

The core (``protocol`` and below) imports neither asyncio nor sockets.
"""

from game_memory.bridge.codes import ErrorCode, RpcError
from game_memory.bridge.limits import DEFAULT_LIMITS, PROTOCOL_VERSION, BridgeLimits
from game_memory.bridge.protocol import (
    METHODS,
    NOTIFICATIONS,
    BridgeConnection,
    Call,
    CloseIntent,
    ConnectionState,
    Received,
    ServerInfo,
)
from game_memory.bridge.server import BridgeServer, Session
from game_memory.bridge.service import BridgeService

__all__ = [
    "DEFAULT_LIMITS",
    "METHODS",
    "NOTIFICATIONS",
    "PROTOCOL_VERSION",
    "BridgeConnection",
    "BridgeLimits",
    "BridgeServer",
    "BridgeService",
    "Call",
    "CloseIntent",
    "ConnectionState",
    "ErrorCode",
    "Received",
    "RpcError",
    "ServerInfo",
    "Session",
]
