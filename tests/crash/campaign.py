"""The SIGKILL campaign: processes killed at random instants of every kind of write.

Each round starts a child process (``kill_worker.py``, or the real ``game-memory serve``
sidecar driven by a client here) on one save, lets it work for a random time, kills it
with SIGKILL, and checks the save: it opens; every acknowledged memory is there, unchanged;
``check(fix=True)`` leaves it consistent. The rounds are

* ``append``: appends, each acknowledged when ``append`` returned;
* ``concurrent``: the same from eight concurrent tasks of one process, so the kill lands
  in the middle of group commits;
* ``migrate``: a migration of new legacy documents (durable before it starts, so they are
  promised from then on, migrated or not);
* ``rebuild``: forced rebuilds of the vector index (the save must be untouched, and the
  index must be repaired by one more ``rebuild(force=True)``);
* ``check``: ``check(fix=True)`` over a torn record planted first;
* ``salvage``: ``check(accept_loss=True)`` over a log cut short first (only the cut memory
  may be lost: everything else acknowledged must survive the salvage, killed or not);
* ``forget``, ``consolidate``, ``erase`` (listed memories, a whole owner, a whole session)
  and ``compact`` (``game-memory compact`` beside a process that appends, forgets and
  compacts): ``lifecycle_rounds.py``;
* ``sidecar``: ``game-memory serve --stdio`` killed while it answers ``memory.remember``
  requests (acknowledged = answered), and ``sidecar_lifecycle``: killed while it answers
  ``memory.remember``, ``memory.forget``, ``memory.consolidate`` and ``memory.erase``
  (``sidecar_rounds.py``).

After every round the save is checked against every promise so far
(``campaign_ledger.verify``: acknowledged memories, forgets, consolidations and erases,
no half-erased state, no erased byte left, ``count()`` against ``enumerate``, ``check``).
:func:`run_campaign` returns the counts: kills per operation, lost acknowledged
operations, half-erased states, unopenable stores.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from game_memory import FileGameMemoryStore, GameMemoryError, VectorMemoryState, open_memory
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document

from . import lifecycle_rounds, sidecar_rounds
from .campaign_ledger import verify
from .campaign_memories import SESSIONS, memory
from .harness import CampaignResult, Harness

__all__ = ["KINDS", "LIFECYCLE_KINDS", "CampaignResult", "run_campaign"]

LIFECYCLE_KINDS = ("forget", "consolidate", "erase", "compact", "sidecar_lifecycle")
KINDS = (
    "append",
    "concurrent",
    "migrate",
    "rebuild",
    "check",
    "salvage",
    "sidecar",
    *LIFECYCLE_KINDS,
)


class _Campaign(Harness):
    """The campaign's rounds (one method per kind) and its check after each."""

    # -- rounds -------------------------------------------------------------------------

    def append(self) -> bool:
        output = self.kill_later(self.start("append", str(self.save), f"a{self.round}", "300"), 0.3)
        for line in output.splitlines():
            if line.startswith("ack "):
                self.ledger.appended(memory(line.split(" ", 1)[1]))
        return True

    def concurrent(self) -> bool:
        process = self.start("appends", str(self.save), f"c{self.round}", "400")
        output = self.kill_later(process, 0.3)
        for line in output.splitlines():
            if line.startswith("ack "):
                self.ledger.appended(memory(line.split(" ", 1)[1]))
        return True

    def migrate(self) -> bool:
        self.save.mkdir(parents=True, exist_ok=True)
        for number in range(self.chooser.randint(20, 120)):
            item = memory(f"lg{self.round}-{number}")
            key = f"{item.session_id}\n{item.owner_id}\n{item.memory_id}"
            (self.save / f"{identity_hash(key)}.memory.json").write_bytes(
                encode_legacy_document(item)
            )
            self.ledger.appended(item)  # a legacy document is already promised
        self.kill_later(self.start("migrate", str(self.save)), 0.6)
        return True

    def rebuild(self) -> bool:
        if not self.ledger.expected:
            return False
        self.kill_later(self.start("rebuild", str(self.save), str(self.index)), 0.8)
        asyncio.run(self._repair_index())
        return True

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

    def check(self) -> bool:
        logs = sorted(self.save.glob(".game-memory/s-*/o-*.log"))
        if logs:
            with self.chooser.choice(logs).open("ab") as log:
                log.write(b"GMR\x01" + bytes(9))  # a writer that died in its header
        self.kill_later(self.start("check", str(self.save)), 0.5)
        return True

    def salvage(self) -> bool:
        victim = self._cut_a_log()
        self.kill_later(self.start("salvage", str(self.save)), 0.4)
        asyncio.run(self._finish_salvage(victim))
        return True

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
            self.ledger.drop(victim)  # the one loss that was accepted

    def forget(self) -> bool:
        return lifecycle_rounds.forget(self)

    def consolidate(self) -> bool:
        return lifecycle_rounds.consolidate(self)

    def erase(self) -> bool:
        return lifecycle_rounds.erase(self)

    def compact(self) -> bool:
        return lifecycle_rounds.compact(self)

    def sidecar(self) -> bool:
        return sidecar_rounds.sidecar(self)

    def sidecar_lifecycle(self) -> bool:
        return sidecar_rounds.sidecar_lifecycle(self)

    # -- checks -------------------------------------------------------------------------

    async def verify(self) -> None:
        findings = await verify(self.save, self.index, self.ledger)
        result = self.result
        result.lost.update(findings.lost)
        result.half_erased += findings.half_erased
        result.erased_bytes_left += findings.erased_bytes_left
        result.unopenable += findings.unopenable
        result.inconsistent += findings.inconsistent
        result.problems.extend(f"round {self.round} ({self.kind}): {p}" for p in findings.problems)
        if findings.unopenable:
            await self._rescue()

    async def _rescue(self) -> None:
        """After a finding, salvage the save so later rounds measure what they do."""
        try:
            async with FileGameMemoryStore(self.save) as store:
                await store.check(accept_loss=True)
                found = {m.memory_id for s in SESSIONS for m in await store.enumerate(s)}
        except GameMemoryError:
            return
        for key in [key for key in self.ledger.expected if key not in found]:
            self.result.lost["append"] += 1
            self.ledger.drop(key)


def run_campaign(
    workdir: Path,
    kills: int,
    *,
    seed: int,
    kinds: tuple[str, ...] = KINDS,
    progress: bool = False,
) -> CampaignResult:
    """Run rounds (kinds in turn, shuffled) until ``kills`` processes were killed.

    A round with nothing to work on (no memory to forget yet) appends first.
    """
    campaign = _Campaign(workdir, seed)
    started = time.perf_counter()
    order = list(kinds)
    while campaign.result.kills < kills:
        campaign.chooser.shuffle(order)
        for kind in order:
            if campaign.result.kills >= kills:
                break
            campaign.round += 1
            campaign.kind = kind
            round_: Callable[[], bool] = getattr(campaign, kind)
            while not round_():  # nothing to work on yet: append first, then try again
                campaign.kind = "append"
                campaign.append()
                campaign.result.rounds["append"] += 1
                campaign.kind = kind
            campaign.result.rounds[kind] += 1
            asyncio.run(campaign.verify())
            if progress:
                print(
                    f"round {campaign.round} ({campaign.kind}): {campaign.result.kills} kills",
                    file=sys.stderr,
                )
    campaign.result.acknowledged.update(campaign.ledger.acknowledged)
    campaign.result.seconds = time.perf_counter() - started
    os.sync()
    return campaign.result
