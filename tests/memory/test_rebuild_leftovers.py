"""A rebuild removes what an erase killed midway left of an NPC the save no longer holds.

An erase of an NPC deletes its entries file, then its row files, then its rewrite mark. A
power cut between the first and the last leaves row files (which may hold the erased
memories' vectors) and the mark, with no entries file. ``get_status`` rightly reads that as
damage; but the rebuild's clean-up rewrote only partitions that had an entries file, so
a rebuild that also met a damaged partition left the session ``DEGRADED`` with no vector
counted ready (found by the power-loss explorer, ``tests/crash/test_power_loss.py``).
"""

from __future__ import annotations

import os

from game_memory import VectorMemoryState
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from support.vectors import MemoryFactory, VectorStoreFactory


async def test_a_rebuild_removes_an_interrupted_erase_of_an_npc_and_ends_ready(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: os.PathLike[str]
) -> None:
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"a{number}", owner_id="anna", tick=number))
        await store.append(make_memory(f"b{number}", owner_id="bram", tick=number))
    await store.authoritative.erase("session", "bram", None)  # the save's part of the erase
    folder = os.path.join(tmp_path, "index", INDEX_FOLDER, f"s-{identity_hash('session')}")
    bram = f"o-{identity_hash('bram')}"
    os.unlink(os.path.join(folder, f"{bram}.entries"))  # the index's first step, then the cut
    open(os.path.join(folder, f"{bram}.rewriting"), "wb").close()
    assert any(name.startswith(bram + ".") and name.endswith(".f32") for name in os.listdir(folder))
    # And a power cut that zeroed a record of another NPC's entries (what the explorer's
    # state held too): the rebuild deletes that partition and embeds it again.
    anna = os.path.join(folder, f"o-{identity_hash('anna')}.entries")
    size = os.path.getsize(anna)
    with open(anna, "r+b") as entries:
        entries.write(bytes(size))
    await store.aclose()

    store = make_vector_store()
    assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
    status = await store.rebuild("session", force=True)
    assert status.state is VectorMemoryState.READY and status.ready_entries == 3
    assert not [name for name in os.listdir(folder) if name.startswith(bram)]
