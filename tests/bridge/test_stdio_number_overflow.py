"""Issue 17, item 3, over stdio: a JSON-RPC id that overflows a float is answered.

``"id": 1e400`` (or a 400-digit integer) was never answered: the sidecar logged "Out of
range float values are not JSON compliant" and "Task exception was never retrieved". The
WebSocket case is pinned in ``test_transport_fuzz.py``; this drives the real
``game-memory serve --stdio`` process, the way the Godot addon does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_an_id_that_overflows_a_float_is_answered_by_the_stdio_sidecar(tmp_path: Path) -> None:
    lines = [
        '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocol_version":1}}',
        '{"jsonrpc":"2.0","id":1e400,"method":"memory.status","params":{"session_id":"s"}}',
        '{"jsonrpc":"2.0","id":1' + "0" * 400 + ',"method":"memory.status","params":{}}',
        '{"jsonrpc":"2.0","id":-1e999,"method":"memory.status","params":{"session_id":"s"}}',
        '{"jsonrpc":"2.0","id":7,"method":"memory.status","params":{"session_id":"s"}}',
    ]
    command = [sys.executable, "-m", "game_memory.cli", "serve", "--stdio", "--model", "lexical"]
    done = subprocess.run(
        [*command, "--save-dir", str(tmp_path / "save")],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ready, *answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert ready["event"] == "ready"
    assert len(answers) == 5  # every line is answered, none dropped
    by_id = {json.dumps(answer.get("id")): answer for answer in answers}
    assert "result" in by_id["0"] and "result" in by_id["7"]
    errors = [answer["error"] for answer in answers if "error" in answer]
    assert len(errors) == 3 and all(e["code"] in (-32700, -32600) for e in errors), errors
    assert all(answer["id"] is None for answer in answers if "error" in answer)
    assert "out of range" in errors[0]["message"]
    for symptom in ("not JSON compliant", "Task exception", "Traceback"):
        assert symptom not in done.stderr
