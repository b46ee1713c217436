"""Restarts over real folders: what the index remembers, and what it makes the game redo."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from game_memory import VectorMemoryState
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from support.providers import FaultyProvider
from support.vectors import MemoryFactory, VectorStoreFactory, query


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


def partition_files(index: Path) -> tuple[Path, Path]:
    """The entries file and the (single) row file of session/owner."""
    session = index / INDEX_FOLDER / f"s-{identity_hash('session')}"
    owner = identity_hash("owner")
    (rows,) = session.glob(f"o-{owner}.*.f32")
    return session / f"o-{owner}.entries", rows


async def test_vectors_survive_a_restart_and_are_not_embedded_again(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    first = make_vector_store()
    await first.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await first.append(make_memory("m2", text="the smith sharpened an axe", tick=2))
    await first.aclose()
    provider = FaultyProvider()
    second = make_vector_store(provider)
    assert (await second.get_status("session")).state is VectorMemoryState.READY
    result = await second.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    assert provider.documents.calls == 0


async def test_rebuild_required_survives_restarts_until_an_explicit_rebuild(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    old = make_vector_store()
    await old.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await old.append(make_memory("m2", text="the smith sharpened an axe", tick=2))
    await old.aclose()
    for _ in range(2):
        provider = FaultyProvider(version="v2")
        restarted = make_vector_store(provider)
        status = await restarted.get_status("session")
        assert status.state is VectorMemoryState.REBUILD_REQUIRED and status.requires_rebuild
        assert (await restarted.recall(query("feline"))).fallback
        assert provider.documents.calls == 0  # nothing rebuilds behind the game's back
        await restarted.aclose()
    rebuilding = make_vector_store(FaultyProvider(version="v2"))
    assert (await rebuilding.rebuild("session")).state is VectorMemoryState.READY
    await rebuilding.aclose()
    provider = FaultyProvider(version="v2")
    after = make_vector_store(provider)
    assert (await after.get_status("session")).state is VectorMemoryState.READY
    assert ids((await after.recall(query("feline", limit=1))).memories) == ["m1"]
    assert provider.documents.calls == 0
    # Going back to the first model is a model change too.
    back = make_vector_store(FaultyProvider(version="v1"))
    assert (await back.get_status("session")).state is VectorMemoryState.REBUILD_REQUIRED


async def test_a_deleted_index_leaves_recall_lexical_until_a_rebuild_restores_it(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    await first.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await first.append(make_memory("m2", text="the smith sharpened an axe", tick=2))
    await first.aclose()
    shutil.rmtree(tmp_path / "index")
    second = make_vector_store()
    status = await second.get_status("session")
    assert (status.state, status.pending_entries) == (VectorMemoryState.DEGRADED, 2)
    assert ids(await second.search(query("axe"))) == ["m2"]
    assert (await second.recall(query("feline"))).fallback
    assert (await second.rebuild("session")).state is VectorMemoryState.READY
    assert ids((await second.recall(query("feline", limit=1))).memories) == ["m1"]


async def test_two_stores_on_the_same_folders_see_each_others_appends(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    one = make_vector_store()
    two = make_vector_store(FaultyProvider())
    await one.append(make_memory("m1", text="the smith sharpened an axe", tick=1))
    assert (await two.recall(query("axe"))).memories  # two has read the partition now
    await one.append(make_memory("m2", text="the cat sleeps on the roof", tick=2))
    await two.append(make_memory("m3", text="a hound in the yard", tick=3))
    for store in (one, two):
        assert ids((await store.recall(query("feline", limit=1))).memories) == ["m2"]
        assert ids((await store.recall(query("puppy", limit=1))).memories) == ["m3"]
        assert (await store.get_status("session")).ready_entries == 3


async def test_torn_tails_of_a_crashed_writer_are_ignored_and_cut_by_the_next_writer(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    await first.append(make_memory("m1", text="the smith sharpened an axe", tick=1))
    await first.aclose()
    entries, rows = partition_files(tmp_path / "index")
    with entries.open("ab") as torn:
        torn.write(b"GMV\x01 half a record")
    with rows.open("ab") as torn:
        torn.write(b"\x00" * 100)
    second = make_vector_store()
    assert (await second.get_status("session")).state is VectorMemoryState.READY
    before = await second.recall(query("blade", limit=1))
    assert ids(before.memories) == ["m1"] and not before.fallback
    await second.append(make_memory("m2", text="the cat sleeps on the roof", tick=2))
    assert entries.stat().st_size % 128 == 0 and rows.stat().st_size % (256 * 4) == 0
    assert ids((await second.recall(query("feline", limit=1))).memories) == ["m2"]
    assert (await second.get_status("session")).ready_entries == 2
