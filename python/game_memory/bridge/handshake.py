"""The ``initialize`` handshake: the token (compared in constant time), then the version.

Pure functions over the raw params of an ``initialize`` request. The token is checked
before anything else, so a refused client learns nothing about the server.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError, error_from_exception, params_not_object
from game_memory.bridge.limits import DEFAULT_LIMITS, PROTOCOL_VERSION, SERVER_NAME
from game_memory.bridge.params import InitializeParams

__all__ = [
    "ServerInfo",
    "initialize_result",
    "read_initialize",
    "refused_before_initialize",
    "token_accepted",
    "token_refused",
]


@dataclass(frozen=True)
class ServerInfo:
    """What ``initialize`` reports, and the diagnostics sent right after it.

    Attributes:
        mode: ``"hybrid"`` or ``"lexical"``.
        model: The embedding model's identity, or ``None``.
        startup_diagnostics: Params of ``memory.diagnostic`` notifications every
            connection receives right after its successful ``initialize`` response.
        server: The server name and version.
        deadlines: The server's deadlines in seconds, of every request but a rebuild and of
            ``memory.rebuild`` (``BridgeLimits``): a client that gives up on a request
            sooner knows how long the server may still be running it.
    """

    mode: str
    model: str | None
    startup_diagnostics: tuple[dict[str, Any], ...] = ()
    server: str = SERVER_NAME
    deadlines: tuple[float, float] = (
        DEFAULT_LIMITS.request_timeout_seconds,
        DEFAULT_LIMITS.rebuild_timeout_seconds,
    )


def token_accepted(expected: bytes | None, raw_params: Any) -> bool:
    """Whether ``raw_params`` carries the ``expected`` token (always, when none is expected).

    The comparison takes the same time wherever the tokens differ.
    """
    if expected is None:
        return True
    supplied = raw_params.get("token") if isinstance(raw_params, dict) else None
    if not isinstance(supplied, str):
        return False
    return hmac.compare_digest(supplied.encode("utf-8", "surrogatepass"), expected)


def token_refused() -> RpcError:
    """The error sent before closing a connection whose token is wrong or missing."""
    return RpcError(
        ErrorCode.UNAUTHORIZED,
        "unauthorized: the token is missing or wrong, so the connection is closed; send the "
        "token printed in the server's ready line (or the --token-file contents)",
        {"kind": "Unauthorized"},
    )


def read_initialize(raw_params: Any) -> InitializeParams:
    """Validate the params of ``initialize``.

    Raises:
        RpcError: ``INVALID_PARAMS`` for malformed params or an unsupported
            ``protocol_version`` (the message names the supported one).
    """
    if not isinstance(raw_params, dict):
        raise params_not_object("initialize")
    try:
        params = InitializeParams.model_validate(raw_params)
    except ValidationError as exc:
        raise error_from_exception(exc, "initialize") from exc
    if params.protocol_version != PROTOCOL_VERSION:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params for initialize: protocol_version {params.protocol_version} is "
            f"not supported; this server supports protocol_version {PROTOCOL_VERSION}",
            {"kind": "UnsupportedProtocolVersion", "field": "protocol_version"},
        )
    return params


def initialize_result(info: ServerInfo) -> dict[str, Any]:
    """The result of a successful ``initialize``."""
    return {
        "protocol_version": PROTOCOL_VERSION,
        "server": info.server,
        "mode": info.mode,
        "model": info.model,
        "deadlines": {"request_seconds": info.deadlines[0], "rebuild_seconds": info.deadlines[1]},
    }


def refused_before_initialize(method: str, *, closing: bool) -> RpcError:
    """The error for a request before a successful ``initialize`` (the connection closes).

    ``closing``: the connection was already refused earlier in the same batch.
    """
    why = (
        "the connection is closing because a request came before a successful initialize"
        if closing
        else f"{method[:64]} was sent before a successful initialize, so the connection is closed"
    )
    return RpcError(
        ErrorCode.UNAUTHORIZED,
        f"unauthorized: {why}; connect again and call initialize first (with the token "
        "from the ready line over WebSocket)",
        {"kind": "Unauthorized"},
    )
