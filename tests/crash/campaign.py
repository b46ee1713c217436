"""The SIGKILL campaign: processes killed at random instants of every kind of write.

Each round starts a child process (``kill_worker.py``, or the real ``game-memory serve``
sidecar driven by a client here) on one save, lets it work for a random time, kills it
with SIGKILL, and checks the save: it opens; every acknowledged memory is there, unchanged;
``check(fix=True)`` leaves it consistent. The rounds are

* ``append``: appends, each acknowledged when ``append`` returned;
* ``migrate``: a migration of new legacy documents (durable before it starts, so they are
  promised from then on, migrated or not);
* ``rebuild``: forced rebuilds of the vector index (the save must be untouched, and the
  index must be repaired by one more ``rebuild(force=True)``);
* ``check``: ``check(fix=True)`` over a torn record planted first;
* ``salvage``: ``check(accept_loss=True)`` over a log cut short first (only the cut memory
  may be lost: everything else acknowledged must survive the salvage, killed or not);
* ``sidecar``: ``game-memory serve --stdio`` killed while it answers ``memory.remember``
  requests (acknowledged = answered).

:func:`run_campaign` returns the counts: kills, lost acknowledged writes, unopenable stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryError,
    GameMoment,
    VectorMemoryState,
    open_memory,
)
from game_memory.bridge.convert import build_memory
from game_memory.bridge.params import RememberParams
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

__all__ = ["KINDS", "SESSIONS", "CampaignResult", "memory", "run_campaign"]

SESSIONS = ("village", "keep")
KINDS = ("append", "migrate", "rebuild", "check", "salvage", "sidecar")
_OWNERS = ("mira", "jory", "tomas", "elda")
_WORKER = str(Path(__file__).with_name("kill_worker.py"))


def memory(memory_id: str) -> GameMemory:
    """The one memory each id stands for (its partition and size follow from the id)."""
    digest = hashlib.sha256(memory_id.encode()).digest()
    return GameMemory(
        memory_id=memory_id,
        session_id=SESSIONS[digest[0] % 2],
        owner_id=_OWNERS[digest[1] % 4],
        scope="campaign",
        kind="event",
        payload_json=json.dumps({"id": memory_id, "pad": "p" * (digest[2] % 5 * 200)}),
        moment=GameMoment(timeline_id="world", tick=digest[3]),
        searchable_text=f"memory {memory_id} of the kill campaign",
    )


@dataclass
class CampaignResult:
    """What the campaign did and found."""

    kills: int = 0
    rounds: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    unopenable: int = 0
    inconsistent: int = 0
    index_not_repaired: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_json(self) -> dict[str, object]:
        return {
            "kills": self.kills,
            "rounds": dict(sorted(self.rounds.items())),
            "acknowledged_writes": self.acknowledged,
            "lost_acknowledged_writes": self.lost,
            "unopenable_stores": self.unopenable,
            "inconsistent_after_fix": self.inconsistent,
            "index_not_repaired": self.index_not_repaired,
            "problems": self.problems[:10],
            "seconds": round(self.seconds, 1),
        }


class _Campaign:
    def __init__(self, workdir: Path, seed: int) -> None:
        self.save = workdir / "save"
        self.index = workdir / "save.index"
        self.chooser = random.Random(seed)
        self.expected: dict[str, GameMemory] = {}
        self.result = CampaignResult()
        self.round = 0

    # -- processes ----------------------------------------------------------------------

    def _start(self, *arguments: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, _WORKER, *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _kill_later(self, process: subprocess.Popen[str], longest: float) -> str:
        """Wait for the first line (sometimes not), then a random time; SIGKILL; output."""
        assert process.stdout is not None
        if self.chooser.random() < 0.8:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                selector.select(timeout=60)
        try:
            process.wait(timeout=self.chooser.uniform(0.0, longest))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            self.result.kills += 1
        output, errors = process.communicate(timeout=120)
        if process.returncode not in (0, -signal.SIGKILL):
            self.result.problems.append(f"a worker failed: {errors.strip()[-300:]}")
        return output

    # -- rounds -------------------------------------------------------------------------

    def append(self) -> None:
        output = self._kill_later(
            self._start("append", str(self.save), f"a{self.round}", "300"), 0.3
        )
        for line in output.splitlines():
            if line.startswith("ack "):
                item = memory(line.split(" ", 1)[1])
                self.expected[item.memory_id] = item

    def migrate(self) -> None:
        self.save.mkdir(parents=True, exist_ok=True)
        for number in range(self.chooser.randint(20, 120)):
            item = memory(f"lg{self.round}-{number}")
            key = f"{item.session_id}\n{item.owner_id}\n{item.memory_id}"
            (self.save / f"{identity_hash(key)}.memory.json").write_bytes(
                encode_legacy_document(item)
            )
            self.expected[item.memory_id] = item  # a legacy document is already promised
        self._kill_later(self._start("migrate", str(self.save)), 0.6)

    def rebuild(self) -> None:
        if not self.expected:
            self.append()
            return
        self._kill_later(self._start("rebuild", str(self.save), str(self.index)), 0.8)
        asyncio.run(self._repair_index())

    async def _repair_index(self) -> None:
        try:
            async with await open_memory(self.save, index=self.index, model="hashing") as memory_:
                for session in SESSIONS:
                    status = await memory_.rebuild(session, force=True)
                    if status.state not in (VectorMemoryState.READY, VectorMemoryState.EMPTY):
                        raise AssertionError(f"rebuild left {status.state.value}")
        except (GameMemoryError, AssertionError) as exc:
            self.result.index_not_repaired += 1
            self.result.problems.append(f"round {self.round}: index not repaired: {exc}")

    def check(self) -> None:
        logs = sorted(self.save.glob(".game-memory/s-*/o-*.log"))
        if logs:
            with self.chooser.choice(logs).open("ab") as log:
                log.write(b"GMR\x01" + bytes(9))  # a writer that died in its header
        self._kill_later(self._start("check", str(self.save)), 0.5)

    def salvage(self) -> None:
        victim = self._cut_a_log()
        self._kill_later(self._start("salvage", str(self.save)), 0.4)
        asyncio.run(self._finish_salvage(victim))

    def _cut_a_log(self) -> str | None:
        """Cut the last record of a log partly off; return the id it held (now lost)."""
        by_size = sorted(
            self.save.glob(".game-memory/s-*/o-*.log"), key=lambda path: path.stat().st_size
        )
        for log in reversed(by_size):
            data = log.read_bytes()
            position, starts = 0, []
            while position + 16 <= len(data):
                starts.append(position)
                position += 16 + int.from_bytes(data[position + 4 : position + 8], "little")
            if len(starts) < 2:
                continue
            last = data[starts[-1] + 16 :]
            memory_id = json.loads(last)["memory"]["memory_id"]
            log.write_bytes(data[: starts[-1] + 20])
            return str(memory_id)
        return None

    async def _finish_salvage(self, victim: str | None) -> None:
        try:
            async with FileGameMemoryStore(self.save) as store:
                report = await store.check(accept_loss=True)
                if not report.ok:
                    self.result.problems.append(f"salvage left {list(report.problems)[:2]}")
        except GameMemoryError as exc:
            self.result.problems.append(f"round {self.round}: salvage failed: {exc}")
        if victim is not None:
            self.expected.pop(victim, None)  # the one loss that was accepted

    def sidecar(self) -> None:
        prefix = f"sc{self.round}"
        command = [sys.executable, "-m", "game_memory.cli", "serve", "--stdio"]
        command += ["--model", "lexical", "--save-dir", str(self.save)]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert process.stdin is not None and process.stdout is not None
        hello = {"protocol_version": 1}
        lines = [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}]
        sent: dict[int, RememberParams] = {}
        for number in range(200):
            item = memory(f"{prefix}-{number}")
            params = {
                "session_id": item.session_id,
                "owner_id": item.owner_id,
                "memory_id": item.memory_id,
                "text": item.searchable_text,
                "scope": "campaign",
                "moment": {"timeline_id": "world", "tick": item.moment.tick},
                "payload": json.loads(item.payload_json),
            }
            sent[number + 1] = RememberParams.model_validate(params)
            lines.append(
                {"jsonrpc": "2.0", "id": number + 1, "method": "memory.remember", "params": params}
            )
        process.stdout.readline()  # the ready line (or end of output if it failed)
        with contextlib.suppress(BrokenPipeError):
            process.stdin.write(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            process.stdin.flush()
        time.sleep(self.chooser.uniform(0.0, 0.4))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            self.result.kills += 1
        with contextlib.suppress(BrokenPipeError):
            process.stdin.close()
        output = process.stdout.read()
        process.stdout.close()
        process.wait(timeout=60)
        for line in output.splitlines():
            answer = json.loads(line)
            if isinstance(answer.get("result"), dict) and answer["id"] in sent:
                item = build_memory(sent[answer["id"]])  # exactly what the sidecar stored
                self.expected[item.memory_id] = item

    # -- checks -------------------------------------------------------------------------

    async def verify(self) -> None:
        try:
            async with FileGameMemoryStore(self.save) as store:
                found = {m.memory_id: m for s in SESSIONS for m in await store.enumerate(s)}
                report = await store.check(fix=True)
        except GameMemoryError as exc:
            self.result.unopenable += 1
            self.result.problems.append(f"round {self.round}: the store does not open: {exc}")
            await self._rescue()
            return
        lost = [key for key, item in self.expected.items() if found.get(key) != item]
        if lost:
            self.result.lost += len(lost)
            self.result.problems.append(f"round {self.round}: lost {sorted(lost)[:5]}")
            for key in lost:
                del self.expected[key]
        if not report.ok:
            self.result.inconsistent += 1
            self.result.problems.append(f"round {self.round}: {list(report.problems)[:2]}")

    async def _rescue(self) -> None:
        """After a finding, salvage the save so later rounds measure what they do."""
        try:
            async with FileGameMemoryStore(self.save) as store:
                await store.check(accept_loss=True)
                found = {m.memory_id for s in SESSIONS for m in await store.enumerate(s)}
        except GameMemoryError:
            return
        for key in [key for key in self.expected if key not in found]:
            self.result.lost += 1
            del self.expected[key]


def run_campaign(
    workdir: Path,
    kills: int,
    *,
    seed: int,
    kinds: tuple[str, ...] = KINDS,
    progress: bool = False,
) -> CampaignResult:
    """Run rounds (kinds in turn, shuffled) until ``kills`` processes were killed."""
    campaign = _Campaign(workdir, seed)
    started = time.perf_counter()
    order = list(kinds)
    while campaign.result.kills < kills:
        campaign.chooser.shuffle(order)
        for kind in order:
            if campaign.result.kills >= kills:
                break
            campaign.round += 1
            getattr(campaign, kind)()
            campaign.result.rounds[kind] += 1
            asyncio.run(campaign.verify())
            if progress:
                print(
                    f"round {campaign.round} ({kind}): {campaign.result.kills} kills",
                    file=sys.stderr,
                )
    campaign.result.acknowledged = len(campaign.expected)
    campaign.result.seconds = time.perf_counter() - started
    os.sync()
    return campaign.result
