"""An erase whose save part is done but whose index part fails.

The save is erased first, then the derived vectors are dropped. When the index cannot be
written (a folder made read-only), the caller must learn that the memories are gone from
the save and what leaves their vector bytes behind, and an eviction (which runs inside an
append that succeeded) must not fail that append.
"""

from __future__ import annotations

from typing import Any

import pytest

from game_memory import DerivedIndexError
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory


def unwritable(*_arguments: Any) -> None:
    raise DerivedIndexError("could not write the vector index: [Errno 30] Read-only file system")


async def test_an_erase_the_index_cannot_follow_says_the_save_is_erased_and_what_to_do(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    for number in range(3):
        await store.append(make_memory(f"m{number}", tick=number))
    monkeypatch.setattr(store.index, "erase", unwritable)
    with pytest.raises(DerivedIndexError) as raised:
        await store.erase("session", "owner", ["m1"])
    message = str(raised.value)
    assert "erased 1 memories from the save" in message
    assert "Read-only file system" in message and "rebuild" in message
    assert sorted(m.memory_id for m in await store.enumerate("session")) == ["m0", "m2"]
    monkeypatch.undo()
    assert await store.erase("session", "owner", ["m1"]) == 0  # run again: the index follows
    status = await store.get_status("session")
    assert status.orphan_entries == 0 and status.total_entries == 2


async def test_an_eviction_the_index_cannot_follow_does_not_fail_the_append(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store(options={"maximum_memories_per_owner": 3})
    for number in range(3):
        await store.append(make_memory(f"m{number}", tick=number))
    monkeypatch.setattr(store.index, "erase", unwritable)
    assert await store.append(make_memory("m3", tick=3)) is True
    assert len(await store.enumerate("session", "owner")) == 2  # the bound is kept
    assert "memory_vector_erase_failed" in diagnostics.codes()
    assert "memories_evicted" in diagnostics.codes()
