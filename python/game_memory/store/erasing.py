"""Erasing for good, and compacting, in the file store: the start of every rewrite.

:func:`erase` and :func:`compact` decide what to rewrite, under the writer lock after
recovery, from partitions read and checked against the ledgers (a damaged partition fails
closed: salvage it first); write the rewrite journal, which commits the rewrite; and carry
it out (``rewriting.py``). A crash at any instant after the journal is written is finished
by the next writer, or by the next reader, which waits for the lock; before it, nothing
changed. So after recovery an erase is either wholly done or not at all, and running it
again completes it (or finds nothing left to erase).

An erase removes the memories' records from their log segments and packs, their
retractions, their ledger intents (the capacity count goes down) and their copies outside
the partition (``copies.py``); no byte of them is left in the save when it returns.
A compaction erases nothing: it rewrites the partitions whose files could be fewer, drops
redundant retractions, and deletes what an interrupted write left behind, and the read files
(``read_files.py``) of partitions the save no longer holds: what an erase by a build that
predates them left (they hold the erased memories' ids and text). An erase of an owner or a
session whose records are already gone removes its read files too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from game_memory.durable import fs
from game_memory.errors import InvalidArgumentError, PersistenceError
from game_memory.model import CompactionReport
from game_memory.store.copies import remove_temporary
from game_memory.store.engine import StoreEngine, validated_id
from game_memory.store.journal_traces import BATCH_JOURNAL, finished_path
from game_memory.store.lifecycle import checked_ids, checked_keep
from game_memory.store.partitions import identity_hash, partition_hash
from game_memory.store.read_files import (
    READ_FOLDER,
    remove_read_files,
    remove_unheld_read_files,
)
from game_memory.store.rewrite_journal import REWRITE_JOURNAL, Rewrite
from game_memory.store.rewriting import STAGED, begin_rewrite, finish_rewrite
from game_memory.store.state import PartitionState, Segment

__all__ = ["compact", "erase", "erase_surplus", "held_partitions", "save_bytes"]

_TRACES = frozenset(finished_path(Path(name)).name for name in (BATCH_JOURNAL, REWRITE_JOURNAL))


def erase(
    engine: StoreEngine,
    session_id: str,
    owner_id: str | None = None,
    memory_ids: Sequence[str] | None = None,
) -> int:
    """Erase a session, one owner, or listed memories of one owner; return how many.

    Ids the owner does not hold are ignored.

    Raises:
        InvalidArgumentError: ``memory_ids`` without ``owner_id``, or a bad id.
        PersistenceError: a partition to erase from is damaged (nothing changed); salvage
            it first (``check --fix --accept-loss``).
    """
    validated_id(session_id, "session_id")
    if owner_id is not None:
        validated_id(owner_id, "owner_id")
    wanted = None if memory_ids is None else checked_ids(memory_ids)
    if wanted is not None and owner_id is None:
        raise InvalidArgumentError("erase takes memory_ids only together with owner_id")
    session_hash = partition_hash(session_id)
    owner_hash = None if owner_id is None else partition_hash(owner_id)
    engine.layout.guard()  # before the lock, whose file is in the data folder
    with engine.locked():
        engine.layout.guard()
        engine.recover(checkpoint=False)  # an erase that finds nothing changes nothing
        marks = engine.refresh()
        owners = [owner_hash] if owner_hash is not None else _owners(engine, session_hash)
        erased = 0
        hashes: set[str] = set()
        for owner in owners:
            state = engine.read_partition(session_hash, owner)
            engine.verify_partition(state, marks, locked=True, session_id=session_id)
            if state.view is None:
                continue
            if wanted is None:
                erased += len(state.view)
                continue
            present = [memory_id for memory_id in wanted if memory_id in state.view.positions]
            erased += len(present)
            hashes.update(identity_hash(memory_id) for memory_id in present)
        if not erased:
            if wanted is None:  # records already gone (an older build's erase): derived too
                remove_read_files(engine.data, session_hash, owner_hash, durable=True)
            return 0
        _rewrite_erasing(engine, session_hash, owner_hash, None if wanted is None else hashes)
        return erased


def erase_surplus(
    engine: StoreEngine, session_id: str, owner_id: str, memory_ids: Sequence[str], keep: int
) -> list[str]:
    """Erase the first of ``memory_ids`` (in their order) that the owner holds, only as many
    as take it down to ``keep`` memories, counted under the writer lock; the ids erased.

    The retention policy's erase. It chooses its victims from a snapshot taken before this
    lock: another process appending to the same owner and evicting meanwhile chose from
    the same state, and the two erases together took the owner below its target (8 of a
    target of 9, the new memories of both gone). Counted here, the owner never goes below
    ``keep`` however the evictions interleave.

    Raises:
        InvalidArgumentError: a bad id, or ``keep`` below 0.
        PersistenceError: the partition is damaged (nothing changed).
    """
    validated_id(session_id, "session_id")
    validated_id(owner_id, "owner_id")
    wanted = checked_ids(memory_ids)
    keep = checked_keep(keep)
    session_hash, owner_hash = partition_hash(session_id), partition_hash(owner_id)
    engine.layout.guard()
    with engine.locked():
        engine.layout.guard()
        engine.recover(checkpoint=False)
        marks = engine.refresh()
        state = engine.read_partition(session_hash, owner_hash)
        engine.verify_partition(state, marks, locked=True, session_id=session_id)
        if state.view is None:
            return []
        surplus = max(0, len(state.view) - keep)
        taken = [memory_id for memory_id in wanted if memory_id in state.view.positions]
        taken = taken[:surplus]
        if taken:
            _rewrite_erasing(engine, session_hash, owner_hash, {identity_hash(m) for m in taken})
        return taken


def _rewrite_erasing(
    engine: StoreEngine, session_hash: str, owner_hash: str | None, hashes: set[str] | None
) -> None:
    """Commit and carry out the erase of ``hashes`` (``None``: whole partitions) under the
    lock, after recovery: the journal is its commit; from there it is finished, never undone."""
    engine.layout.require_format(3)
    rewrite = Rewrite(
        "erase", session_hash, owner_hash, None if hashes is None else frozenset(hashes)
    )
    engine.checkpoint()  # the rewrite renumbers the ledger: every intent durable first
    rewrite = begin_rewrite(engine.rewrite_context, rewrite)
    finish_rewrite(engine.rewrite_context, rewrite, verify=False)


def compact(engine: StoreEngine) -> CompactionReport:
    """Compact the whole save (see the module docstring); safe beside readers and writers.

    Raises:
        PersistenceError: a partition is damaged (salvage it first), or a file could not
            be rewritten.
    """
    engine.layout.guard()  # before the lock, whose file is in the data folder
    with engine.locked():
        engine.layout.guard()
        engine.recover()
        before = save_bytes(engine.data)
        rewritten = 0
        removed = remove_temporary(engine.data)
        marks = engine.refresh()
        for session_hash in _sessions(engine):
            directory = engine.session_directory(session_hash)
            removed += remove_temporary(directory) + _remove_staged_leftovers(directory)
            for owner in engine.cache.owner_hashes(directory):
                state = engine.read_partition(session_hash, owner)
                engine.verify_partition(state, marks, locked=True)
                if _needs_rewrite(state, engine.maximum_file_bytes):
                    engine.layout.require_format(3)
                    rewrite = Rewrite("compact", session_hash, owner, phase="files")
                    rewrite = begin_rewrite(engine.rewrite_context, rewrite)
                    finish_rewrite(engine.rewrite_context, rewrite, verify=False)
                    rewritten += 1
            removed += _remove_empty_packs(engine, session_hash, directory)
            removed += _remove_empty_folder(directory)
        removed += remove_unheld_read_files(engine.data, held_partitions(engine))
        return CompactionReport(
            bytes_before=before,
            bytes_after=save_bytes(engine.data),
            partitions_rewritten=rewritten,
            files_removed=removed,
        )


def save_bytes(data: Path) -> int:
    """The size of every regular file under the data folder (links are not followed), but
    its derived read files.

    Left out: the traces of finished journals (``*.done.json``, a generation each:
    ``journal_traces.py``), bookkeeping of a few bytes that a save's first rewrite creates,
    and the ``read/`` folder, derived files that speed up the next open and are rebuilt on
    demand: the compaction's own reads of large partitions wrote new ones (in the
    background, and more when the store closed), so a compaction with nothing to do
    reported the save 8 MB larger each time, and the next one a different "before"."""
    total = 0
    for folder, names, files in os.walk(data):
        if folder == str(data) and READ_FOLDER in names:
            names.remove(READ_FOLDER)  # derived: not walked
        for name in files:
            if folder == str(data) and name in _TRACES:
                continue
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


def _owners(engine: StoreEngine, session_hash: str) -> list[str]:
    folder = engine.session_folder(session_hash)
    return sorted(
        set(engine.cache.owner_hashes(folder))
        | set(engine.intents.owner_hashes(session_hash))
        | set(engine.retraction_intents.owner_hashes(session_hash))
    )


def held_partitions(engine: StoreEngine) -> dict[str, set[str]]:
    """Every session the save holds (a folder, or ledger intents) and, per session, its
    owners with records (logs or packs) or intents (under the lock): the partitions whose
    read files ``compact`` and ``check --fix`` keep (``read_files.remove_unheld_read_files``).

    Both intents indexes are refreshed here first, never trusted as a caller left them: a
    plain check refreshes neither, and a recovery that stopped at a damaged partition may
    not have either, and an index behind its ledger calls an NPC the save still holds (by
    intents alone: its log lost) one it no longer holds.

    Raises:
        PersistenceError: a ledger or the data folder could not be read.
    """
    engine.refresh()
    held: dict[str, set[str]] = {}
    for session_hash in _sessions(engine):
        held[session_hash] = set(engine.cache.owner_hashes(engine.session_folder(session_hash)))
    for intents in (engine.intents, engine.retraction_intents):
        for session_hash in intents.session_hashes():
            held.setdefault(session_hash, set()).update(intents.owner_hashes(session_hash))
    return held


def _sessions(engine: StoreEngine) -> list[str]:
    return sorted(
        entry.name[2:]
        for entry in fs.list_directory(engine.data)
        if entry.name.startswith("s-") and len(entry.name) == 66 and entry.is_dir()
    )


def _needs_rewrite(state: PartitionState, maximum_file_bytes: int) -> bool:
    """Whether a rewrite of the partition would leave fewer files or fewer records."""
    records = sum(len(part.memories) for part in state.packs) + sum(
        len(segment.items) for segment in state.segments
    )
    if records > state.memory_count:
        return True  # a second copy of a record
    for segments in (state.segments, state.retraction_segments):
        if any(not segment.items for segment in segments):
            return True
        if len(segments) > _packed_count(segments, maximum_file_bytes):
            return True
    seen: set[tuple[str, str]] = set()
    known = state.view.positions if state.view is not None else {}
    for memory_id, at in state.retractions:
        key = (memory_id, at.timeline_id)
        if key in seen or memory_id not in known:
            return True  # redundant, or of a memory no longer there
        seen.add(key)
    return False


def _packed_count(segments: Sequence[Segment[Any]], maximum_file_bytes: int) -> int:
    """How many segments the rewrite's greedy packing (``split_segments``) makes of these
    segments' records: a series is rewritten only when that is fewer files. (An estimate
    from the bytes alone, ``held / (0.9 * maximum)``, asked for more than the packing can
    give when records are over a tenth of a file: every compact then reported the
    partition rewritten, leaving its files as they were.)"""
    count = 0
    size = 0
    for segment in segments:
        starts = segment.starts.tolist()
        if len(starts) != len(segment.items):  # not known record by record: as written
            return len(segments)
        for start, stop in zip(starts, [*starts[1:], segment.end], strict=True):
            record = stop - start
            if size and size + record > maximum_file_bytes:
                count, size = count + 1, 0
            size += record
    return count + (1 if size else 0)


def _remove_staged_leftovers(directory: Path) -> int:
    """Staged files without a rewrite journal: an abandoned staging (recovery ran first)."""
    removed = 0
    for entry in fs.list_directory(directory):
        if entry.name.endswith(STAGED) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            removed += 1
    if removed:
        fs.fsync_directory(directory)
    return removed


def _remove_empty_packs(engine: StoreEngine, session_hash: str, directory: Path) -> int:
    """Delete the empty packs at the end of the session's series (the numbering stays
    contiguous; a reader that loses the race reads again under the lock)."""
    indexes = engine.cache.pack_indexes(directory)
    removed = 0
    if indexes and not indexes[-1].owners:
        engine.counts.bump(session_hash, None)  # files of the session go
    while indexes and not indexes[-1].owners:
        try:
            os.unlink(indexes.pop().path)
        except OSError as exc:
            raise PersistenceError(f"could not remove an empty pack: {exc.strerror}") from exc
        removed += 1
    if removed:
        fs.fsync_directory(directory)
    return removed


def _remove_empty_folder(directory: Path) -> int:
    try:
        if os.listdir(directory):
            return 0
        os.rmdir(directory)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise PersistenceError(f"could not remove {directory}: {exc.strerror}") from exc
    fs.fsync_directory(directory.parent)
    return 1
