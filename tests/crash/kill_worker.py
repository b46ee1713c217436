"""The child process the SIGKILL campaign kills (``python kill_worker.py MODE SAVE ...``).

Modes (each prints one flushed line per finished step, so the parent knows what was
acknowledged before it killed the process):

* ``append SAVE PREFIX COUNT``: append ``PREFIX-0`` ... (``campaign_memories.memory``);
  ``ack <id>``.
* ``appends SAVE PREFIX COUNT``: the same appends from eight concurrent tasks through one
  store, so they share group commits (a kill lands mid-group); ``ack <id>``.
* ``migrate SAVE``: run the legacy migration; ``migrated <n>``.
* ``rebuild SAVE INDEX``: rebuild every session's vectors with the hashing model, forced,
  over and over; ``rebuilt <session>``.
* ``check SAVE``: ``check(fix=True)`` over and over; ``checked <ok>``.
* ``salvage SAVE``: ``check(accept_loss=True)``; ``salvaged <ok>``.
* ``forget SAVE PLAN``: the plan's ``[session, owner, id, tick]`` forgotten in turn;
  ``forgot <n>`` after the n-th returned.
* ``consolidate SAVE PLAN``: the plan's ``[session, owner, sources, summary id, tick]``;
  ``consolidated <n>``.
* ``erase SAVE INDEX PLAN``: the plan's ``[session, owner or null, ids or null]`` erased in
  turn through the front door (save and index); ``erasing <n> <json ids>`` (what is there
  to erase) before the call, ``erased <n>`` after it.
* ``churn SAVE PREFIX COUNT``: appends (``ack <id>``); every third memory forgotten twice,
  the second earlier (``forgetting <id> <tick>`` before, ``forgot <id> <tick>`` after);
  every tenth append a compaction in the same process (``compacted``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crash.campaign_memories import SESSIONS, memory, summary
from game_memory import FileGameMemoryStore, GameMoment, open_memory


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def at(tick: int) -> GameMoment:
    return GameMoment(timeline_id="world", tick=tick)


async def erase(save: str, index: str, plan: list[list[Any]]) -> None:
    opened = open_memory(save, index=index, model="hashing", create=False, create_index=True)
    async with await opened as front:
        for number, (session, owner, ids) in enumerate(plan):
            there = {m.memory_id for m in await front.authoritative.enumerate(session, owner)}
            targets = sorted(there if ids is None else there & set(ids))
            say(f"erasing {number} {json.dumps(targets)}")
            await front.erase(session, owner, ids)
            say(f"erased {number}")


async def concurrent_appends(store: FileGameMemoryStore, prefix: str, count: int) -> None:
    async def appender(task: int) -> None:
        for number in range(task, count, 8):
            item = memory(f"{prefix}-{number}")
            await store.append(item)
            say(f"ack {item.memory_id}")

    await asyncio.gather(*(appender(task) for task in range(8)))


async def churn(store: FileGameMemoryStore, prefix: str, count: int) -> None:
    for number in range(count):
        item = memory(f"{prefix}-{number}")
        await store.append(item)
        say(f"ack {item.memory_id}")
        if number % 3 == 0:
            for tick in (item.moment.tick + 200, item.moment.tick + 100):
                say(f"forgetting {item.memory_id} {tick}")
                await store.forget(item.session_id, item.owner_id, item.memory_id, at(tick))
                say(f"forgot {item.memory_id} {tick}")
        if number % 10 == 9:
            await store.compact()
            say("compacted")


async def main(mode: str, save: str, rest: list[str]) -> None:
    if mode == "rebuild":
        opened = open_memory(save, index=rest[0], model="hashing", create=False, create_index=True)
        async with await opened as memory_:
            while True:
                for session in SESSIONS:
                    await memory_.rebuild(session, force=True)
                    say(f"rebuilt {session}")
    if mode == "erase":
        await erase(save, rest[0], json.loads(Path(rest[1]).read_text()))
        return
    async with FileGameMemoryStore(save, lock_timeout=60) as store:
        if mode == "append":
            prefix, count = rest[0], int(rest[1])
            for number in range(count):
                item = memory(f"{prefix}-{number}")
                await store.append(item)
                say(f"ack {item.memory_id}")
        elif mode == "appends":
            await concurrent_appends(store, rest[0], int(rest[1]))
        elif mode == "migrate":
            report = await store.migrate_legacy_layout()
            say(f"migrated {report.migrated_entries}")
        elif mode == "check":
            while True:
                say(f"checked {(await store.check(fix=True)).ok}")
        elif mode == "salvage":
            say(f"salvaged {(await store.check(accept_loss=True)).ok}")
        elif mode == "forget":
            for number, (session, owner, memory_id, tick) in enumerate(
                json.loads(Path(rest[0]).read_text())
            ):
                await store.forget(session, owner, memory_id, at(tick))
                say(f"forgot {number}")
        elif mode == "consolidate":
            for number, (session, owner, sources, summary_id, tick) in enumerate(
                json.loads(Path(rest[0]).read_text())
            ):
                await store.consolidate(
                    session, owner, sources, summary(summary_id, session, owner, tick)
                )
                say(f"consolidated {number}")
        elif mode == "churn":
            await churn(store, rest[0], int(rest[1]))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
