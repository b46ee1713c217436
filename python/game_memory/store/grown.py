"""The state of a cached partition grown by what a writer just wrote, without reading it back.

A writer that committed a group or a batch knows exactly what it appended: the records, the
memories they encode, and where (``appends.plan_segments``). :func:`grown_state` makes the
partition state a read of the files would then build from the state that was read under
the same hold of the writer lock, checking every file it names against ``lstat`` (the
tail segment grown by exactly those bytes, a new segment of the next number holding just
them); :func:`build_view` extends a view with new memories (a read builds its views with it
too). The partition cache (``partitions.py``) installs the result under its lock.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from game_memory.durable.fs import lstat_regular
from game_memory.durable.names import segment_path
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.growing import Appended, Growing
from game_memory.store.lazy import concatenated
from game_memory.store.retractions import Retraction
from game_memory.store.state import PartitionState, Segment, session_folder
from game_memory.store.view import IdPositions, PartitionView

__all__ = ["Part", "build_view", "grown_state"]

#: One segment a write plan wrote: its path, its size before (``-1``: the write created
#: it), the framed records and their memories, in order.
Part = tuple[str, int, Sequence[bytes], Sequence[GameMemory]]


def grown_state(
    state: PartitionState, parts: Sequence[Part], session_directory: str | Path
) -> PartitionState | None:
    """``state`` grown by ``parts`` (a write plan's parts in order), or ``None`` when a file
    is not exactly as ``state`` had it plus the records (the next read reads it then).

    The first part may grow the tail segment (its size before is the tail's end), the
    others are the next new segments of the series; an empty partition (no view yet: its
    first batch or append) gets the view a read of the new files would build. The tail's
    memories and offsets grow in place (``growing.py``): an append copies nothing of what
    the segment held.
    """
    segments = list(state.segments)
    probes = list(state.probes)
    insert_at: int | None = None  # where a new segment's probe goes (found when needed)
    grown_by: list[GameMemory] = []
    for number, (path, before, records, memories) in enumerate(parts):
        offsets, written = _offsets(records)
        info = lstat_regular(path)
        if info is None:
            return None
        probe = (path, info.st_ino, info.st_size, info.st_ctime_ns)
        if before >= 0:
            tail = segments[-1] if segments and number == 0 else None
            if tail is None or tail.path != path or tail.end != before:
                return None
            if tail.torn_bytes or tail.size != tail.end:
                return None
            if (info.st_ino, info.st_dev) != (tail.inode, tail.device):
                return None
            if info.st_size != tail.end + written:
                return None
            # The tail's memories and offsets grow in place (``growing.py``): an append
            # copies nothing of what the segment held.
            starts, room = Growing.extend(tail.starts, tail.room, tail.end + offsets)
            segments[-1] = Segment(
                path,
                tail.device,
                tail.inode,
                info.st_size,
                info.st_size,
                0,
                concatenated(tail.items, memories),
                starts,
                room,
            )
            probes = [probe if old[0] == path else old for old in probes]
        else:
            expected = segment_path(session_directory, state.owner_hash, len(segments))
            if path != expected or info.st_size != written:
                return None
            if insert_at is None:
                insert_at = _new_segment_probe(state, probes)
            starts, room = Growing.extend(offsets[:0], None, offsets)
            segments.append(
                Segment(
                    path,
                    info.st_dev,
                    info.st_ino,
                    written,
                    written,
                    0,
                    Appended(list(memories)),
                    starts,
                    room,
                )
            )
            probes.insert(insert_at, probe)
            insert_at += 1
        grown_by.extend(memories)
    absent = state.absent
    if len(segments) != len(state.segments):
        next_before = segment_path(session_directory, state.owner_hash, len(state.segments))
        if next_before not in state.absent:
            return None  # not the absent set a read builds: let the next read build it
        next_now = segment_path(session_directory, state.owner_hash, len(segments))
        absent = tuple(next_now if path == next_before else path for path in state.absent)
    folder = state.folder
    if folder is None:
        # The partition's first write created its session folder: name it as a read
        # would, so a folder swapped for another is noticed (``is_current``).
        folder_inode = session_folder(session_directory)
        if folder_inode is None:
            return None
        folder = (os.fspath(session_directory), folder_inode)
    if state.view is not None:
        view = build_view(state.view, grown_by, session_directory, state.view.retractions)
    else:  # an empty partition (its first batch): built as a read of the files would
        view = build_view(None, grown_by, session_directory, state.retractions)
    return PartitionState(
        state.session_hash,
        state.owner_hash,
        state.packs,
        tuple(segments),
        view,
        tuple(probes),
        absent,
        folder,
        state.retraction_segments,
        state.read_chain,
        state.rewrites,  # grown by this writer under the lock: no rewrite in between
    )


def _offsets(records: Sequence[bytes]) -> tuple[npt.NDArray[np.int64], int]:
    """Where each of ``records`` starts after the first, and their total length."""
    if len(records) <= 64:  # a group commit: cheaper without numpy's per-call costs
        starts: list[int] = []
        total = 0
        for record in records:
            starts.append(total)
            total += len(record)
        return np.array(starts, np.int64), total
    lengths = np.fromiter((len(record) for record in records), np.int64, len(records))
    ends = np.cumsum(lengths)
    return np.concatenate(([0], ends[:-1])).astype(np.int64), int(ends[-1])


def _new_segment_probe(state: PartitionState, probes: list[tuple[str, int, int, int]]) -> int:
    """Where a read lists a new memory segment's probe: after the memory log's, before the
    retraction log's (a read lists packs, then each series in order)."""
    logged = {segment.path for segment in state.segments}
    retracting = {segment.path for segment in state.retraction_segments}
    ours = [at for at, probe in enumerate(probes) if probe[0] in logged]
    theirs = [at for at, probe in enumerate(probes) if probe[0] in retracting]
    return ours[-1] + 1 if ours else (theirs[0] if theirs else len(probes))


def _positions(base: PartitionView | None) -> Mapping[str, int] | None:
    """``base``'s id positions for ``IdPositions.extending`` (an ``IdPositions`` or a lazy
    view's ``LazyPositions`` is shared, not copied)."""
    return None if base is None else base.positions


def build_view(
    base: PartitionView | None,
    memories: list[GameMemory],
    folder: str | Path,
    retractions: tuple[Retraction, ...] = (),
) -> PartitionView | None:
    """Extend ``base`` with ``memories`` (or build from scratch when ``base`` is None).

    An equal second copy of a memory is skipped (a rewrite interrupted part-way leaves
    copies of the records it moved; see ``rewriting.py``); a different one is corruption.
    """
    # The base's id map is shared, not copied (``IdPositions``): an append costs its ids.
    shared, fresh = IdPositions.extending(_positions(base))
    known: Sequence[GameMemory] = base.memories if base is not None else ()
    added: list[GameMemory] = []
    for memory in memories:
        position = fresh.get(memory.memory_id)
        if position is None and fresh is not shared:
            position = shared.get(memory.memory_id)
        if position is not None:
            held = known[position] if position < len(known) else added[position - len(known)]
            if held != memory:
                raise PersistenceError(
                    f"a partition in {folder} holds two different memories with one id "
                    f"{memory.memory_id!r}; the save is corrupt"
                )
            continue
        fresh[memory.memory_id] = len(known) + len(added)
        added.append(memory)
    ordered = concatenated(known, added)
    if not ordered:
        return None
    positions = IdPositions.of(shared, fresh)
    if base is not None:  # its ids (the first memory of a lazy view is not decoded)
        return PartitionView(base.session_id, base.owner_id, ordered, positions, base, retractions)
    first = ordered[0]
    return PartitionView(first.session_id, first.owner_id, ordered, positions, base, retractions)
