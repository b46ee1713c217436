"""The bookkeeping of what an append has in flight (``write_guards.EvictionGuard``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory import InvalidArgumentError, VectorMemoryStoreOptions, open_memory
from game_memory.write_guards import EvictionGuard
from support.vectors import MemoryFactory


def test_memories_in_flight_are_spared_per_owner_until_they_land(
    make_memory: MemoryFactory,
) -> None:
    guard = EvictionGuard()
    mine = [make_memory(f"m{n}") for n in range(3)]
    theirs = make_memory("t", owner_id="tomas")
    with guard.flying([*mine, mine[0], theirs]) as flight:  # m0 twice: counted twice
        with guard.flying([mine[1]]):  # another append of the same memory at once
            assert guard.spared("session", "owner") == {"m0", "m1", "m2"}
            assert guard.spared("session", "tomas") == {"t"}
            flight.land([mine[0], mine[1]])
            assert guard.spared("session", "owner") == {"m0", "m1", "m2"}  # still held
        assert guard.spared("session", "owner") == {"m0", "m2"}
        flight.land([mine[0], mine[0]])  # the second landing of m0 is one too many: ignored
        assert guard.spared("session", "owner") == {"m2"}
    assert guard.spared("session", "owner") == set() == guard.spared("session", "tomas")
    assert guard._flying == {}  # nothing left behind


async def test_a_bounded_consolidate_with_bad_ids_is_refused_by_the_store_checks(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    memory = await open_memory(
        tmp_path / "save",
        model="lexical",
        options=VectorMemoryStoreOptions(maximum_memories_per_owner=3),
    )
    async with memory:
        await memory.append(make_memory("m0"))
        summary = make_memory("s", kind="reflection", tick=5)
        for bad in (5, "m0", [5]):
            with pytest.raises(InvalidArgumentError):
                await memory.consolidate("session", "owner", bad, summary)  # type: ignore[arg-type]
        assert [m.memory_id for m in await memory.enumerate("session", "owner")] == ["m0"]
