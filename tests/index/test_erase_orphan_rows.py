"""An erase leaves no vector bytes behind, even in files a killed index writer left.

Found by the SIGKILL campaign (``tests/crash/campaign.py``, a sidecar killed mid
``memory.remember``): the index appends a memory's rows before its entry records, so a
writer killed in between leaves a row file of an owner without an entries file. The
erase only looked at owners with an entries file, and the erased memory's vector stayed
in the index folder. Likewise a compaction of the index killed mid atomic write leaves
``<rows>.<uuid>.tmp`` with the vectors it kept, which no later erase removed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from game_memory import GameMemory, open_memory
from game_memory.embedding.hashing import HashingEmbeddingProvider
from support.erased import files_holding, vector_bytes, witnessed


def _memory(memory_id: str) -> GameMemory:
    return witnessed(memory_id, "ORPHAN-MARKER the well is dry")


@pytest.mark.parametrize("shape", ["listed", "owner", "session"])
async def test_an_erase_removes_rows_a_writer_killed_before_its_entries_left(
    tmp_path: Path, shape: str
) -> None:
    save, index = tmp_path / "save", tmp_path / "save.index"
    item = _memory("m1")
    async with await open_memory(save, index=index, model="hashing") as memory:
        await memory.append(item)
    vector = await vector_bytes([item])
    assert files_holding(index, vector)  # the grep finds the vector where it is
    for entries in index.rglob("o-*.entries"):
        os.unlink(entries)  # as a writer killed after the rows, before the entries, leaves it
    assert files_holding(index, vector)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        owner = None if shape == "session" else "mira"
        assert await memory.erase("slot", owner, ["m1"] if shape == "listed" else None) == 1
    assert files_holding(index, vector) == []
    assert not [p for p in index.rglob("*") if p.is_file() and b"ORPHAN-MARKER" in p.read_bytes()]


@pytest.mark.parametrize("shape", ["listed", "owner", "session"])
async def test_an_erase_removes_the_temporary_file_a_killed_index_compaction_left(
    tmp_path: Path, shape: str
) -> None:
    save, index = tmp_path / "save", tmp_path / "save.index"
    item = _memory("m1")
    async with await open_memory(save, index=index, model="hashing") as memory:
        await memory.append(item)
    vector = await vector_bytes([item])
    (rows,) = index.rglob("o-*.f32")
    # A compaction killed mid atomic write leaves <rows>.<uuid>.tmp with the vectors it kept.
    rows.with_name(f"{rows.name}.0123456789abcdef0123456789abcdef.tmp").write_bytes(
        rows.read_bytes()
    )
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        owner = None if shape == "session" else "mira"
        assert await memory.erase("slot", owner, ["m1"] if shape == "listed" else None) == 1
    assert files_holding(index, vector) == []


@pytest.mark.parametrize("shape", ["listed", "owner", "session"])
async def test_an_erase_where_no_index_was_ever_written_erases_the_save_and_creates_nothing(
    tmp_path: Path, shape: str
) -> None:
    """Found by the SIGKILL campaign (seed 2790277214): a sidecar killed before it made its
    index folder left a save whose interrupted erase could not be run again, because the
    rerun (a front door opened without ``create``) asked for the missing folder's lock."""
    save, index = tmp_path / "save", tmp_path / "save.index"
    async with await open_memory(save, model="lexical") as memory:
        await memory.append(_memory("m1"))
        await memory.append(_memory("m2"))
    assert not index.exists()
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        owner = None if shape == "session" else "mira"
        erased = await memory.erase("slot", owner, ["m1"] if shape == "listed" else None)
        assert erased == (1 if shape == "listed" else 2)
        left = [m.memory_id for m in await memory.authoritative.enumerate("slot")]
        assert left == (["m2"] if shape == "listed" else [])
    assert not index.exists()


async def test_a_write_into_a_missing_index_opened_without_create_names_why(
    tmp_path: Path,
) -> None:
    from game_memory import DerivedIndexError
    from game_memory.index.file_index import FileVectorMemoryIndex

    item = _memory("m1")
    index = FileVectorMemoryIndex(tmp_path / "save.index", create=False)
    provider = HashingEmbeddingProvider()
    vectors = np.ones((1, provider.identity.dimensions), dtype=np.float32)
    with pytest.raises(DerivedIndexError, match=r"does not exist.*without create"):
        index.write([item], vectors, provider.identity)
    assert not (tmp_path / "save.index").exists()
    await index.aclose()
