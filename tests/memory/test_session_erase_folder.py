"""An erase of a whole session leaves nothing of it in the index folder.

The index kept one folder per erased session (its record of identity codes, named by the
hash of the session id): a server whose players make and delete save slots for weeks grew
by a folder per slot, which no compaction reclaimed.
"""

from __future__ import annotations

import os
from pathlib import Path

from game_memory import VectorMemoryState
from game_memory.durable.names import identity_hash
from game_memory.index.engine import INDEX_FOLDER
from support.vectors import MemoryFactory, VectorStoreFactory


def session_folder(tmp_path: Path, session: str) -> Path:
    return tmp_path / "index" / INDEX_FOLDER / f"s-{identity_hash(session)}"


async def test_an_erased_session_leaves_no_folder_and_can_be_filled_again(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", owner_id=f"npc{number}", tick=number))
    await store.append(make_memory("k", session_id="kept", tick=1))
    folder = session_folder(tmp_path, "session")
    assert folder.is_dir()
    other = make_vector_store()  # a second front door on the same folders (its verdict held)
    assert (await other.get_status("session")).state is VectorMemoryState.READY

    assert await store.erase("session") == 3
    assert not folder.exists()
    assert session_folder(tmp_path, "kept").is_dir()

    # The slot is used again, by either front door: its vectors are written and trusted.
    await other.append(make_memory("n1", owner_id="npc0", tick=5))
    await store.append(make_memory("n2", owner_id="npc1", tick=6))
    for memory in (store, other):
        status = await memory.get_status("session")
        assert status.state is VectorMemoryState.READY and status.ready_entries == 2
    assert os.listdir(folder)
