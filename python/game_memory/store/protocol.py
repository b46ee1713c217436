"""The smallest surface a memory store offers to the layers above it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from game_memory.model import GameMemory, GameMemoryQuery, GameMemorySearchSnapshot

__all__ = ["GameMemoryStore"]


@runtime_checkable
class GameMemoryStore(Protocol):
    """An authoritative (or authority-wrapping) store of memories.

    ``enumerate`` yields every memory of a session (or one owner), ordered by owner then
    memory id (ordinal), never another session's. ``search_snapshot`` returns ranked results
    together with the exact bounded partition they were ranked from, so a caller can validate
    derived data against the same snapshot without a second read.
    """

    async def append(self, memory: GameMemory) -> bool:
        """Add a memory; ``False`` when an equivalent one is already there."""
        ...

    async def search(self, query: GameMemoryQuery) -> list[GameMemory]:
        """Recall up to ``query.limit`` visible memories, best first."""
        ...

    async def search_snapshot(
        self, query: GameMemoryQuery, maximum_snapshot_entries: int | None = None
    ) -> GameMemorySearchSnapshot:
        """Recall with the authoritative snapshot and stage metrics."""
        ...

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or of one owner in it)."""
        ...

    async def aclose(self) -> None:
        """Release resources; idempotent."""
        ...
