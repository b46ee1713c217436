"""The bridge's bounds, as numbers, in one frozen record.

Every limit is documented in ``docs/protocol.md`` (a test checks that each default value
appears there), together with what happens when a client goes past it.
"""

from __future__ import annotations

from dataclasses import dataclass

from game_memory._version import __version__

__all__ = ["DEFAULT_LIMITS", "PROTOCOL_VERSION", "SERVER_NAME", "BridgeLimits"]

#: The only protocol version this server speaks.
PROTOCOL_VERSION = 1

#: What ``initialize`` reports as ``server``.
SERVER_NAME = f"game-memory {__version__}"


@dataclass(frozen=True)
class BridgeLimits:
    """Bounds on what one client may ask of the bridge.

    Attributes:
        maximum_message_bytes: Largest inbound message (UTF-8 bytes of one line or frame);
            larger ones are refused without being parsed.
        maximum_batch_entries: Largest JSON-RPC batch array.
        maximum_in_flight: Requests of one connection that may run at once; more are
            refused with "busy" (-32007).
        maximum_response_bytes: Largest outbound response; a bigger result is replaced by
            a "capacity exceeded" error (-32003) naming ``maximum_response_bytes``.
        request_timeout_seconds: Server-side deadline of every request but a rebuild.
        rebuild_timeout_seconds: Server-side deadline of ``memory.rebuild``.
        initialize_timeout_seconds: How long a WebSocket client may wait before its
            ``initialize``; the connection is then closed (close code 4001).
        shutdown_grace_seconds: How long in-flight requests may finish when the server stops.
        maximum_connections: Simultaneous WebSocket connections; more are refused with
            HTTP 503 during the handshake.
        outbox_messages: Messages queued for one connection, answers being built
            included, before the server stops reading from it and building its recall
            answers (responses) or drops them (intermediate notifications).
        outbox_bytes: The same bound in bytes: a recall holds room for an upper bound of
            its answer while it builds it, so a client that does not read holds at most
            this plus one response of answers.
    """

    maximum_message_bytes: int = 1_048_576
    maximum_batch_entries: int = 64
    maximum_in_flight: int = 64
    maximum_response_bytes: int = 16_777_216
    request_timeout_seconds: float = 120.0
    rebuild_timeout_seconds: float = 3_600.0
    initialize_timeout_seconds: float = 30.0
    shutdown_grace_seconds: float = 10.0
    maximum_connections: int = 128
    outbox_messages: int = 256
    outbox_bytes: int = 33_554_432


DEFAULT_LIMITS = BridgeLimits()
