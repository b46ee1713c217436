"""An index folder this process may not write: read as it is, and named for what it is.

A current index reads from a read-only folder. One that still holds reference (C#)
records cannot be used until they are migrated, which writes; the error says the folder is
not writable and to make it writable, never to delete it (that loses the reference
vectors) or to rebuild (which cannot write either), and recall is lexical meanwhile.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from game_memory import DerivedIndexError, VectorMemoryState, VectorMemoryStore
from game_memory.index.engine import INDEX_FOLDER
from game_memory.index.file_index import FileVectorMemoryIndex
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, file_hashes, query

from .test_legacy import reference_record, reference_vector, saved, write_reference_index


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Make ``folder`` and everything in it unwritable for this process, as a read-only
    mount is (root: ``chattr +i``, which binds root too; others: the mode bits); skip the
    test where the file system cannot."""
    paths = [folder, *sorted(folder.rglob("*"))]
    changed: list[Path] = []
    chattr = shutil.which("chattr")
    try:
        for path in paths:
            if os.geteuid() != 0:
                path.chmod(0o555 if path.is_dir() else 0o444)
            elif (
                chattr is None
                or subprocess.run(
                    [chattr, "+i", str(path)], capture_output=True, check=False
                ).returncode
            ):
                pytest.skip("this file system cannot make a folder immutable (chattr +i)")
            changed.append(path)
        yield
    finally:
        for path in reversed(changed):
            if os.geteuid() != 0:
                path.chmod(0o755 if path.is_dir() else 0o644)
            else:
                subprocess.run([chattr or "chattr", "-i", str(path)], check=False)


async def reference_index(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> tuple[VectorMemoryStore, dict[str, str]]:
    """A store whose save holds two memories and whose index folder holds only their
    reference records; the store, and the folder's files by digest."""
    store, provider, memories = await saved(make_vector_store, make_memory)
    write_reference_index(
        tmp_path / "index",
        [
            (m, reference_record(m, provider.identity, reference_vector(provider, m)))
            for m in memories
        ],
    )
    return store, file_hashes(tmp_path / "index")


def file_index(store: VectorMemoryStore) -> FileVectorMemoryIndex:
    assert isinstance(store.index, FileVectorMemoryIndex)
    return store.index


def _says_make_it_writable(error: DerivedIndexError, index: Path) -> None:
    message = str(error)
    assert "not writable" in message and "make the folder writable" in message
    assert str(index) in message and "reference" in message
    assert "delete the index folder" not in message and "run a rebuild" not in message


async def test_reference_records_in_a_read_only_file_system_are_named_not_writable(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, files = await reference_index(make_vector_store, make_memory, tmp_path)
    index = tmp_path / "index"
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777, **kwargs: Any) -> None:
        if Path(path).parent == index:  # the index's own folder: refused, as on a ro mount
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
        real_mkdir(path, mode, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    result = await store.recall(query("axe"))
    assert result.fallback and [m.memory_id for m in result.memories] == ["m2"]
    assert diagnostics.codes() == ["memory_vector_search_failed"]
    with pytest.raises(DerivedIndexError) as caught:
        _ = file_index(store).engine
    _says_make_it_writable(caught.value, index)
    assert "Read-only file system" in str(caught.value)
    assert file_hashes(index) == files  # nothing written, nothing deleted
    monkeypatch.undo()  # made writable: the next use migrates them, recall is hybrid
    assert not (await store.recall(query("feline", limit=1))).fallback


async def test_reference_records_in_an_unwritable_folder_are_named_not_writable(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
) -> None:
    store, files = await reference_index(make_vector_store, make_memory, tmp_path)
    index = tmp_path / "index"
    with read_only(index):
        assert (await store.recall(query("axe"))).fallback
        assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
        with pytest.raises(DerivedIndexError) as caught:
            _ = file_index(store).engine
        _says_make_it_writable(caught.value, index)
    assert file_hashes(index) == files
    assert not (await store.recall(query("feline", limit=1))).fallback


async def test_a_current_index_in_an_unwritable_folder_is_read(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
) -> None:
    store, _ = await reference_index(make_vector_store, make_memory, tmp_path)
    assert not (await store.recall(query("feline", limit=1))).fallback  # migrated
    await store.aclose()
    assert (tmp_path / "index" / INDEX_FOLDER / "format.json").exists()
    with read_only(tmp_path / "index"):
        reader = make_vector_store()
        result = await reader.recall(query("feline", limit=1))
        assert [m.memory_id for m in result.memories] == ["m1"] and not result.fallback
        status = await reader.get_status("session")
        assert (status.state, status.ready_entries) == (VectorMemoryState.READY, 2)
        await reader.aclose()
