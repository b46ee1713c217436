"""Forgetting on game time in the file store: retractions, and consolidation summaries.

Both are appends, with an append's guarantees (``engine.py``):

* :func:`forget` writes one retraction, as an append writes a memory: under the writer
  lock, after recovery and a read of the partition checked against the ledgers, its
  intent is appended and fsynced to the retraction ledger, then its record to the owner's
  retraction log (``retractions.py``), fsynced; the call returns after both. A writer
  killed part-way leaves a torn tail or a pending intent, which the next writer resolves;
  an acknowledged retraction survives ``kill -9`` and power loss, and a retraction log cut
  short fails reads closed, like a memory log. A write or fsync that fails is undone, as
  a failed append is (``group_writes.py``): the record and its intent are cut back,
  durably, so a failed ``forget`` has no effect, in this process or after a reopen
  (:func:`forget` says what holds when the undo fails too).
* :func:`consolidate` is one append of the summary, whose ``consolidates`` retracts its
  sources as of its own moment: both or neither by construction. Its sources are checked
  under the same lock as the append, so an erase cannot remove one in between.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence

from game_memory.durable import fs
from game_memory.durable.names import segment_path
from game_memory.errors import (
    CapacityExceededError,
    InvalidArgumentError,
    MemoryNotFoundError,
    PersistenceError,
)
from game_memory.model import GameMemory, GameMoment
from game_memory.store.capacity import RAISE_THE_BOUND
from game_memory.store.engine import StoreEngine, validated_id
from game_memory.store.ledger import LedgerEntry
from game_memory.store.lifecycle import checked_summary, covered
from game_memory.store.partitions import identity_hash, partition_hash
from game_memory.store.records import encode_record
from game_memory.store.retractions import encode_retraction
from game_memory.store.state import PartitionState

__all__ = ["consolidate", "forget"]


def forget(
    engine: StoreEngine, session_id: str, owner_id: str, memory_id: str, at: GameMoment
) -> bool:
    """Durably retract ``memory_id`` as of ``at``; ``False`` if already retracted then.

    All or nothing. When writing or fsyncing the intent or the record fails, both are cut
    back and the cut is fsynced before the error is raised: the retraction is then not in
    effect, in this process or after a reopen (a failed ``fsync`` may or may not have
    reached the disk, but a size cut back and fsynced holds either way), and calling
    ``forget`` again writes it again. Should the undo fail too (a disk failing
    throughout), the error says that the retraction may be in effect: reads here and
    after a reopen see the same files, and the next ``forget`` of it settles it (``False``
    if it is in effect).

    Raises:
        MemoryNotFoundError: the owner holds no memory ``memory_id`` (nothing written).
        InvalidArgumentError: an id or ``at`` is invalid.
        CapacityExceededError: the store holds ``maximum_entries`` retractions already.
        PersistenceError: the partition is damaged (nothing written); or a write failed
            (nothing kept: a ``DiskFullError`` for a full disk), see above.
    """
    for value, what in ((session_id, "session_id"), (owner_id, "owner_id")):
        validated_id(value, what)
    validated_id(memory_id, "memory_id")
    if not isinstance(at, GameMoment):
        raise InvalidArgumentError("forget takes the game moment of the retraction (a GameMoment)")
    record = encode_record(encode_retraction(memory_id, at))
    session_hash, owner_hash = partition_hash(session_id), partition_hash(owner_id)
    engine.layout.guard()  # before the lock, whose file is in the data folder
    with engine.locked():
        state, _marks = engine.prepare(session_hash, owner_hash)
        if state.find(memory_id) is None:
            raise MemoryNotFoundError(
                f"owner {owner_id!r} of session {session_id!r} holds no memory {memory_id!r}; "
                "nothing was forgotten. Check the id (enumerate lists what the owner holds)"
            )
        if covered((moment for held, moment in state.retractions if held == memory_id), at):
            return False
        count = engine.retraction_ledger.count()
        if count >= engine.maximum_entries:
            raise CapacityExceededError(
                f"the store holds {count:,} retractions, its maximum_entries; compact it "
                "('game-memory compact' drops redundant ones), erase what the game no longer "
                f"needs, or {RAISE_THE_BOUND}",
                bound="maximum_entries",
            )
        engine.layout.require_format(3)
        entry = LedgerEntry(session_hash, owner_hash, identity_hash(memory_id))
        with _undone_on_failure(engine, state, count, memory_id):
            engine.retraction_ledger.append([entry], first_index=count)
            engine.write_records(state, [record], durable=True, series="r")
        engine.note_verified(engine.retraction_ledger)
        return True


@contextlib.contextmanager
def _undone_on_failure(
    engine: StoreEngine, state: PartitionState, count: int, memory_id: str
) -> Iterator[None]:
    """Undo a retraction whose block failed (:func:`_cut_back`) and raise what failed; if
    the undo fails too, raise an error that says the retraction may be in effect (chained
    from the first failure, whose cause a caller may look for: a full disk)."""
    try:
        yield
    except BaseException as failed:
        undo = _cut_back(engine, state, count)
        if undo is None or not isinstance(failed, Exception):
            raise  # undone; or an interrupt, which stays one (the next recovery settles it)
        raise PersistenceError(
            f"{str(failed).rstrip('.')}; undoing the retraction of {memory_id!r} failed "
            f"too ({undo}), so it may be in effect. Once the disk works again, forget "
            f"{memory_id!r} again (it returns False if the retraction is in effect)"
        ) from failed


def _cut_back(engine: StoreEngine, state: PartitionState, count: int) -> Exception | None:
    """Durably remove what a failed retraction wrote; what kept it from that, else ``None``.

    First the record (its segment cut back to where ``state`` ends, or a segment it
    started deleted), then the intent (the retraction ledger cut back to ``count``). In
    that order, as a failed append is undone (``group_writes.py``), and each step fsynced:
    should the undo stop half-way, an intent is left without its record, which recovery
    drops, never a record without its intent.
    """
    try:
        directory = engine.session_directory(state.session_hash)
        tail = state.retraction_tail
        if tail is not None:
            engine.cut_tail(tail.path, tail.end)
        started = segment_path(directory, state.owner_hash, len(state.retraction_segments), "r")
        if os.path.lexists(started):
            os.unlink(started)
            fs.fsync_directory(directory)
        if engine.retraction_ledger.count() > count:
            engine.retraction_ledger.truncate(count)
    except (OSError, PersistenceError) as undo:
        return undo
    return None


def consolidate(
    engine: StoreEngine,
    session_id: str,
    owner_id: str,
    memory_ids: Sequence[str],
    summary: GameMemory,
) -> bool:
    """Append ``summary`` consolidating ``memory_ids`` (see the module docstring).

    Raises:
        MemoryNotFoundError: an id names no memory of the owner (nothing written).
        InvalidArgumentError: see :func:`~game_memory.store.lifecycle.checked_summary`.
        MemoryConflictError: the summary's id holds other content.
        CapacityExceededError: the store is full, or the summary too large for a file.
    """
    validated_id(session_id, "session_id")
    validated_id(owner_id, "owner_id")
    if not isinstance(summary, GameMemory):
        raise InvalidArgumentError("consolidate takes a GameMemory as its summary")
    session_hash, owner_hash = partition_hash(session_id), partition_hash(owner_id)
    engine.layout.guard()  # before the lock, whose file is in the data folder
    with engine.locked():
        state, _marks = engine.prepare(session_hash, owner_hash)
        stored = state.find(summary.memory_id)
        checked = checked_summary(
            session_id, owner_id, memory_ids, summary, functools.partial(_moment, state), stored
        )
        return engine.add_locked(checked, engine.encode(checked), state)


def _moment(state: PartitionState, memory_id: str) -> GameMoment | None:
    """The moment of the partition's memory ``memory_id`` (``checked_summary``'s ``held``)."""
    memory = state.find(memory_id)
    return None if memory is None else memory.moment
