"""A writer process of the many-writers test: ``python workers.py URL WORKER COUNT START_AT``.

Waits until ``START_AT`` (a ``time.time()`` value, so every worker starts at once), then
appends, interleaved, to one session with three owners: ``COUNT`` memories of its own,
``COUNT`` *shared* memories every worker appends with the same content, and ``COUNT``
*contested* ids every worker appends with content of its own. Prints one JSON line per
append: ``[memory_id, outcome]`` with outcome ``true``, ``false`` or ``"conflict"``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from game_memory import GameMemory, GameMoment, MemoryConflictError
from game_memory.postgres import PostgresGameMemoryStore

SESSION = "world"


def memory(memory_id: str, number: int, author: str) -> GameMemory:
    """The memory ``author`` appends under ``memory_id`` (contested ids differ by author)."""
    return GameMemory(
        memory_id=memory_id,
        session_id=SESSION,
        owner_id=f"npc-{number % 3}",
        scope="village",
        kind="event",
        payload_json=json.dumps({"n": number, "by": author}),
        moment=GameMoment(timeline_id="world", tick=number),
        searchable_text=f"{memory_id} written by {author}",
    )


def plan(worker: str, count: int) -> list[GameMemory]:
    """What one worker appends, in order."""
    memories: list[GameMemory] = []
    for number in range(count):
        memories.append(memory(f"{worker}-{number}", number, worker))
        memories.append(memory(f"shared-{number}", number, "everyone"))
        memories.append(memory(f"contested-{number}", number, worker))
    return memories


async def main(url: str, worker: str, count: int, start_at: float) -> None:
    store = PostgresGameMemoryStore(url, max_connections=2)
    await store.count()  # connect and check the schema before the start line
    time.sleep(max(0.0, start_at - time.time()))
    try:
        for item in plan(worker, count):
            try:
                outcome: object = await store.append(item)
            except MemoryConflictError:
                outcome = "conflict"
            print(json.dumps([item.memory_id, outcome]), flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
