"""Start a ``game-memory serve --websocket`` sidecar for engine tests, and act on it on cue.

``SidecarProcess.start`` launches the command in its own process group with a pipe on stdin
(EOF there is the sidecar's signal to exit cleanly), reads its one ready line
(``{"event": "ready", "url", "token", "protocol_version"}``) within a deadline, and keeps
stderr in a file for failure reports. ``controls()`` gives the engine harness handlers that
freeze (SIGSTOP), thaw (SIGCONT) and kill (SIGKILL) the real process, which is how the engine
tests produce request timeouts and a sidecar dying mid-request without any fake.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = ["SidecarError", "SidecarProcess", "serve_command"]

_STDERR_TAIL_BYTES = 4000


class SidecarError(RuntimeError):
    """The sidecar did not start: no ready line in time, or a bad one; has its stderr tail."""


def serve_command(
    save_dir: Path, index_dir: Path, model: str = "hashing", extra: Sequence[str] = ()
) -> list[str]:
    """Return the command that runs the real sidecar from this checkout's Python; ``extra``
    arguments (e.g. ``--maximum-memories-per-owner 6``) come last."""
    return [
        sys.executable,
        "-m",
        "game_memory.cli",
        "serve",
        "--websocket",
        "127.0.0.1:0",
        "--save-dir",
        str(save_dir),
        "--index-dir",
        str(index_dir),
        "--model",
        model,
        *extra,
    ]


class SidecarProcess:
    """A running sidecar: its URL, token and process, with freeze/thaw/kill controls."""

    def __init__(
        self, process: subprocess.Popen[bytes], ready: Mapping[str, Any], stderr_path: Path
    ) -> None:
        self.process = process
        self.url = str(ready["url"])
        self.token = str(ready["token"])
        self.ready = dict(ready)
        self._stderr_path = stderr_path

    @classmethod
    def start(
        cls,
        command: Sequence[str],
        stderr_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 60.0,
    ) -> SidecarProcess:
        """Launch ``command`` and wait for its ready line.

        Raises:
            SidecarError: it exited, printed something else, or was silent for
                ``ready_timeout`` seconds; it is killed and the message has its stderr.
        """
        with stderr_path.open("wb") as stderr:
            process = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        assert process.stdout is not None
        line = _read_line(process.stdout, ready_timeout)
        try:
            ready = json.loads(line) if line else None
        except ValueError:
            ready = None
        if not isinstance(ready, dict) or ready.get("event") != "ready" or "url" not in ready:
            _kill(process)
            tail = stderr_path.read_bytes()[-_STDERR_TAIL_BYTES:].decode(errors="replace")
            raise SidecarError(
                f"`{' '.join(command)}` gave no ready line within {ready_timeout} s "
                f"(got {line[:200]!r}); stderr:\n{tail}"
            )
        return cls(process, ready, stderr_path)

    @property
    def pid(self) -> int:
        """The sidecar's process id (also its process group id)."""
        return self.process.pid

    def stderr_tail(self) -> str:
        """Return the end of what the sidecar wrote to stderr."""
        data = self._stderr_path.read_bytes() if self._stderr_path.exists() else b""
        return data[-_STDERR_TAIL_BYTES:].decode(errors="replace")

    def freeze(self) -> str:
        """Stop the sidecar (SIGSTOP): it holds its sockets but answers nothing."""
        os.kill(self.pid, signal.SIGSTOP)
        return "frozen"

    def thaw(self) -> str:
        """Resume a frozen sidecar (SIGCONT)."""
        os.kill(self.pid, signal.SIGCONT)
        return "thawed"

    def kill(self) -> str:
        """Kill the sidecar's process group (SIGKILL) and reap it; its sockets close."""
        _kill(self.process)
        return f"killed, exit {self.process.returncode}"

    def controls(self) -> dict[str, Callable[[], object]]:
        """Return the harness control handlers: freeze, thaw and kill."""
        return {"freeze": self.freeze, "thaw": self.thaw, "kill": self.kill}

    def close(self, timeout: float = 15.0) -> int | None:
        """Ask the sidecar to exit by closing its stdin; kill it if it has not within
        ``timeout`` seconds. Returns its exit code (negative: killed by that signal)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGCONT)  # a frozen sidecar cannot see EOF
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(self.process)
            return self.process.returncode


def _read_line(stream: IO[bytes], timeout: float) -> str:
    """Read one line from ``stream`` within ``timeout`` seconds; "" on EOF or timeout."""
    result: list[bytes] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0].decode(errors="replace").strip() if result else ""


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
