"""Partitions opened from their read files, and read files written from partitions read whole.

:func:`seeded_state` turns a partition's read file (``read_files.py``), once checked
against the files of the save, into the :class:`PartitionState` an earlier read of those
bytes would have left in the cache: its packs' ranges and log segments up to the bytes
covered, and a view whose memories are decoded lazily and whose columns, lexical index and
digests are restored. The partition cache then brings that state up to date exactly as
it brings any cached state up to date (reading only the bytes appended since), so what a
read returns never depends on whether a read file was used.

:func:`persist` writes a partition's read file when a read decoded many of its memories
(at least :data:`LAZY_MINIMUM`, and more than an eighth of those a read file already
covers), so a large partition is decoded in full once, not on every start; closing the
store writes it for whatever the read file does not cover yet, so the next start decodes
nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from game_memory.durable.fs import lstat_regular
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.lazy import LazyMemories, LazyPositions, RecordFile
from game_memory.store.packs import PackIndex
from game_memory.store.read_files import (
    Covered,
    file_crc,
    file_times,
    load_read_file,
    read_file_path,
    stamp_path,
    write_read_file,
)
from game_memory.store.records import HEADER_BYTES
from game_memory.store.rewrite_journal import REWRITE_JOURNAL
from game_memory.store.state import PackPart, PartitionState, Segment
from game_memory.store.view import PartitionView, ReadPrefix

__all__ = ["LAZY_MINIMUM", "content_digests", "persist", "seeded_state", "wants_persist"]

#: Partitions with fewer memories are always decoded whole (it is cheap) and get no file.
LAZY_MINIMUM = 1_024
_LOG = logging.getLogger("game_memory.store")

Decode = Callable[[bytes, str], GameMemory]
Digests = Callable[[Sequence[GameMemory]], list[tuple[bytes, bytes]]]


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


def seeded_state(
    session_directory: str,
    session_hash: str,
    owner_hash: str,
    indexes: list[PackIndex],
    segment_path: Callable[[int], str],
    decode: Decode,
) -> PartitionState | None:
    """The state a read of the covered bytes would have cached, or ``None`` (no usable file).

    Raises nothing for a stale or damaged read file (it is ignored and logged); the files
    of the save are checked byte for byte (CRC-32) before anything of it is used.
    """
    path = read_file_path(session_directory, owner_hash)
    read = load_read_file(path, session_hash, owner_hash)
    if read is None:
        return None
    owned = [index for index in indexes if owner_hash in index.owners]
    files = read.files
    packs = [covered for covered in files if covered.name.startswith("p-")]
    segments = [covered for covered in files if covered.name.startswith("o-")]
    if len(packs) + len(segments) != len(files) or len(packs) > len(owned):
        return _stale(path, "its files do not match the partition's")
    opened: list[RecordFile] = []
    # Each covered file's live identity: a save copied elsewhere (another disk, a restored
    # cloud save) holds the same bytes in files of other inodes, which the CRC check below
    # accepts (content decides, not identity), and the state names the files as they are.
    identities: list[tuple[int, int]] = []
    for number, covered in enumerate(files):
        if number < len(packs):
            index = owned[number]
            start, length, _ = index.owners[owner_hash]
            if os.path.basename(index.path) != covered.name or (start, start + length) != (
                covered.start,
                covered.end,
            ):
                return _stale(path, f"{covered.name} changed")
            full = index.path
            identities.append((index.device, index.inode))
        else:
            position = number - len(packs)
            full = segment_path(position)
            if os.path.basename(full) != covered.name:
                return _stale(path, "its segments are out of order")
            try:
                info = lstat_regular(full)
            except PersistenceError:
                return _stale(path, f"{covered.name} is not a regular file")
            last = position == len(segments) - 1
            if (
                info is None
                or info.st_size < covered.end
                or (not last and info.st_size != covered.end)
            ):
                return _stale(path, f"{covered.name} was replaced, cut or moved")
            identities.append((info.st_dev, info.st_ino))
        # Another file than the one the CRC was taken of (a copy, or a file replaced by an
        # erase or a compaction) is never "unchanged": its covered bytes are checked.
        if not covered.unchanged(full) and (
            file_crc(full, covered.start, covered.end) != covered.crc
        ):
            return _stale(path, f"the bytes of {covered.name} it covers changed")
        try:
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return _stale(path, f"{covered.name} cannot be opened")
        opened.append(RecordFile(full, fd))
    ids = read.ids
    numbers = read.location_files.astype(np.int64)
    if numbers.size and bool(np.any(np.diff(numbers) < 0)):
        return _stale(path, "its records are out of order")
    locations = _Locations(numbers, read.location_offsets, read.location_lengths)
    memories = LazyMemories.of(opened, locations, decode, ids)
    pack_parts: list[PackPart] = []
    segment_states: list[Segment[GameMemory]] = []
    bounds = np.searchsorted(numbers, np.arange(len(files) + 1), side="left").tolist()
    done = 0
    for number, covered in enumerate(files):
        stop = int(bounds[number + 1])
        window = memories.window(done, stop)
        starts = read.location_offsets[done:stop].astype(np.int64)
        done = stop
        if number < len(packs):
            pack_parts.append(PackPart(owned[number], window))
        else:
            segment_states.append(
                Segment(
                    opened[number].path,
                    *identities[number],
                    covered.end,
                    covered.end,
                    0,
                    window,
                    starts,
                )
            )
    if done != read.count:
        return _stale(path, "its records do not add up")
    prefix = ReadPrefix(
        read.count, read.columns, read.lexical, _scan_of(read.scan), read.hashes, read.digests
    )
    if not ids:
        return None
    # Built on the first lookup (the first recall makes none); a repeated id raises then.
    positions = LazyPositions(ids, str(path))
    head = memories[0]  # the session and owner ids come from the save itself
    view = PartitionView(head.session_id, head.owner_id, memories, positions, prefix=prefix)
    return PartitionState(
        session_hash,
        owner_hash,
        tuple(pack_parts),
        tuple(segment_states),
        view,
        read_file_count=read.count,
    )


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


def content_digests(memories: Sequence[GameMemory]) -> list[tuple[bytes, bytes]]:
    """``(sha256(memory_id), content digest)`` per memory, as the vector index computes them
    (``index/entries.py``: SHA-256 of the memory's canonical JSON)."""
    serialize = GameMemory.__pydantic_serializer__.to_json
    return [
        (
            hashlib.sha256(memory.memory_id.encode("utf-8")).digest(),
            hashlib.sha256(serialize(memory)).digest(),
        )
        for memory in memories
    ]


def wants_persist(state: PartitionState, *, closing: bool = False) -> bool:
    """Whether :func:`persist` would write ``state``'s read file (a cheap test: counts only)."""
    view = state.view
    if view is None or len(view) < LAZY_MINIMUM:
        return False
    covered = state.read_file_count
    return len(view) - covered >= (1 if closing else max(LAZY_MINIMUM, covered // 8))


def persist(
    session_directory: str, state: PartitionState, digests: Digests, *, closing: bool = False
) -> bool:
    """Write ``state``'s read file if the read decoded enough memories (see the module).

    With ``closing`` (the store is being closed), any memory the read file does not cover
    is enough: the next open then decodes nothing (a read file rewritten while reading
    costs the partition's size, so reads wait for :data:`LAZY_MINIMUM` and an eighth).

    Returns whether a read file was written. Not while an erase or compaction is under way
    (``rewrite.json``), and a file written while one began is removed again: a read file
    never outlives bytes an erase removed.
    """
    view = state.view
    if view is None or not wants_persist(state, closing=closing):
        return False
    memories = view.memories
    journal = os.path.join(os.path.dirname(session_directory), REWRITE_JOURNAL)
    if os.path.lexists(journal):
        return False
    files: list[Covered] = []
    locations: list[tuple[int, int, int]] = []
    for part in state.packs:
        start, length, _ = part.index.owners[state.owner_hash]
        times = file_times(part.index.path)
        crc = file_crc(part.index.path, start, start + length)
        if crc is None:
            return False
        name = os.path.basename(part.index.path)
        index = part.index
        files.append(Covered(name, index.device, index.inode, start, start + length, crc, *times))
        # A pack range holds its records back to back; their lengths come from the data.
        position = start
        for memory_record in _record_lengths(part.index.path, start, start + length):
            locations.append((len(files) - 1, position, memory_record))
            position += memory_record
    for segment in state.segments:
        times = file_times(segment.path)
        crc = file_crc(segment.path, 0, segment.end)
        if crc is None or segment.starts.size != len(segment.items):
            return False
        name = os.path.basename(segment.path)
        files.append(Covered(name, segment.device, segment.inode, 0, segment.end, crc, *times))
        bounds = [*segment.starts.tolist(), segment.end]
        for start, stop in itertools.pairwise(bounds):
            locations.append((len(files) - 1, start, stop - start))
    if len(locations) != len(view):
        return False  # copies of records (an interrupted rewrite): read whole until compacted
    prefix = view.prefix
    known = prefix.count if prefix is not None else 0
    hashes = [prefix.hashes] if prefix is not None else []
    contents = [prefix.digests] if prefix is not None else []
    done = view.digested
    if done is not None and known < done[0] <= len(memories):
        known, hashes, contents = done[0], [done[1]], [done[2]]
    for hashed, digest in digests(memories[known:]):
        hashes.append(hashed)
        contents.append(digest)
    all_hashes, all_digests = b"".join(hashes), b"".join(contents)
    view.digested = (len(memories), all_hashes, all_digests)
    target = read_file_path(session_directory, state.owner_hash)
    written = write_read_file(
        target,
        session_hash=state.session_hash,
        owner_hash=state.owner_hash,
        files=files,
        locations=locations,
        ids=list(view.positions),
        hashes=all_hashes,
        digests=all_digests,
        columns=view.columns,
        lexical=view.lexical,
        scan=view.memory_scan,
    )
    if not written:
        return False
    unchanged = not os.path.lexists(journal) and all(
        _same_file(os.path.join(session_directory, covered.name), covered) for covered in files
    )
    if not unchanged:
        for stale in (target, stamp_path(target)):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        return False
    return True


def _same_file(path: str, covered: Covered) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (covered.device, covered.inode)


def _record_lengths(path: str, start: int, end: int) -> list[int]:
    """The whole lengths of the records back to back in ``path`` from ``start`` to ``end``."""
    lengths: list[int] = []
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        data = file.read(end - start)
    position = 0
    while position + HEADER_BYTES <= len(data):
        length = HEADER_BYTES + int.from_bytes(data[position + 4 : position + 8], "little")
        lengths.append(length)
        position += length
    return lengths
