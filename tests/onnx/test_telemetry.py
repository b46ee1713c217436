"""game-memory keeps onnxruntime from writing outside its folders on a player's machine.

onnxruntime 1.32 writes ``~/.cache/Microsoft/DeveloperTools/.onnxruntime/deviceid`` and a
queue of telemetry events as soon as it is imported, unless ``ORT_DISABLE_TELEMETRY`` is
set before: ``game_memory.onnx`` sets it (leaving a value the host chose alone).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_LOAD = "import game_memory.onnx, onnxruntime, os; print(os.environ['ORT_DISABLE_TELEMETRY'])"


def _run(home: Path, **environment: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != "ORT_DISABLE_TELEMETRY"}
    env.update(HOME=str(home), **environment)
    done = subprocess.run(
        [sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_onnx_providers_writes_nothing_in_the_home_folder(tmp_path: Path) -> None:
    assert _run(tmp_path) == "1"
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []


@pytest.mark.parametrize("chosen", ["0", "1"])
def test_a_host_that_chose_for_itself_is_left_alone(tmp_path: Path, chosen: str) -> None:
    assert _run(tmp_path, ORT_DISABLE_TELEMETRY=chosen) == chosen
