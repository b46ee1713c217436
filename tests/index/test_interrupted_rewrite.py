"""A partition rewrite killed midway leaves no erased vector behind the next write.

Found by a probe of several processes on one save (kill -9 of a process during
``erase(listed ids)``): the index rewrites an owner's partition as new row files (a new
generation tag), then the entries file, then deletes the old generation's row files and
temporary files. A process killed between those steps left the old row file, which holds
the erased memories' vectors, beside the live one; ``get_status`` said READY with no
orphans, and nothing removed it (not the next appends, ``compact`` or ``check --fix``)
until that partition was rewritten again. Killed before the entries file was replaced,
the erase left its tombstones, and the erased rows in the live row file.

The kill is simulated here by making the step after it raise; the process (a front door,
or a second index object on the folder, as another process) then carries on.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from game_memory import GameMemory, GameMemoryQuery, VectorMemoryState, open_memory
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.errors import DerivedIndexError
from game_memory.index import engine, writer
from game_memory.index.file_index import FileVectorMemoryIndex
from support.erased import files_holding, vector_bytes, witnessed

_KEPT = [f"m{i}" for i in range(1, 9, 2)]
_ERASED = [f"m{i}" for i in range(0, 9, 2)]


def _memory(memory_id: str, tick: int = 1) -> GameMemory:
    return witnessed(memory_id, "saw the wolves cross the frozen river", tick)


class _Killed(OSError):
    """The step a kill -9 would never have reached."""


@contextlib.contextmanager
def _killed_before(step: str) -> Iterator[None]:
    """Make ``step`` of the index's writes raise, as if the writer died just before it."""

    def killed(*_args: object, **_kwargs: object) -> None:
        raise _Killed(f"killed before {step}")

    with pytest.MonkeyPatch.context() as patch:
        # compact_files is called through the engine's import, _remove_row_files in writer.
        patch.setattr(engine if step == "compact_files" else writer, step, killed)
        yield


async def _saved(save: Path, index: Path) -> list[bytes]:
    items = [_memory(m, tick) for tick, m in enumerate(sorted(_KEPT + _ERASED))]
    async with await open_memory(save, index=index, model="hashing") as memory:
        await memory.append_many(items)
    return await vector_bytes([m for m in items if m.memory_id in _ERASED])


# The steps of a partition rewrite a kill can stop before: the old generation's removal
# (after the new entries file is in place), and the compaction itself (after the erase's
# tombstones were appended).
_STEPS = ["_remove_row_files", "compact_files"]


@pytest.mark.parametrize("step", _STEPS)
async def test_the_next_append_after_a_killed_erase_removes_the_erased_vectors(
    tmp_path: Path, step: str
) -> None:
    save, index = tmp_path / "save", tmp_path / "save.index"
    erased = await _saved(save, index)
    assert len(files_holding(index, erased)) == 1  # the grep finds them where they are
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        with _killed_before(step), pytest.raises((DerivedIndexError, _Killed)):
            await memory.erase("slot", "mira", _ERASED)
    # The kill left the erased vectors in the index folder.
    assert files_holding(index, erased)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        status = await memory.get_status("slot")
        # Not called clean while the erased vectors are there.
        assert status.state is not VectorMemoryState.READY or status.requires_rebuild
        await memory.append(_memory("after", 99))  # the next use of the partition
        assert files_holding(index, erased) == []
        status = await memory.get_status("slot")
        assert status.state is VectorMemoryState.READY
        assert (status.ready_entries, status.orphan_entries) == (len(_KEPT) + 1, 0)
        query = GameMemoryQuery(session_id="slot", owner_id="mira", text="wolves", limit=20)
        found = await memory.recall(query, require_semantic=True)
        assert sorted(m.memory_id for m in found.memories) == sorted([*_KEPT, "after"])
    assert files_holding(index, erased) == []


@pytest.mark.parametrize("step", _STEPS)
async def test_a_writer_that_kept_running_removes_what_another_killed_writer_left(
    tmp_path: Path, step: str
) -> None:
    """Two index objects on one folder, as two processes: ``a`` has the partition cached
    and keeps appending after ``b`` was killed mid erase."""
    save, folder = tmp_path / "save", tmp_path / "save.index"
    erased = await _saved(save, folder)
    a, b = FileVectorMemoryIndex(folder), FileVectorMemoryIndex(folder)
    provider = HashingEmbeddingProvider()
    identity = provider.identity
    one = np.ones((1, identity.dimensions), dtype=np.float32)
    a.write([_memory("before", 50)], one, identity)  # a holds the partition, tidied
    with _killed_before(step), pytest.raises((DerivedIndexError, _Killed)):
        b.erase("slot", "mira", _ERASED)
    assert files_holding(folder, erased)
    a.write([_memory("after", 99)], one * 2, identity)
    assert files_holding(folder, erased) == []
    await a.aclose()
    await b.aclose()


async def test_the_next_append_after_a_killed_owner_erase_removes_its_rows(tmp_path: Path) -> None:
    """An owner erase deletes the entries file, then the row files: killed in between,
    the row files stayed under an owner without entries until an erase found them."""
    save, index = tmp_path / "save", tmp_path / "save.index"
    erased = await _saved(save, index)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        with _killed_before("_remove_row_files"), pytest.raises((DerivedIndexError, _Killed)):
            await memory.erase("slot", "mira")
    assert files_holding(index, erased)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        await memory.append(_memory("after", 99))
        assert files_holding(index, erased) == []
        status = await memory.get_status("slot")
        assert (status.state, status.ready_entries) == (VectorMemoryState.READY, 1)


async def test_a_rebuild_removes_what_a_killed_erase_left(tmp_path: Path) -> None:
    save, index = tmp_path / "save", tmp_path / "save.index"
    erased = await _saved(save, index)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        with _killed_before("_remove_row_files"), pytest.raises((DerivedIndexError, _Killed)):
            await memory.erase("slot", "mira", _ERASED)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        status = await memory.rebuild("slot")
        assert files_holding(index, erased) == []
        assert (status.state, status.ready_entries) == (VectorMemoryState.READY, len(_KEPT))


async def test_status_reports_a_leftover_row_file_and_a_rebuild_removes_it(
    tmp_path: Path,
) -> None:
    """A leftover without the rewrite mark (left by a version before the mark): the next
    write does not look for it, but the status does not call the session clean and a
    rebuild removes it without embedding anything again."""
    save, index = tmp_path / "save", tmp_path / "save.index"
    erased = await _saved(save, index)
    (old,) = index.rglob("o-*.f32")
    data = old.read_bytes()
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        await memory.erase("slot", "mira", _ERASED)
        assert files_holding(index, erased) == []
        old.write_bytes(data)  # back, as a kill before the old generation's removal left it
        status = await memory.get_status("slot")
        assert status.requires_rebuild
        rebuilt = await memory.rebuild("slot")
        assert files_holding(index, erased) == []
        assert (rebuilt.state, rebuilt.ready_entries) == (VectorMemoryState.READY, len(_KEPT))


async def test_a_rewrite_in_progress_elsewhere_is_not_reported(tmp_path: Path) -> None:
    """The files of a rewrite another writer is making look like a killed one's; the check
    confirms them under the writer lock, after that writer is done."""
    folder = tmp_path / "save.index"
    a, b = FileVectorMemoryIndex(folder), FileVectorMemoryIndex(folder)
    identity = HashingEmbeddingProvider().identity
    a.write([_memory("m1")], np.ones((1, identity.dimensions), np.float32), identity)
    (rows,) = folder.rglob("o-*.f32")
    mark = rows.with_name(rows.name.split(".")[0] + ".rewriting")
    leftover = rows.with_name(
        rows.name.replace(".f32", ".f32.0123456789abcdef0123456789abcdef.tmp")
    )
    held, done = threading.Event(), threading.Event()

    def rewriting() -> None:
        with b.engine.locked():
            mark.touch()
            leftover.write_bytes(rows.read_bytes())
            held.set()
            time.sleep(0.3)
            leftover.unlink()
            mark.unlink()
            done.set()  # before the lock is released

    writer_thread = threading.Thread(target=rewriting)
    writer_thread.start()
    held.wait()
    assert a.verify("slot", repair=False) == []
    assert done.is_set()  # it waited for the writer
    writer_thread.join()
    mark.touch()  # now as a killed rewrite leaves it: reported, then repaired
    assert len(a.verify("slot", repair=False)) == 1
    assert a.verify("slot", repair=True) == []
    assert not mark.exists()
    assert a.verify("slot", repair=False) == []
    await a.aclose()
    await b.aclose()


def test_appends_to_a_tidied_partition_touch_no_other_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark is looked for once per partition and writer, not per append."""
    index = FileVectorMemoryIndex(tmp_path / "save.index")
    identity = HashingEmbeddingProvider().identity
    one = np.ones((1, identity.dimensions), np.float32)
    index.write([_memory("m0")], one, identity)
    looked: list[str] = []
    real = os.path.lexists

    def lexists(path: str) -> bool:
        looked.append(str(path))
        return real(path)

    monkeypatch.setattr(os.path, "lexists", lexists)
    for i in range(1, 30):
        if not index.write_now([_memory(f"m{i}", i)], one * i, identity):
            index.write([_memory(f"m{i}", i)], one * i, identity)
    assert [p for p in looked if p.endswith(".rewriting")] == []
