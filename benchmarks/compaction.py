"""Erase and compaction benchmark: a save's size falls back when half of it is erased.

Builds one save of N memories (default 20,000) across 4 sessions and 200 owners: the first
half migrated from legacy flat documents (so they live in packs, with a legacy backup), the
other half appended (log segments), with a retraction for every tenth memory. Then, in one
run, it measures the save's bytes (every file under ``.game-memory``, backups included):

1. ``written``: after the writes;
2. ``after_erase``: after erasing half of the memories, those of every other owner: a
   quarter of the owners erased whole (``erase(session, owner)``), another quarter by
   listing each of their memories (``erase(session, owner, ids)``, in batches of 64); with
   the time of each kind of erase;
3. ``after_compact``: after ``compact()`` (which has little left to do: an erase rewrites
   what it touches), with its time.

It also checks the promise: no erased memory's text is left in any file, and the save checks
consistent. Prints JSON: the byte counts, ``fallen_back`` (after_erase / written) and the
timings. Usage: ``python benchmarks/compaction.py [--memories N] [--owners N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from script_support import int_range

from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.durable.names import identity_hash
from game_memory.store.documents import encode_legacy_document
from game_memory.store.erasing import save_bytes

SESSIONS = 4


def memory(number: int, owners: int) -> GameMemory:
    """Memory ``number``: its owner and session follow from the number."""
    owner = number % owners
    return GameMemory(
        memory_id=f"m{number}",
        session_id=f"slot-{owner % SESSIONS}",
        owner_id=f"npc-{owner}",
        scope="village",
        kind="event",
        payload_json=json.dumps({"n": number, "seen": "the square at dusk"}),
        moment=GameMoment(timeline_id="main", tick=number),
        importance=(number % 10) / 10,
        searchable_text=f"MEMORY-{number:07d} the villager saw something at the well "
        + "and told the miller about it " * 3,
    )


def _seconds(started: float) -> float:
    return round(time.perf_counter() - started, 3)


async def run(folder: Path, memories: int, owners: int) -> dict[str, object]:
    save = folder / "save"
    save.mkdir(parents=True)
    legacy = memories // 2
    for number in range(legacy):
        item = memory(number, owners)
        key = f"{item.session_id}\n{item.owner_id}\n{item.memory_id}"
        (save / f"{identity_hash(key)}.memory.json").write_bytes(encode_legacy_document(item))
    timings: dict[str, float] = {}
    async with FileGameMemoryStore(save, maximum_entries=max(memories, 1)) as store:
        started = time.perf_counter()
        await store.migrate_legacy_layout()
        timings["migrate_legacy_half"] = _seconds(started)
        started = time.perf_counter()
        for number in range(legacy, memories):
            await store.append(memory(number, owners))
        timings["append_other_half"] = _seconds(started)
        for number in range(0, memories, 10):
            item = memory(number, owners)
            at = GameMoment(timeline_id="main", tick=memories + number)
            await store.forget(item.session_id, item.owner_id, item.memory_id, at)
        os.sync()
        written = save_bytes(save / ".game-memory")
        erased: set[int] = set()
        whole = listed = 0
        started = time.perf_counter()
        for owner in range(0, owners, 4):  # a quarter of the owners: erased whole
            session = f"slot-{owner % SESSIONS}"
            whole += await store.erase(session, f"npc-{owner}")
            erased.update(n for n in range(memories) if n % owners == owner)
        timings["erase_owners"] = _seconds(started)
        started = time.perf_counter()
        for owner in range(2, owners, 4):  # another quarter: every memory listed
            numbers = [n for n in range(memories) if n % owners == owner]
            for start in range(0, len(numbers), 64):
                ids = [f"m{n}" for n in numbers[start : start + 64]]
                listed += await store.erase(f"slot-{owner % SESSIONS}", f"npc-{owner}", ids)
            erased.update(numbers)
        timings["erase_listed"] = _seconds(started)
        os.sync()
        after_erase = save_bytes(save / ".game-memory")
        started = time.perf_counter()
        report = await store.compact()
        timings["compact"] = _seconds(started)
        after_compact = save_bytes(save / ".game-memory")
        check = await store.check()
        count = await store.count()
    left = _markers_left(save, erased)
    return {
        "benchmark": "compaction",
        "memories": memories,
        "owners": owners,
        "sessions": SESSIONS,
        "erased": whole + listed,
        "erased_whole_owners": whole,
        "erased_listed": listed,
        "count_after": count,
        "bytes": {
            "written": written,
            "after_erase": after_erase,
            "after_compact": after_compact,
        },
        "fallen_back": round(after_erase / written, 3),
        "compaction": report.model_dump(mode="json"),
        "erased_texts_left_in_files": left,
        "check_consistent": check.ok,
        "timings_s": timings,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


def _markers_left(save: Path, erased: set[int]) -> int:
    wanted = {f"MEMORY-{number:07d}".encode() for number in erased}
    left = 0
    for path in save.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            left += sum(1 for marker in wanted if marker in data)
    return left


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int_range(1, 10_000_000), default=20_000)
    parser.add_argument("--owners", type=int_range(1, 1_000_000), default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gm-compaction-") as folder:
        result = asyncio.run(run(Path(folder), args.memories, args.owners))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
