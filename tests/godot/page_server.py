"""The HTTP server an engine run talks to: static files, the page's log, and test controls.

It serves a fixed set of files on 127.0.0.1 (the harness page, the runtime, the pack) and
answers two kinds of requests from the page and the engine:

* ``POST /log``: the page (``harness_page.html``) sends what the engine printed as ordered
  ``{"seq", "stream", "text"}`` entries; they are put back in ``seq`` order, so nothing
  depends on Chromium's console log format.
* ``GET /control/<name>``: calls a Python function the test registered (freeze or kill a
  sidecar, say) on the server's thread and replies only after it returned, so the GDScript
  that asked (with ``HTTPRequest``) knows the action happened before it goes on.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["PAGE_PATH", "ConsoleLine", "ControlHandler", "PageServer"]

#: The harness page, served as ``index.html``.
PAGE_PATH = Path(__file__).resolve().with_name("harness_page.html")
#: Engine output that means the project cannot run (a script that does not parse, a fatal
#: alert); a run is ended shortly after it instead of waiting for its timeout.
_FATAL_OUTPUT = re.compile(r"Parse Error|Failed to load script|Compile Error|startGame failed")
_FATAL_GRACE_SECONDS = 1.5
_MAX_LOG_POST_BYTES = 8 * 1024 * 1024

ControlHandler = Callable[[], object]


@dataclass(frozen=True)
class ConsoleLine:
    """One line the page reported: ``stream`` is stdout, stderr, alert, pageerror or exit."""

    stream: str
    text: str


class _Log:
    """The page's ordered output and how the run ended, behind one condition variable."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.pending: dict[int, ConsoleLine] = {}
        self.lines: list[ConsoleLine] = []
        self.next_seq = 0
        self.exit_text: str | None = None
        self.fatal_at: float | None = None

    def add(self, entries: list[dict[str, Any]]) -> None:
        with self.condition:
            for entry in entries:
                seq = int(entry.get("seq", -1))
                if seq >= self.next_seq:
                    self.pending[seq] = ConsoleLine(
                        str(entry.get("stream", "")), str(entry.get("text", ""))
                    )
            while self.next_seq in self.pending:
                line = self.pending.pop(self.next_seq)
                self.next_seq += 1
                self.lines.extend(
                    ConsoleLine(line.stream, text) for text in line.text.splitlines() or [""]
                )
                if line.stream == "exit":
                    self.exit_text = line.text
                elif line.stream == "alert" or (
                    line.stream != "stdout" and _FATAL_OUTPUT.search(line.text)
                ):
                    self.fatal_at = self.fatal_at or time.monotonic()
            self.condition.notify_all()


class _QuietServer(ThreadingHTTPServer):
    """Ignores clients that vanish mid-request (Chromium is SIGKILLed at the end of a run)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


class PageServer:
    """Serves one engine run on a free loopback port until ``close``.

    Args:
        files: URL path (without the leading ``/``) -> (bytes or a file, content type).
        controls: the ``GET /control/<name>`` handlers.
    """

    def __init__(
        self,
        files: Mapping[str, tuple[bytes | Path, str]],
        controls: Mapping[str, ControlHandler] | None = None,
    ) -> None:
        self._log = _Log()
        self._controls = dict(controls or {})
        self.control_calls: list[str] = []
        self._server = _QuietServer(("127.0.0.1", 0), self._handler(dict(files)))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="engine-page", daemon=True
        )
        self._thread.start()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_for_exit(self, deadline: float, alive: Callable[[], bool]) -> bool:
        """Wait until the page reported the engine's exit, a fatal error's grace period is
        over, or ``alive()`` turns false. Returns True when ``deadline`` (a
        ``time.monotonic()`` value) passed first."""
        log = self._log
        with log.condition:
            while log.exit_text is None:
                now = time.monotonic()
                if now >= deadline:
                    return True
                if log.fatal_at is not None and now >= log.fatal_at + _FATAL_GRACE_SECONDS:
                    return False
                if not alive():
                    return False
                log.condition.wait(timeout=0.1)
        return False

    def lines(self) -> list[ConsoleLine]:
        """Return the lines reported so far, in order."""
        with self._log.condition:
            return list(self._log.lines)

    def exit_code(self) -> int | None:
        """Return the engine's exit code (255 when it could not start), or None."""
        with self._log.condition:
            text = self._log.exit_text
        if text is None:
            return None
        match = re.match(r"-?\d+", text.strip())
        return int(match.group(0)) if match else 255

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()

    def _control(self, name: str) -> tuple[int, bytes, str]:
        handler = self._controls.get(name)
        if handler is None:
            return 404, f"no control named {name!r}".encode(), "text/plain"
        self.control_calls.append(name)
        try:
            outcome = handler()
        except Exception as exc:  # reported to the GDScript, which fails its check
            return 500, f"{type(exc).__name__}: {exc}".encode(), "text/plain"
        return 200, json.dumps({"ok": True, "result": repr(outcome)}).encode(), "application/json"

    def _handler(self, files: dict[str, tuple[bytes | Path, str]]) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # the page reports what matters; keep pytest's output clean

            def _reply(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path.startswith("/control/"):
                    self._reply(*server._control(path.removeprefix("/control/")))
                    return
                entry = files.get(path.lstrip("/"))
                if entry is None:
                    self._reply(404, b"not found", "text/plain")
                    return
                content, content_type = entry
                body = content.read_bytes() if isinstance(content, Path) else content
                self._reply(200, body, content_type)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                if urlsplit(self.path).path != "/log" or not 0 < length <= _MAX_LOG_POST_BYTES:
                    self._reply(400, b"bad log post", "text/plain")
                    return
                try:
                    entries = json.loads(self.rfile.read(length))
                except ValueError:
                    self._reply(400, b"log post is not JSON", "text/plain")
                    return
                if isinstance(entries, list):
                    server._log.add([entry for entry in entries if isinstance(entry, dict)])
                self._reply(204, b"", "text/plain")

        return Handler
