"""The file index keeps the protocol's word: read-only vectors, checked inputs, a real verify."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from game_memory import FileVectorMemoryIndex, GameMemory, HashingEmbeddingProvider
from game_memory.errors import InvalidArgumentError
from game_memory.index.entries import EntryState
from game_memory.store.view import PartitionView
from support.vectors import MemoryFactory

IDENTITY = HashingEmbeddingProvider().identity


def _rows(count: int) -> np.ndarray:
    rows = np.random.default_rng(7).normal(size=(count, IDENTITY.dimensions)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _view(memories: list[GameMemory]) -> PartitionView:
    positions = {m.memory_id: i for i, m in enumerate(memories)}
    return PartitionView(memories[0].session_id, memories[0].owner_id, tuple(memories), positions)


def test_vectors_are_read_only(tmp_path: Path, make_memory: MemoryFactory) -> None:
    index = FileVectorMemoryIndex(tmp_path / "index")
    memories = [make_memory("a"), make_memory("b")]
    index.write(memories, _rows(2), IDENTITY)
    joined = index.join(_view(memories), IDENTITY)
    matrix = index.vectors(joined, IDENTITY)
    with pytest.raises(ValueError, match="read-only"):
        matrix[0, 0] = 1.0


@pytest.mark.parametrize("shape", [(1, IDENTITY.dimensions), (2, 8), (2, IDENTITY.dimensions + 1)])
def test_a_vector_batch_of_the_wrong_shape_is_refused(
    tmp_path: Path, make_memory: MemoryFactory, shape: tuple[int, int]
) -> None:
    index = FileVectorMemoryIndex(tmp_path / "index")
    with pytest.raises(InvalidArgumentError, match="one finite row"):
        index.write([make_memory("a"), make_memory("b")], np.ones(shape, np.float32), IDENTITY)


def test_a_non_finite_vector_is_refused(tmp_path: Path, make_memory: MemoryFactory) -> None:
    rows = _rows(1)
    rows[0, 3] = np.nan
    with pytest.raises(InvalidArgumentError):
        FileVectorMemoryIndex(tmp_path / "index").write([make_memory("a")], rows, IDENTITY)


@pytest.mark.parametrize(
    ("state", "code"),
    [
        (EntryState.READY, "x"),
        (EntryState.DELETED, "x"),
        (EntryState.FAILED, "é"),
        (EntryState.FAILED, "x" * 33),
    ],
)
def test_mark_takes_only_failed_or_pending_with_a_short_ascii_code(
    tmp_path: Path, make_memory: MemoryFactory, state: EntryState, code: str
) -> None:
    with pytest.raises(InvalidArgumentError):
        FileVectorMemoryIndex(tmp_path / "index").mark([make_memory("a")], state, code)


def test_verify_finds_damage_to_rows_already_loaded(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    index = FileVectorMemoryIndex(tmp_path / "index")
    memories = [make_memory("a"), make_memory("b")]
    index.write(memories, _rows(2), IDENTITY)
    joined = index.join(_view(memories), IDENTITY)
    index.vectors(joined, IDENTITY)  # loaded and checksummed once
    assert index.verify("session", repair=False) == []
    (rows,) = (tmp_path / "index").rglob("*.f32")
    data = bytearray(rows.read_bytes())
    data[5] ^= 0xFF
    rows.write_bytes(bytes(data))
    damaged = index.verify("session", repair=False)
    assert len(damaged) == 1 and "checksum" in str(damaged[0])


def test_index_writes_are_not_fsynced_unless_asked(
    tmp_path: Path, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Derived data: after a power loss, damage is found by the checksums and rebuilt.
    calls: list[int] = []
    real = os.fsync

    def counted(fd: int) -> None:
        calls.append(fd)
        real(fd)

    for durable, expected_at_least in ((False, 0), (True, 2)):
        index = FileVectorMemoryIndex(tmp_path / f"index-{durable}", durable_writes=durable)
        index.write([make_memory("first")], _rows(1), IDENTITY)  # creates the folders
        monkeypatch.setattr(os, "fsync", counted)
        calls.clear()
        index.write([make_memory("second")], _rows(1), IDENTITY)
        monkeypatch.setattr(os, "fsync", real)
        if durable:
            assert len(calls) >= expected_at_least
        else:
            assert calls == []
