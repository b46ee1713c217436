"""What every round of the SIGKILL campaign shares: its save, its processes, its counts.

:class:`Harness` holds one campaign's save, index, random chooser, promises
(``campaign_ledger.Ledger``) and counts, and starts and kills its child processes
(``kill_worker.py`` and the real ``game-memory`` command line), counting every kill
under the round's kind. The memories themselves come from ``campaign_memories.py``.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .campaign_ledger import Ledger
from .campaign_memories import OWNERS, SESSIONS, memory, summary

__all__ = ["OWNERS", "SESSIONS", "CampaignResult", "Harness", "memory", "summary"]

_WORKER = str(Path(__file__).with_name("kill_worker.py"))


@dataclass
class CampaignResult:
    """What the campaign did and found (every finding count should be 0)."""

    kills: int = 0
    kills_per_operation: Counter[str] = field(default_factory=Counter)
    rounds: Counter[str] = field(default_factory=Counter)
    acknowledged: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    half_erased: int = 0
    erased_bytes_left: int = 0
    unopenable: int = 0
    inconsistent: int = 0
    index_not_repaired: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def lost_total(self) -> int:
        return sum(self.lost.values())

    def as_json(self) -> dict[str, object]:
        return {
            "kills": self.kills,
            "kills_per_operation": dict(sorted(self.kills_per_operation.items())),
            "rounds": dict(sorted(self.rounds.items())),
            "acknowledged_operations": dict(sorted(self.acknowledged.items())),
            "lost_acknowledged_operations": self.lost_total,
            "lost_by_operation": dict(sorted(self.lost.items())),
            "half_erased_states": self.half_erased,
            "erased_bytes_left": self.erased_bytes_left,
            "unopenable_stores": self.unopenable,
            "inconsistent_after_fix": self.inconsistent,
            "index_not_repaired": self.index_not_repaired,
            "problems": self.problems[:10],
            "seconds": round(self.seconds, 1),
        }


class Harness:
    """One campaign's save, promises and counts, and its child processes."""

    def __init__(self, workdir: Path, seed: int) -> None:
        import random

        self.workdir = workdir
        self.save = workdir / "save"
        self.index = workdir / "save.index"
        self.plan = workdir / "plan.json"
        self.chooser = random.Random(seed)
        self.ledger = Ledger()
        self.result = CampaignResult()
        self.round = 0
        self.kind = ""

    def start(self, *arguments: str) -> subprocess.Popen[str]:
        """Start ``kill_worker.py`` with ``arguments``."""
        return self.popen([sys.executable, _WORKER, *arguments])

    def start_cli(self, *arguments: str) -> subprocess.Popen[str]:
        """Start the real ``game-memory`` command line with ``arguments``."""
        return self.popen([sys.executable, "-m", "game_memory.cli", *arguments])

    @staticmethod
    def popen(command: Sequence[str]) -> subprocess.Popen[str]:
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )

    def write_plan(self, plan: Any) -> str:
        self.plan.write_text(json.dumps(plan))
        return str(self.plan)

    def killed(self) -> None:
        self.result.kills += 1
        self.result.kills_per_operation[self.kind] += 1

    def kill_later(self, process: subprocess.Popen[str], longest: float) -> str:
        """Wait for the first line (sometimes not), then a random time; SIGKILL; output."""
        assert process.stdout is not None
        if self.chooser.random() < 0.8:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                selector.select(timeout=60)
        return self.kill_after(process, self.chooser.uniform(0.0, longest))

    def kill_after(self, process: subprocess.Popen[str], seconds: float) -> str:
        """SIGKILL ``process`` after ``seconds`` unless it ended; its output."""
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            self.killed()
        output, errors = process.communicate(timeout=120)
        if process.returncode not in (0, -signal.SIGKILL):
            self.result.problems.append(
                f"round {self.round} ({self.kind}): a process failed: {errors.strip()[-300:]}"
            )
        return output
