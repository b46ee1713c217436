"""Hybrid recall over partitions opened from their read files: the same hits and evidence.

A view opened from its read file (``store/read_path.py``) carries the digests the join
needs and decodes its memories lazily; the join (``index/join.py``) and the vector channel
(``recall/vectors.py``) must give exactly what they give over decoded memories, also after
an append extends the partition and its join.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from game_memory import GameMoment, RecallResult
from game_memory.store import read_path
from support.vectors import MemoryFactory, VectorStoreFactory, query

TEXTS = ["the cat sleeps on the roof", "the smith sharpened an axe", "a storm over the river"]


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)


def evidence(result: RecallResult) -> list[tuple[object, ...]]:
    return [
        (h.memory.memory_id, h.lexical_rank, h.vector_rank, h.lexical_score, h.vector_score)
        for h in result.hits
    ]


async def recalls(store: object) -> list[list[tuple[object, ...]]]:
    found = []
    for text, tick in (("feline on a roof", None), ("axe", 60), ("river storm", 90)):
        at = GameMoment(timeline_id="world", tick=tick) if tick is not None else None
        result = await store.recall(query(text, owner_id="owner", at_or_before=at))  # type: ignore[attr-defined]
        assert not result.fallback
        found.append(evidence(result))
    return found


async def test_recall_from_read_files_equals_recall_from_records(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    first = make_vector_store()
    for number in range(100):
        text = f"{TEXTS[number % 3]} {number}"
        await first.append(make_memory(f"m{number:03d}", owner_id="owner", text=text, tick=number))
    expected = await recalls(first)
    await first.aclose()
    assert list((tmp_path / "save" / ".game-memory" / "read").glob("s-*/o-*.read"))

    second = make_vector_store()
    assert await recalls(second) == expected
    await second.append(make_memory("late", owner_id="owner", text="a cat on the roof", tick=95))
    grown = await recalls(second)
    assert "late" in [row[0] for row in grown[0]]
    await second.aclose()

    shutil.rmtree(tmp_path / "save" / ".game-memory" / "read")
    third = make_vector_store()
    assert await recalls(third) == grown
