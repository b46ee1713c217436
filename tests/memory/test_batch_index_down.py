"""A resent batch whose index cannot answer: saved, and the index's trouble a diagnostic.

``append_many`` raises only what the store's ``append_many`` raises, and then nothing is
saved (``docs/api.md``); the bridge says an error means nothing was stored. A batch that
held memories already stored asked the index whether they had vectors outside the
``try`` that turns the index's failures into diagnostics: with the index gone (a database
unreachable) the new memories were committed and the call raised ``DerivedIndexError``.
"""

from __future__ import annotations

from typing import Any

import pytest

from game_memory import DerivedIndexError
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory


def unreachable(*_arguments: Any) -> None:
    raise DerivedIndexError("could not reach the vector index")


async def test_a_resent_batch_with_the_index_down_is_saved_and_reported(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    assert await store.append_many([make_memory("m1", tick=1)]) == [True]
    assert store.index is not None
    monkeypatch.setattr(store.index, "is_ready", unreachable)
    monkeypatch.setattr(store.index, "write", unreachable)
    resent = [make_memory("m1", tick=1), make_memory("m2", tick=2)]
    assert await store.append_many(resent) == [False, True]
    assert sorted(m.memory_id for m in await store.enumerate("session")) == ["m1", "m2"]
    assert "memory_embedding_append_failed" in diagnostics.codes()
    monkeypatch.undo()
    assert (await store.rebuild("session")).ready_entries == 2  # a rebuild embeds m2


async def test_a_resent_batch_whose_readiness_cannot_be_read_still_gets_vectors(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    assert await store.append_many([make_memory("m1", tick=1)]) == [True]
    assert store.index is not None
    monkeypatch.setattr(store.index, "is_ready", unreachable)
    assert await store.append_many([make_memory("m1", tick=1), make_memory("m2", tick=2)]) == [
        False,
        True,
    ]
    monkeypatch.undo()
    assert (await store.get_status("session")).ready_entries == 2
    assert diagnostics.codes() == []
