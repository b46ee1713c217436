"""The lifecycle rounds of the SIGKILL campaign: forget, consolidate, erase and compact.

Each round writes a plan over memories the save acknowledged, starts ``kill_worker.py``
(or the real ``game-memory compact``) on it, kills it at a random instant and records in
the ledger what was sent and what was acknowledged (a line the child printed after the
call returned):

* ``forget``: retractions of acknowledged memories, some twice (the second earlier, so
  the first becomes redundant);
* ``consolidate``: summaries of two to four memories of one owner;
* ``erase``: listed memories, a whole owner or a whole session, through the front door
  (the save and the index); the child prints what it is about to erase before it asks;
* ``compact``: ``game-memory compact`` processes, killed or not, while a child appends,
  forgets and compacts in-process (compaction running with appends).

A round returns ``False`` when the save holds nothing for it to work on (the campaign
then appends instead).
"""

from __future__ import annotations

import json
from collections import defaultdict

from game_memory import GameMemory

from .campaign_ledger import EraseCall
from .campaign_memories import memory, summary
from .harness import Harness

__all__ = ["compact", "consolidate", "erase", "forget", "partitions"]


def partitions(harness: Harness) -> dict[tuple[str, str], list[GameMemory]]:
    """The acknowledged memories by (session, owner), each list by id."""
    grouped: dict[tuple[str, str], list[GameMemory]] = defaultdict(list)
    for memory_id in sorted(harness.ledger.expected):
        item = harness.ledger.expected[memory_id]
        grouped[(item.session_id, item.owner_id)].append(item)
    return dict(grouped)


def forget(harness: Harness) -> bool:
    ledger, chooser = harness.ledger, harness.chooser
    candidates = sorted(ledger.expected)
    if not candidates:
        return False
    plan: list[tuple[str, str, str, int]] = []
    for memory_id in chooser.sample(candidates, min(len(candidates), chooser.randint(5, 40))):
        item = ledger.expected[memory_id]
        tick = item.moment.tick + chooser.randint(1, 300)
        ticks = (
            [tick, chooser.randint(item.moment.tick + 1, tick)]
            if chooser.random() < 0.3
            else [tick]
        )
        for at in ticks:
            plan.append((item.session_id, item.owner_id, memory_id, at))
            ledger.forget_sent(memory_id, at)
    output = harness.kill_later(
        harness.start("forget", str(harness.save), harness.write_plan(plan)), 0.5
    )
    for line in output.splitlines():
        if line.startswith("forgot "):
            _session, _owner, memory_id, at = plan[int(line.split()[1])]
            ledger.forgot(ledger.expected[memory_id], at)
    return True


def consolidate(harness: Harness) -> bool:
    ledger, chooser = harness.ledger, harness.chooser
    groups = [group for group in partitions(harness).values() if len(group) >= 2]
    if not groups:
        return False
    plan: list[list[object]] = []
    stored: list[GameMemory] = []
    for number in range(chooser.randint(2, 10)):
        group = chooser.choice(groups)
        sources = chooser.sample(group, min(len(group), chooser.randint(2, 4)))
        first = sources[0]
        tick = max(source.moment.tick for source in sources) + chooser.randint(1, 100)
        summary_id = f"sum{harness.round}-{number}"
        item = summary(summary_id, first.session_id, first.owner_id, tick)
        ids = [source.memory_id for source in sources]
        plan.append([first.session_id, first.owner_id, ids, summary_id, tick])
        stored.append(item.model_copy(update={"consolidates": tuple(ids)}))
        ledger.consolidation_sent(stored[-1])
    output = harness.kill_later(
        harness.start("consolidate", str(harness.save), harness.write_plan(plan)), 0.5
    )
    for line in output.splitlines():
        if line.startswith("consolidated "):
            ledger.consolidated(stored[int(line.split()[1])])
    return True


def erase(harness: Harness) -> bool:
    chooser = harness.chooser
    grouped = partitions(harness)
    if not grouped:
        return False
    plan: list[tuple[str, str | None, list[str] | None]] = []
    for _ in range(chooser.randint(1, 3)):
        (session, owner), group = chooser.choice(sorted(grouped.items()))
        shape = chooser.random()
        if shape < 0.6:
            picked = chooser.sample(group, min(len(group), chooser.randint(1, 10)))
            plan.append((session, owner, [item.memory_id for item in picked]))
        elif shape < 0.9:
            plan.append((session, owner, None))
        else:
            plan.append((session, None, None))
    process = harness.start(
        "erase", str(harness.save), str(harness.index), harness.write_plan(plan)
    )
    output = harness.kill_later(process, 1.5)
    calls: dict[int, EraseCall] = {}
    for line in output.splitlines():
        word, number, *rest = line.split(" ", 2)
        if word == "erasing":
            erased_session, erased_owner, ids = plan[int(number)]
            targets = frozenset(json.loads(rest[0]))
            listed = None if ids is None else tuple(ids)
            calls[int(number)] = EraseCall(erased_session, erased_owner, listed, targets)
            harness.ledger.erase_sent(calls[int(number)])
        elif word == "erased":
            harness.ledger.erase_done(calls[int(number)])
    return True


def compact(harness: Harness) -> bool:
    """``game-memory compact`` killed (or not) while a child appends, forgets and compacts."""
    ledger, chooser = harness.ledger, harness.chooser
    if not ledger.expected:
        # No save yet (the first round): ``game-memory compact`` refuses a folder that does
        # not exist, and the churning child may not have created it by then.
        return False
    churn = harness.start("churn", str(harness.save), f"c{harness.round}", "300")
    for _ in range(chooser.randint(1, 3)):
        cli = harness.start_cli("compact", "--save-dir", str(harness.save), "--json")
        output = harness.kill_after(cli, chooser.uniform(0.2, 2.5))
        if output.strip():
            json.loads(output.splitlines()[-1])  # an acknowledged compaction printed its report
            ledger.acknowledged["compact"] += 1
    output = harness.kill_after(churn, chooser.uniform(0.0, 0.5))
    for line in output.splitlines():
        word, *rest = line.split()
        if word == "ack":
            ledger.appended(memory(rest[0]))
        elif word == "forgetting":
            ledger.forget_sent(rest[0], int(rest[1]))
        elif word == "forgot":
            ledger.forgot(ledger.expected[rest[0]], int(rest[1]))
        elif word == "compacted":
            ledger.acknowledged["compact"] += 1
    return True
