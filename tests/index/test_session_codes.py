"""A session folder says what its identity codes mean: another index's folder copied in is
never scored as the active model's (``index/session_codes.py``).

Found by an audit: entry records and row-file names carry only a code local to the index
folder's table, so a session folder copied from an index built with another model of the
same width (code 0 there) read READY here, its vectors scored as this model's, and a
rebuild without ``force`` changed nothing.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import (
    DerivedIndexError,
    FileVectorMemoryIndex,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    VectorMemoryState,
    open_memory,
)
from game_memory.durable import fs
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.index.engine import INDEX_FOLDER
from game_memory.index.session_codes import CODES_NAME
from game_memory.model import GameMemoryKind

SESSION = "slot1"
REBUILD_REQUIRED = "memory_vector_rebuild_required"


class _Reversed(HashingEmbeddingProvider):
    """Another model of the same width: the hashing model of every word spelled backwards
    (``word7`` lands elsewhere), under another identity."""

    def __init__(self) -> None:
        super().__init__(256, version="reversed")

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        return super().embed(" ".join(word[::-1] for word in text.split()))


def _memory(owner: str, number: int) -> GameMemory:
    return GameMemory(
        memory_id=f"{owner}-m{number}",
        session_id=SESSION,
        owner_id=owner,
        scope="world",
        kind=GameMemoryKind.EVENT,
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=number),
        importance=0.5,
        searchable_text=f"{owner} saw word{number} event number {number}",
    )


async def _build(save: Path, model: object = "hashing", count: int = 40) -> None:
    async with await open_memory(save, model=model) as memory:  # type: ignore[arg-type]
        for owner in ("alice", "bob"):
            await memory.append_many([_memory(owner, n) for n in range(count)])


def _session_folder(save: Path) -> Path:
    (folder,) = (save.parent / f"{save.name}.index" / INDEX_FOLDER).glob("s-*")
    return folder


async def _foreign_copy(tmp_path: Path) -> Path:
    """A hashing save whose index session folder was copied from the same save's index
    built with :class:`_Reversed` (identity code 0 there too)."""
    own, other = tmp_path / "own" / "save", tmp_path / "other" / "save"
    await _build(own)
    await _build(other, _Reversed())
    target = _session_folder(own)
    shutil.rmtree(target)
    shutil.copytree(_session_folder(other), target)
    return own


async def _recall(save: Path) -> tuple[object, object, list[str]]:
    codes: list[str] = []
    async with await open_memory(
        save, model="hashing", diagnostics=lambda d: codes.append(d.code)
    ) as memory:
        query = GameMemoryQuery(session_id=SESSION, owner_id="alice", text="word7", limit=3)
        result = await memory.recall(query)
        status = await memory.get_status(SESSION)
    return result, status, codes


async def test_a_session_folder_copied_from_another_models_index_requires_a_rebuild(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save = await _foreign_copy(tmp_path)
    with caplog.at_level(logging.WARNING, "game_memory.index"):
        result, status, codes = await _recall(save)
    assert status.state is VectorMemoryState.REBUILD_REQUIRED  # type: ignore[attr-defined]
    assert status.ready_entries == 0  # type: ignore[attr-defined]
    assert result.fallback  # type: ignore[attr-defined]
    assert REBUILD_REQUIRED in codes
    assert _session_folder(save).name in caplog.text  # the warning names the folder

    async with await open_memory(save, model="hashing") as memory:
        rebuilt = await memory.rebuild(SESSION)  # no force: the stale vectors are re-embedded
    assert rebuilt.state is VectorMemoryState.READY
    result, status, codes = await _recall(save)
    assert status.state is VectorMemoryState.READY  # type: ignore[attr-defined]
    assert not result.fallback  # type: ignore[attr-defined]
    hits = result.hits  # type: ignore[attr-defined]
    assert hits[0].memory.memory_id == "alice-m7" and hits[0].vector_score > 0
    assert codes == []


async def test_an_append_to_a_copied_session_folder_drops_the_other_models_vectors(
    tmp_path: Path,
) -> None:
    save = await _foreign_copy(tmp_path)
    async with await open_memory(save, model="hashing") as memory:
        await memory.append(_memory("alice", 99))
        status = await memory.get_status(SESSION)
        assert status.ready_entries == 1  # only the vector just written is this model's
        assert status.state is not VectorMemoryState.READY
        rebuilt = await memory.rebuild(SESSION)
    assert rebuilt.state is VectorMemoryState.READY and rebuilt.ready_entries == 81


async def test_an_erase_in_a_copied_session_folder_drops_the_other_models_vectors(
    tmp_path: Path,
) -> None:
    save = await _foreign_copy(tmp_path)
    async with await open_memory(save, model="hashing") as memory:
        assert await memory.erase(SESSION, "alice", ["alice-m3"]) == 1
        status = await memory.get_status(SESSION)
        # alice's partition was compacted without the foreign vectors, bob's are stale.
        assert status.state is VectorMemoryState.REBUILD_REQUIRED
        assert status.stale_entries == 40 and status.pending_entries == 39
        rebuilt = await memory.rebuild(SESSION)
    assert rebuilt.state is VectorMemoryState.READY and rebuilt.ready_entries == 79


async def test_an_index_written_before_the_session_record_reads_ready_and_gets_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    save = tmp_path / "save"
    await _build(save)
    record = _session_folder(save) / CODES_NAME
    os.unlink(record)  # as an earlier release left the folder
    with caplog.at_level(logging.WARNING):
        result, status, codes = await _recall(save)
    assert status.state is VectorMemoryState.READY  # type: ignore[attr-defined]
    assert not result.fallback and codes == []  # type: ignore[attr-defined]
    assert not caplog.records
    async with await open_memory(save, model="hashing") as memory:
        await memory.append(_memory("alice", 99))
    assert record.exists()  # written at its next write
    _, status, _ = await _recall(save)
    assert status.state is VectorMemoryState.READY  # type: ignore[attr-defined]
    assert status.ready_entries == 81  # type: ignore[attr-defined]


async def test_erase_and_compaction_keep_a_sound_index_ready(tmp_path: Path) -> None:
    save = tmp_path / "save"
    await _build(save)
    assert (_session_folder(save) / CODES_NAME).exists()
    async with await open_memory(save, model="hashing") as memory:
        assert await memory.erase(SESSION, "alice", ["alice-m7"]) == 1
        status = await memory.get_status(SESSION)
        assert status.state is VectorMemoryState.READY and status.ready_entries == 79
        await memory.erase(SESSION)
        await memory.append(_memory("bob", 5))
        status = await memory.get_status(SESSION)
    assert status.state is VectorMemoryState.READY and status.ready_entries == 1


async def test_a_write_of_the_record_killed_before_its_rename_leaves_the_old_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save = tmp_path / "save"
    await _build(save)
    record = _session_folder(save) / CODES_NAME
    before = record.read_bytes()  # names code 0 only: a new model's write rewrites it
    real_replace = os.replace

    def killed(source: str, target: str) -> None:
        if str(target).endswith(CODES_NAME):
            raise OSError(5, "killed mid write")
        real_replace(source, target)

    monkeypatch.setattr(fs.os, "replace", killed)
    index = FileVectorMemoryIndex(save.parent / "save.index")
    other = _Reversed()
    item = _memory("alice", 99)
    with pytest.raises(DerivedIndexError, match="killed mid write"):
        index.write([item], np.stack([other.embed(item.searchable_text or "")]), other.identity)
    await index.aclose()
    monkeypatch.undo()
    assert record.read_bytes() == before  # the old record, whole
    # What a real kill leaves besides: the temporary file of the new record.
    (record.parent / f"{CODES_NAME}.0123456789abcdef0123456789abcdef.tmp").write_bytes(b"x")
    result, status, codes = await _recall(save)
    assert status.state is VectorMemoryState.READY  # type: ignore[attr-defined]
    assert not result.fallback and codes == []  # type: ignore[attr-defined]


async def test_a_damaged_record_vouches_for_no_vector_until_a_rebuild(tmp_path: Path) -> None:
    save = tmp_path / "save"
    await _build(save)
    record = _session_folder(save) / CODES_NAME
    data = bytearray(record.read_bytes())
    data[-3] ^= 0x01
    record.write_bytes(bytes(data))
    _, status, _ = await _recall(save)
    assert status.state is VectorMemoryState.REBUILD_REQUIRED  # type: ignore[attr-defined]
    async with await open_memory(save, model="hashing") as memory:
        rebuilt = await memory.rebuild(SESSION)
    assert rebuilt.state is VectorMemoryState.READY and rebuilt.ready_entries == 80
