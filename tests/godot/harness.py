"""Run a Godot project in the official Godot 4.6 web runtime inside headless Chromium.

``run_project`` packs project folders (``project_pack``), serves the pack with the runtime
(``index.js``/``index.wasm`` fetched by ``fetch_runtime.sh``) and a small harness page on
127.0.0.1, opens the page in Debian's headless Chromium, and collects what the engine prints
until it quits. The page forwards every ``print``/``printerr``/``alert``/page error and the
exit code to the server with ordered POSTs, so nothing depends on Chromium's log format;
Chromium's own log is kept for failure reports.

The page server also answers ``GET /control/<name>`` (its origin is passed to the engine as
the last user argument, ``--harness-url=...``) by calling a Python function the test
registered (freeze, thaw or kill a sidecar) and replying only after it returned, so GDScript
(``HTTPRequest``) knows the action happened before it goes on.

Chromium runs in its own session (process group); when the run ends the whole group is
SIGKILLed and the harness waits until no live process of it is left (zombies, reaped late by
PID 1 in containers, are not waited for).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from .project_pack import build_project_pack

__all__ = [
    "ADDON_DIR",
    "BROWSER_CANDIDATES",
    "REPO_ROOT",
    "RUNTIME_DIR",
    "TEST_PROJECT_DIR",
    "ConsoleLine",
    "ControlHandler",
    "EngineRun",
    "EngineUnavailableError",
    "ensure_runtime",
    "find_chromium",
    "run_pack",
    "run_project",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where ``fetch_runtime.sh`` puts ``index.js`` and ``index.wasm`` (git-ignored).
RUNTIME_DIR = REPO_ROOT / ".cache" / "godot-web"
ADDON_DIR = REPO_ROOT / "godot_addon" / "addons" / "game_memory"
TEST_PROJECT_DIR = Path(__file__).resolve().parent / "project"
FETCH_SCRIPT = Path(__file__).resolve().parent / "fetch_runtime.sh"
BROWSER_CANDIDATES = ("chromium", "chromium-browser")
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--enable-logging=stderr",
    "--v=0",
)
#: Engine output that means the project cannot run (a parse error in a script, a fatal
#: alert); the run is ended shortly after instead of waiting for its timeout.
_FATAL_OUTPUT = re.compile(r"Parse Error|Failed to load script|Compile Error|startGame failed")
_FATAL_GRACE_SECONDS = 1.5
_MAX_LOG_POST_BYTES = 8 * 1024 * 1024
_BROWSER_LOG_TAIL_BYTES = 6000

ControlHandler = Callable[[], object]

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>game-memory engine run</title></head>
<body style="margin:0"><canvas id="canvas"></canvas>
<script src="index.js"></script>
<script>
(function () {
  const queue = [];
  let sending = false;
  let seq = 0;
  function flush() {
    if (sending || queue.length === 0) return;
    sending = true;
    const batch = queue.splice(0, queue.length);
    fetch('/log', {method: 'POST', headers: {'Content-Type': 'application/json'},
                   body: JSON.stringify(batch)})
      .catch(() => {})
      .finally(() => { sending = false; flush(); });
  }
  function emit(stream, text) {
    const line = String(text);
    (stream === 'stdout' ? console.log : console.error)('[' + stream + '] ' + line);
    queue.push({seq: seq++, stream: stream, text: line});
    flush();
  }
  // Fatal engine errors use alert(), which would block a headless page forever.
  window.alert = (message) => emit('alert', message);
  window.addEventListener('error', (event) => emit('pageerror', event.message));
  window.addEventListener('unhandledrejection', (event) => emit('pageerror', event.reason));
  const params = new URLSearchParams(location.search);
  const args = params.getAll('arg');
  const canvas = document.getElementById('canvas');
  // --headless on the web reads past DisplayServerHeadless unless the canvas is 0x0.
  if (args.includes('--headless')) { canvas.width = 0; canvas.height = 0; }
  const engine = new Engine({
    executable: 'index', mainPack: params.get('pck'), args: args, canvas: canvas,
    canvasResizePolicy: 0, unloadAfterInit: false,
    onPrint: (...parts) => emit('stdout', parts.join(' ')),
    onPrintError: (...parts) => emit('stderr', parts.join(' ')),
    onExit: (code) => emit('exit', code),
  });
  engine.startGame().catch((error) => emit('exit', '255 startGame failed: ' + error));
})();
</script></body></html>
"""


class EngineUnavailableError(RuntimeError):
    """Chromium or the web runtime is missing; the message says how to install it."""


@dataclass(frozen=True)
class ConsoleLine:
    """One line the page reported: ``stream`` is stdout, stderr, alert, pageerror or exit."""

    stream: str
    text: str


@dataclass
class EngineRun:
    """What one engine run printed, and how it ended."""

    exit_code: int | None
    lines: list[ConsoleLine]
    timed_out: bool
    seconds: float
    browser_log: str = ""
    control_calls: list[str] = field(default_factory=list)

    def stdout(self) -> list[str]:
        """Return the engine's ``print`` output, line by line."""
        return [line.text for line in self.lines if line.stream == "stdout"]

    def errors(self) -> list[str]:
        """Return error output: ``printerr``/``push_error``, alerts and page errors."""
        return [line.text for line in self.lines if line.stream in ("stderr", "alert", "pageerror")]

    def records(self, tag: str = "GMTEST") -> list[dict[str, Any]]:
        """Return the JSON objects of the stdout lines that start with ``tag`` and a space."""
        prefix = tag + " "
        found: list[dict[str, Any]] = []
        for text in self.stdout():
            if text.startswith(prefix):
                value = json.loads(text[len(prefix) :])
                if isinstance(value, dict):
                    found.append(value)
        return found

    def describe(self, last: int = 60) -> str:
        """Summarize the run for an assertion message: ending, last lines, Chromium log tail."""
        ending = "timed out" if self.timed_out else f"exit code {self.exit_code}"
        shown = "\n".join(f"  [{line.stream}] {line.text}" for line in self.lines[-last:])
        return (
            f"engine run {ending} after {self.seconds:.1f} s; last {last} lines:\n{shown}\n"
            f"chromium log tail:\n{self.browser_log[-_BROWSER_LOG_TAIL_BYTES:]}"
        )


def find_chromium() -> str | None:
    """Return the path of a Chromium executable on the PATH, or None."""
    for name in BROWSER_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def ensure_runtime(destination: Path = RUNTIME_DIR) -> Path:
    """Make sure ``index.js``/``index.wasm`` are in ``destination`` (fetching them if not).

    Raises:
        EngineUnavailableError: the fetch script failed (no npm, no network, changed hash).
    """
    result = subprocess.run(
        ["sh", str(FETCH_SCRIPT), str(destination)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise EngineUnavailableError(
            f"could not fetch the Godot web runtime ({FETCH_SCRIPT}): "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return destination


class _PageState:
    """What the page server shares with the run loop (guarded by one condition)."""

    def __init__(self, controls: Mapping[str, ControlHandler]) -> None:
        self.condition = threading.Condition()
        self.pending: dict[int, ConsoleLine] = {}
        self.lines: list[ConsoleLine] = []
        self.next_seq = 0
        self.exit_text: str | None = None
        self.fatal_at: float | None = None
        self.controls = dict(controls)
        self.control_calls: list[str] = []

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
                for text in line.text.splitlines() or [""]:
                    self.lines.append(ConsoleLine(line.stream, text))
                if line.stream == "exit":
                    self.exit_text = line.text
                elif line.stream == "alert" or (
                    line.stream != "stdout" and _FATAL_OUTPUT.search(line.text)
                ):
                    self.fatal_at = self.fatal_at or time.monotonic()
            self.condition.notify_all()


def _make_handler(files: Mapping[str, tuple[bytes | Path, str]], state: _PageState) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep pytest output clean; the page reports what matters

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
                self._control(path.removeprefix("/control/"))
                return
            entry = files.get(path.lstrip("/"))
            if entry is None:
                self._reply(404, b"not found", "text/plain")
                return
            content, content_type = entry
            body = content.read_bytes() if isinstance(content, Path) else content
            self._reply(200, body, content_type)

        def _control(self, name: str) -> None:
            handler = state.controls.get(name)
            if handler is None:
                self._reply(404, f"no control named {name!r}".encode(), "text/plain")
                return
            state.control_calls.append(name)
            try:
                outcome = handler()
            except Exception as exc:  # reported to the GDScript side, which fails its check
                self._reply(500, f"{type(exc).__name__}: {exc}".encode(), "text/plain")
                return
            self._reply(200, json.dumps({"ok": True, "result": repr(outcome)}).encode(),
                        "application/json")

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
                state.add([entry for entry in entries if isinstance(entry, dict)])
            self._reply(204, b"", "text/plain")

    return Handler


class _QuietServer(ThreadingHTTPServer):
    """A page server that ignores clients vanishing mid-request (Chromium is SIGKILLed)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


def _live_group_members(pgid: int) -> list[int]:
    """Return the pids of the process group that are not zombies (Linux /proc)."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _kill_group(process: subprocess.Popen[bytes], wait_seconds: float = 10.0) -> None:
    """SIGKILL the process's whole group and wait until no live member is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=wait_seconds)
    deadline = time.monotonic() + wait_seconds
    while _live_group_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def run_pack(
    pack: Path,
    user_args: Sequence[str] = (),
    *,
    controls: Mapping[str, ControlHandler] | None = None,
    timeout: float = 45.0,
    headless: bool = True,
) -> EngineRun:
    """Run a ``.pck`` in the web runtime in headless Chromium and collect its output.

    Args:
        pack: the project pack (see ``project_pack.build_project_pack``).
        user_args: arguments after ``--``, read in GDScript with ``OS.get_cmdline_user_args()``;
            the harness appends ``--harness-url=http://127.0.0.1:PORT``, the page server's
            origin, where the GDScript finds ``/control/<name>``.
        controls: ``GET /control/<name>`` handlers the GDScript may call (on the server's
            thread); the reply is sent after the handler returned.
        timeout: seconds before the run is ended (``timed_out`` is then true).
        headless: run the engine with ``--headless`` (no rendering; faster). False runs
            WebGL2 through SwiftShader.

    Returns:
        The run's output and ending. It never raises because of what the engine did.

    Raises:
        EngineUnavailableError: Chromium is not installed, or the runtime cannot be fetched.
    """
    chromium = find_chromium()
    if chromium is None:
        raise EngineUnavailableError(
            "Chromium is not installed; run `apt-get install -y chromium` to run engine tests"
        )
    runtime = ensure_runtime()
    state = _PageState(controls or {})
    files: dict[str, tuple[bytes | Path, str]] = {
        "index.html": (_PAGE.encode(), "text/html; charset=utf-8"),
        "index.js": (runtime / "index.js", "text/javascript"),
        "index.wasm": (runtime / "index.wasm", "application/wasm"),
        "game.pck": (pack, "application/octet-stream"),
    }
    server = _QuietServer(("127.0.0.1", 0), _make_handler(files, state))
    serving = threading.Thread(target=server.serve_forever, name="engine-page", daemon=True)
    serving.start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    engine_args = [*(["--headless"] if headless else []), "--", *user_args,
                   f"--harness-url={origin}"]
    query = urlencode([("pck", "game.pck"), *(("arg", arg) for arg in engine_args)])
    url = f"{origin}/index.html?{query}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gm-chromium-") as scratch:
        log_path = Path(scratch) / "chromium.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={scratch}/profile", url],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                timed_out = _wait_for_exit(state, process, started + timeout)
            finally:
                _kill_group(process)
                server.shutdown()
                server.server_close()
        browser_log = log_path.read_bytes()[-_BROWSER_LOG_TAIL_BYTES:].decode(errors="replace")
    with state.condition:
        lines = list(state.lines)
        exit_text = state.exit_text
    exit_code: int | None = None
    if exit_text is not None:
        match = re.match(r"-?\d+", exit_text.strip())
        exit_code = int(match.group(0)) if match else 255
    return EngineRun(exit_code, lines, timed_out, time.monotonic() - started, browser_log,
                     list(state.control_calls))


def _wait_for_exit(state: _PageState, process: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for the page to report the engine's exit; returns True when ``deadline`` passed."""
    with state.condition:
        while state.exit_text is None:
            now = time.monotonic()
            if now >= deadline:
                return True
            if state.fatal_at is not None and now >= state.fatal_at + _FATAL_GRACE_SECONDS:
                return False
            if process.poll() is not None:
                return False
            state.condition.wait(timeout=0.1)
    return False


def run_project(
    mounts: Sequence[tuple[Path, str]],
    user_args: Sequence[str] = (),
    *,
    extra_files: Mapping[str, bytes] | None = None,
    controls: Mapping[str, ControlHandler] | None = None,
    timeout: float = 45.0,
    headless: bool = True,
) -> EngineRun:
    """Pack ``mounts`` (``(folder, res_prefix)`` pairs, one with ``project.godot``) plus
    ``extra_files`` and run the pack with ``run_pack``; see it for the other arguments.

    For a project that ships the addon inside it (the demo), one mount is enough:
    ``run_project([(demo_dir, "")], ["--scripted"])``.
    """
    with tempfile.TemporaryDirectory(prefix="gm-pack-") as scratch:
        pack = Path(scratch) / "game.pck"
        build_project_pack(pack, mounts, extra_files)
        return run_pack(pack, user_args, controls=controls, timeout=timeout, headless=headless)
