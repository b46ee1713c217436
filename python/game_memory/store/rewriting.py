"""Rewriting partitions: how an erase removes bytes for good and a compaction tidies files.

Everything here runs under the writer lock, driven by the rewrite journal
(``rewrite_journal.py``), and every step is idempotent, so :func:`finish_rewrite` both
completes a rewrite that was just committed and finishes one whose writer died, from the
phase its journal names:

1. ``copies`` (erase only): read the memories the erase covers (the partition's files are
   still untouched) and delete their copies outside the partition (``copies.py``); then
   advance the journal to ``files``. Doing this first is what lets a crash later still
   name every copy: once a partition file changes, the copies are already gone, durably.
2. ``files``: a whole session is deleted (its ledger intents first, then its folder).
   For one owner partition, read its files and write what stays under staging names
   (``*.new``, which readers never look at): each pack holding a record to drop, rebuilt
   without it; the owner's memory log and retraction log, each as the fewest segments of
   up to ``maximum_file_bytes`` (a series that would not change is left alone). Erased
   memories, second copies of a memory and retractions of memories no longer there are
   dropped, and so is a retraction that another of the same memory and timeline at an
   earlier or equal tick makes redundant. The staged files and the folder are fsynced;
   the ledgers are rewritten to match (intents of erased memories and dropped retractions
   removed); then the journal advances to ``switch`` with each new series' length.
3. ``switch``: rename every staged file over the file it replaces, delete the old
   segments past each new series' length (highest first), fsync the folder, remove the
   journal.

A crash in phase 2 leaves the partition's own files untouched (staging is redone from
them); a crash in phase 3 leaves complete, durable staged files, and the switch is
finished. Readers never see a partition between two of these steps: while a journal
exists they wait for the writer lock (``engine.py``).

A journal left by a dead writer is finished only if the save is in a state its rewrite
leaves at the phase it names (``rewrite_journal.mismatch``): an old copy of a journal put
back after its rewrite was done would erase what was learned since, or delete segments
written since. Staged files are never taken as proof that a rewrite is under way (a sync
tool that restores deleted files brings them back with an old journal, and any file can
carry their names): a refused journal's are set aside with it (:func:`staged_files`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np

from game_memory.durable import fs, portable
from game_memory.durable.names import identity_hash, partition_hash, segment_path
from game_memory.errors import PersistenceError
from game_memory.store.copies import ErasedId, remove_copies, remove_tree
from game_memory.store.documents import DocumentError
from game_memory.store.journal_traces import StaleJournalError
from game_memory.store.ledger import Ledger
from game_memory.store.packs import encode_pack, pack_path, read_pack_index, read_pack_range
from game_memory.store.partitions import PartitionCache
from game_memory.store.read_files import remove_read_files
from game_memory.store.records import HEADER_BYTES, RecordCorruption, encode_record, scan_records
from game_memory.store.retractions import Retraction, decode_retraction
from game_memory.store.rewrite_counts import RewriteCounts
from game_memory.store.rewrite_journal import Rewrite, RewriteJournal, erased_intents, mismatch

__all__ = [
    "RewriteContext",
    "begin_rewrite",
    "finish_rewrite",
    "split_segments",
    "staged_files",
]

STAGED = ".new"
_STAGED_NAME = re.compile(
    r"^(?:[or]-([0-9a-f]{64})(?:\.[1-9][0-9]{0,8})?\.log|p-[1-9][0-9]{0,8}\.pack)\.new$"
)
_Item = TypeVar("_Item")


@dataclass(frozen=True, slots=True)
class RewriteContext:
    """What a rewrite needs of the store (the engine hands it out)."""

    root: Path
    data: Path
    ledger: Ledger
    retraction_ledger: Ledger
    journal: RewriteJournal
    cache: PartitionCache
    maximum_file_bytes: int
    counts: RewriteCounts


def begin_rewrite(context: RewriteContext, rewrite: Rewrite) -> Rewrite:
    """Write the journal of a new rewrite with what a recovery checks the save against
    (``rewrite_journal.mismatch``): an erase's commit. Under the writer lock, after
    recovery and a checkpoint.

    Returns:
        The rewrite as its journal names it, for :func:`finish_rewrite`.

    Raises:
        PersistenceError: the ledger is damaged (nothing was written: an erase could not
            rewrite it either), or the journal could not be written.
    """
    ledgers = (context.ledger.count(), context.retraction_ledger.count())
    erased = erased_intents(context.ledger, rewrite) if rewrite.erases else None
    begun = dataclasses.replace(rewrite, ledgers=ledgers, erased_intents=erased)
    return context.journal.begin(begun)


def finish_rewrite(context: RewriteContext, rewrite: Rewrite, *, verify: bool = True) -> None:
    """Carry ``rewrite`` through to its end from the phase its journal names (see above).

    ``verify``: check the save against the journal first (a journal found on disk); false
    only for the rewrite :func:`begin_rewrite` just began.

    Raises:
        PersistenceError: the save disagrees with the journal (nothing was done: the
            message names the repair), or a file could not be read (it is corrupt) or
            written.
    """
    if verify:
        problem = mismatch(rewrite, context.ledger, context.retraction_ledger)
        if problem is not None:
            raise StaleJournalError(context.journal.path, problem)
    # Before any file is deleted or replaced: other processes' caches of the partition
    # (or the session) are not reused from here on (``rewrite_counts.py``). Counted again
    # when a recovery finishes it: a count too many only costs a re-read.
    context.counts.bump(rewrite.session_hash, rewrite.owner_hash)
    if rewrite.phase == "copies":
        _remove_copies(context, rewrite)
        rewrite = dataclasses.replace(rewrite, phase="files")
        context.journal.write(rewrite)
    directory = context.data / f"s-{rewrite.session_hash}"
    if rewrite.phase == "files":
        if rewrite.owner_hash is None:
            _rewrite_ledgers(context, rewrite, None)
            _forget_cached(context, rewrite)  # its descriptors and maps before its files
            remove_tree(directory)
            remove_read_files(context.data, rewrite.session_hash, durable=True)  # derived too
            context.journal.remove(rewrite.generation)
            _forget_cached(context, rewrite)  # and whatever a read cached meanwhile
            return
        rewrite, retractions_kept = _stage(context, rewrite, directory)
        _rewrite_ledgers(context, rewrite, retractions_kept)
        ledgers = (context.ledger.count(), context.retraction_ledger.count())
        rewrite = dataclasses.replace(rewrite, ledgers=ledgers)  # what a switch must find
        context.journal.write(rewrite)
    # The cached partition first: the descriptors of its files and the maps of its read
    # files go with it (on Windows a file open or mapped cannot be replaced or removed);
    # and again at the end, for whatever a read cached meanwhile (as before the switch).
    _forget_cached(context, rewrite)
    _switch(rewrite, directory)
    remove_read_files(
        context.data, rewrite.session_hash, rewrite.owner_hash, durable=True
    )  # derived copies too: a power loss must not bring an erased memory's back
    context.journal.remove(rewrite.generation)
    _forget_cached(context, rewrite)


def split_segments(records: list[bytes], maximum_file_bytes: int) -> list[bytes]:
    """Greedily pack framed records into segments of at most ``maximum_file_bytes`` each
    (as appends fill them; a record never spans two)."""
    segments: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for record in records:
        if size and size + len(record) > maximum_file_bytes:
            segments.append(b"".join(current))
            current, size = [], 0
        current.append(record)
        size += len(record)
    if current:
        segments.append(b"".join(current))
    return segments


# -- phase 1: copies -------------------------------------------------------------------------


def _remove_copies(context: RewriteContext, rewrite: Rewrite) -> None:
    directory = context.data / f"s-{rewrite.session_hash}"
    owners = (
        [rewrite.owner_hash]
        if rewrite.owner_hash is not None
        else context.cache.owner_hashes(directory)
    )
    erased: list[ErasedId] = []
    for owner_hash in owners:
        state = context.cache.read(directory, rewrite.session_hash, owner_hash)
        view = state.view
        if view is None:
            continue
        # By the ids alone: decoding every memory of the partition to find the erased
        # ones cost most of an erase of one memory of a large NPC (0.8 s at 16k).
        erased.extend(
            ErasedId(view.session_id, view.owner_id, memory_id)
            for memory_id in view.memory_ids
            if rewrite.covers(rewrite.session_hash, owner_hash, identity_hash(memory_id))
        )
    remove_copies(
        context.root,
        context.data,
        rewrite.session_hash,
        rewrite.owner_hash,
        erased,
        whole_partitions=rewrite.memory_hashes is None,
    )


# -- phase 2: ledgers and staging -------------------------------------------------------------


def _rewrite_ledgers(
    context: RewriteContext, rewrite: Rewrite, retractions_kept: dict[str, int] | None
) -> None:
    """Drop the intents of erased memories and of retractions no longer kept.

    ``retractions_kept`` maps a memory hash of the rewritten partition to how many of its
    retractions stay (``None``: the whole session goes).
    """
    session, owner = rewrite.session_hash, rewrite.owner_hash
    # On raw records, not entry objects: the ledger holds an intent per memory of the
    # whole save, and an erase drops a partition's few (250 ms at 100k intents as
    # objects). Every record is still verified as a read verifies it.
    rows = context.ledger.records()
    if rewrite.erases:
        drop = np.zeros(rows.shape[0], dtype=np.bool_)
        hashes = rewrite.memory_hashes
        for position in context.ledger.partition_rows(rows, session, owner).tolist():
            drop[position] = hashes is None or context.ledger.memory_hash(rows, position) in hashes
        if drop.any():
            context.ledger.rewrite_records(rows, drop)
    retractions = context.retraction_ledger.records()
    remaining = dict(retractions_kept or {})
    dropped = np.zeros(retractions.shape[0], dtype=np.bool_)
    for position in context.retraction_ledger.partition_rows(retractions, session, owner).tolist():
        memory_hash = context.retraction_ledger.memory_hash(retractions, position)
        if remaining.get(memory_hash, 0) > 0:
            remaining[memory_hash] -= 1
        else:
            dropped[position] = True
    if dropped.any():
        context.retraction_ledger.rewrite_records(retractions, dropped)


@dataclass
class _PackRead:
    path: str
    others: list[tuple[str, list[bytes]]]
    mine: list[tuple[str, bytes]]  # each record's memory id, and its payload


@dataclass
class _Series(Generic[_Item]):
    """One log series of the partition as read: its items with their payloads, and the
    valid bytes of each segment (torn tails left out)."""

    items: list[tuple[_Item, bytes]] = field(default_factory=list)
    contents: list[bytes] = field(default_factory=list)


def _stage(
    context: RewriteContext, rewrite: Rewrite, directory: Path
) -> tuple[Rewrite, dict[str, int]]:
    """Write the partition's new files under staging names; return the journal's next
    state (``switch``) and, per memory hash, how many of its retractions stay."""
    session_hash, owner_hash = rewrite.session_hash, rewrite.owner_hash
    assert owner_hash is not None
    if not os.path.isdir(directory):  # nothing left of the partition (a switch emptied it)
        return dataclasses.replace(rewrite, phase="switch", segments=0, retraction_segments=0), {}
    _remove_staged(directory, owner_hash)
    maximum = context.maximum_file_bytes
    erased = _covered(rewrite, session_hash, owner_hash)
    kept_ids: set[str] = set()
    for pack in _read_packs(directory, session_hash, owner_hash, maximum):
        mine: list[bytes] = []
        for found, payload in pack.mine:
            if not erased(found) and found not in kept_ids:
                kept_ids.add(found)
                mine.append(encode_record(payload))
        if len(mine) != len(pack.mine):
            groups = [(h, [encode_record(p) for p in payloads]) for h, payloads in pack.others]
            if mine:
                groups.append((owner_hash, mine))
            _write_staged(Path(pack.path + STAGED), encode_pack(groups))

    owner: str = owner_hash

    def identify(payload: bytes, path: str) -> str:
        return _memory_id(payload, path, session_hash, owner)

    memories = _read_series(directory, owner_hash, "o", identify, maximum)
    records: list[bytes] = []
    for memory_id, payload in memories.items:
        if not erased(memory_id) and memory_id not in kept_ids:
            kept_ids.add(memory_id)
            records.append(encode_record(payload))
    segments = _stage_series(directory, owner_hash, "o", memories, records, maximum)

    retractions = _read_series(directory, owner_hash, "r", _decode_retraction, maximum)
    earliest: dict[tuple[str, str], int] = {}
    for (memory_id, at), _payload in retractions.items:
        key = (memory_id, at.timeline_id)
        earliest[key] = min(earliest.get(key, at.tick), at.tick)
    kept: list[bytes] = []
    counts: dict[str, int] = {}
    taken: set[tuple[str, str]] = set()
    for (memory_id, at), payload in retractions.items:
        key = (memory_id, at.timeline_id)
        if memory_id not in kept_ids or key in taken or at.tick != earliest[key]:
            continue  # erased, unknown, or made redundant by an earlier retraction
        taken.add(key)
        kept.append(encode_record(payload))
        memory_hash = identity_hash(memory_id)
        counts[memory_hash] = counts.get(memory_hash, 0) + 1
    retraction_segments = _stage_series(directory, owner_hash, "r", retractions, kept, maximum)
    fs.fsync_directory(directory)
    staged = dataclasses.replace(
        rewrite, phase="switch", segments=segments, retraction_segments=retraction_segments
    )
    return staged, counts


def _covered(rewrite: Rewrite, session_hash: str, owner_hash: str) -> Callable[[str], bool]:
    def covered(memory_id: str) -> bool:
        return rewrite.covers(session_hash, owner_hash, identity_hash(memory_id))

    return covered


def _stage_series(
    directory: Path,
    owner_hash: str,
    series: str,
    read: _Series[_Item],
    records: list[bytes],
    maximum_file_bytes: int,
) -> int:
    """Stage a series' new segments unless they equal the old; return its new length."""
    contents = split_segments(records, maximum_file_bytes)
    if contents == read.contents:
        return len(read.contents)
    for number, data in enumerate(contents):
        _write_staged(Path(segment_path(directory, owner_hash, number, series) + STAGED), data)
    return len(contents)


def _read_packs(
    directory: Path, session_hash: str, owner_hash: str, maximum_file_bytes: int
) -> list[_PackRead]:
    """Every pack of the session holding records of the owner, with all its ranges."""
    payload_bound = maximum_file_bytes - HEADER_BYTES
    found: list[_PackRead] = []
    number = 1
    while True:
        path = pack_path(directory, number)
        info = fs.lstat_regular(path)
        if info is None:
            return found
        index = read_pack_index(path, info, maximum_file_bytes)
        if owner_hash in index.owners:
            others = [
                (other, read_pack_range(index, other, payload_bound))
                for other in sorted(index.owners)
                if other != owner_hash
            ]
            mine = [
                (_memory_id(payload, path, session_hash, owner_hash), payload)
                for payload in read_pack_range(index, owner_hash, payload_bound)
            ]
            found.append(_PackRead(path, others, mine))
        number += 1


def _read_series(
    directory: Path,
    owner_hash: str,
    series: str,
    decode: Callable[[bytes, str], _Item],
    maximum_file_bytes: int,
) -> _Series[_Item]:
    """Read a log series strictly (damage raises; only the last segment may be torn)."""
    read: _Series[_Item] = _Series()
    number = 0
    torn_before: str | None = None
    while True:
        path = segment_path(directory, owner_hash, number, series)
        loaded = fs.read_file(path, maximum_file_bytes)
        if loaded is None:
            return read
        if torn_before is not None:
            raise PersistenceError(f"{torn_before} is cut short before the next segment")
        data = loaded[0]
        try:
            scan = scan_records(data, maximum_payload=maximum_file_bytes - HEADER_BYTES)
        except RecordCorruption as exc:
            raise PersistenceError(
                f"{path} is corrupt ({exc.reason} at byte {exc.offset}); run 'game-memory "
                "check' and salvage the save before erasing from it"
            ) from exc
        if scan.torn_bytes:
            torn_before = path
        read.contents.append(data[: scan.end])
        read.items.extend((decode(payload, path), payload) for payload in scan.payloads)
        number += 1


def _memory_id(payload: bytes, path: str, session_hash: str, owner_hash: str) -> str:
    """The memory id of a record the rewrite copies, checked to be of this partition.

    A rewrite copies records byte for byte; it needs each one's id (what is erased, which
    copy of a memory is the first) and proof that the record is of this partition, not
    the memory itself. So the payload is parsed as JSON and those three ids read, without
    validating the whole memory, whose ``payload_json`` is a second, strict parse: the
    full decode of every record cost most of an erase of one memory of a large NPC.
    Records the rewrite keeps are checked again, fully, when they are read.

    Raises:
        PersistenceError: the record is not a memory record of a readable shape, or is of
            another partition (the save is corrupt).
    """
    try:
        document = json.loads(payload)
        memory = document["memory"]
        memory_id, session_id, owner_id = (
            memory["memory_id"],
            memory["session_id"],
            memory["owner_id"],
        )
        if not (
            isinstance(memory_id, str) and isinstance(session_id, str) and isinstance(owner_id, str)
        ):
            raise TypeError("an id is not a text")
    except (ValueError, RecursionError, KeyError, TypeError) as exc:
        raise PersistenceError(f"{path} holds an unreadable record: {exc}") from exc
    if (partition_hash(session_id), partition_hash(owner_id)) != (session_hash, owner_hash):
        raise PersistenceError(f"{path} holds a memory of another partition; the save is corrupt")
    return memory_id


def _decode_retraction(payload: bytes, path: str) -> Retraction:
    try:
        return decode_retraction(payload)
    except DocumentError as exc:
        raise PersistenceError(f"{path} holds an unreadable retraction: {exc}") from exc


def _write_staged(path: Path, data: bytes) -> None:
    """Write a staged file whole and fsync it (the folder is fsynced once, after all)."""
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | portable.OPEN_FLAGS
        fd = os.open(path, flags, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise PersistenceError(f"could not write {path}: {exc.strerror}") from exc


def _staged_names(directory: Path, owner_hash: str) -> list[str]:
    names: list[str] = []
    for entry in fs.list_directory(directory):
        match = _STAGED_NAME.match(entry.name)
        if match is not None and match.group(1) in (None, owner_hash):
            names.append(entry.name)
    return names


def staged_files(data: Path, rewrite: Rewrite) -> list[Path]:
    """The staged files (``*.new``) of the partition ``rewrite`` covers, sorted: its owner's
    series and the session's packs (a session's: every one in its folder), which a
    ``switch`` of it would rename over the partition's files.

    For ``check --fix``, which sets them aside with a journal it refuses: only a rewrite
    under way stages files (staging starts by removing them, and every writer finishes a
    journal before it writes), so once that journal is set aside they are leftovers that
    nothing may act on, and must not sit where a later journal's switch would take them.

    Raises:
        PersistenceError: the session's folder could not be listed.
    """
    directory = data / f"s-{rewrite.session_hash}"
    if os.path.islink(directory) or not os.path.isdir(directory):
        return []  # what a link names is never touched (``check`` names the link)
    owners = (None, rewrite.owner_hash)
    return [
        directory / entry.name
        for entry in fs.list_directory(directory, links=[])  # links left out, never moved
        if (match := _STAGED_NAME.match(entry.name)) is not None
        and (rewrite.owner_hash is None or match.group(1) in owners)
    ]


def _remove_staged(directory: Path, owner_hash: str) -> None:
    for name in _staged_names(directory, owner_hash):
        try:
            os.unlink(directory / name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PersistenceError(f"could not remove {directory / name}: {exc.strerror}") from exc


# -- phase 3: switch --------------------------------------------------------------------------


def _switch(rewrite: Rewrite, directory: Path) -> None:
    owner_hash = rewrite.owner_hash
    assert owner_hash is not None and rewrite.segments is not None
    assert rewrite.retraction_segments is not None
    if not os.path.isdir(directory):
        return
    try:
        for name in _staged_names(directory, owner_hash):
            os.replace(directory / name, directory / name[: -len(STAGED)])
        for series, length in (("o", rewrite.segments), ("r", rewrite.retraction_segments)):
            number = length
            while os.path.lexists(segment_path(directory, owner_hash, number, series)):
                number += 1
            for stale in range(number - 1, length - 1, -1):
                os.unlink(segment_path(directory, owner_hash, stale, series))
    except OSError as exc:
        raise PersistenceError(f"could not rewrite {directory}: {exc.strerror}") from exc
    fs.fsync_directory(directory)
    if not os.listdir(directory):
        os.rmdir(directory)
        fs.fsync_directory(directory.parent)


def _forget_cached(context: RewriteContext, rewrite: Rewrite) -> None:
    if rewrite.owner_hash is None:
        context.cache.forget_session(rewrite.session_hash)
    else:
        context.cache.forget(rewrite.session_hash, rewrite.owner_hash)
