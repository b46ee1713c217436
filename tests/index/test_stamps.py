"""Verified stamps: an open that trusts one answers exactly as a full check, and never
trusts it over files that changed (``index/stamps.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from game_memory import VectorMemoryStore
from game_memory.durable.names import identity_hash
from game_memory.index import engine as engine_module
from game_memory.index.engine import INDEX_FOLDER
from game_memory.index.partition import RowBuffer
from game_memory.index.stamps import read_stamp
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query

from .test_corruption import DETECTED, entries_file, flip, row_file

SESSION, OWNER = identity_hash("session"), identity_hash("owner")
QUERIES = ["feline", "dog gate", "axe", "roof cat dog"]


@pytest.fixture(autouse=True)
def small_stamps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamp partitions of a few memories (the default is 1,024 checked records)."""
    monkeypatch.setattr(engine_module, "STAMP_MINIMUM", 1)


def stamp_file(index: Path) -> Path:
    return index / INDEX_FOLDER / f"s-{SESSION}" / f"o-{OWNER}.verified"


async def fill(store: VectorMemoryStore, make_memory: MemoryFactory) -> None:
    await store.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await store.append(make_memory("m2", text="a dog barks at the gate", tick=2))
    await store.append(make_memory("m3", text="the smith sharpened an axe", tick=3))
    await store.aclose()


async def answers(store: VectorMemoryStore) -> list[list[tuple[str, float | None]]]:
    found = []
    for text in QUERIES:
        result = await store.recall(query(text))
        assert not result.fallback
        found.append([(hit.memory.memory_id, hit.vector_score) for hit in result.hits])
    await store.aclose()
    return found


def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many rows each verification checked by hashing."""
    checked: list[int] = []
    verify = RowBuffer.verify

    def counting(self: RowBuffer, *args: object) -> int:
        done = verify(self, *args)  # type: ignore[arg-type]
        checked.append(done)
        return done

    monkeypatch.setattr(RowBuffer, "verify", counting)
    return checked


async def test_an_open_trusting_the_stamp_answers_exactly_like_a_full_check(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await fill(make_vector_store(), make_memory)
    stamp_file(tmp_path / "index").unlink()  # the writer's own, from its close
    checked = count_checks(monkeypatch)
    full = await answers(make_vector_store())  # checks everything, writes the stamp
    assert sum(checked) == 3
    stamp = read_stamp(str(stamp_file(tmp_path / "index")), SESSION, OWNER)
    assert stamp is not None and stamp.entries.records == 3
    checked.clear()
    assert await answers(make_vector_store()) == full
    assert sum(checked) == 0  # nothing changed: nothing was hashed again
    stamp_file(tmp_path / "index").unlink()
    assert await answers(make_vector_store()) == full


async def test_closing_a_writer_checks_and_stamps_what_it_wrote(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The partitions a store appended to are checked and stamped when it closes (files
    fsynced first), so the next open of the unchanged files checks nothing."""
    from game_memory.durable import fs

    synced: list[str] = []
    sync_all = fs.sync_all

    def recorded(files: list[Path], folders: list[Path]) -> None:
        synced.extend(path.name for path in files)
        sync_all(files, folders)

    monkeypatch.setattr(fs, "sync_all", recorded)
    checked = count_checks(monkeypatch)
    await fill(make_vector_store(), make_memory)  # appends, then closes
    assert sum(checked) == 3  # at close
    assert f"o-{OWNER}.entries" in synced and any(name.endswith(".f32") for name in synced)
    stamp = read_stamp(str(stamp_file(tmp_path / "index")), SESSION, OWNER)
    assert stamp is not None and stamp.entries.records == 3
    checked.clear()
    full = await answers(make_vector_store())
    assert sum(checked) == 0
    stamp_file(tmp_path / "index").unlink()
    assert await answers(make_vector_store()) == full
    assert sum(checked) == 3


async def test_a_copied_index_trusts_its_stamp_for_the_entries_by_their_crc(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy (other inodes) holds the same entry bytes: the stamp's CRC-32 vouches for
    them, so they are not checked one by one; its rows (another file) are checked."""
    import shutil

    from game_memory.index import stamps

    await fill(make_vector_store(), make_memory)
    full = await answers(make_vector_store())
    shutil.copytree(tmp_path / "index", tmp_path / "copy")
    trusted: list[int] = []
    real = stamps.trusted_records

    def counted(*args: object) -> int:
        found = real(*args)  # type: ignore[arg-type]
        trusted.append(found)
        return found

    monkeypatch.setattr(engine_module, "trusted_records", counted)
    checked = count_checks(monkeypatch)
    copied = make_vector_store(index=tmp_path / "copy")
    assert await answers(copied) == full
    assert trusted == [3] and sum(checked) == 3
    flip(entries_file(tmp_path / "copy"), 128 + 40)  # other bytes: no longer vouched for
    trusted.clear()
    result = await make_vector_store(index=tmp_path / "copy").recall(query("feline dog"))
    assert trusted == [0] and result.fallback


async def test_rows_appended_after_the_stamp_are_checked_and_found(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await fill(make_vector_store(), make_memory)
    await answers(make_vector_store())
    checked = count_checks(monkeypatch)
    store = make_vector_store()
    await store.append(make_memory("m4", text="a cat naps by the fire", tick=4))
    await store.aclose()
    assert sum(checked) == 4  # at close: the row file changed, every row is checked again
    checked.clear()
    result = await make_vector_store().recall(query("feline"))
    assert not result.fallback and {"m1", "m4"} <= {m.memory_id for m in result.memories}
    assert sum(checked) == 0  # stamped at close
    stamp_file(tmp_path / "index").unlink()  # a writer that never closed (killed)
    result = await make_vector_store().recall(query("feline"))
    assert not result.fallback and {"m1", "m4"} <= {m.memory_id for m in result.memories}
    assert sum(checked) == 4


@pytest.mark.parametrize("damage", list(DETECTED.values()), ids=list(DETECTED))
async def test_damage_after_a_stamp_is_still_detected(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    await fill(make_vector_store(), make_memory)
    await answers(make_vector_store())
    assert stamp_file(tmp_path / "index").exists()
    damage(tmp_path / "index")
    diagnostics.clear()
    result = await make_vector_store().recall(query("feline dog"))
    assert result.fallback
    assert diagnostics.codes() == ["memory_vector_search_failed"]


async def test_a_flipped_row_is_found_even_with_its_modification_time_put_back(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
) -> None:
    await fill(make_vector_store(), make_memory)
    await answers(make_vector_store())
    rows = row_file(tmp_path / "index")
    before = os.stat(rows)
    flip(rows, 256 * 4 + 7)
    os.utime(rows, ns=(before.st_atime_ns, before.st_mtime_ns))  # the change time still moves
    result = await make_vector_store().recall(query("feline dog"))
    assert result.fallback


async def test_an_entries_file_changed_in_place_is_checked_record_by_record(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
) -> None:
    await fill(make_vector_store(), make_memory)
    await answers(make_vector_store())
    flip(entries_file(tmp_path / "index"), 128 + 40)  # inside the second record's digest
    result = await make_vector_store().recall(query("feline dog"))
    assert result.fallback


@pytest.mark.parametrize("damage", ["flip", "cut", "foreign", "other partition"])
async def test_a_damaged_or_foreign_stamp_is_ignored_and_rewritten(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    damage: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await fill(make_vector_store(), make_memory)
    full = await answers(make_vector_store())
    path = stamp_file(tmp_path / "index")
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    elif damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "foreign":
        data = bytearray(b"GMSTAMP1 not a stamp")
    else:
        data = bytearray(bytes(data).replace(OWNER.encode(), SESSION.encode()))
    path.write_bytes(bytes(data))
    checked = count_checks(monkeypatch)
    assert await answers(make_vector_store()) == full
    assert sum(checked) == 3  # checked in full, as without a stamp
    assert read_stamp(str(path), SESSION, OWNER) is not None  # and stamped again


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from game_memory.durable.names import identity_hash
from game_memory.durable import fs
from game_memory.index import engine as engine_module
from game_memory.index.file_index import FileVectorMemoryIndex

def dying(path, data):
    temporary = path.with_name(path.name + ".0123.tmp")
    temporary.write_bytes(data[: len(data) // 2])  # half written, then killed
    os.kill(os.getpid(), signal.SIGKILL)

engine_module.STAMP_MINIMUM = 1
fs.atomic_write = dying  # the stamp's atomic write (durable/framed_json.py)
engine = FileVectorMemoryIndex(sys.argv[1]).engine
partition = engine.partition(identity_hash("session"), identity_hash("owner"))
engine.matrix(partition, 0, 256)
"""


async def test_a_reader_killed_while_writing_its_stamp_leaves_nothing_wrong(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await fill(make_vector_store(), make_memory)
    stamp_file(tmp_path / "index").unlink()  # the writer's own, from its close
    python = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), str(tmp_path / "index")],
        env={**os.environ, "PYTHONPATH": python},
        capture_output=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert not stamp_file(tmp_path / "index").exists()
    checked = count_checks(monkeypatch)
    first = await answers(make_vector_store())
    assert sum(checked) == 3  # no stamp: checked in full
    assert stamp_file(tmp_path / "index").exists()
    assert await answers(make_vector_store()) == first
