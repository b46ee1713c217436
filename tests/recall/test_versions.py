"""Implicit versions compared by words: what the word cache may keep alive."""

from __future__ import annotations

import sys

from game_memory import GameMemory
from game_memory.recall.versions import WORD_CACHED_TEXT_BYTES, implicit_versions
from support.vectors import MemoryFactory


def _versions(memories: list[GameMemory]) -> list[tuple[int, int]]:
    """The pairs found by words alone (no vectors), as the reranker asks for them."""
    return implicit_versions(
        [vars(memory) for memory in memories],
        [memory.moment.tick for memory in memories],
        [memory.moment.timeline_id for memory in memories],
        [None] * len(memories),
        0.4,
        3.0,
    )


def test_long_texts_are_compared_by_words_but_never_kept_alive_by_the_cache(
    make_memory: MemoryFactory,
) -> None:
    # Two versions of one belief whose texts are long (a searchable text may hold 1,000,000
    # characters): a process-wide cache keyed by such texts kept up to 4,096 of them alive
    # after their memories, stores and saves were gone (gigabytes).
    shared = " ".join(f"word{i}" for i in range(300))
    older = make_memory("older", text=shared + " " + "x" * 50_000, tick=1)
    newer = make_memory("newer", text=shared + " " + "y" * 50_000, tick=2)
    texts = [older.searchable_text, newer.searchable_text]
    assert all(sys.getsizeof(text) > WORD_CACHED_TEXT_BYTES for text in texts)
    before = [sys.getrefcount(text) for text in texts]

    assert _versions([older, newer]) == [(0, 1)]
    assert _versions([older, newer]) == [(0, 1)]  # the same answer when asked again

    assert [sys.getrefcount(text) for text in texts] == before


def test_short_texts_are_remembered_and_give_the_same_pairs(make_memory: MemoryFactory) -> None:
    older = make_memory("older", text="the bridge over the river is open to carts", tick=1)
    newer = make_memory("newer", text="the bridge over the river is closed to carts", tick=2)
    text = older.searchable_text
    assert text is not None
    before = sys.getrefcount(text)

    assert _versions([older, newer]) == [(0, 1)]

    assert sys.getrefcount(text) > before  # cached: the next recall does not tokenize it
    assert _versions([older, newer]) == [(0, 1)]
