"""``game-memory serve``: run the sidecar the Godot addon talks to.

Opens the memory (:func:`game_memory.open_memory`), starts the chosen
transport, prints ONE ready line on stdout, and serves until stdin reaches end of file
(the game died), SIGTERM or SIGINT. Then it refuses new requests, lets running ones finish
within the grace period, sends what is queued, closes the stores and exits 0. Logs go to
stderr only. Exit codes: 0 after a clean stop, 1 when the memory or the port cannot be
opened, 2 for bad arguments (a non-loopback host, an unreadable token file: a
:class:`~game_memory.cli.usage.UsageError`, which ends the run with the usage line).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from game_memory.bridge.limits import DEFAULT_LIMITS, PROTOCOL_VERSION, BridgeLimits
from game_memory.bridge.protocol import ServerInfo
from game_memory.bridge.results import diagnostic_to_json
from game_memory.bridge.server import BridgeServer
from game_memory.bridge.service import DiagnosticView
from game_memory.bridge.stdin import StdinReader
from game_memory.bridge.stdio import StdioTransport
from game_memory.bridge.websocket import WebSocketTransport, check_loopback
from game_memory.cli.capacity import given_bound
from game_memory.cli.folders import folder_problem, index_folder, is_new_save
from game_memory.cli.options import RecallSettings, recall_settings
from game_memory.cli.usage import UsageError
from game_memory.errors import GameMemoryError, InvalidArgumentError
from game_memory.opening import open_memory

__all__ = ["TIMEOUT_ENVIRONMENT_VARIABLE", "ServeSettings", "run"]

logger = logging.getLogger("game_memory.bridge")

#: Overrides the server-side request deadline (seconds, a positive number).
TIMEOUT_ENVIRONMENT_VARIABLE = "GAME_MEMORY_REQUEST_TIMEOUT"
#: A request deadline must be below this many seconds (about 115 days).
MAXIMUM_REQUEST_TIMEOUT_SECONDS = 10_000_000

_MAXIMUM_TOKEN_CHARACTERS = 4_096


@dataclass(frozen=True)
class ServeSettings:
    """Everything ``serve`` needs, checked before anything is opened or bound.

    Attributes:
        save_dir: The authoritative save folder (``None`` with ``database``).
        index_dir: The derived index folder (``None``: the default sibling folder).
        model: ``"default"``, ``"lexical"``, ``"hashing"`` or a model folder.
        host: The loopback address to bind (``None`` for stdio).
        port: The port to bind (0 picks a free one).
        token: The token WebSocket clients must present (``None`` for stdio).
        limits: The bridge's bounds.
        recall: The fusion and reranker options from ``--fusion`` and friends.
        database: A ``postgresql://`` URL holding the save, in place of ``save_dir``.
        maximum_entries: The save's store-wide bound (``--maximum-entries``; ``None``: the
            store's default).
    """

    save_dir: Path | None
    index_dir: Path | None
    model: str
    host: str | None
    port: int
    token: str | None
    limits: BridgeLimits
    recall: RecallSettings = field(default_factory=RecallSettings)
    database: str | None = None
    maximum_entries: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServeSettings:
        """Check the parsed arguments.

        Raises:
            ValueError: With a message for the user: a non-loopback or malformed address,
                an unreadable or empty token file, a bad request timeout.
        """
        host: str | None = None
        port = 0
        token: str | None = None
        if args.websocket is not None:
            host, port = _split_address(args.websocket)
            host = check_loopback(host)
            token = _read_token(args.token_file) if args.token_file else secrets.token_urlsafe(32)
        elif args.token_file:
            raise ValueError("--token-file applies to --websocket only; stdio needs no token")
        limits = DEFAULT_LIMITS
        given = getattr(args, "request_timeout", None)
        if given is not None:  # 0 included: refused, never taken for "not given"
            seconds = _seconds(given, "--request-timeout")
            limits = dataclasses.replace(limits, request_timeout_seconds=seconds)
        elif os.environ.get(TIMEOUT_ENVIRONMENT_VARIABLE):
            seconds = _seconds(
                os.environ[TIMEOUT_ENVIRONMENT_VARIABLE], TIMEOUT_ENVIRONMENT_VARIABLE
            )
            limits = dataclasses.replace(limits, request_timeout_seconds=seconds)
        return cls(
            save_dir=Path(args.save_dir) if args.save_dir else None,
            index_dir=(
                index_folder(args.save_dir, args.index_dir or None)[0]
                if args.save_dir
                else Path(args.index_dir)
                if args.index_dir
                else None
            ),
            model=args.model,
            host=host,
            port=port,
            token=token,
            limits=limits,
            recall=recall_settings(args),
            database=getattr(args, "database", None),
            maximum_entries=given_bound(args),
        )


def _split_address(text: str) -> tuple[str, int]:
    host, separator, port_text = text.rpartition(":")
    if not separator or not host:
        raise ValueError(f"--websocket needs HOST:PORT (such as 127.0.0.1:0), not {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65_535:
        raise ValueError(f"the port in {text!r} must be a number from 0 to 65535")
    return host, port


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {path}: {exc}") from exc
    if not token:
        raise ValueError(f"the token file {path} is empty; write a random token into it")
    if len(token) > _MAXIMUM_TOKEN_CHARACTERS or any(char.isspace() for char in token):
        raise ValueError(
            f"the token in {path} must be one word of at most {_MAXIMUM_TOKEN_CHARACTERS} "
            "characters"
        )
    return token


def _seconds(text: Any, what: str) -> float:
    """``text`` as a request deadline in seconds; ``what`` names where it came from.

    The upper bound keeps the deadline a time the event loop can schedule (and a typo such
    as a deadline in milliseconds from being taken for 3 years); the message states it.

    Raises:
        ValueError: not a positive, finite number of seconds under
            :data:`MAXIMUM_REQUEST_TIMEOUT_SECONDS`.
    """
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < MAXIMUM_REQUEST_TIMEOUT_SECONDS:
        raise ValueError(
            f"{what} must be a positive number of seconds below "
            f"{MAXIMUM_REQUEST_TIMEOUT_SECONDS:,} (about 115 days), not {text!r}"
        )
    return value


class _DiagnosticRelay:
    """Log each store diagnostic to stderr and pass it to the server once there is one."""

    def __init__(self) -> None:
        self.target: Callable[[DiagnosticView], None] | None = None

    def __call__(self, diagnostic: DiagnosticView) -> None:
        params = diagnostic_to_json(diagnostic)
        level = {"error": logging.ERROR, "warning": logging.WARNING}.get(
            params["severity"], logging.INFO
        )
        logger.log(level, "diagnostic %s: %s", params["code"], params["message"])
        if self.target is not None:
            self.target(diagnostic)


def _print_ready(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


async def _first(*awaitables: Any) -> None:
    """Wait until the first of ``awaitables`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(item) for item in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until_end_of_input() -> None:
    reader = StdinReader(0)
    reader.start()
    try:
        while await reader.read():
            pass  # in WebSocket mode stdin only says whether the game is alive
    finally:
        reader.stop()


def _stop_on_signals(stop: asyncio.Event) -> None:
    """Set ``stop`` on SIGTERM or SIGINT, on event loops with and without signal support."""
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(number, stop.set)
        except (NotImplementedError, RuntimeError):  # e.g. Windows: a plain handler instead
            signal.signal(number, lambda *_: loop.call_soon_threadsafe(stop.set))


async def serve(settings: ServeSettings) -> int:
    """Open the memory, serve until told to stop, close everything; return the exit code."""
    stop = asyncio.Event()
    _stop_on_signals(stop)
    relay = _DiagnosticRelay()
    for path, option in ((settings.save_dir, "--save-dir"), (settings.index_dir, "--index-dir")):
        problem = folder_problem(path, option)
        if problem is not None:
            raise InvalidArgumentError(problem)
    save = settings.database or settings.save_dir
    if save is None:
        raise InvalidArgumentError("serve needs --save-dir or --database")
    new_save = settings.save_dir is not None and is_new_save(str(settings.save_dir))
    memory = await open_memory(
        save,
        index=settings.index_dir,
        model=settings.model,
        diagnostics=relay,
        options=settings.recall.options,
        reranker=settings.recall.reranker,
        maximum_entries=settings.maximum_entries,
    )
    try:
        # Open the save now (creating a new one): one that cannot be opened ends the
        # server before its ready line, with the reason on stderr and exit code 1.
        await memory.authoritative.count()
        if new_save and settings.save_dir is not None:
            logger.info("created a new save at %s", os.path.abspath(settings.save_dir))
        notices = () if memory.notice is None else (diagnostic_to_json(memory.notice),)
        for notice in notices:
            logger.warning("%s", notice["message"])
        identity = None if memory.active_identity is None else str(memory.active_identity)
        limits = settings.limits
        info = ServerInfo(
            mode=memory.mode,
            model=identity,
            startup_diagnostics=notices,
            deadlines=(limits.request_timeout_seconds, limits.rebuild_timeout_seconds),
        )
        server = BridgeServer(memory, info, settings.limits)
        relay.target = server.broadcast_diagnostic
        transport: WebSocketTransport | StdioTransport
        reading: asyncio.Future[None] | None = None
        if settings.host is not None and settings.token is not None:
            transport = WebSocketTransport(server, settings.token)
            url = await transport.start(settings.host, settings.port)
            ready = {"event": "ready", "url": url, "token": settings.token}
            _print_ready({**ready, "protocol_version": PROTOCOL_VERSION})
            logger.info("serving %s memory on %s", memory.mode, url)
            await _first(stop.wait(), _until_end_of_input())
        else:
            transport = StdioTransport(server)
            _print_ready(
                {"event": "ready", "transport": "stdio", "protocol_version": PROTOCOL_VERSION}
            )
            # The read loop outlives the stop signal: requests that arrive while running
            # ones finish are read and answered with -32009, as over WebSocket.
            reading = asyncio.ensure_future(transport.run())
            await _first(stop.wait(), asyncio.shield(reading))
        logger.info("stopping: finishing running requests")
        await server.shutdown()
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        await transport.aclose()
    finally:
        await memory.aclose()
    logger.info("stopped")
    return 0


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("game-memory serve: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("websockets").setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    """Run ``game-memory serve`` with parsed arguments; return the exit code.

    Raises:
        UsageError: a bad argument (checked before anything is opened or bound); the
            caller prints it with the usage line and exits with code 2.
    """
    try:
        settings = ServeSettings.from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    _configure_logging()
    try:
        return asyncio.run(serve(settings))
    except (GameMemoryError, OSError) as exc:
        print(f"game-memory serve: {exc}", file=sys.stderr)
        return 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
