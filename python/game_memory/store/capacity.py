"""The store-wide bound's error: which owners hold the most memories, and what to do.

When ``maximum_entries`` is reached nothing more can be remembered, anywhere; the message
names the largest owners (from the ledger index, no scan) so the game knows whom to bound
or erase, and how to turn the retention policy on. Every message that says to raise the
bound names it where the save is opened: the Python argument, the ``game-memory`` option,
and the Godot node's setting (:data:`BOUND_OPTIONS`).
"""

from __future__ import annotations

from collections.abc import Callable

from game_memory.errors import PersistenceError
from game_memory.store.intents import LedgerIndex
from game_memory.store.ledger import BOUND_OPTIONS
from game_memory.store.state import PartitionState

__all__ = ["BOUND_OPTIONS", "RAISE_THE_BOUND", "full_message"]

#: How to raise ``maximum_entries``. A save grown past the default must be opened with its
#: bound every time: a smaller one refuses appends, and reads of a session larger than it.
RAISE_THE_BOUND = (
    "open the save with a larger maximum_entries, and keep opening it with that bound: "
    + BOUND_OPTIONS
)


def full_message(
    intents: LedgerIndex, read_partition: Callable[[str, str], PartitionState], count: int
) -> str:
    """The ``maximum_entries`` error: the largest owners, and what to do about them."""
    intents.refresh()
    largest: list[str] = []
    for session_hash, owner_hash, held in intents.largest(3):
        try:
            view = read_partition(session_hash, owner_hash).view
        except PersistenceError:
            view = None
        name = (
            f"{view.owner_id!r} of session {view.session_id!r}"
            if view is not None
            else f"o-{owner_hash[:12]}… of s-{session_hash[:12]}…"
        )
        largest.append(f"{name} ({held:,})")
    return (
        f"the store holds {count:,} memories, its maximum_entries; the largest owners are "
        f"{', '.join(largest)}. Keep each NPC bounded with the retention policy "
        "VectorMemoryStoreOptions(maximum_memories_per_owner=N) (game-memory serve "
        "--maximum-memories-per-owner N), erase what the game no longer needs "
        f"(game-memory erase), or {RAISE_THE_BOUND}"
    )
