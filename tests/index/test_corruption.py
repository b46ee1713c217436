"""Mayhem on the derived index: recall falls back, the save is never touched, rebuild repairs."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from game_memory import DerivedIndexError, VectorMemoryState, VectorMemoryStore
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, file_hashes, query

ENTRY = 128
ROW = 256 * 4


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


def data(index: Path) -> Path:
    return index / INDEX_FOLDER


def entries_file(index: Path) -> Path:
    return data(index) / f"s-{identity_hash('session')}" / f"o-{identity_hash('owner')}.entries"


def row_file(index: Path) -> Path:
    (rows,) = (data(index) / f"s-{identity_hash('session')}").glob("*.f32")
    return rows


def flip(path: Path, position: int) -> None:
    content = bytearray(path.read_bytes())
    content[position] ^= 0x40
    path.write_bytes(bytes(content))


def truncate(path: Path, size: int) -> None:
    with path.open("r+b") as file:
        file.truncate(size)


def truncate_entries(index: Path) -> None:
    truncate(entries_file(index), ENTRY + 50)  # m1 whole, m2 torn, m3 gone


def flip_entry(index: Path) -> None:
    flip(entries_file(index), ENTRY + 20)  # inside the second record's memory hash


def flip_row(index: Path) -> None:
    flip(row_file(index), ROW + 7)  # inside the second vector


def delete_rows(index: Path) -> None:
    row_file(index).unlink()


def truncate_rows(index: Path) -> None:
    truncate(row_file(index), 2 * ROW)


def corrupt_format(index: Path) -> None:
    (data(index) / "format.json").write_text("{not json")


def delete_identities(index: Path) -> None:
    (data(index) / "identities.json").unlink()


def entries_become_a_folder(index: Path) -> None:
    path = entries_file(index)
    path.unlink()
    path.mkdir()


def rows_become_a_link(index: Path) -> None:
    path = row_file(index)
    target = path.with_name("elsewhere.bin")
    path.rename(target)
    os.symlink(target, path)


def garbage_identities(index: Path) -> None:
    (data(index) / "identities.json").write_bytes(b"\x00garbage{")


def zeroed_entry(index: Path) -> None:
    with entries_file(index).open("ab") as file:  # a power loss kept the size, not the data
        file.write(bytes(ENTRY))


#: Damage the index of a session (three ready memories) in ways a reader must detect.
DETECTED: dict[str, Callable[[Path], None]] = {
    "zero-filled entry": zeroed_entry,
    "flipped entry byte": flip_entry,
    "flipped vector byte": flip_row,
    "deleted vector file": delete_rows,
    "truncated vector file": truncate_rows,
    "vector file replaced by a link": rows_become_a_link,
}
#: ... and damage no single partition explains: a rebuild empties the whole index.
WHOLE_INDEX: dict[str, Callable[[Path], None]] = {
    "garbage identities file": garbage_identities,
    "corrupt format file": corrupt_format,
    "deleted identities file": delete_identities,
}


async def three_ready(store: VectorMemoryStore, make_memory: MemoryFactory) -> None:
    await store.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await store.append(make_memory("m2", text="a dog barks at the gate", tick=2))
    await store.append(make_memory("m3", text="the smith sharpened an axe", tick=3))
    await store.aclose()


async def damaged(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> dict[str, str]:
    """Save three memories with vectors, damage the index; return the save's file hashes."""
    await three_ready(make_vector_store(), make_memory)
    save = file_hashes(tmp_path / "save")
    damage(tmp_path / "index")
    return save


@pytest.mark.parametrize("damage", list(DETECTED.values()), ids=list(DETECTED))
async def test_damaged_vectors_make_recall_lexical_and_never_touch_the_save(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    save = await damaged(make_vector_store, make_memory, tmp_path, damage)
    diagnostics.clear()
    store = make_vector_store()
    result = await store.recall(query("feline dog"))
    assert result.fallback and ids(result.memories) == ["m2"]
    assert diagnostics.codes() == ["memory_vector_search_failed"]
    assert diagnostics[0].details == {"exception": "DerivedIndexError"}
    await store.aclose()
    assert file_hashes(tmp_path / "save") == save


@pytest.mark.parametrize("damage", list(DETECTED.values()), ids=list(DETECTED))
async def test_a_rebuild_deletes_the_damaged_partition_and_embeds_it_again(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    save = await damaged(make_vector_store, make_memory, tmp_path, damage)
    diagnostics.clear()
    store = make_vector_store()
    status = await store.rebuild("session")
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    assert diagnostics.codes() == [
        "memory_vector_index_reset",
        "memory_embedding_rebuild_completed",
    ]
    result = await store.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    await store.aclose()
    assert file_hashes(tmp_path / "save") == save


@pytest.mark.parametrize("damage", list(DETECTED.values()), ids=list(DETECTED))
async def test_status_reports_a_damaged_index_as_degraded_with_the_reason(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
) -> None:
    await damaged(make_vector_store, make_memory, tmp_path, damage)
    store = make_vector_store()
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        status = await store.get_status("session")
    assert (status.state, status.ready_entries, status.pending_entries) == (
        VectorMemoryState.DEGRADED,
        0,
        3,
    )
    assert status.requires_rebuild
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "game_memory.index"]
    assert "is damaged" in warning and "rebuild" in warning


async def test_recall_raises_the_derived_index_error_when_semantic_recall_is_required(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    await three_ready(make_vector_store(), make_memory)
    flip_row(tmp_path / "index")
    store = make_vector_store(options={"fail_when_embedding_unavailable": True})
    with pytest.raises(DerivedIndexError, match="checksum"):
        await store.recall(query("feline"))


async def test_appending_beside_a_damaged_partition_saves_the_memory_and_writes_no_vector(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
) -> None:
    await three_ready(make_vector_store(), make_memory)
    flip_entry(tmp_path / "index")
    damaged = entries_file(tmp_path / "index").read_bytes()
    diagnostics.clear()
    store = make_vector_store()
    assert await store.append(make_memory("m4", text="a kitten", tick=4))
    assert diagnostics.codes() == ["memory_embedding_append_failed"]
    assert entries_file(tmp_path / "index").read_bytes() == damaged
    assert ids(await store.search(query("kitten"))) == ["m4"]


async def test_a_truncated_entries_file_loses_only_the_cut_records(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = await damaged(  # m1 whole, m2 torn, m3 gone
        make_vector_store,
        make_memory,
        tmp_path,
        lambda index: truncate(entries_file(index), ENTRY + 50),
    )
    store = make_vector_store()
    status = await store.get_status("session")
    assert (status.state, status.ready_entries, status.pending_entries) == (
        VectorMemoryState.DEGRADED,
        1,
        2,
    )
    result = await store.recall(query("feline"))
    assert not result.fallback and [h.memory.memory_id for h in result.hits if h.vector_rank] == [
        "m1"
    ]
    assert (await store.rebuild("session")).state is VectorMemoryState.READY
    await store.aclose()
    assert file_hashes(tmp_path / "save") == save


@pytest.mark.parametrize("damage", list(WHOLE_INDEX.values()), ids=list(WHOLE_INDEX))
async def test_a_damaged_index_folder_is_degraded_and_a_rebuild_repairs_it_alone(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    damage: Callable[[Path], None],
) -> None:
    save = await damaged(make_vector_store, make_memory, tmp_path, damage)
    store = make_vector_store()
    result = await store.recall(query("feline dog"))
    assert result.fallback and ids(result.memories) == ["m2"]
    assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
    diagnostics.clear()
    status = await store.rebuild("session", force=True)
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    assert diagnostics.codes()[0] == "memory_vector_index_reset"
    assert not (await store.recall(query("feline", limit=1))).fallback
    await store.aclose()
    assert file_hashes(tmp_path / "save") == save


async def test_an_entries_path_that_is_a_folder_is_a_derived_index_error(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    await three_ready(make_vector_store(), make_memory)
    entries_become_a_folder(tmp_path / "index")
    store = make_vector_store()
    assert (await store.recall(query("feline dog"))).fallback
    assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
