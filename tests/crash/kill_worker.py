"""The child process the SIGKILL campaign kills (``python kill_worker.py MODE SAVE ...``).

Modes (each prints one flushed line per finished step, so the parent knows what was
acknowledged before it killed the process):

* ``append SAVE PREFIX COUNT``: append ``PREFIX-0`` ... (``campaign.memory``); ``ack <id>``.
* ``migrate SAVE``: run the legacy migration; ``migrated <n>``.
* ``rebuild SAVE INDEX``: rebuild every session's vectors with the hashing model, forced,
  over and over; ``rebuilt <session>``.
* ``check SAVE``: ``check(fix=True)`` over and over; ``checked <ok>``.
* ``salvage SAVE``: ``check(accept_loss=True)``; ``salvaged <ok>``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crash.campaign import SESSIONS, memory
from game_memory import FileGameMemoryStore, open_memory


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(mode: str, save: str, rest: list[str]) -> None:
    if mode == "rebuild":
        opened = open_memory(save, index=rest[0], model="hashing", create=False, create_index=True)
        async with await opened as memory_:
            while True:
                for session in SESSIONS:
                    await memory_.rebuild(session, force=True)
                    say(f"rebuilt {session}")
    async with FileGameMemoryStore(save, lock_timeout=60) as store:
        if mode == "append":
            prefix, count = rest[0], int(rest[1])
            for number in range(count):
                item = memory(f"{prefix}-{number}")
                await store.append(item)
                say(f"ack {item.memory_id}")
        elif mode == "migrate":
            report = await store.migrate_legacy_layout()
            say(f"migrated {report.migrated_entries}")
        elif mode == "check":
            while True:
                say(f"checked {(await store.check(fix=True)).ok}")
        elif mode == "salvage":
            say(f"salvaged {(await store.check(accept_loss=True)).ok}")
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
