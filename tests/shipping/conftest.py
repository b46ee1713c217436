"""The sidecar bundle, built once per test session from this checkout with the real CLI.

``built_bundle`` runs ``game-memory bundle --output DIR --json`` (PyInstaller, the default
model prepared in ``$GAME_MEMORY_HOME``) in a folder every user can read, so a test can run
the bundle as an unprivileged player. The figures (size, build time, time to the ready
line) are printed in the terminal summary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_SECONDS = 1_500
_FIGURES: dict[str, Any] = {}


@dataclass(frozen=True)
class BuiltBundleRun:
    """A bundle built by the CLI: its folder, its executable and what the CLI printed."""

    folder: Path
    executable: Path
    summary: dict[str, Any]
    model_home: Path
    wall_seconds: float


def model_home() -> Path:
    """Where the default model is prepared: ``$GAME_MEMORY_HOME`` (CI sets it), else a cache
    folder in the checkout."""
    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    return Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"


def _build(model: str) -> tuple[Path, BuiltBundleRun]:
    output = Path(tempfile.mkdtemp(prefix="game-memory-bundle-test-"))
    output.chmod(0o755)  # an unprivileged player must be able to run it
    home = model_home()
    started = time.monotonic()
    result = subprocess.run(
        [
            *[sys.executable, "-m", "game_memory.cli", "bundle"],
            *["--output", str(output), "--model", model, "--json"],
        ],
        env={**os.environ, "GAME_MEMORY_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_SECONDS,
        check=False,
    )
    wall = time.monotonic() - started
    assert result.returncode == 0, f"game-memory bundle --model {model} failed:\n{result.stderr}"
    summary = json.loads(result.stdout)
    run = BuiltBundleRun(Path(summary["bundle"]), Path(summary["executable"]), summary, home, wall)
    return output, run


@pytest.fixture(scope="session")
def built_bundle() -> Iterator[BuiltBundleRun]:
    """``game-memory bundle --output <tmp> --json`` (the default model), once per session."""
    output, run = _build("default")
    _FIGURES.update(run.summary, wall_seconds=round(run.wall_seconds, 1))
    try:
        yield run
    finally:
        shutil.rmtree(output, ignore_errors=True)


@pytest.fixture(scope="session")
def lexical_bundle() -> Iterator[BuiltBundleRun]:
    """``game-memory bundle --model lexical``: no model and no embedding runtime, once."""
    output, run = _build("lexical")
    _FIGURES.update(
        lexical_bytes=run.summary["total_bytes"],
        lexical_ready_seconds=run.summary["ready_seconds"],
        lexical_build_seconds=run.summary["build_seconds"],
    )
    try:
        yield run
    finally:
        shutil.rmtree(output, ignore_errors=True)


def record_figure(name: str, value: Any) -> None:
    """Add a measured figure to the terminal summary's bundle line."""
    _FIGURES[name] = value


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the bundle's figures when a bundle was built in this session."""
    if not _FIGURES:
        return
    figures = {
        key: _FIGURES[key]
        for key in (
            "platform",
            "total_bytes",
            "model_bytes",
            "freeze_seconds",
            "build_seconds",
            "wall_seconds",
            "ready_seconds",
            "scrubbed_ready_seconds",
            "lexical_bytes",
            "lexical_ready_seconds",
            "lexical_build_seconds",
        )
        if key in _FIGURES
    }
    terminalreporter.write_line("sidecar bundle: " + json.dumps(figures), bold=True)
