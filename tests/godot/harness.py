"""Run a Godot project in the official Godot 4.6 web runtime inside headless Chromium.

``run_project`` packs project folders (``project_pack``), serves the pack with the runtime
(``index.js``/``index.wasm``, fetched by ``fetch_runtime.sh``) and the harness page on
127.0.0.1 (``page_server``), opens the page in Debian's headless Chromium, and collects what
the engine prints until it quits. Chromium's own log is kept for failure reports.

The engine gets the page server's origin as its last user argument,
``--harness-url=http://127.0.0.1:PORT``, where GDScript finds the test's
``/control/<name>`` handlers.

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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .page_server import PAGE_PATH, ConsoleLine, ControlHandler, PageServer
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
_BROWSER_LOG_TAIL_BYTES = 6000
#: Harmless Chromium log lines in a container (no D-Bus, no GPU, Debian's wrapper script).
_BROWSER_NOISE = re.compile(
    r"dbus|bluez|idle_linux|vaapi|sandbox_linux|unexpected operator|Fontconfig"
)


class EngineUnavailableError(RuntimeError):
    """Chromium or the web runtime is missing; the message says how to install it."""


@dataclass
class EngineRun:
    """What one engine run printed, and how it ended.

    Attributes:
        exit_code: what ``get_tree().quit(code)`` passed (255: the engine did not start), or
            None when the run was ended before the engine quit.
        lines: everything the page reported, in order (one entry per line).
        timed_out: the run was ended at its timeout.
        seconds: wall time from launching Chromium until its process group was gone.
        browser_log: the tail of Chromium's own log, without the console lines.
        control_calls: the ``/control/<name>`` names the engine called, in order.
        process_group: Chromium's process group id (all of it is dead when the run returns).
    """

    exit_code: int | None
    lines: list[ConsoleLine]
    timed_out: bool
    seconds: float
    browser_log: str = ""
    control_calls: list[str] = field(default_factory=list)
    process_group: int = 0

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
    files: dict[str, tuple[bytes | Path, str]] = {
        "index.html": (PAGE_PATH, "text/html; charset=utf-8"),
        "index.js": (runtime / "index.js", "text/javascript"),
        "index.wasm": (runtime / "index.wasm", "application/wasm"),
        "game.pck": (pack, "application/octet-stream"),
    }
    server = PageServer(files, controls)
    # Without --headless the engine renders through WebGL2 (SwiftShader); audio stays Dummy,
    # since the runtime's audio worklets are not served.
    display = ["--headless"] if headless else ["--audio-driver", "Dummy"]
    engine_args = [*display, "--", *user_args, f"--harness-url={server.origin}"]
    query = urlencode([("pck", "game.pck"), *(("arg", arg) for arg in engine_args)])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gm-chromium-") as scratch:
        log_path = Path(scratch) / "chromium.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [
                    chromium,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={scratch}/profile",
                    f"{server.origin}/index.html?{query}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                timed_out = server.wait_for_exit(started + timeout, lambda: process.poll() is None)
            finally:
                _kill_group(process)
                server.close()
        # Console lines are in ``lines`` already; keep Chromium's own messages (crashes).
        browser_log = "".join(
            line
            for line in log_path.read_text(errors="replace").splitlines(keepends=True)
            if ":CONSOLE" not in line and not _BROWSER_NOISE.search(line)
        )[-_BROWSER_LOG_TAIL_BYTES:]
    return EngineRun(
        server.exit_code(),
        server.lines(),
        timed_out,
        time.monotonic() - started,
        browser_log,
        list(server.control_calls),
        process.pid,
    )


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
