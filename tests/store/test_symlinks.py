"""Symbolic links anywhere in a save are refused with PersistenceError, never followed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, PersistenceError
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, log_path, session_folder, write_legacy


def relink(path: Path) -> None:
    """Replace ``path`` by a symbolic link to a copy of it (same content, now behind a link)."""
    copy = path.with_name(path.name + ".real")
    if path.is_dir():
        shutil.copytree(path, copy, symlinks=True)
        shutil.rmtree(path)
    else:
        shutil.copyfile(path, copy)
        path.unlink()
    path.symlink_to(copy)


async def populated(make_store: StoreFactory, make_memory: MemoryFactory, save: Path) -> None:
    store = make_store(save)
    await store.append(make_memory("m1"))
    await store.append(make_memory("m2", owner_id="other"))
    await store.aclose()


def test_a_save_folder_that_is_a_link_is_refused_at_construction(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "save").symlink_to(tmp_path / "real")
    with pytest.raises(PersistenceError, match="symbolic link"):
        FileGameMemoryStore(tmp_path / "save")


def test_a_save_folder_below_a_linked_ancestor_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real" / "games").mkdir(parents=True)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    with pytest.raises(PersistenceError, match="symbolic link"):
        FileGameMemoryStore(tmp_path / "linked" / "games" / "save")


@pytest.mark.parametrize(
    "target",
    ["data folder", "session folder", "log", "ledger", "lock file", "format file"],
)
async def test_a_linked_file_or_folder_inside_the_store_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, target: str
) -> None:
    save = tmp_path / "save"
    await populated(make_store, make_memory, save)
    relink(
        {
            "data folder": save / DATA,
            "session folder": session_folder(save, "session"),
            "log": log_path(save, "session", "owner"),
            "ledger": save / DATA / "ledger.log",
            "lock file": save / DATA / "lock",
            "format file": save / DATA / "format.json",
        }[target]
    )
    store = make_store(save)
    with pytest.raises(PersistenceError):
        await store.enumerate("session")
        await store.append(make_memory("m3"))
        await store.count()


async def test_a_linked_session_folder_is_refused_by_a_session_wide_read_and_by_check(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await populated(make_store, make_memory, save)
    relink(session_folder(save, "session"))
    store = make_store(save)
    with pytest.raises(PersistenceError):
        await search(store, GameMemoryQuery(session_id="session", limit=5))
    report = await store.check()
    assert not report.ok and any("link" in problem for problem in report.problems)


async def test_a_linked_entry_among_a_partitions_files_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await populated(make_store, make_memory, save)
    (session_folder(save, "session") / "stray").symlink_to(save)
    with pytest.raises(PersistenceError, match="symbolic link"):
        await make_store(save).enumerate("session")


async def test_a_linked_pack_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    write_legacy(save, make_memory("legacy"))
    store = make_store(save)
    assert (await store.migrate_legacy_layout()).migrated_entries == 1
    await store.aclose()
    relink(session_folder(save, "session") / "p-1.pack")
    with pytest.raises(PersistenceError):
        await make_store(save).enumerate("session", "owner")


async def test_a_linked_legacy_document_stops_the_migration_before_anything_moves(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    kept = write_legacy(save, make_memory("kept"))
    linked = write_legacy(save, make_memory("linked"))
    relink(linked)
    store = make_store(save)
    with pytest.raises(PersistenceError, match="symbolic link"):
        await store.migrate_legacy_layout()
    assert kept.is_file() and linked.is_symlink()
    assert not (save / DATA / "ledger.log").exists()


async def test_a_linked_csharp_partition_folder_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    save.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (save / ".memory-v2").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PersistenceError, match="symbolic link"):
        await make_store(save).count()


async def test_ids_cannot_escape_the_store_folder(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    hostile = "../../" * 8 + "etc/passwd"
    await store.append(make_memory(hostile, session_id=hostile, owner_id="/" + hostile))
    assert [m.memory_id for m in await store.enumerate(hostile)] == [hostile]
    outside = {p for p in tmp_path.rglob("*") if not str(p).startswith(str(save))}
    assert outside == set()
    names = set(os.listdir(save / DATA))
    assert {name for name in names if not name.startswith("s-")} == {
        "format.json",
        "ledger.log",
        "lock",
        "rewrite-counts",
        "unsynced.log",
    }


@pytest.mark.parametrize("target", ["save folder", "data folder"])
async def test_a_folder_replaced_by_a_link_after_the_store_opened_it_is_never_followed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, target: str
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    await store.append(make_memory("m1"))
    assert [m.memory_id for m in await store.enumerate("session")] == ["m1"]
    relink(save if target == "save folder" else save / DATA)
    with pytest.raises(PersistenceError, match="symbolic link"):
        await store.enumerate("session")
    with pytest.raises(PersistenceError, match="symbolic link"):
        await store.append(make_memory("m2"))
    with pytest.raises(PersistenceError, match="symbolic link"):
        await store.check()
    with pytest.raises(PersistenceError, match="symbolic link"):
        await store.count()
    real = (
        save.with_name("save.real") / DATA if target == "save folder" else save / (DATA + ".real")
    )
    assert (real / "ledger.log").stat().st_size == 128  # m2 was never written through the link


async def test_a_save_folder_swapped_for_another_folder_between_calls_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    other = make_store(tmp_path / "other")
    await other.append(make_memory("theirs"))
    store = make_store(save)
    await store.append(make_memory("mine"))
    save.rename(tmp_path / "moved")
    (tmp_path / "other").rename(save)
    with pytest.raises(PersistenceError, match="replaced by another folder"):
        await store.enumerate("session")
    with pytest.raises(PersistenceError, match="replaced by another folder"):
        await store.append(make_memory("m2"))
    assert [m.memory_id for m in await make_store(save).enumerate("session")] == ["theirs"]
