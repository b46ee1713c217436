"""Many processes recording new embedding identities in one index at the same instant.

A rolling model upgrade: game servers on several hosts write their first vector under an
identity the index has not seen, at once. Each identity is numbered in the shared table;
every writer must get its identity recorded and its vector written (none may fail for
losing the race to number its identity), and codes must stay distinct.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import psycopg

from game_memory import GameMemory, GameMoment
from game_memory.model import MemoryEmbeddingIdentity
from game_memory.postgres import PostgresVectorIndex

WRITERS = 24


def _memory(number: int) -> GameMemory:
    return GameMemory(
        memory_id=f"m-{number}",
        session_id="world",
        owner_id=f"npc-{number}",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="world", tick=number),
        searchable_text=f"memory {number}",
    )


def _identity(number: int) -> MemoryEmbeddingIdentity:
    return MemoryEmbeddingIdentity(
        provider_id="fleet", model_id=f"model-{number}", version="1", dimensions=4
    )


def test_writers_recording_different_identities_at_once_all_succeed(
    database: str, make_postgres_index: Callable[..., PostgresVectorIndex]
) -> None:
    indexes = [make_postgres_index(max_connections=1) for _ in range(WRITERS)]
    for index in indexes:  # connect and create the schema before the start line
        assert index.verify("world", repair=False) == []
    start = threading.Barrier(WRITERS)
    failures: list[BaseException] = []

    def write(number: int) -> None:
        start.wait()
        try:
            indexes[number].write(
                [_memory(number)],
                np.full((1, 4), number + 1, dtype=np.float32),
                _identity(number),
            )
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    reader = make_postgres_index()
    for number in range(WRITERS):
        assert reader.is_ready(_memory(number), _identity(number))
    with psycopg.connect(database) as connection:
        rows = connection.execute("SELECT code, name FROM game_memory_identities").fetchall()
    assert sorted(name for _, name in rows) == sorted(str(_identity(n)) for n in range(WRITERS))
    assert sorted(code for code, _ in rows) == list(range(WRITERS))
