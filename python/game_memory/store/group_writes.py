"""One group commit: new memories of any partitions made durable by one fsync per log touched.

Under the writer lock, after recovery and after each memory was decided new (``batches.py``),
a group of at most :data:`~game_memory.store.ledger.MAXIMUM_GROUP` memories is written:

1. the unsynced marker names every partition of the group (``unsynced.py``; one append and
   fsync, only for partitions it does not name yet, so a series of appends to one NPC pays
   it once per checkpoint);
2. all intents in one write to the ledger, each naming the group's first position, **not
   fsynced**;
3. each partition's records in one write, to one log segment (a torn tail cut first; a
   group never appends to a segment and starts the next one of the same partition, or a
   power loss could keep the new segment and not the old one's unsynced end);
4. **the commit**: every segment written (and every folder that got a new entry) is fsynced,
   from a small thread pool when there are several (a group of one partition that made no
   new entry fsyncs its segment through the descriptor it wrote with); then the group is
   acknowledged.

Why this is crash safe. A ``kill -9`` at any instant: the kernel keeps every write, and the
intents were written before the records, so at most this group's intents lack their records
(``reconcile.py`` drops those; readers excuse the newest group meanwhile). A power loss: a
record that was fsynced survives, its intent may not; its partition is named by the marker,
made durable before the record was written, so recovery writes the intent again. Nothing is
acknowledged before step 4 completes, and when any step fails (a failed fsync included)
every memory of the group fails: the segments are cut back to their sizes before the group
(the new ones deleted) and the ledger to its count before it, so no record of a failed group
stays visible; if that undo fails too, the next recovery reconciles what is left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from game_memory.durable import fs, portable
from game_memory.errors import PersistenceError
from game_memory.store.appends import plan_segments, write_planned
from game_memory.store.ledger import MAXIMUM_GROUP, RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.state import PartitionState
from game_memory.store.unsynced import (
    MAXIMUM_PARTITIONS,
    MAXIMUM_UNSYNCED_INTENTS,
    Unsynced,
    UnsyncedMarker,
)

__all__ = ["Held", "Written", "write_group"]

_Plan = list[tuple[str, int, list[bytes]]]


class Held(NamedTuple):
    """The ledgers and the unsynced marker as one hold of the writer lock knows them.

    Taken by recovery (``StoreEngine.recover``) and kept up to date by the writes of the
    same hold, so a group does not ask the files again: while the lock is held nothing
    else writes them. ``ledger`` and ``retractions`` are the ledgers' ``lstat`` (``None``:
    no such file), ``unsynced`` the marker's generation (``None``: empty).
    """

    ledger: os.stat_result | None
    retractions: os.stat_result | None
    unsynced: Unsynced | None


class Written(NamedTuple):
    """What :func:`write_group` appended to the ledger (``intents``, framed, from position
    ``first``) and the marker's generation after it."""

    first: int
    intents: bytes
    unsynced: Unsynced | None


def write_group(
    ledger: Ledger,
    marker: UnsyncedMarker,
    items: Sequence[tuple[LedgerEntry, bytes, PartitionState]],
    *,
    directory: Callable[[str], Path],
    maximum_file_bytes: int,
    checkpoint: Callable[[], None],
    held: Held | None = None,
) -> Written:
    """Durably add the new memories ``items`` (intent, framed record, partition as read).

    Call under the writer lock, after recovery, with the capacity checked. ``checkpoint``
    makes every intent durable and empties the marker (the engine's). ``held``: the ledger
    and the marker as this hold of the lock left them (``None``: read them).

    Returns:
        The intents written and the marker's generation after the group.

    Raises:
        PersistenceError: a write or fsync failed; nothing of the group is acknowledged.
        ValueError: more than ``MAXIMUM_GROUP`` items, or the records of one partition
            that do not fit one segment (``batches.py`` splits them into groups).
    """
    if len(items) > MAXIMUM_GROUP:
        raise ValueError(f"a group commit holds at most {MAXIMUM_GROUP} memories")
    info = held.ledger if held is not None else ledger.stat()
    count = 0 if info is None else info.st_size // RECORD_BYTES
    grouped: dict[tuple[str, str], tuple[PartitionState, list[bytes]]] = {}
    for entry, record, state in items:
        key = (entry.session_hash, entry.owner_hash)
        grouped.setdefault(key, (state, []))[1].append(record)
    current = held.unsynced if held is not None else marker.read()
    if current is not None and (
        len(set(current.partitions) | set(grouped)) > MAXIMUM_PARTITIONS
        or count + len(items) - current.watermark > MAXIMUM_UNSYNCED_INTENTS
    ):
        checkpoint()
        current = None
    named = set(current.partitions) if current is not None else set()
    missing = [key for key in grouped if key not in named]
    folders: set[Path] = set()
    if info is None:
        folders.add(ledger.path.parent)  # the ledger's own name, once
    if missing:
        watermark = current.watermark if current is not None else count
        marker.add(watermark, missing)
        current = Unsynced(watermark, [*(current.partitions if current else ()), *missing])
    plans: list[_Plan] = []
    try:
        intents = ledger.encode_group([item[0] for item in items], count)
        ledger.append_encoded(intents, durable=False)
        files: list[Path] = []
        single = len(grouped) == 1
        for (session_hash, _owner_hash), (state, records) in grouped.items():
            if state.folder is not None:
                # Read under this hold of the lock, which nothing else deletes it under.
                folder: str | Path = state.folder[0]
            else:
                folder = directory(session_hash)
                if fs.ensure_directory(folder, durable=False):
                    folders.add(folder.parent)
            plan = plan_segments(folder, state, records, maximum_file_bytes=maximum_file_bytes)
            plan = [part for part in plan if part[2]]  # a rollover leaves the old tail alone
            if len(plan) != 1:
                raise ValueError("a group writes one log segment per partition")
            plans.append(plan)
            if any(before < 0 for _, before, _ in plan):
                folders.add(Path(folder))
            if single and not folders:
                # The usual single append: written and fsynced through one descriptor.
                write_planned(state, plan, durable=True)
                continue
            write_planned(state, plan)
            files.extend(Path(path) for path, _, _ in plan)
        fs.sync_all(files, sorted(folders))
    except BaseException:
        _undo(ledger, count, plans)
        raise
    return Written(count, intents, current)


def _undo(ledger: Ledger, count: int, plans: list[_Plan]) -> None:
    """Best effort: cut what a failed group wrote (recovery reconciles anything left)."""
    for plan in plans:
        for path, before, _records in plan:
            try:
                if before < 0:
                    os.unlink(path)
                else:
                    fd = os.open(path, os.O_WRONLY | portable.OPEN_FLAGS)
                    try:
                        if os.fstat(fd).st_size > before:
                            os.ftruncate(fd, before)
                    finally:
                        os.close(fd)
            except OSError:
                continue
    try:
        if ledger.count() > count:
            ledger.truncate(count)
    except PersistenceError:
        pass
