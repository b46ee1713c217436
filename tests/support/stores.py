"""Lexical reads of any :class:`GameMemoryStore`, through the one method recall uses.

The store protocol has one read, ``snapshot``; these helpers give store tests the
reference's two shapes of it (the ranked memories, and the search snapshot).
"""

from __future__ import annotations

from game_memory import GameMemory, GameMemoryQuery, GameMemorySearchSnapshot, GameMemoryStore

__all__ = ["search", "search_snapshot"]


async def search(store: GameMemoryStore, query: GameMemoryQuery) -> list[GameMemory]:
    """The lexical hits of ``query``, best first."""
    return [hit.memory for hit in (await store.snapshot(query)).lexical]


async def search_snapshot(
    store: GameMemoryStore, query: GameMemoryQuery, maximum_entries: int | None = None
) -> GameMemorySearchSnapshot:
    """The hits, the authoritative snapshot and the stages of ``query``."""
    snapshot = await store.snapshot(query, maximum_entries=maximum_entries)
    return snapshot.search_snapshot()
