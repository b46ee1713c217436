"""``compact``: what an erase leaves to tidy, and what interrupted writes left behind.

An erase rewrites the partition it touches compactly; compaction rewrites the rest that
needs it (segments that could be fewer, redundant retractions), deletes temporary and
staged files no journal claims, empty packs at the end of a series and empty session
folders, and keeps every memory and every retraction that matters.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from game_memory import GameMemoryQuery, GameMoment
from game_memory.durable.names import identity_hash
from support.stores import search

from .helpers import (
    DATA,
    MemoryFactory,
    StoreFactory,
    files_under,
    log_path,
    session_folder,
    write_legacy,
)
from .test_erase import Stop, stop_in_switch


def at(tick: int) -> GameMoment:
    return GameMoment(timeline_id="world", tick=tick)


async def test_segments_written_small_are_merged_and_nothing_is_lost(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    small = make_store(maximum_file_bytes=1_024)
    memories = [make_memory(f"m{n}", tick=n, text="a rumour " + "r" * 300) for n in range(10)]
    for memory in memories:
        await small.append(memory)
    assert log_path(save, "session", "owner", 9).exists()  # one record per segment
    await small.aclose()
    store = make_store()  # the default bound: four megabytes a segment
    report = await store.compact()
    assert report.partitions_rewritten == 1
    assert report.bytes_after <= report.bytes_before
    assert log_path(save, "session", "owner").exists()
    assert not log_path(save, "session", "owner", 1).exists()
    assert await store.enumerate("session") == sorted(memories, key=lambda m: m.memory_id)
    assert (await store.check()).ok
    again = await store.compact()
    assert again.partitions_rewritten == 0 and again.bytes_after == again.bytes_before


async def test_segments_as_full_as_packing_makes_them_are_left_alone(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # Records of just over half a file: one a segment however they are packed. Compaction
    # reported such a partition rewritten on every call (its files left as they were):
    # it never settled.
    save = tmp_path / "save"
    store = make_store(maximum_file_bytes=1_024)
    for n in range(5):
        await store.append(make_memory(f"m{n}", tick=n, text="a rumour " + "r" * 200))
    assert log_path(save, "session", "owner", 4).exists()
    assert not log_path(save, "session", "owner", 5).exists()
    before = files_under(session_folder(save, "session"))
    for _ in range(2):
        report = await store.compact()
        assert report.partitions_rewritten == 0
        assert report.bytes_after == report.bytes_before
    assert files_under(session_folder(save, "session")) == before


async def test_a_retraction_made_redundant_by_an_earlier_one_is_dropped(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", tick=number, text="the well"))
    assert await store.forget("session", "owner", "m1", at(500)) is True
    assert await store.forget("session", "owner", "m1", at(100)) is True  # earlier: it counts
    ledger = tmp_path / "save" / DATA / "retraction-ledger.log"
    assert ledger.stat().st_size == 256
    query = GameMemoryQuery(session_id="session", limit=10, at_or_before=at(300))
    before = [m.memory_id for m in await search(store, query)]
    report = await store.compact()
    assert report.partitions_rewritten == 1
    assert ledger.stat().st_size == 128
    assert [m.memory_id for m in await search(store, query)] == before == ["m2", "m0"]
    checked = await make_store().check()
    assert checked.ok, checked.problems


async def test_leftovers_of_interrupted_writes_are_deleted(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store()
    await store.append(make_memory("m1", text="kept"))
    folder = session_folder(save, "session")
    (folder / "p-1.pack.4242.tmp").write_bytes(b"LEFTOVER bytes of a pack")
    (folder / f"o-{identity_hash('owner')}.log.new").write_bytes(b"LEFTOVER staged bytes")
    (save / DATA / "format.json.0123.tmp").write_bytes(b"LEFTOVER")
    report = await store.compact()
    assert report.files_removed == 3
    assert not [path for path, data in files_under(save).items() if b"LEFTOVER" in data]
    assert [m.memory_id for m in await store.enumerate("session")] == ["m1"]


async def test_empty_packs_at_the_end_and_empty_session_folders_go(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    write_legacy(save, make_memory("legacy-1", session_id="old", owner_id="ghost"))
    store = make_store()
    await store.append(make_memory("m1"))
    assert (session_folder(save, "old") / "p-1.pack").exists()
    assert await store.erase("old", "ghost") == 1
    assert (session_folder(save, "old") / "p-1.pack").stat().st_size == 32  # an empty pack
    report = await store.compact()
    assert report.files_removed == 2  # the pack and its folder
    assert not session_folder(save, "old").exists()
    assert (await store.check()).ok


async def test_an_interrupted_compaction_is_finished_by_the_next_reader(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = make_store(maximum_file_bytes=1_024)
    memories = [make_memory(f"m{n}", tick=n, text="a rumour " + "r" * 300) for n in range(6)]
    for memory in memories:
        await small.append(memory)
    await small.aclose()
    store = make_store()
    with monkeypatch.context() as patch:
        stop_in_switch(patch)
        with contextlib.suppress(Stop):
            await store.compact()
    save = tmp_path / "save"
    assert (save / DATA / "rewrite.json").exists()
    assert log_path(save, "session", "owner", 5).exists()  # merged, but the old ones still there
    reader = make_store()
    assert await reader.enumerate("session") == memories
    assert not (save / DATA / "rewrite.json").exists()
    assert not log_path(save, "session", "owner", 1).exists()
    assert (await reader.check()).ok


async def test_a_compaction_with_nothing_to_do_reports_the_same_size_twice(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """Its own reads of large partitions wrote derived read files (``read/``), in the
    background and at close: a compaction that freed nothing reported the save 8 MB larger
    each time, and the next one another "before". Derived files are not counted."""
    save = tmp_path / "save"
    store = make_store(save)
    await store.append_many([make_memory(f"m{n}", tick=n) for n in range(300)])
    await store.aclose()
    first = make_store(save)
    report = await first.compact()
    await first.aclose()  # read files are written by now
    assert list((save / DATA / "read").rglob("*.read"))
    again = make_store(save)
    second = await again.compact()
    await again.aclose()
    assert second.partitions_rewritten == 0
    assert report.bytes_after == second.bytes_before == second.bytes_after
    authoritative = sum(
        len(data)
        for name, data in files_under(save / DATA).items()
        if not name.startswith("read/") and not name.endswith(".done.json")
    )
    assert second.bytes_after == authoritative
