"""A cached segment whose inode number now names another file is read again from its start.

A rewrite (an erase, a compaction) replaces a log segment with a new file; a later rewrite
can create its file under the inode number the first one freed. A reader that cached the
first file then finds the same inode and a larger size, and reading on from where it
stopped would parse the middle of another record: a crash campaign's compact round
reported a healthy save "corrupt (bad magic at byte 264)" that way. Rewriting the file in
place (same inode) is the same sight for a reader.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMoment
from game_memory.durable.names import partition_hash, segment_path
from game_memory.store import partitions
from game_memory.store.partitions import PartitionCache

from .helpers import MemoryFactory

SESSION, OWNER = partition_hash("session"), partition_hash("npc")


async def filled(
    save: Path, make_memory: MemoryFactory, prefix: str, count: int, start: int = 0
) -> str:
    """Memories ``start..start + count`` of one NPC appended one by one (by a writer of its
    own); the save's session folder."""
    async with FileGameMemoryStore(save) as store:
        for number in range(start, start + count):
            await store.append(
                make_memory(
                    f"{prefix}{number}",
                    owner_id="npc",
                    text=f"{prefix} remembers {number}",
                    moment=GameMoment(timeline_id="main", tick=number),
                )
            )
        return store._engine.session_folder(SESSION)


def ids(state: partitions.PartitionState) -> list[str]:
    assert state.view is not None
    return [memory.memory_id for memory in state.view.memories]


async def test_a_segment_under_a_reused_inode_is_read_from_its_start(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    first = await filled(tmp_path / "a", make_memory, "m", 5)
    other = await filled(tmp_path / "b", make_memory, "x", 12)
    path = segment_path(first, OWNER, 0)
    cache = PartitionCache(4_000_000, 1_000)
    assert ids(cache.read(first, SESSION, OWNER)) == [f"m{n}" for n in range(5)]
    inode = os.stat(path).st_ino
    replacement = Path(segment_path(other, OWNER, 0)).read_bytes()
    with open(path, "r+b") as file:  # same inode, other records, longer
        file.truncate(0)
        file.write(replacement)
    assert os.stat(path).st_ino == inode and len(replacement) > 0
    assert ids(cache.read(first, SESSION, OWNER)) == [f"x{n}" for n in range(12)]


async def test_a_segment_that_grew_is_read_from_where_it_stopped(
    tmp_path: Path, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check costs one record read again, not the segment."""
    save = tmp_path / "save"
    first = await filled(save, make_memory, "m", 5)
    cache = PartitionCache(4_000_000, 1_000)
    before = cache.read(first, SESSION, OWNER)
    end = before.segments[0].end
    await filled(save, make_memory, "m", 2, start=5)  # another writer appends two more
    offsets: list[int] = []
    original = partitions.fs.read_file

    def recorded(path: Any, maximum_bytes: int, *, offset: int = 0) -> Any:
        offsets.append(offset)
        return original(path, maximum_bytes, offset=offset)

    monkeypatch.setattr(partitions.fs, "read_file", recorded)
    after = cache.read(first, SESSION, OWNER)
    assert ids(after) == [f"m{n}" for n in range(7)]
    assert offsets == [end]  # the log read on from its old end
