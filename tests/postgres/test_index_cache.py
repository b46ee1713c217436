"""The PostgreSQL index's process cache of loaded partitions (``postgres/index_cache.py``):
its bound is kept by a running total and its loads are found by session, both without a
pass over every load (which made a first status over 10,000 NPCs take 15.8 s)."""

from __future__ import annotations

import random

from game_memory.durable.names import identity_hash
from game_memory.index.entries import EntryState
from game_memory.postgres.index_cache import EntryRow, Loaded, Loads, load


def _load(session: str, owner: str, count: int, base: Loaded | None = None) -> Loaded:
    start = 0 if base is None else base.partition.records
    entries = [
        EntryRow(
            change=start + number + 1,
            memory_hash=bytes.fromhex(identity_hash(f"{owner}-{start + number}")),
            digest=b"d" * 32,
            state=EntryState.PENDING,
            identity=None,
            code="embedding_pending",
            embedding=None,
        )
        for number in range(count)
    ]
    return load(base, session, owner, 1, start + count, entries, {}, "a test partition")


def _check(loads: Loads) -> None:
    held = list(loads._loads.values())
    assert loads._total == sum(item.partition.live for item in held)
    for session in {item.session_id for item in held} | set(loads._sessions):
        expected = {item.owner_id: item for item in held if item.session_id == session}
        assert loads.session(session) == expected


def test_the_bound_and_the_sessions_follow_every_remember_grow_and_forget() -> None:
    rng = random.Random(7)
    loads = Loads(maximum_entries=400)
    for step in range(600):
        session, owner = f"s{rng.randrange(5)}", f"npc{rng.randrange(40)}"
        action = rng.random()
        current = loads.get(session, owner)
        if action < 0.15 and current is not None:
            loads.forget(session, owner)
        elif action < 0.45 and current is not None:  # a load extended in place, counted again
            loads.remember(_load(session, owner, rng.randrange(1, 8), current))
        else:
            loads.remember(_load(session, owner, rng.randrange(1, 30)))
        _check(loads)
        if len(loads._loads) > 1:
            assert loads._total <= 400, step
