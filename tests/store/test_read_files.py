"""Read files: a partition opened from its read file reads exactly what its records say.

The read file is derived data (``store/read_files.py``, ``store/read_path.py``): these tests
check that a store opened from one recalls the same memories with the same scores as a
store reading the records, decodes only what it hands out, follows appends, forgets and
erases, and that a read file that no longer matches the save (changed bytes, a damaged or
foreign read file) is ignored, never trusted.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, GameMoment, PersistenceError
from game_memory.index.entries import content_digest, memory_hash
from game_memory.store import read_path
from game_memory.store.lazy import LazyMemories
from game_memory.store.read_path import content_digests

from .helpers import DATA, MemoryFactory, StoreFactory, log_path

WORDS = ["sword", "river", "tavern", "dragon", "merchant", "storm", "harvest", "smith"]
SIZE = 96  # above lexical.SMALL_SNAPSHOT (64): the column path


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give partitions of a few dozen memories read files (the default is 1,024)."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)


def read_folder(save: Path) -> Path:
    return save / DATA / "read"


def read_files(save: Path) -> list[Path]:
    return sorted(read_folder(save).glob("s-*/o-*.read"))


def query(
    text: str | None = "dragon river", tick: int | None = None, **fields: object
) -> GameMemoryQuery:
    at = GameMoment(timeline_id="main", tick=tick) if tick is not None else None
    limit = fields.pop("limit", 10)
    return GameMemoryQuery(
        session_id="session", owner_id="npc", text=text, at_or_before=at, limit=limit, **fields
    )


async def fill(store: FileGameMemoryStore, make_memory: MemoryFactory, count: int = SIZE) -> None:
    for number in range(count):
        words = " ".join(WORDS[(number * k) % len(WORDS)] for k in (1, 3, 5))
        await store.append(
            make_memory(
                f"m{number:03d}",
                owner_id="npc",
                text=f"{words} {number}",
                moment=GameMoment(timeline_id="main", tick=number),
                importance=(number % 7) / 7,
                tags=["rumour"] if number % 3 == 0 else [],
                belief_key="weather" if number % 10 == 0 else None,
            )
        )


def ranked(snapshot: object) -> list[tuple[str, float]]:
    return [(hit.memory.memory_id, hit.score) for hit in snapshot.lexical]  # type: ignore[attr-defined]


QUERIES = [
    query(),
    query("storm", tick=30),
    query(None, tick=20),
    query("smith harvest", tags=["rumour"]),
    query("merchant", minimum_importance=0.5, limit=3),
]


async def answers(store: FileGameMemoryStore) -> list[list[tuple[str, float]]]:
    return [ranked(await store.snapshot(q)) for q in QUERIES]


async def test_a_store_opened_from_read_files_ranks_exactly_like_one_reading_the_records(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    assert len(read_files(tmp_path / "save")) == 1
    await first.aclose()

    second = make_store()
    snapshot = await second.snapshot(query())
    memories = snapshot.views[0].memories
    assert isinstance(memories, LazyMemories)
    # Only what recall handed out (and a first memory for the partition's ids) was read.
    assert memories.decoded_count() <= len(snapshot.lexical) + 1
    assert await answers(second) == expected
    everything = await second.enumerate("session", "npc")
    assert [m.memory_id for m in everything] == [f"m{n:03d}" for n in range(SIZE)]
    assert snapshot.authoritative_memories == tuple(everything)


async def test_appends_and_forgets_after_opening_from_a_read_file_are_seen(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()

    second = make_store()
    await second.snapshot(query())
    await second.append(
        make_memory(
            "late",
            owner_id="npc",
            text="dragon river dragon",
            moment=GameMoment(timeline_id="main", tick=99),
        )
    )
    await second.forget("session", "npc", "m003", GameMoment(timeline_id="main", tick=50))
    after = await answers(second)
    assert ranked(await second.snapshot(query()))[0][0] == "late"
    await second.aclose()

    shutil.rmtree(read_folder(tmp_path / "save"))
    third = make_store()
    assert await answers(third) == after


async def test_a_read_file_is_ignored_when_the_bytes_it_covers_changed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()
    log = log_path(tmp_path / "save", "session", "npc")
    data = bytearray(log.read_bytes())
    data[40] ^= 0x01  # inside the first record's payload
    log.write_bytes(bytes(data))

    second = make_store()
    with pytest.raises(PersistenceError, match="corrupt"):
        await second.snapshot(query())


async def test_a_covered_file_changed_in_place_is_checked_again_whatever_its_mtime(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()
    second = make_store()
    assert await answers(second)  # opened from the read file, nothing hashed (unchanged)
    await second.aclose()
    log = log_path(tmp_path / "save", "session", "npc")
    before = os.stat(log)
    data = bytearray(log.read_bytes())
    data[40] ^= 0x01
    log.write_bytes(bytes(data))
    os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))  # the change time still moves
    with pytest.raises(PersistenceError, match="corrupt"):
        await make_store().snapshot(query())


@pytest.mark.parametrize("damage", ["flip", "cut", "foreign"])
async def test_a_damaged_or_foreign_read_file_is_ignored_and_rebuilt(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, damage: str
) -> None:
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    await first.aclose()
    (path,) = read_files(tmp_path / "save")
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    elif damage == "cut":
        data = data[: len(data) // 3]
    else:
        data = bytearray(b"not a read file at all")
    path.write_bytes(bytes(data))

    second = make_store()
    assert await answers(second) == expected
    assert path.read_bytes() != bytes(data)  # rewritten from the records
    third = make_store()
    assert await answers(third) == expected


async def test_erasing_removes_the_read_files_of_the_session(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await fill(store, make_memory)
    await store.snapshot(query())
    assert read_files(tmp_path / "save")
    await store.erase("session", "npc", ["m005"])
    assert not read_files(tmp_path / "save")
    memories = await store.enumerate("session", "npc")
    assert "m005" not in {m.memory_id for m in memories} and len(memories) == SIZE - 1


async def test_the_store_digests_equal_the_vector_index_digests(
    make_memory: MemoryFactory,
) -> None:
    memories = [
        make_memory("a", text="x"),
        make_memory("é", text="猫", belief_key="k", payload_json='{"b": [1, 2]}'),
    ]
    assert content_digests(memories) == [
        (memory_hash(m.memory_id), content_digest(m)) for m in memories
    ]


async def test_small_partitions_get_no_read_file(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await fill(store, make_memory, count=5)
    await store.snapshot(query())
    assert read_files(tmp_path / "save") == []


@pytest.mark.parametrize("odd", ["nul\0inside", "ünïcode ✓"])
async def test_ids_of_any_text_come_back_from_the_read_file(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, odd: str
) -> None:
    first = make_store()
    await fill(first, make_memory)
    await first.append(make_memory(odd, owner_id="npc", text="dragon odd"))
    expected = await answers(first)
    ids = [m.memory_id for m in await first.enumerate("session", "npc")]
    await first.aclose()
    assert read_files(tmp_path / "save")
    second = make_store()
    assert await answers(second) == expected
    assert [m.memory_id for m in await second.enumerate("session", "npc")] == ids
