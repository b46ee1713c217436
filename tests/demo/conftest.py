"""Fixtures of the demo tests: the prepared default model, one real-model terminal run, the engine.

The real default model is prepared at most once per run into ``$GAME_MEMORY_HOME`` (CI sets it)
or else into the repository's git-ignored ``.cache/pytest-game-memory-home``, as the ONNX tests
do. Engine tests are skipped, with the reason in the terminal summary, only when Chromium is
not installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from game_memory.demo import run_demo

REPOSITORY = Path(__file__).resolve().parents[2]
DEMO_PROJECT = REPOSITORY / "demo_project"
_SKIPPED: list[str] = []
#: Lines for the terminal summary (the engine run's wall time): reported, never asserted.
NOTES: list[str] = []


def link_or_copy(source: str, destination: str) -> None:
    """``shutil.copytree``'s copy function: a hard link when the filesystem allows, else a copy."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


@pytest.fixture(scope="session")
def model_home() -> Path:
    """The model cache folder holding the prepared all-MiniLM-L6-v2 (prepared here if needed)."""
    from game_memory.onnx import prepare_default_model

    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    home = Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"
    prepare_default_model(home)
    return home


@pytest.fixture(scope="session")
def real_report(model_home: Path) -> dict[str, Any]:
    """``game-memory demo --json`` with the real default model, on a fresh temporary save."""
    return asyncio.run(run_demo("default", None, home=model_home))


@pytest.fixture(scope="session")
def engine() -> None:
    """Make sure the engine can run: skip when Chromium is missing, fetch the runtime."""
    from godot.harness import ensure_runtime, find_chromium

    if find_chromium() is None:
        reason = (
            "demo engine tests skipped: Chromium is not installed (apt-get install -y chromium)"
        )
        _SKIPPED.append(reason)
        pytest.skip(reason)
    ensure_runtime()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print why the demo's engine test was skipped (a skip is never silent), and its time."""
    for reason in dict.fromkeys(_SKIPPED):
        terminalreporter.write_line(reason, yellow=True, bold=True)
    for note in NOTES:
        terminalreporter.write_line(note)
