"""Read files: a partition opened from its read file reads exactly what its records say.

The read file is derived data (``store/read_files.py``, ``store/read_path.py``): these tests
check that a store opened from one recalls the same memories with the same scores as a
store reading the records, decodes only what it hands out, follows appends, forgets and
erases, and that a read file that no longer matches the save (changed bytes, a damaged or
foreign read file) is ignored, never trusted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import mmap
import os
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from crash.recorder import Recorder
from game_memory import (
    FileGameMemoryStore,
    GameMemoryQuery,
    GameMoment,
    MemoryConflictError,
    PersistenceError,
)
from game_memory.durable.names import identity_hash
from game_memory.index.entries import content_digest, memory_hash
from game_memory.store import read_files as read_file_module
from game_memory.store import read_path
from game_memory.store.lazy import LazyMemories, LazyPositions
from game_memory.store.read_path import content_digests
from game_memory.store.upkeep import Upkeep
from game_memory.store.view import IdPositions

from .helpers import DATA, MemoryFactory, StoreFactory, log_path

WORDS = ["sword", "river", "tavern", "dragon", "merchant", "storm", "harvest", "smith"]
SIZE = 96  # above lexical.SMALL_SNAPSHOT (64): the column path


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give partitions of a few dozen memories read files, written after a few appends too
    (the defaults are 128 and 1,024)."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)


def read_folder(save: Path) -> Path:
    return save / DATA / "read"


def read_files(save: Path) -> list[Path]:
    """The first part of each partition's read-file chain (``o-<hash>.read``)."""
    return sorted(
        path for path in read_folder(save).glob("s-*/o-*.read") if path.name.count(".") == 1
    )


def chain_parts(save: Path) -> list[Path]:
    """Every part of every chain (``o-<hash>.read``, ``o-<hash>.<n>.read``)."""
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
    await fill_from(store, make_memory, 0, count)


async def fill_from(
    store: FileGameMemoryStore, make_memory: MemoryFactory, start: int, stop: int
) -> None:
    """Append memories ``start..stop`` of the ones :func:`fill` appends, one at a time."""
    for number in range(start, stop):
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


async def read_files_written(store: FileGameMemoryStore) -> None:
    """Wait for the read files the store's reads and appends queued (its one background
    thread runs them in order, so a no-op job queued after them ends after them)."""
    await asyncio.to_thread(lambda: store._background.submit(lambda: None).result())


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
    snapshot = await second.snapshot(query())
    assert ranked(snapshot)[0][0] == "late"
    # A lazy view with memories appended since its read file: the batch reads (a recall's
    # candidates) equal the reads one by one, the appended tail included.
    view = snapshot.views[0]
    assert isinstance(view.memories, LazyMemories) and len(view.memories) == SIZE + 1
    positions = [SIZE, 3, 0, SIZE - 1, 3]
    assert view.memories_at(positions) == [view.memories[p] for p in positions]
    assert view.memories.picked([]) == []
    with pytest.raises(IndexError):
        view.memories.picked([SIZE + 1])
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
    await read_files_written(second)
    assert path.read_bytes() != bytes(data)  # rewritten from the records
    third = make_store()
    assert await answers(third) == expected


def rewrite_header(path: Path, **fields: object) -> None:
    """Give a read file's header other ``fields`` (its CRC made right again): a file as
    another build or another Python would have written it."""
    head = struct.Struct("<8sII")
    data = path.read_bytes()
    magic, length, _crc = head.unpack_from(data)
    header = json.loads(data[head.size : head.size + length])
    header.update(fields)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    rest = data[head.size + length :]
    path.write_bytes(head.pack(magic, len(encoded), zlib.crc32(encoded)) + encoded + rest)


@pytest.mark.parametrize(
    "fields",
    [{"format_version": 3}, {"tokenizer": "2/unicode-0.0.0"}, {"tokenizer": None}],
    ids=["format 3", "another unicode database", "no tokenizer named"],
)
async def test_a_read_file_of_another_format_or_tokenizer_is_ignored_and_rebuilt(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, fields: dict[str, object]
) -> None:
    """Its postings may hold other tokens than this build makes of the same text (format 3
    predates the tokenizer's NFKC, marks and Hangul): trusted, a recall would miss them."""
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    await first.aclose()
    (path,) = read_files(tmp_path / "save")
    rewrite_header(path, **fields)
    stale = path.read_bytes()
    second = make_store()
    assert await answers(second) == expected
    await read_files_written(second)
    assert path.read_bytes() != stale  # rewritten from the records, with today's header
    assert read_file_module.TOKENIZER_ID.encode() in path.read_bytes()[:4096]


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


async def test_erasing_one_npc_keeps_the_read_files_of_the_others_and_their_answers(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """An erase removes the erased NPC's read files only: the others hold none of its
    memories (on Windows, one the process has mapped could not be removed), and a kept one
    answers exactly as the records do, in this store and after a reopen."""
    store = make_store()
    await fill(store, make_memory)
    for number in range(SIZE):  # a second NPC, whose read file must stay
        await store.append(
            make_memory(f"o{number:03d}", owner_id="other", text=f"dragon storm {number}")
        )
    other = query("dragon storm").model_copy(update={"owner_id": "other"})
    await store.snapshot(query())
    expected = ranked(await store.snapshot(other))
    await read_files_written(store)
    kept = {path.name for path in read_files(tmp_path / "save")}
    assert len(kept) == 2
    await store.erase("session", "npc", ["m005"])
    left = [path.name for path in chain_parts(tmp_path / "save")]
    assert f"o-{identity_hash('other')}.read" in left
    assert all(name.startswith(f"o-{identity_hash('other')}.") for name in left), left
    assert ranked(await store.snapshot(other)) == expected
    memories = await store.enumerate("session", "npc")
    assert "m005" not in {m.memory_id for m in memories} and len(memories) == SIZE - 1
    await store.aclose()
    reopened = make_store()
    assert ranked(await reopened.snapshot(other)) == expected
    assert len(await reopened.enumerate("session", "other")) == SIZE


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


# -- verified stamps (read_file_module.py: a load that checked every array stamps the file) ------


class CountingCrc:
    """The CRC-32 of ``read_files``, counting its calls (one per array when checked)."""

    def __init__(self) -> None:
        self.calls = 0

    def crc32(self, data: bytes, value: int = 0) -> int:
        self.calls += 1
        return zlib.crc32(data, value)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """A short settling time (the default is 2 s) and a wait of longer than that."""
    monkeypatch.setattr(read_file_module, "SETTLED_NS", 20_000_000)
    return lambda: time.sleep(0.05)


def load_owned(path: Path) -> read_file_module.ReadFile | None:
    """Load the read file at ``path`` as its own partition's (hashes from its names)."""
    return read_file_module.load_read_file(path, path.parent.name[2:], path.stem[2:])


def load(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[read_file_module.ReadFile | None, bool]:
    """Load the read file at ``path``; whether its arrays' CRCs were computed."""
    counter = CountingCrc()
    original = read_file_module.crc32
    monkeypatch.setattr(read_file_module, "crc32", counter.crc32)
    try:
        found = load_owned(path)
    finally:
        monkeypatch.setattr(read_file_module, "crc32", original)
    arrays = 20  # a read file holds more arrays than this; header and stamp are 1 each
    return found, counter.calls >= arrays


async def stamped_read_file(
    make_store: StoreFactory, make_memory: MemoryFactory, save: Path
) -> tuple[Path, list[list[tuple[str, float]]]]:
    store = make_store()
    await fill(store, make_memory)
    expected = await answers(store)
    await store.aclose()
    (path,) = read_files(save)
    # The chain's first part may have been written (and stamped by the merges that read
    # it back) long before the close: write it again, unstamped and fresh.
    read_file_module.stamp_path(path).unlink(missing_ok=True)
    path.write_bytes(path.read_bytes())
    return path, expected


async def test_a_load_that_checked_every_array_stamps_the_file_and_the_next_load_trusts_it(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
) -> None:
    path, expected = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    stamp = read_file_module.stamp_path(path)
    first, checked = load(path, monkeypatch)  # too fresh to stamp yet
    assert first is not None and checked and not stamp.exists()
    settled()
    first, checked = load(path, monkeypatch)
    assert first is not None and checked and stamp.exists()
    info = os.stat(path)
    assert read_file_module.read_stamp(stamp) == (
        (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns),
        zlib.crc32(path.read_bytes()[16 : 16 + int.from_bytes(path.read_bytes()[8:12], "little")]),
    )
    again, checked = load(path, monkeypatch)
    assert again is not None and not checked
    assert again.part.ids == first.part.ids and again.part.digests == first.part.digests
    assert await answers(make_store()) == expected


@pytest.mark.parametrize("stale", ["crc", "cut", "magic", "header", "identity", "empty"])
async def test_a_damaged_or_mismatching_stamp_makes_the_load_check_every_array(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
    stale: str,
) -> None:
    path, expected = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    assert load(path, monkeypatch)[0] is not None
    stamp = read_file_module.stamp_path(path)
    data = bytearray(stamp.read_bytes())
    body = len(data) - 4
    if stale == "crc":
        data[-1] ^= 0x01  # the stamp fails its own checksum, its fields intact
    elif stale == "cut":
        data = data[:-4]
    elif stale == "empty":
        data = bytearray()
    else:
        # A stamp that holds its checksum but names another magic, header or file.
        at = {"magic": 0, "header": body - 4, "identity": 16}[stale]  # identity: the inode
        data[at] ^= 0x01
        data[body:] = zlib.crc32(bytes(data[:body])).to_bytes(4, "little")
    stamp.write_bytes(bytes(data))
    found, checked = load(path, monkeypatch)
    assert found is not None and checked
    assert load(path, monkeypatch)[1] is False  # stamped anew
    assert await answers(make_store()) == expected


@pytest.mark.parametrize("how", ["in place", "replaced"])
async def test_a_read_file_changed_under_its_stamp_is_found_damaged_never_trusted(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
    how: str,
) -> None:
    path, expected = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    assert load(path, monkeypatch)[0] is not None and read_file_module.stamp_path(path).exists()
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last array (content digests): nothing but its CRC checks it
    if how == "in place":
        with path.open("r+b") as handle:
            handle.seek(len(data) - 1)
            handle.write(data[-1:])
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime moves
    else:
        copy = path.with_name("copy.tmp")
        copy.write_bytes(bytes(data))
        os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
        os.replace(copy, path)
    found, checked = load(path, monkeypatch)
    assert found is None and checked
    second = make_store()
    assert await answers(second) == expected  # read from the records instead
    await second.aclose()
    assert path.read_bytes() != bytes(data)  # and rewritten


async def test_the_read_file_is_fsynced_before_its_stamp_is_written(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
) -> None:
    # A stamp must never outlive the bytes it vouches for: a read file copied in (not
    # synced) could come back from a power loss with other bytes under the same identity.
    path, _ = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    recorder = Recorder(str(tmp_path))
    read_inode = recorder.numbers[(os.stat(path).st_dev, os.stat(path).st_ino)]
    with recorder.active():
        assert (
            read_file_module.load_read_file(path, path.parent.name[2:], path.stem[2:]) is not None
        )
    kinds = [(op.kind, op.inode, op.name) for op in recorder.ops]
    synced = kinds.index(("fsync", read_inode, ""))
    created = next(i for i, (kind, _, name) in enumerate(kinds) if kind == "create")
    assert recorder.ops[created].name.startswith(read_file_module.stamp_path(path).name)
    assert synced < created
    renamed = next(i for i, (kind, _, _) in enumerate(kinds) if kind == "rename")
    stamp_inode = recorder.ops[created].inode
    assert ("fsync", stamp_inode, "") in kinds[created:renamed]


@pytest.mark.parametrize("meanwhile", ["nothing", "replaced", "removed"])
async def test_a_load_hands_its_stamp_to_later_which_stamps_only_the_file_it_checked(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
    meanwhile: str,
) -> None:
    path, _ = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    stamp = read_file_module.stamp_path(path)
    jobs: list[Callable[[], None]] = []
    found = read_file_module.load_read_file(
        path, path.parent.name[2:], path.stem[2:], later=jobs.append
    )
    assert found is not None and len(jobs) == 1
    assert not stamp.exists()  # the load wrote nothing: the job will
    if meanwhile == "replaced":  # the same bytes, another file
        copy = path.with_name("copy.tmp")
        copy.write_bytes(path.read_bytes())
        os.replace(copy, path)
    elif meanwhile == "removed":
        path.unlink()
    jobs[0]()  # never raises
    if meanwhile == "nothing":
        assert stamp.exists()
        again, checked = load(path, monkeypatch)
        assert again is not None and not checked  # the stamp vouches for the file
    else:
        assert not stamp.exists()
        if meanwhile == "replaced":
            again, checked = load(path, monkeypatch)
            assert again is not None and checked


async def test_a_store_loading_a_partition_leaves_the_stamps_fsyncs_to_its_read_file_thread(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
) -> None:
    # A stamp costs three fsyncs (the read file, the stamp, its folder): on the first
    # recall after a load they would delay the answer, so the read-file thread writes it
    # (or the store as it closes, if that thread did not get to it first).
    path, expected = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    synced_by: list[str] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced_by.append(threading.current_thread().name)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    store = make_store()
    assert await answers(store) == expected
    serving = [name for name in synced_by if not name.startswith("game-memory-read-file")]
    assert serving == []  # neither the event loop nor the store's reading threads
    await store.aclose()
    assert read_file_module.stamp_path(path).exists()
    _, checked = load(path, monkeypatch)
    assert not checked


async def test_a_store_closed_before_its_thread_wrote_the_stamps_writes_them_at_close(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settled: Callable[[], None],
) -> None:
    # "Load, ask, quit": the read-file thread's queue is dropped at close, and a stamp
    # dropped at every such session would make every load check the same bytes again.
    path, expected = await stamped_read_file(make_store, make_memory, tmp_path / "save")
    settled()
    store = make_store()
    store._engine.cache.upkeep = Upkeep(lambda job: None)  # a thread that never gets to it
    assert await answers(store) == expected
    assert not read_file_module.stamp_path(path).exists()
    await store.aclose()
    assert read_file_module.stamp_path(path).exists()
    _, checked = load(path, monkeypatch)
    assert not checked


# -- id positions (lazy.py: the dict is built on the first lookup, not at open) -------------


async def test_recalls_build_no_id_dict_and_appends_find_ids_by_their_hashes(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    await first.aclose()
    second = make_store()
    assert await answers(second) == expected
    view = (await second.snapshot(query())).views[0]
    positions = view.positions
    assert isinstance(positions, LazyPositions) and not positions.built
    assert positions.background is not None  # the store's read-file thread
    positions.background = None  # here: no build off the lookups' thread
    assert list(positions) == [f"m{n:03d}" for n in range(SIZE)]  # from the list
    with pytest.raises(MemoryConflictError):  # the id is found by its hash, no dict built
        await second.append(make_memory("m005", owner_id="npc", text="another text"))
    assert not positions.built
    await second.append(make_memory("late", owner_id="npc", text="dragon river late"))
    assert not positions.built
    grown = (await second.snapshot(query())).views[0].positions
    assert grown.get("late") == SIZE and grown.get("m005") == 5 and "m095" in grown
    assert "nobody" not in grown and grown.get("nobody") is None
    assert "late" in {m.memory_id for m in await second.enumerate("session", "npc")}
    # Every lookup answers as the dict would, and once lookups are many the dict is built.
    for number in range(LazyPositions.SCANS + 1):
        assert positions.get(f"m{number % SIZE:03d}") == number % SIZE
    assert 12 not in positions and positions.get("late") is None
    with pytest.raises(KeyError):
        positions["late"]
    assert positions.built and positions["m005"] == 5


async def test_the_first_lookup_has_the_read_file_thread_build_the_id_dict(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()
    second = make_store()
    positions = (await second.snapshot(query())).views[0].positions
    assert isinstance(positions, LazyPositions) and not positions.built
    await second.append(make_memory("late", owner_id="npc", text="dragon"))  # a lookup
    for _ in range(200):  # the build is queued on the store's read-file thread
        if positions.built:
            break
        await asyncio.sleep(0.01)
    assert positions.built and positions["m042"] == 42 and len(positions) == SIZE
    with pytest.raises(MemoryConflictError):
        await second.append(make_memory("m042", owner_id="npc", text="other"))


def test_a_background_build_that_finds_an_id_twice_leaves_the_error_to_a_lookup() -> None:
    ids = ["a", "b", "a"]
    hashes = b"".join(hashlib.sha256(i.encode()).digest() for i in ids)
    jobs: list[Callable[[], None]] = []
    positions = LazyPositions(ids, "part-0", hashes)
    positions.background = jobs.append
    with pytest.raises(PersistenceError, match="twice"):
        positions.get("a")  # found twice by the hashes
    assert positions.get("b") == 1 and len(jobs) == 1
    jobs[0]()  # the build finds "a" twice: nothing installed, the next lookup raises
    assert not positions.built
    with pytest.raises(PersistenceError, match="twice"):
        positions.get("b")


async def test_appends_onto_a_lazy_view_merge_its_ids_once_they_are_many(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grown view shares the lazy view's ids without building their dict; the merge that
    copies them (after ``IdPositions.MERGE`` appends) builds it, and every id is found."""
    monkeypatch.setattr(IdPositions, "MERGE", 3)
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()
    second = make_store()
    lazy = (await second.snapshot(query())).views[0].positions
    assert isinstance(lazy, LazyPositions)
    for number in range(5):
        await second.append(make_memory(f"new{number}", owner_id="npc", text="dragon"))
    assert lazy.built  # the merge after three appends copied the whole dict
    grown = (await second.snapshot(query())).views[0].positions
    assert [grown.get(f"new{n}") for n in range(5)] == [SIZE + n for n in range(5)]
    assert grown.get("m000") == 0 and grown.get("m095") == 95 and len(grown) == SIZE + 5
    with pytest.raises(MemoryConflictError):
        await second.append(make_memory("new1", owner_id="npc", text="other"))


async def test_a_read_file_naming_an_id_twice_is_refused_at_the_first_lookup(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written = read_path.write_read_file

    def duplicated(*args: object, **fields: Any) -> int | None:
        ids = fields["part"].ids
        # ids[1] repeats ids[0]
        fields["part"] = dataclasses.replace(fields["part"], ids=[ids[0], *ids[:-1]])
        return written(*args, **fields)  # type: ignore[arg-type]

    monkeypatch.setattr(read_path, "write_read_file", duplicated)
    first = make_store()
    await fill(first, make_memory)
    await first.aclose()
    second = make_store()
    with pytest.raises(PersistenceError, match="twice"):
        await second.append(make_memory("late", owner_id="npc", text="dragon late"))


async def test_a_read_file_rewritten_after_each_batch_digests_only_the_memories_added_since(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk ingest rewrites the read file after each batch; the digests of the memories
    an earlier rewrite covered are reused (``PartitionView.digested``), so the ingest is not
    quadratic, and the file still matches one written from scratch."""
    from game_memory.store import partitions

    digested: list[int] = []

    def counted(memories: Any) -> list[tuple[bytes, bytes]]:
        digested.append(len(memories))
        return content_digests(memories)

    monkeypatch.setattr(partitions, "content_digests", counted)
    store = make_store()
    batches = [
        [
            make_memory(f"m{start + n:03d}", owner_id="npc", text=f"{WORDS[n % len(WORDS)]} {n}")
            for n in range(40)
        ]
        for start in (0, 40, 80)
    ]
    for batch in batches:
        assert await store.append_many(batch) == [True] * 40
        await store.snapshot(query())  # a read after each batch, as a game's would be
        await read_files_written(store)
    assert digested and max(digested) <= 40  # never the whole partition again
    expected = await answers(store)
    await store.aclose()
    assert read_files(tmp_path / "save")
    reopened = make_store()  # opened from the read file those digests went into
    assert await answers(reopened) == expected
    await reopened.aclose()
    for path in read_files(tmp_path / "save"):
        path.unlink()
    assert await answers(make_store()) == expected  # and from the records alone


async def test_a_copied_save_opens_from_its_read_files_checked_by_content(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """A save copied elsewhere (another disk, a restored cloud save) holds the same bytes in
    files of other inodes: its read file is used once the covered bytes' CRCs hold (content
    decides, not identity), and a copy whose bytes differ is read from its records."""
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    await first.aclose()
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "save", copy)
    copied = make_store(copy)
    snapshot = await copied.snapshot(query())
    memories = snapshot.views[0].memories
    assert isinstance(memories, LazyMemories)  # from the read file, not decoded whole
    assert memories.decoded_count() <= len(snapshot.lexical) + 1
    assert await answers(copied) == expected
    await copied.aclose()
    # A copy with one covered byte changed (same length): the read file is not used (it
    # would hide the damage); the records are read, and the damage is named.
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "save", damaged)
    segment = log_path(damaged, "session", "npc")
    data = bytearray(segment.read_bytes())
    at = data.index(b"m001")
    data[at : at + 4] = b"m00X"
    segment.write_bytes(bytes(data))
    other = make_store(damaged)
    with pytest.raises(PersistenceError, match="checksum mismatch"):
        await other.snapshot(query())
    await other.aclose()


async def test_appends_never_wait_for_a_read_file_and_closing_waits_for_the_queued_one(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read file costs the partition's size to write (seconds at 100k memories): the
    append or recall that crosses the threshold queues it on the store's read-file thread
    and returns; closing waits for it, and the next open starts from it."""
    from game_memory.store import partitions

    release = threading.Event()
    started: list[str] = []
    real_persist = partitions.persist

    def slow_persist(directory: str, state: Any, digests: Any, **kwargs: Any) -> bool:
        started.append(threading.current_thread().name)
        release.wait(30)
        return real_persist(directory, state, digests, **kwargs)

    monkeypatch.setattr(partitions, "persist", slow_persist)
    store = make_store()
    await asyncio.wait_for(fill(store, make_memory), 30)  # never blocked by the write
    await asyncio.wait_for(answers(store), 30)
    assert started and {name.split("_")[0] for name in started} == {"game-memory-read-file"}
    assert len(started) == 1  # one write queued at a time per partition
    assert read_files(tmp_path / "save") == []  # still waiting
    release.set()
    expected = await answers(store)
    await store.aclose()
    assert len(read_files(tmp_path / "save")) == 1
    seeded: list[bool] = []
    real_seeded = partitions.seeded_state

    def recorded(*args: Any, **kwargs: Any) -> Any:
        state = real_seeded(*args, **kwargs)
        seeded.append(state is not None)
        return state

    monkeypatch.setattr(partitions, "seeded_state", recorded)
    reopened = make_store()
    assert await answers(reopened) == expected
    assert seeded == [True]  # opened from the read file
    await reopened.aclose()


async def test_a_queued_read_file_is_not_written_for_a_partition_replaced_meanwhile(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An erase or compaction that ran between queueing a read file and writing it
    replaced the files its memories were read from (and forgot the cached state): the
    queued write is dropped, never written from what may be gone."""
    from game_memory.durable.names import partition_hash
    from game_memory.store import partitions

    written: list[int] = []
    real_persist = partitions.persist
    monkeypatch.setattr(
        partitions,
        "persist",
        lambda *args, **kwargs: written.append(1) or real_persist(*args, **kwargs),
    )
    store = make_store()
    queued: list[Callable[[], None]] = []
    cache = store._engine.cache
    cache.background = queued.append
    await fill(store, make_memory)
    assert len(queued) == 1  # one write queued for the partition
    cache.forget(partition_hash("session"), partition_hash("npc"))
    queued.pop()()
    assert written == [] and read_files(tmp_path / "save") == []
    await answers(store)  # read again: queued again, and this time written
    queued.pop()()
    assert written == [1] and len(read_files(tmp_path / "save")) == 1
    await store.aclose()


async def test_appends_queue_a_read_file_only_from_appended_minimum_and_closing_writes_the_rest(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Appended memories cost the next start nothing until the store closes, so appends
    write a part in the background only once ``APPENDED_MINIMUM`` of them are uncovered
    (a read that decodes files does from ``LAZY_MINIMUM``); closing writes the rest."""
    from game_memory.durable.names import partition_hash

    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 64)
    store = make_store()
    queued: list[Callable[[], None]] = []
    cache = store._engine.cache
    cache.background = queued.append
    await fill(store, make_memory, 63)
    assert queued == []  # 63 appended, above LAZY_MINIMUM (8), below APPENDED_MINIMUM
    await fill_from(store, make_memory, 63, 64)
    assert len(queued) == 1  # the 64th
    queued.pop()()
    assert len(chain_parts(tmp_path / "save")) == 1
    state = cache.current(partition_hash("session"), partition_hash("npc"))
    assert state is not None and state.read_file_count == 64
    await fill_from(store, make_memory, 64, SIZE)
    assert queued == []  # 32 more: fewer than APPENDED_MINIMUM again
    expected = await answers(store)
    await store.aclose()
    parts = chain_parts(tmp_path / "save")
    assert len(parts) == 1  # the 64, merged at close with the 32 they did not cover
    reopened = make_store()
    assert await answers(reopened) == expected
    view = (await reopened.snapshot(query())).views[0]
    assert isinstance(view.memories, LazyMemories) and view.memories.lazy_count == SIZE
    await reopened.aclose()


async def test_a_one_part_chain_is_restored_from_views_of_its_map(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A partition of one read-file part is restored from views of the file's map, not
    copies (at 100k memories the copies cost about 5 ms of page faults at every open):
    its columns, record locations and the ids' text; it still answers as the records do."""
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 10 * SIZE)  # one part, at close
    first = make_store()
    await fill(first, make_memory)
    expected = await answers(first)
    await first.aclose()
    assert len(chain_parts(tmp_path / "save")) == 1
    store = make_store()
    assert await answers(store) == expected
    view = (await store.snapshot(query())).views[0]
    assert view.prefix is not None
    columns = view.prefix.columns
    for array in (columns.ticks, columns.importance, columns.scope_codes, columns.belief_codes):
        assert isinstance(mapped_by(array), mmap.mmap) and not array.flags.writeable
    # The view's own columns and lexical index (what the recalls above masked and ranked
    # with) are the restored ones, not copies into a room to grow in (4.3 MB at 100k).
    assert view.columns is columns and view.lexical is view.prefix.lexical
    assert isinstance(mapped_by(view.lexical.lengths), mmap.mmap)  # not a copy either
    records = view.memories._records
    assert isinstance(mapped_by(records.locations._files), mmap.mmap)
    assert isinstance(mapped_by(records.locations._offsets), mmap.mmap)
    assert records.expected[SIZE - 1] == f"m{SIZE - 1:03d}"
    await store.aclose()


def mapped_by(array: Any) -> object:
    """The object whose memory ``array`` views (through its bases and a memoryview)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array
