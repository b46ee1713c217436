"""The SIGKILL campaign in CI: tens of kills over every kind of write, then the save checked.

``benchmarks/crash_campaign.py`` runs the same campaign with at least 500 kills. Here the
seed is random (printed on failure), so every run explores other instants.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .campaign import KINDS, run_campaign

pytestmark = pytest.mark.slow


def test_tens_of_kills_lose_no_acknowledged_operation_and_leave_no_store_unopenable(
    tmp_path: Path,
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    result = run_campaign(tmp_path, 30, seed=seed)
    report = json.dumps({"seed": seed, **result.as_json()}, indent=1)
    assert result.kills >= 30 and result.acknowledged["append"] > 0, report
    assert set(result.rounds) == set(KINDS), report
    assert result.lost_total == 0 and result.unopenable == 0, report
    assert result.half_erased == 0 and result.erased_bytes_left == 0, report
    assert result.inconsistent == 0 and result.index_not_repaired == 0, report
    assert result.problems == [], report


class Sidecar:
    """``game-memory serve --stdio`` on a save, asked one request at a time."""

    def __init__(self, save: Path) -> None:
        command = [sys.executable, "-m", "game_memory.cli", "serve", "--stdio"]
        self.process = subprocess.Popen(
            [*command, "--model", "lexical", "--save-dir", str(save)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.process.stdout is not None
        ready = json.loads(self.process.stdout.readline())
        assert ready["event"] == "ready"
        self.next_id = 0
        assert "result" in self.ask("initialize", {"protocol_version": 1})

    def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        assert answer["id"] == self.next_id
        return answer

    def kill(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.kill()
        self.process.wait(timeout=60)
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                pipe.close()

    def close(self) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.stdout.close()
        return self.process.wait(timeout=60)


def remember(text: str, tick: int) -> dict[str, Any]:
    moment = {"timeline_id": "main", "tick": tick}
    return {"session_id": "slot", "owner_id": "mira", "text": text, "moment": moment}


def test_a_save_folder_swapped_between_calls_is_refused_and_never_written(tmp_path: Path) -> None:
    save, other = tmp_path / "save", tmp_path / "other"
    sidecar = Sidecar(save)
    try:
        assert sidecar.ask("memory.remember", remember("the well is dry", 1))["result"]["created"]
        save.rename(tmp_path / "moved")
        other.mkdir()
        other.rename(save)  # another folder where the save was
        for method, params in (
            ("memory.recall", {"session_id": "slot", "text": "well"}),
            ("memory.remember", remember("written where?", 2)),
        ):
            error = sidecar.ask(method, params)["error"]
            assert error["code"] == -32006 and "replaced by another folder" in error["message"]
        assert list(save.iterdir()) == []  # nothing was written into the new folder
        save.rename(tmp_path / "other-again")
        (tmp_path / "moved").rename(save)  # the real save is back: served again
        recalled = sidecar.ask("memory.recall", {"session_id": "slot", "text": "well"})
        assert [m["text"] for m in recalled["result"]["memories"]] == ["the well is dry"]
    finally:
        assert sidecar.close() == 0


def test_a_sidecar_killed_mid_request_keeps_every_answered_remember(tmp_path: Path) -> None:
    save = tmp_path / "save"
    answered: list[str] = []
    for attempt in range(3):
        sidecar = Sidecar(save)
        assert sidecar.process.stdin is not None
        for number in range(20):
            answer = sidecar.ask("memory.remember", remember(f"memory {attempt}-{number}", number))
            answered.append(answer["result"]["memory_id"])
        # One more request, killed while the sidecar works on it.
        message = {"jsonrpc": "2.0", "id": 99, "method": "memory.remember"}
        message["params"] = remember(f"unanswered {attempt}", 50)
        sidecar.process.stdin.write(json.dumps(message).encode() + b"\n")
        sidecar.process.stdin.flush()
        sidecar.kill()

    async def stored() -> tuple[set[str], bool]:
        from game_memory import FileGameMemoryStore

        async with FileGameMemoryStore(save) as store:
            ids = {memory.memory_id for memory in await store.enumerate("slot")}
            return ids, (await store.check(fix=True)).ok

    ids, consistent = asyncio.run(stored())
    assert set(answered) <= ids and consistent
