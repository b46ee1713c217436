"""Checking one partition read against what the two ledgers promise it holds.

The add ledger has one intent per memory, the retraction ledger one per retraction
(``ledger.py``); :class:`~game_memory.store.intents.LedgerIndex` counts them per partition.
A partition read must hold every memory and every retraction its intents promise, except
what may still be in flight: the newest intent of each ledger (an append or a ``forget``
running now, or one whose writer died before it acknowledged), or the newest group of add
intents (a group commit, ``group_writes.py``), and the intents of an uncommitted batch.
These functions say what is missing beyond that; the engine checks again under the writer
lock before it fails closed.
"""

from __future__ import annotations

from game_memory.durable.names import identity_hash
from game_memory.store.intents import LedgerIndex, LedgerMark
from game_memory.store.state import PartitionState

__all__ = ["missing_memories", "missing_retractions", "partition_name"]


def missing_memories(
    intents: LedgerIndex, state: PartitionState, mark: LedgerMark, batch: int | None
) -> list[int]:
    """Positions of the partition's add intents before ``mark`` whose memory is not there,
    less the newest group of intents and those of an uncommitted batch (from ``batch`` on)."""
    positions = intents.positions(state.session_hash, state.owner_hash, mark)
    if len(positions) <= state.memory_count:
        return []
    named = intents.memory_hashes(positions)
    present = (
        {identity_hash(memory.memory_id) for memory in state.view.memories}
        if state.view is not None
        else set()
    )
    pending = mark.pending_from if mark.pending_from >= 0 else mark.count - 1
    missing = [p for p in positions if named.get(p) not in present and p < pending]
    if batch is not None:
        missing = [p for p in missing if p < batch]
    return missing


def missing_retractions(intents: LedgerIndex, state: PartitionState, mark: LedgerMark) -> int:
    """How many retractions the partition lacks, less the newest retraction intent."""
    positions = intents.positions(state.session_hash, state.owner_hash, mark)
    shortfall = len(positions) - state.retraction_count
    if shortfall > 0 and positions and positions[-1] == mark.count - 1:
        shortfall -= 1
    return max(0, shortfall)


def partition_name(state: PartitionState, session_id: str | None, owner_id: str | None) -> str:
    """``owner 'x' in session 'y'``, with hashes where the ids are not known."""
    view = state.view
    owner = owner_id if owner_id is not None else (view.owner_id if view is not None else None)
    session = (
        session_id if session_id is not None else (view.session_id if view is not None else None)
    )
    shown_owner = repr(owner) if owner is not None else f"o-{state.owner_hash[:12]}…"
    shown_session = repr(session) if session is not None else f"s-{state.session_hash[:12]}…"
    return f"owner {shown_owner} in session {shown_session}"
