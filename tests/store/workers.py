"""Child processes of the crash and concurrency tests (run as ``python workers.py MODE ...``).

Modes:

* ``append SAVE PREFIX COUNT [CRASH [AT]]``: append ``PREFIX-0`` ... and print ``ack <id>``
  (flushed) after each append returns. ``CRASH`` makes the process SIGKILL itself at one
  deterministic point of the ``AT``-th append (default ``CRASH_AT``): ``intent`` (after the
  ledger intent), ``torn`` (half the record's bytes written), ``record`` (after the record,
  before the ack).
* ``migrate SAVE [PHASE]``: run the legacy migration, SIGKILLing itself at ``PHASE``
  (``journal``, ``ledger``, ``pack``, ``sync``, ``commit``, ``backup``), else print
  ``migrated <n> <count>``.
* ``read SAVE SECONDS``: search and enumerate in a loop, checking every memory seen is
  complete; print ``seen <max count>`` or ``error <message>``.

``expected_memory(id)`` is the one memory each id stands for, so a test can verify content.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from game_memory.durable import fs
from game_memory.store import engine as engine_module
from game_memory.store import group_writes, migration
from game_memory.store.ledger import Ledger

CRASH_AT = 3


def expected_memory(memory_id: str) -> GameMemory:
    """The memory a worker appends under ``memory_id`` (``<prefix>-<n>``)."""
    number = int(memory_id.rsplit("-", 1)[1])
    return GameMemory(
        memory_id=memory_id,
        session_id=f"session-{number % 2}",
        owner_id=f"npc-{number % 3}",
        scope="crash",
        kind="event",
        payload_json=f'{{"n": {number}, "pad": "{"p" * (number % 7 * 300)}"}}',
        moment=GameMoment(timeline_id="world", tick=number),
        searchable_text=f"memory {memory_id} of the crash test",
        tags=["crash"],
    )


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm_append_crash(point: str, at: int = CRASH_AT) -> None:
    """Patch the engine so the ``at``-th append dies at ``point``."""
    calls = {"n": 0}

    def armed() -> bool:
        return calls["n"] == at

    original_append = Ledger.append_encoded
    original_write = group_writes.write_planned
    original_bytes = fs.append_bytes

    def ledger_append(self: Ledger, records: bytes, **options: Any) -> None:
        calls["n"] += 1
        original_append(self, records, **options)
        if point == "intent" and armed():
            die()

    def write_records(state: Any, plan: Any, **options: Any) -> None:
        original_write(state, plan, **options)
        if point == "record" and armed():
            die()

    def append_bytes(fd: int, data: bytes, path: Path, **options: Any) -> None:
        if point == "torn" and armed() and path.name.startswith("o-"):
            os.write(fd, data[: len(data) // 2])
            os.fsync(fd)
            die()
        original_bytes(fd, data, path, **options)

    Ledger.append_encoded = ledger_append  # type: ignore[method-assign]
    group_writes.write_planned = write_records
    fs.append_bytes = append_bytes


def arm_migration_crash(phase: str) -> None:
    """Patch the migration so it dies right after ``phase``."""
    engine_class = engine_module.StoreEngine
    targets: dict[str, tuple[Any, str]] = {
        "journal": (engine_class, "write_journal"),
        "ledger": (Ledger, "append_encoded"),
        "pack": (migration, "write_pack"),
        "sync": (fs, "sync_all"),
        "commit": (engine_class, "commit_journal"),
    }
    if phase == "backup":
        original_rename = fs.rename_all

        def rename_half(source: Path, target: Path, names: list[str]) -> None:
            original_rename(source, target, names[: len(names) // 2])
            die()

        fs.rename_all = rename_half
        return
    owner, name = targets[phase]
    original = getattr(owner, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        die()

    setattr(owner, name, dying)


async def append(save: str, prefix: str, count: int, crash: str | None, at: int) -> None:
    if crash is not None:
        arm_append_crash(crash, at)
    async with FileGameMemoryStore(save, lock_timeout=60) as store:
        for number in range(count):
            memory_id = f"{prefix}-{number}"
            await store.append(expected_memory(memory_id))
            sys.stdout.write(f"ack {memory_id}\n")
            sys.stdout.flush()


async def migrate(save: str, phase: str | None) -> None:
    if phase is not None:
        arm_migration_crash(phase)
    async with FileGameMemoryStore(save, lock_timeout=60) as store:
        result = await store.migrate_legacy_layout()
        print(f"migrated {result.migrated_entries} {result.partitioned_entries}", flush=True)


async def read(save: str, seconds: float) -> None:
    most = 0
    deadline = time.monotonic() + seconds
    async with FileGameMemoryStore(save, lock_timeout=60) as store:
        while time.monotonic() < deadline:
            seen: list[GameMemory] = []
            for session in ("session-0", "session-1"):
                seen.extend(await store.enumerate(session))
                query = GameMemoryQuery(
                    session_id=session, owner_id="npc-1", limit=10, text="crash"
                )
                seen.extend(hit.memory for hit in (await store.snapshot(query)).lexical)
            for memory in seen:
                if memory != expected_memory(memory.memory_id):
                    print(f"error {memory.memory_id} differs from what was written", flush=True)
                    return
            count = len({memory.key for memory in seen})
            if count < most:
                print(f"error the store shrank from {most} to {count} memories", flush=True)
                return
            most = count
    print(f"seen {most}", flush=True)


def main(argv: list[str]) -> None:
    mode, save = argv[0], argv[1]
    if mode == "append":
        crash = argv[4] if len(argv) > 4 else None
        at = int(argv[5]) if len(argv) > 5 else CRASH_AT
        asyncio.run(append(save, argv[2], int(argv[3]), crash, at))
    elif mode == "migrate":
        asyncio.run(migrate(save, argv[2] if len(argv) > 2 else None))
    elif mode == "read":
        asyncio.run(read(save, float(argv[2])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
