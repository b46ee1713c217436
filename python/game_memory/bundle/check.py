"""Start a built sidecar once, the way a game would, and check that it serves its model.

The check runs the bundle's executable with a scrubbed environment (an empty ``PATH`` and
an empty ``HOME``, so no Python and no model cache can help it), ``serve --stdio`` on a
temporary save, waits for the ready line, sends ``initialize`` and compares the mode and
model it reports with what was bundled. A model that failed to load would otherwise only
show up as a lexical sidecar in the game.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from game_memory.bundle.layout import BundleError, executable_name

__all__ = ["SidecarCheck", "check_sidecar", "scrubbed_environment"]

_STDERR_TAIL_CHARACTERS = 2_000


@dataclass(frozen=True)
class SidecarCheck:
    """What the started sidecar reported.

    Attributes:
        ready_seconds: From starting the process to its ready line.
        mode: ``hybrid`` or ``lexical`` (from ``initialize``).
        model: The embedding identity it serves, or ``None`` in lexical mode.
    """

    ready_seconds: float
    mode: str
    model: str | None


def scrubbed_environment(home: Path, empty_path: Path) -> dict[str, str]:
    """The environment of a player's machine with nothing installed: ``env -i`` plus an
    empty ``HOME`` and a ``PATH`` of one empty folder (and, on Windows, the two variables
    the system itself needs to load DLLs and sockets)."""
    environment = {"HOME": str(home), "PATH": str(empty_path)}
    if sys.platform == "win32":
        for name in ("SYSTEMROOT", "SYSTEMDRIVE"):
            if name in os.environ:
                environment[name] = os.environ[name]
        environment["USERPROFILE"] = str(home)
    return environment


def _lines(stream: IO[bytes], into: queue.Queue[tuple[float, bytes]]) -> None:
    """Queue each line of the sidecar's stdout as it comes, then ``b""``; the stream is
    closed at its end (the process exited or was killed), by this thread, which alone
    reads it."""
    with stream:
        for line in stream:
            into.put((time.monotonic(), line))
    into.put((time.monotonic(), b""))


def _next_line(lines: queue.Queue[tuple[float, bytes]], deadline: float) -> tuple[float, bytes]:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        return time.monotonic(), b""


def check_sidecar(bundle: Path, *, expect_model: bool, timeout: float = 120.0) -> SidecarCheck:
    """Start ``bundle``'s sidecar once and check what it serves.

    Args:
        bundle: The bundle folder.
        expect_model: True when a model was bundled: the sidecar must report hybrid mode.
        timeout: Seconds for the ready line and the ``initialize`` answer together.

    Raises:
        BundleError: It did not start, printed no ready line in time, answered badly, served
            another mode than bundled, or did not exit cleanly at end of input; the message
            quotes its stderr.
    """
    executable = bundle / executable_name()
    with tempfile.TemporaryDirectory(prefix="game-memory-bundle-check-") as scratch:
        # By its real path: the sidecar's store refuses links on the save's path, and the
        # temporary folder may be under one (on a Mac ``/var`` links to ``/private/var``).
        root = Path(os.path.realpath(scratch))
        for name in ("home", "path", "save"):
            (root / name).mkdir()
        stderr_path = root / "stderr.log"
        command = [str(executable), "serve", "--stdio", "--save-dir", str(root / "save")]
        started = time.monotonic()
        with stderr_path.open("wb") as stderr:
            try:
                process = subprocess.Popen(
                    [*command, "--model", "default"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    env=scrubbed_environment(root / "home", root / "path"),
                    cwd=root,
                )
            except OSError as exc:
                raise BundleError(f"cannot start {executable}: {exc.strerror or exc}") from exc
        try:
            return _talk(process, started, started + timeout, stderr_path, expect_model)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            if process.stdin is not None:
                with contextlib.suppress(OSError):  # nothing is left unsent by then
                    process.stdin.close()


def _talk(
    process: subprocess.Popen[bytes],
    started: float,
    deadline: float,
    stderr_path: Path,
    expect_model: bool,
) -> SidecarCheck:
    assert process.stdin is not None and process.stdout is not None

    def fail(what: str) -> BundleError:
        if process.poll() is None:
            process.kill()
        process.wait()
        tail = stderr_path.read_text(encoding="utf-8", errors="replace")
        return BundleError(
            f"the bundled sidecar {what} (exit {process.returncode}); its stderr:\n"
            f"{tail[-_STDERR_TAIL_CHARACTERS:]}"
        )

    lines: queue.Queue[tuple[float, bytes]] = queue.Queue()
    threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True).start()
    at, line = _next_line(lines, deadline)
    ready = _json(line)
    if ready.get("event") != "ready" or ready.get("transport") != "stdio":
        raise fail(f"printed {line[:200]!r} instead of its ready line")
    ready_seconds = at - started
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocol_version": 1}}
    process.stdin.write(json.dumps(request).encode() + b"\n")
    process.stdin.flush()
    _, line = _next_line(lines, deadline)
    result = _json(line).get("result")
    if not isinstance(result, dict):
        raise fail(f"answered initialize with {line[:300]!r}")
    mode, model = str(result.get("mode")), result.get("model")
    if mode != ("hybrid" if expect_model else "lexical"):
        raise fail(
            f"serves {mode} recall, but the bundle {'has' if expect_model else 'has no'} model"
        )
    process.stdin.close()
    try:
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise fail("did not exit at the end of its input") from None
    if code != 0:
        raise fail("exited with an error at the end of its input")
    return SidecarCheck(ready_seconds, mode, model if isinstance(model, str) else None)


def _json(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
