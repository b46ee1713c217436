"""A new NPC's first vector write that fails (a full disk, an I/O error) leaves nothing of
itself for the next write to trip over.

Found by a fault-injection audit: ENOSPC on the index's disk during a new NPC's first
append wrote the partition's row file (a fresh generation tag) but not its entries file.
The memory was saved, its vector pending, as documented; but the next write of that NPC
chose another fresh tag, so the first row file was of a generation no record names, which
reads as the leftovers of an interrupted rewrite: ``get_status`` said the whole session
was damaged (0 of 14 ready, ``requires_rebuild``) after the disk was freed, after more
appends and after a fresh open, until a rebuild.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from game_memory import GameMemory, GameMemoryKind, GameMoment, VectorMemoryState, open_memory
from game_memory.index import writer
from game_memory.index.entries import ENTRY_BYTES


def _memory(number: int, owner: str) -> GameMemory:
    return GameMemory(
        memory_id=f"m{number}",
        session_id="slot",
        owner_id=owner,
        scope="personal",
        kind=GameMemoryKind.EVENT,
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=number),
        searchable_text=f"The blacksmith {number} repaired the mill wheel.",
    )


def _row_files(index: Path) -> list[str]:
    return sorted(path.name for path in index.rglob("o-*.f32"))


@pytest.mark.parametrize("failing", ["rows", "entries", "entries-torn"])
async def test_a_failed_first_write_of_a_new_npc_leaves_the_session_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    memory = await open_memory(tmp_path / "save", index=tmp_path / "index", model="hashing")
    try:
        await memory.append_many([_memory(number, f"npc{number % 3}") for number in range(12)])
        before = set(_row_files(tmp_path / "index"))
        real_rows, real_open, real_write = writer._append_rows, writer._open_whole, os.write

        def full_rows(path: str, matrix: np.ndarray, durable: bool) -> object:
            real_rows(path, matrix[:0], durable)  # created, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

        def full_entries(path: str, unit: int) -> tuple[int, int]:
            if path.endswith(".entries"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_open(path, unit)

        def half_a_record(fd: int, data: bytes | memoryview) -> int:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".entries"):  # half a record
                real_write(fd, bytes(data)[: ENTRY_BYTES // 2])
                raise OSError(errno.EIO, "Input/output error")
            return real_write(fd, data)

        with monkeypatch.context() as patch:
            if failing == "rows":
                patch.setattr(writer, "_append_rows", full_rows)
            elif failing == "entries":
                patch.setattr(writer, "_open_whole", full_entries)
            else:
                patch.setattr(os, "write", half_a_record)
            assert await memory.append(_memory(200, "fresh")) is True  # saved, vector pending
        assert set(_row_files(tmp_path / "index")) == before  # nothing of the failed write
        status = await memory.get_status("slot")
        assert (status.ready_entries, status.pending_entries) == (12, 1), status
        assert await memory.append(_memory(200, "fresh")) is False  # the game's retry
        assert await memory.append(_memory(201, "fresh")) is True
        status = await memory.get_status("slot")
        assert status.state is VectorMemoryState.READY, status
        assert (status.ready_entries, status.total_entries) == (14, 14)
    finally:
        await memory.aclose()
    reopened = await open_memory(tmp_path / "save", index=tmp_path / "index", model="hashing")
    try:
        status = await reopened.get_status("slot")
        assert status.state is VectorMemoryState.READY and not status.requires_rebuild, status
    finally:
        await reopened.aclose()


def test_an_entries_write_that_fails_is_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record half written before the disk filled is not left for a reader (the next
    opener would cut a torn tail anyway; a whole record of a failed append would stay)."""
    path = str(tmp_path / "o-x.entries")
    writer._append_entries(path, b"\x01" * ENTRY_BYTES, False)
    real_write = os.write
    calls = []

    def short_then_full(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:ENTRY_BYTES])  # one whole record, then
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(OSError):
        writer._append_entries(path, b"\x02" * (3 * ENTRY_BYTES), False)
    assert os.path.getsize(path) == ENTRY_BYTES


def test_a_full_index_disk_says_free_space_not_delete_the_index() -> None:
    """A full disk under the index said "delete the index folder or run a rebuild", which
    neither frees space nor helps the write."""
    from game_memory.durable import fs
    from game_memory.index.partition import derived_error

    try:  # as the library raises it: translated from the OSError, which it chains
        raise fs.DiskFullError("could not write o-x.entries: the disk is full") from OSError(
            errno.ENOSPC, "No space left on device"
        )
    except fs.DiskFullError as full:
        message = str(derived_error(full))
    assert "free space on the index folder's disk" in message
    assert "delete the index folder" not in message
