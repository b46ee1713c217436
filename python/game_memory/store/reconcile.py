"""Recovery after a group commit: the intents after the watermark made to match the records.

A group commit (``group_writes.py``) writes its intents, then its records, and fsyncs only
the records. What a crash can leave, in the partitions the unsynced marker names
(``unsynced.py``) and in the ledger after the marker's watermark ``W``:

* after a ``kill -9``: the newest group's intents without (some of) their records (the
  group was in flight, never acknowledged);
* after a power loss: also intents that did not reach the disk (missing, zeros, torn or
  any subset of the unsynced writes) while their records did: acknowledged memories
  whose intents must be written again.

:func:`reconcile` reads every named partition and the ledger from ``W`` on. A partition's
first ``k`` memories are those of its ``k`` intents before ``W`` (all durable, with their
records, when the generation began: a checkpoint happens only in a consistent state);
the rest must each have one intent after ``W``. The intents after ``W`` are kept, in
order, where their record is there; those of the newest group whose record is missing are
dropped (never acknowledged); an intent for each record without one is added. If that
changes anything, the ledger is cut back to ``W`` (fsynced) and the new tail appended and
fsynced, so a crash during it leaves the marker, and doing it again gives the same result.

What this never does is drop an intent that may be acknowledged: an intent without its
record outside the newest group, an intent of a partition the marker does not name, or a
partition that cannot be read (damage) leaves the ledger as it is; readers then fail
closed and ``check`` names the damage.
"""

from __future__ import annotations

from collections.abc import Callable

from game_memory.durable.names import identity_hash
from game_memory.errors import PersistenceError
from game_memory.store.intents import LedgerIndex, LedgerMark
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.state import PartitionState
from game_memory.store.unsynced import Unsynced

__all__ = ["reconcile"]


def reconcile(
    ledger: Ledger,
    intents: LedgerIndex,
    read_partition: Callable[[str, str], PartitionState],
    unsynced: Unsynced,
) -> tuple[int, int]:
    """Make the ledger after ``unsynced.watermark`` match the named partitions' records.

    Call under the writer lock, after the ledger's unwritten tail was cut. Returns how many
    intents were dropped (pending, or damaged) and how many were added (``(0, 0)``: the
    ledger was left as it is).

    Raises:
        PersistenceError: the watermark lies past the end of the ledger (the ledger lost
            durable intents), or the ledger could not be written.
    """
    watermark = unsynced.watermark
    info = ledger.stat()
    count = 0 if info is None else info.st_size // RECORD_BYTES
    if count < watermark:
        raise PersistenceError(
            f"{ledger.path} holds {count:,} intents but {watermark:,} were made durable; "
            "the save is damaged. Restore it from a backup."
        )
    inode = 0 if info is None else info.st_ino
    intents.refresh()
    before = LedgerMark(watermark, inode)
    named = set(unsynced.partitions)
    owed: dict[tuple[str, str], list[str]] = {}
    for key in unsynced.partitions:
        try:
            state = read_partition(*key)
        except PersistenceError:
            return 0, 0  # damaged: never guess (readers and check report it)
        ids = list(state.view.positions) if state.view is not None else []
        earlier = intents.intents(key[0], key[1], before)
        if len(ids) < earlier:
            return 0, 0  # acknowledged records lost: damage, not a crash
        owed[key] = [identity_hash(memory_id) for memory_id in ids[earlier:]]
    tail = ledger.read_from(watermark)
    pending_from = tail[-1][2] if tail and tail[-1][1] is not None else count
    remaining = {key: dict.fromkeys(hashes) for key, hashes in owed.items()}
    kept: list[LedgerEntry] = []
    dropped = 0
    for position, entry, _group in tail:
        if entry is None:
            dropped += 1  # lost to a power loss: written again below if its record is there
            continue
        key = (entry.session_hash, entry.owner_hash)
        if key not in named:
            return 0, 0  # not a group commit's intent: leave it to check
        if entry.memory_hash in remaining[key]:
            del remaining[key][entry.memory_hash]
            kept.append(entry)
            continue
        if position < pending_from:
            return 0, 0  # a record missing outside the newest group: damage
        dropped += 1  # the newest group's, never acknowledged
    added = [
        LedgerEntry(key[0], key[1], memory_hash)
        for key in unsynced.partitions
        for memory_hash in remaining[key]
    ]
    if not dropped and not added:
        return 0, 0
    if info is not None:
        ledger.truncate(watermark)
    if kept or added:
        ledger.append(kept + added, first_index=watermark, durable=True)
    return dropped, len(added)
