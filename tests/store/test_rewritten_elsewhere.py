"""A partition another process rewrote is read again, never reused from the cache.

Two store objects on one save stand for two processes: each has its own cache. A rewrite
(an erase, a compaction) replaces or deletes files, and the file system may give a file
made afterwards the inode number of a deleted one: the log the next append creates could
then look, to ``lstat``, like the log another process had cached (same inode, same size).
That process served the erased memories and wrote against them. ``rewrite_counts.py``
tells it; these tests check the outcome both as the file system happens to number inodes
and with the inode reuse forced on the cached state.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from game_memory import (
    FileGameMemoryStore,
    GameMemoryQuery,
    GameMoment,
    MemoryConflictError,
    MemoryNotFoundError,
)
from game_memory.durable.names import partition_hash
from game_memory.store.rewrite_counts import REWRITE_COUNTS, RewriteCounts
from game_memory.store.state import PartitionState
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory


def _texts(memories: list[object]) -> list[tuple[str, str | None]]:
    return sorted((m.memory_id, m.searchable_text) for m in memories)  # type: ignore[attr-defined]


async def _refill(
    writer: FileGameMemoryStore, make_memory: MemoryFactory, *, session: bool = False
) -> None:
    """Erase the owner (or the session) and write records of the same sizes back."""
    await writer.erase("session") if session else await writer.erase("session", "owner")
    for n in range(3):
        await writer.append(make_memory(f"m{n}", text=f"bravo{n} publicword", tick=n))


async def _seed(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    for n in range(3):
        await store.append(make_memory(f"m{n}", text=f"alpha{n} secretword", tick=n))


def _as_if_reused(reader: FileGameMemoryStore) -> None:
    """Make the reader's cached state of the partition look, to ``lstat``, like the files
    on disk now: what a reused inode number with an equal size (and, on a file system with
    coarse timestamps, an equal change time) shows."""
    cache = reader._engine.cache
    key = (partition_hash("session"), partition_hash("owner"))
    state: PartitionState = cache._states[key]
    probes = []
    for path, _, _, _ in state.probes:
        info = os.lstat(path)
        probes.append((path, info.st_ino, info.st_size, info.st_ctime_ns))
    segments = []
    for segment in state.segments:
        info = os.lstat(segment.path)
        segments.append(dataclasses.replace(segment, inode=info.st_ino, size=info.st_size))
    forged = dataclasses.replace(state, probes=tuple(probes), segments=tuple(segments))
    cache._states[key] = forged


@pytest.mark.parametrize("forced", [False, True])
@pytest.mark.parametrize("session", [False, True])
async def test_a_reader_sees_an_owner_erased_and_refilled_elsewhere(
    make_store: StoreFactory, make_memory: MemoryFactory, forced: bool, session: bool
) -> None:
    reader, writer = make_store(), make_store()
    await _seed(reader, make_memory)
    assert len(await reader.enumerate("session", "owner")) == 3  # cached
    await _refill(writer, make_memory, session=session)
    if forced:
        _as_if_reused(reader)
    expected = [(f"m{n}", f"bravo{n} publicword") for n in range(3)]
    assert _texts(await reader.enumerate("session", "owner")) == expected
    assert (
        await search(reader, GameMemoryQuery(session_id="session", text="secretword", limit=10))
        == []
    )
    found = await search(reader, GameMemoryQuery(session_id="session", text="publicword", limit=10))
    assert len(found) == 3


@pytest.mark.parametrize("forced", [False, True])
async def test_a_writer_judges_against_what_the_save_holds_after_a_rewrite_elsewhere(
    make_store: StoreFactory, make_memory: MemoryFactory, forced: bool
) -> None:
    # With the stale partition the writer took an erased memory for a duplicate (lost),
    # missed a conflict (written as new: every process then refused the save), forgot an
    # erased memory and could not forget one that was there.
    stale, writer = make_store(), make_store()
    await _seed(stale, make_memory)
    await stale.enumerate("session", "owner")
    await writer.erase("session", "owner")
    for n in range(3):
        await writer.append(make_memory(f"n{n}", text=f"bravo{n} publicword", tick=n))
    if forced:
        _as_if_reused(stale)
    assert await stale.append(make_memory("m0", text="alpha0 secretword", tick=0)) is True
    with pytest.raises(MemoryConflictError):
        await stale.append(make_memory("n0", text="other content", tick=0))
    with pytest.raises(MemoryNotFoundError):
        await stale.forget("session", "owner", "m1", GameMoment(timeline_id="world", tick=9))
    assert await stale.forget("session", "owner", "n1", GameMoment(timeline_id="world", tick=9))
    assert await stale.erase("session", "owner", ["n2"]) == 1
    fresh = make_store()
    assert [m.memory_id for m in await fresh.enumerate("session", "owner")] == ["m0", "n0", "n1"]
    assert (await fresh.check()).ok


async def test_the_counts_are_written_at_open_and_moved_by_a_rewrite(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await _seed(store, make_memory)
    counts = store._engine.counts
    assert counts.usable and (tmp_path / "save" / DATA / REWRITE_COUNTS).is_file()
    before = counts.stamp(partition_hash("session"), partition_hash("owner"))
    other = counts.stamp(partition_hash("session"), partition_hash("someone else"))
    await store.erase("session", "owner", ["m1"])
    after = counts.stamp(partition_hash("session"), partition_hash("owner"))
    assert before is not None and after is not None and after[1] == before[1] + 1
    assert after[0] == before[0]  # the session's count moves for a whole session only
    await store.erase("session")
    assert counts.stamp(partition_hash("session"), partition_hash("owner"))[0] == before[0] + 1  # type: ignore[index]
    assert counts.stamp(partition_hash("session"), partition_hash("someone else"))[0] != other[0]  # type: ignore[index]


@pytest.mark.parametrize("damage", ["missing", "short", "header"])
async def test_a_missing_or_damaged_counts_file_is_written_again_at_open(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, damage: str
) -> None:
    store = make_store()
    await _seed(store, make_memory)
    await store.aclose()
    path = tmp_path / "save" / DATA / REWRITE_COUNTS
    if damage == "missing":  # a save of an earlier release
        path.unlink()
    elif damage == "short":
        path.write_bytes(path.read_bytes()[:100])
    else:
        path.write_bytes(b"X" * path.stat().st_size)
    reopened = make_store()
    assert len(await reopened.enumerate("session", "owner")) == 3
    assert reopened._engine.counts.usable
    assert RewriteCounts(tmp_path / "save" / DATA).path.read_bytes()[:8] == b"GMRWC001"


async def test_a_read_only_save_without_counts_is_read_under_the_old_rules(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await _seed(store, make_memory)
    await store.aclose()
    (tmp_path / "save" / DATA / REWRITE_COUNTS).unlink()
    reader = make_store(create=False)
    assert _texts(await reader.enumerate("session", "owner")) == [
        (f"m{n}", f"alpha{n} secretword") for n in range(3)
    ]
    assert not reader._engine.counts.usable
