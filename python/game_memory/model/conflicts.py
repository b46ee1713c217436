"""The error every store raises for a memory id given other content: one wording, two cases.

A game that sees it needs to know which of its two mistakes it made: reusing an id the save
already holds, or giving one id twice with different content in one batch (where nothing
is stored yet, so "already holds" would send it looking for a memory that is not there).
"""

from __future__ import annotations

from game_memory.errors import MemoryConflictError
from game_memory.model.memory import GameMemory

__all__ = ["memory_conflict"]


def memory_conflict(memory: GameMemory, *, in_batch: bool = False) -> MemoryConflictError:
    """The conflict of ``memory`` with a stored memory of its id, or with ``in_batch``, an
    earlier memory of the same batch (or of an append written in the same group)."""
    where = (
        "is given twice with different content in one batch (or by two appends at once)"
        if in_batch
        else "already holds different content"
    )
    return MemoryConflictError(
        f"memory id {memory.memory_id!r} of owner {memory.owner_id!r} in session "
        f"{memory.session_id!r} {where}; an id cannot be reused. Use a new id "
        "(derive_memory_id gives stable ones)."
    )
