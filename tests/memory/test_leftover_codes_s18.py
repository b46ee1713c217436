"""Files of codes left of an NPC an older build erased read as damage, and a rebuild removes them.

A build that predates files of int8 codes (``o-<owner>.<code>.<tag>.q8``) erases an NPC by
deleting its entries file and its row files, and leaves its codes: int8 copies of the erased
memories' vectors. No entries name them, so nothing else ever removes them; ``get_status``
said READY with no orphan (``IndexEngine.untidy_owners`` skipped owners without an entries
file), and only an explicit rebuild happened to delete them (release audit, finding 2).

The leftover is built directly: the save's erase, then the index's files of the NPC but its
codes deleted, as the older build's erase does.
"""

from __future__ import annotations

import os
from pathlib import Path

from game_memory import VectorMemoryState
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from support.vectors import MemoryFactory, VectorStoreFactory


async def codes_left_of_an_erased_npc(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> tuple[Path, str]:
    """A session of two NPCs, ``bram`` erased by an older build that left only his files of
    codes; the index's session folder and bram's file prefix."""
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"a{number}", owner_id="anna", tick=number))
        await store.append(make_memory(f"b{number}", owner_id="bram", tick=number))
    await store.authoritative.erase("session", "bram", None)  # the save's part of the erase
    await store.aclose()
    folder = tmp_path / "index" / INDEX_FOLDER / f"s-{identity_hash('session')}"
    bram = f"o-{identity_hash('bram')}."
    rows = [name for name in os.listdir(folder) if name.startswith(bram) and name.endswith(".f32")]
    assert rows
    for name in rows:  # the codes of the rows stay, the rows and entries go
        os.replace(folder / name, folder / (name[: -len(".f32")] + ".q8"))
    os.unlink(folder / f"{bram}entries")
    assert [name for name in os.listdir(folder) if name.startswith(bram)] == [
        name[: -len(".f32")] + ".q8" for name in rows
    ]
    return folder, bram


async def test_codes_of_an_npc_with_no_entries_read_as_damage_until_a_rebuild_removes_them(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    folder, bram = await codes_left_of_an_erased_npc(make_vector_store, make_memory, tmp_path)
    store = make_vector_store()
    assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
    status = await store.rebuild("session")
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    assert not [name for name in os.listdir(folder) if name.startswith(bram)]
    assert (await store.get_status("session")).state is VectorMemoryState.READY
