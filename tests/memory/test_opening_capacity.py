"""``open_memory(maximum_entries=...)``: the save's store-wide bound, through the front door.

The file store holds 100,000 memories unless opened with a larger bound, and the front door
(what every CLI command and the sidecar call) is the only way the command line and the
Godot addon have to open it with one; a database takes the same argument as its own bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory.errors import CapacityExceededError, InvalidArgumentError
from game_memory.model import GameMemory, GameMemoryKind, GameMemoryQuery, GameMoment
from game_memory.opening import open_memory
from game_memory.recall.options import VectorMemoryStoreOptions


def _memory(number: int, owner: str = "mira") -> GameMemory:
    return GameMemory(
        memory_id=f"m{number}",
        session_id="save-1",
        owner_id=owner,
        scope="personal",
        kind=GameMemoryKind.EVENT,
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=number),
        searchable_text=f"memory {number}",
    )


async def test_a_small_bound_refuses_the_append_that_passes_it(tmp_path: Path) -> None:
    save = tmp_path / "save"
    async with await open_memory(save, model="lexical", maximum_entries=3) as memory:
        for number in range(3):
            assert await memory.append(_memory(number, owner=f"npc{number % 2}")) is True
        with pytest.raises(CapacityExceededError) as raised:
            await memory.append(_memory(3))
        assert raised.value.bound == "maximum_entries"
        assert await memory.append(_memory(0, owner="npc0")) is False  # still idempotent
        assert await memory.authoritative.count() == 3
    # The message names every way to raise the bound: Python, the CLI and the addon.
    message = str(raised.value)
    assert "the store holds 3 memories, its maximum_entries" in message
    assert "open_memory(..., maximum_entries=N)" in message
    assert "--maximum-entries N on game-memory serve" in message
    assert "maximum_entries setting of the Godot GameMemory node" in message


async def test_a_larger_bound_lets_the_save_grow_past_the_smaller_one(tmp_path: Path) -> None:
    save = tmp_path / "save"
    async with await open_memory(save, model="lexical", maximum_entries=2) as memory:
        await memory.append(_memory(0))
        await memory.append(_memory(1))
        with pytest.raises(CapacityExceededError):
            await memory.append(_memory(2))
    async with await open_memory(save, model="lexical", maximum_entries=4) as memory:
        assert await memory.append(_memory(2)) is True
        assert await memory.append(_memory(3)) is True
        with pytest.raises(CapacityExceededError):
            await memory.append(_memory(4))
        assert await memory.authoritative.count() == 4
    async with await open_memory(save, model="lexical") as memory:  # None: the default
        assert await memory.append(_memory(4)) is True


async def test_a_bound_below_a_session_refuses_to_read_it(tmp_path: Path) -> None:
    """Why the read-only commands take the option too: a save grown past the default
    cannot be searched with the default."""
    save = tmp_path / "save"
    async with await open_memory(save, model="lexical", maximum_entries=6) as memory:
        for number in range(6):
            await memory.append(_memory(number))
    async with await open_memory(save, model="lexical", maximum_entries=3, create=False) as memory:
        with pytest.raises(CapacityExceededError):
            await memory.enumerate("save-1")
    async with await open_memory(save, model="lexical", maximum_entries=6, create=False) as memory:
        assert len(await memory.enumerate("save-1")) == 6


@pytest.mark.parametrize("bad", [0, -1, 1_000_001, True, 2.0, "5"])
async def test_a_bad_bound_is_refused_before_anything_is_opened(
    tmp_path: Path, bad: object
) -> None:
    save = tmp_path / "save"
    with pytest.raises(InvalidArgumentError, match="maximum_entries must be an integer from 1"):
        await open_memory(save, model="lexical", maximum_entries=bad)  # type: ignore[arg-type]
    assert not save.exists()


async def test_a_database_takes_the_bound_as_its_own() -> None:
    pytest.importorskip("psycopg")
    from postgres.server import server_url, temporary_schema

    with server_url() as server, temporary_schema(server) as url:
        async with await open_memory(url, model="lexical", maximum_entries=2) as memory:
            await memory.append(_memory(0))
            await memory.append(_memory(1))
            with pytest.raises(CapacityExceededError) as raised:
                await memory.append(_memory(2))
            assert raised.value.bound == "maximum_entries"
            assert "--maximum-entries N on game-memory serve" in str(raised.value)
        async with await open_memory(url, model="lexical") as memory:  # None: no bound
            assert await memory.append(_memory(2)) is True


async def test_a_raised_store_bound_raises_the_session_wide_bounds_unless_they_are_set(
    tmp_path: Path,
) -> None:
    # A save opened to hold 200,000 memories (the CLI's --maximum-entries, the sidecar's)
    # would otherwise hold sessions no status or rebuild could read: those read a whole
    # session, bounded by maximum_index_entries (100,000), which only Python can set.
    raised = await open_memory(tmp_path / "a", model="hashing", maximum_entries=200_000)
    try:
        assert raised.options.maximum_index_entries == 200_000
        assert raised.options.maximum_stored_vector_values >= 200_000 * 1_024
    finally:
        await raised.aclose()
    chosen = VectorMemoryStoreOptions(maximum_index_entries=50_000)
    kept = await open_memory(
        tmp_path / "b", model="hashing", maximum_entries=200_000, options=chosen
    )
    try:
        assert kept.options.maximum_index_entries == 50_000
    finally:
        await kept.aclose()
    default = await open_memory(tmp_path / "c", model="hashing", maximum_entries=5)
    try:
        assert default.options.maximum_index_entries == 100_000
    finally:
        await default.aclose()


async def test_a_raised_store_bound_raises_the_index_bound_on_one_npc(tmp_path: Path) -> None:
    # The derived index holds at most 100,000 entries of one NPC unless opened otherwise,
    # and nothing but Python could open it otherwise: an NPC past 100,000 memories in a save
    # opened with maximum_entries=200_000 was saved without vectors, and every rebuild
    # failed on them while its message said to run it again.
    raised = await open_memory(tmp_path / "a", model="hashing", maximum_entries=200_000)
    try:
        assert raised.index is not None and raised.index.capacity == 200_000
    finally:
        await raised.aclose()
    default = await open_memory(tmp_path / "b", model="hashing", maximum_entries=5)
    try:
        assert default.index is not None and default.index.capacity == 100_000
    finally:
        await default.aclose()


async def test_a_save_opened_under_a_smaller_bound_than_it_holds_names_that_bound(
    tmp_path: Path,
) -> None:
    # Status and rebuild blamed maximum_index_entries ("more than 100,000 memories ... the
    # CLI cannot set it") and a recall of one NPC blamed maximum_snapshot_entries ("query
    # one owner"): the bound hit was the store's maximum_entries, which --maximum-entries
    # raises.
    grown = await open_memory(tmp_path / "save", model="hashing")
    for number in range(4):
        await grown.append(
            GameMemory(
                memory_id=f"m{number}",
                session_id="s1",
                owner_id="ada",
                scope="world",
                kind=GameMemoryKind.FACT,
                payload_json="{}",
                moment=GameMoment(timeline_id="main", tick=number),
                searchable_text=f"memory {number}",
            )
        )
    await grown.aclose()
    small = await open_memory(tmp_path / "save", model="hashing", maximum_entries=2)
    try:
        query = GameMemoryQuery(session_id="s1", owner_id="ada", text="memory", limit=5)
        calls = [
            lambda: small.get_status("s1"),
            lambda: small.rebuild("s1"),
            lambda: small.recall(query),
        ]
        for call in calls:
            with pytest.raises(CapacityExceededError, match="--maximum-entries N") as raised:
                await call()
            assert raised.value.bound == "maximum_entries"
            assert "100,000" not in str(raised.value)
    finally:
        await small.aclose()
