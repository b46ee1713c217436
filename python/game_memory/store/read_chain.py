"""Partitions opened from their read-file chains (``read_files.py``), checked against the save.

:func:`seeded_state` turns a partition's chain of read files, once checked against the files
of the save, into the :class:`PartitionState` an earlier read of those bytes would have left
in the cache: its packs' ranges and log segments up to the bytes covered, and a view whose
memories are decoded lazily and whose columns, lexical index and digests are restored from
the parts. The partition cache then brings that state up to date exactly as it brings any
cached state up to date (reading only the bytes appended since), so what a read returns
never depends on whether a read file was used. Writing the parts is ``read_path.py``'s.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from game_memory.durable import portable
from game_memory.durable.fs import lstat_regular
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.columns import PredicateColumns
from game_memory.store.covered_stamps import Identity, read_covered, write_covered
from game_memory.store.descriptors import descriptors_exhausted, out_of_descriptors
from game_memory.store.lazy import LazyMemories, LazyPositions, RecordFile
from game_memory.store.packed_ids import joined_ids
from game_memory.store.packs import PackIndex
from game_memory.store.postings import LexicalIndex, TermTable
from game_memory.store.read_files import (
    COLUMN_NAMES,
    SETTLED_NS,
    Covered,
    Later,
    Part,
    ReadFile,
    file_crc,
    load_read_file,
    read_file_path,
    read_folders_real,
)
from game_memory.store.read_parts import tables_extend
from game_memory.store.state import PackPart, PartitionState, Segment
from game_memory.store.view import PartitionView, ReadPrefix

__all__ = ["load_chain", "seeded_state"]

_LOG = logging.getLogger("game_memory.store")
Decode = Callable[[bytes, str], GameMemory]

_Scan = tuple[bool, tuple[tuple[int, str, int], ...], dict[str, tuple[tuple[str, int], ...]]]


def _scan_of(stored: Any) -> _Scan:
    """The view's scan (``view.py``) from its JSON form (lists in place of tuples)."""
    keys: Any = stored[0]
    rows: Any = stored[1]
    waiting: Any = stored[2]
    return (
        bool(keys),
        tuple((int(p), str(t), int(k)) for p, t, k in rows),
        {str(i): tuple((str(t), int(k)) for t, k in moments) for i, moments in waiting.items()},
    )


def load_chain(
    session_directory: str, session_hash: str, owner_hash: str, later: Later | None = None
) -> list[ReadFile]:
    """The partition's parts that form a chain from its first memory: part 0, then each
    next part that starts where the one before ends, names its header and extends its code
    tables. Stops at the first part missing, damaged, foreign or stale (logged). Stamps
    go to ``later`` (``read_files.load_read_file``)."""
    chain: list[ReadFile] = []
    data, session = os.path.split(session_directory)
    if not read_folders_real(Path(data), session):
        _LOG.warning(
            "the read files of %s are behind a link or a file, not in the save: not used",
            session_directory,
        )
        return chain
    end, previous = 0, 0
    for number in itertools.count():
        path = read_file_path(session_directory, owner_hash, number)
        read = load_read_file(path, session_hash, owner_hash, later)
        if read is None:
            break
        part = read.part
        if (part.start, read.previous) != (end, previous) or part.count == 0:
            _stale(path, "it does not continue the part before it")
            break
        if chain and not tables_extend(chain[-1].part.tables, part.tables):
            _stale(path, "its code tables do not extend those of the part before it")
            break
        chain.append(read)
        end, previous = part.end, read.header_crc
    return chain


def seeded_state(
    session_directory: str,
    session_hash: str,
    owner_hash: str,
    indexes: list[PackIndex],
    segment_path: Callable[[int], str],
    decode: Decode,
    later: Later | None = None,
) -> PartitionState | None:
    """The state a read of the covered bytes would have cached, or ``None`` (no usable file).

    Raises nothing for a stale or damaged read file (it is ignored and logged); the files
    of the save are checked byte for byte (CRC-32) before anything of it is used. A
    process with no descriptor left gets ``PersistenceError`` saying so at once
    (``descriptors.descriptors_exhausted``): a whole read of the partition would fail too,
    less clearly. The
    stamps that record such checks (verified and covered stamps, with their fsyncs) are
    written by jobs handed to ``later`` when given (the store's read-file thread: off the
    first recall), else before returning.
    """
    chain = load_chain(session_directory, session_hash, owner_hash, later)
    while chain:
        state = _seeded(
            chain,
            session_directory,
            session_hash,
            owner_hash,
            indexes,
            segment_path,
            decode,
            later,
        )
        if state is not None:
            return state
        chain.pop()  # a later part that no longer matches the save: use the ones before
    return None


def _seeded(
    chain: list[ReadFile],
    session_directory: str,
    session_hash: str,
    owner_hash: str,
    indexes: list[PackIndex],
    segment_path: Callable[[int], str],
    decode: Decode,
    later: Later | None,
) -> PartitionState | None:
    path = read_file_path(session_directory, owner_hash, len(chain) - 1)
    owned = [index for index in indexes if owner_hash in index.owners]
    # Every covered range in chain order, checked to name the partition's files in order:
    # its packs' owner ranges first (part 0 only), then its segments, each range going on
    # from where the one before ended in the same segment, or from byte 0 of the next one
    # once the one before is covered to its end.
    paths: list[str] = []  # the distinct files, in order
    identities: list[tuple[int, int]] = []
    ends: list[int] = []  # the last covered byte of each
    numbers: list[npt.NDArray[np.int64]] = []  # per part: its ranges' file numbers
    packs = 0
    segment, end = -1, 0
    started = time.time_ns()  # before any identity is taken (see SETTLED_NS)
    restamp: list[tuple[int, list[Identity | None]]] = []
    for at, read in enumerate(chain):
        mapping: list[int] = []
        part_path = read_file_path(session_directory, owner_hash, at)
        vouched = read_covered(part_path, read.header_crc, len(read.part.files))
        seen: list[Identity | None] = []
        hashed = False
        for number, covered in enumerate(read.part.files):
            if covered.name.startswith("p-"):
                if at or segment >= 0 or packs >= len(owned):
                    return _stale(path, "its packs do not match the partition's")
                index = owned[packs]
                first, length, _ = index.owners[owner_hash]
                if os.path.basename(index.path) != covered.name or (first, first + length) != (
                    covered.start,
                    covered.end,
                ):
                    return _stale(path, f"{covered.name} changed")
                full, identity = index.path, (index.device, index.inode)
                packs += 1
                paths.append(full)
                identities.append(identity)
                ends.append(covered.end)
            elif segment >= 0 and covered.name == os.path.basename(paths[-1]):
                if covered.start != end:
                    return _stale(path, f"its ranges of {covered.name} do not follow on")
                full = paths[-1]
                ends[-1] = covered.end
            else:
                if segment >= 0:
                    info = lstat_regular(paths[-1])
                    if info is None or info.st_size != end:
                        return _stale(path, f"{os.path.basename(paths[-1])} changed")
                segment += 1
                full = segment_path(segment)
                if os.path.basename(full) != covered.name or covered.start != 0:
                    return _stale(path, "its segments are out of order")
                try:
                    info = lstat_regular(full)
                except PersistenceError:
                    return _stale(path, f"{covered.name} is not a regular file")
                if info is None:
                    return _stale(path, f"{covered.name} was removed")
                paths.append(full)
                identities.append((info.st_dev, info.st_ino))
                ends.append(covered.end)
            end = covered.end
            # Another file than the one the CRC was taken of (a copy, or a file replaced by
            # an erase or a compaction) is never "unchanged": its covered bytes are checked,
            # unless a covered stamp found them so under the identity the file has now.
            now = _identity_of(full)
            unchanged = now is not None and (
                (covered.size >= 0 and now == _named(covered))
                or (vouched is not None and vouched[number] == now)
            )
            if not unchanged:
                if file_crc(full, covered.start, covered.end, mapped=True) != covered.crc:
                    return _stale(path, f"the bytes of {covered.name} it covers changed")
                hashed = True
            settled = now is not None and started - now[4] >= SETTLED_NS
            seen.append(now if settled else None)
            mapping.append(len(paths) - 1)
        numbers.append(np.asarray(mapping, np.int64))
        if hashed and any(identity is not None for identity in seen):
            restamp.append((at, seen))  # (files changed within SETTLED_NS: nothing to record)
    if packs != len(owned) and segment >= 0:
        return _stale(path, "its packs do not match the partition's")
    if segment >= 0:
        info = lstat_regular(paths[-1])
        if info is None or info.st_size < end:
            return _stale(path, f"{os.path.basename(paths[-1])} was cut")
    parts = [read.part for read in chain]
    located = _located(parts, numbers)
    if located.size and bool(np.any(located[1:] < located[:-1])):
        return _stale(path, "its records are out of order")
    opened: list[RecordFile] = []
    for full in paths:
        try:
            fd = os.open(full, os.O_RDONLY | portable.OPEN_FLAGS)
        except OSError as exc:
            if out_of_descriptors(exc):  # reading the partition whole would fail too
                raise descriptors_exhausted(full, exc) from exc
            return _stale(path, f"{os.path.basename(full)} cannot be opened")
        opened.append(RecordFile(full, fd))
    if len(parts) == 1:  # the part's arrays, views of its map (copies cost page faults)
        offsets = parts[0].location_offsets.astype(np.int64, copy=False)
        lengths = parts[0].location_lengths
    else:
        offsets = np.concatenate([part.location_offsets for part in parts]).astype(np.int64)
        lengths = np.concatenate([part.location_lengths for part in parts])
    ids = joined_ids([part.ids for part in parts])
    count = len(ids)
    if not count:
        return None
    try:
        prefix = _prefix(parts, count)
    except ValueError as exc:
        return _stale(path, str(exc))
    memories = LazyMemories.of(opened, _Locations(located, offsets, lengths), decode, ids)
    pack_parts: list[PackPart] = []
    segment_states: list[Segment[GameMemory]] = []
    numbered = np.arange(len(paths) + 1, dtype=located.dtype)  # not a copy of ``located``
    bounds = np.searchsorted(located, numbered, side="left").tolist()
    for number, full in enumerate(paths):
        first, stop = int(bounds[number]), int(bounds[number + 1])
        window = memories.window(first, stop)
        if number < packs:
            pack_parts.append(PackPart(owned[number], window))
        else:
            segment_states.append(
                Segment(
                    full,
                    *identities[number],
                    ends[number],
                    ends[number],
                    0,
                    window,
                    offsets[first:stop],
                )
            )
    # The ranges hashed now (a copied save) are recorded as found, so the next open of the
    # same files hashes none of them (``covered_stamps.py``).
    for at, seen in restamp:
        job = functools.partial(
            write_covered,
            read_file_path(session_directory, owner_hash, at),
            chain[at].header_crc,
            seen,
        )  # the identities as checked: a file changed since no longer matches its own
        if later is None:
            job()
        else:
            later(job)
    # Found by the ids' hashes at first, the dict built once lookups are many (the first
    # recall makes none); a repeated id raises then.
    positions = LazyPositions(ids, str(path), prefix.hashes)
    head = memories[0]  # the session and owner ids come from the save itself
    view = PartitionView(head.session_id, head.owner_id, memories, positions, prefix=prefix)
    return PartitionState(
        session_hash,
        owner_hash,
        tuple(pack_parts),
        tuple(segment_states),
        view,
        read_chain=tuple((read.part.count, read.header_crc) for read in chain),
    )


def _identity_of(path: str) -> Identity | None:
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _named(covered: Covered) -> Identity:
    """The identity a part names a covered file by (the file its CRC was taken of)."""
    return (covered.device, covered.inode, covered.size, covered.modified, covered.changed)


def _prefix(parts: Sequence[Part], count: int) -> ReadPrefix:
    """What the parts give the view of their memories: the columns (arrays joined, the
    last part's code tables), the lexical index (one set of rows per part), the last
    part's scan, the digests.

    Raises:
        ValueError: the parts' arrays do not fit together.
    """
    first = parts[0]
    if len(parts) == 1 and first.tables["tags"] == sorted(first.tables["tags"]):
        # One part (its tags in order, as a writer sorts them): its arrays, views of the
        # read file's map, as they are. Copies cost 4 ms of page faults at 100k memories.
        columns = PredicateColumns.restore((first.columns, first.tables), count)
    else:
        arrays, ordered = _joined_columns(parts)
        tables = {**parts[-1].tables, "tags": ordered}
        columns = PredicateColumns.restore((arrays, tables), count)
    lexical = LexicalIndex.restore_parts(
        [
            (
                TermTable(part.term_blob, part.term_offsets),
                part.posting_offsets,
                part.posting_documents,
                part.posting_frequencies,
                part.lengths,
            )
            for part in parts
        ],
        count,
    )
    if len(parts) == 1:  # the part's own views of its map: nothing copied
        hashes, digests = parts[0].hashes, parts[0].digests
    else:
        hashes = b"".join(part.hashes for part in parts)
        digests = b"".join(part.digests for part in parts)
    return ReadPrefix(count, columns, lexical, _scan_of(parts[-1].scan), hashes, digests)


def _located(parts: Sequence[Part], numbers: Sequence[npt.NDArray[np.int64]]) -> npt.NDArray[Any]:
    """Each memory's file among the partition's files (``numbers[p]``: part ``p``'s file
    numbers there): a lone part's own array when its files are the partition's first ones
    in order (the usual chain), else translated and joined."""
    if len(parts) == 1:
        mapping = numbers[0]
        if bool(np.array_equal(mapping, np.arange(mapping.size))):
            return parts[0].location_files
    return np.concatenate(
        [
            mapping[part.location_files.astype(np.int64)]
            for mapping, part in zip(numbers, parts, strict=True)
        ]
    )


def _joined_columns(parts: Sequence[Part]) -> tuple[dict[str, npt.NDArray[Any]], list[str]]:
    """The parts' columns as one set of arrays (each column joined, each tag's memories
    gathered from every part) and the tags they name, in sorted order."""
    arrays: dict[str, npt.NDArray[Any]] = {
        name: np.concatenate([part.columns[name] for part in parts]) for name in COLUMN_NAMES
    }
    tags: dict[str, list[npt.NDArray[np.int64]]] = {}
    for part in parts:
        tag_offsets, tag_documents = part.columns["tag_offsets"], part.columns["tag_documents"]
        for number, tag in enumerate(part.tables["tags"]):
            tags.setdefault(tag, []).append(
                tag_documents[int(tag_offsets[number]) : int(tag_offsets[number + 1])]
            )
    ordered = sorted(tags)
    chunks = [np.concatenate(tags[tag]) for tag in ordered]
    arrays["tag_offsets"] = np.concatenate(
        ([0], np.cumsum([chunk.size for chunk in chunks], dtype=np.int64))
    ).astype(np.int64)
    arrays["tag_documents"] = np.concatenate(chunks) if chunks else np.empty(0, np.int64)
    return arrays, ordered


class _Locations(Sequence[tuple[int, int, int]]):
    """Record locations kept as the read file's arrays (no tuple per memory until read)."""

    def __init__(
        self,
        files: npt.NDArray[np.int64],
        offsets: npt.NDArray[np.int64],
        lengths: npt.NDArray[np.uint32],
    ) -> None:
        self._files, self._offsets, self._lengths = files, offsets, lengths

    def __len__(self) -> int:
        return int(self._files.size)

    @overload
    def __getitem__(self, index: int) -> tuple[int, int, int]: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[int, int, int]]: ...

    def __getitem__(
        self, index: int | slice
    ) -> tuple[int, int, int] | Sequence[tuple[int, int, int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return int(self._files[index]), int(self._offsets[index]), int(self._lengths[index])


def _stale(path: object, reason: str) -> PartitionState | None:
    _LOG.info("the read file %s is stale (%s); the partition is read whole", path, reason)
    return None
