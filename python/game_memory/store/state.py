"""What one read of a partition saw, and the checks that tell whether it is still current.

A :class:`PartitionState` records the memories and retractions of one owner partition
together with the identity (inode, size, change time) of every file they came from, and the
names of the next pack and segments, which did not exist. :func:`is_current` re-checks
exactly those with ``lstat`` (a few system calls, no reads): logs only grow and packs never
change between rewrites, and a rewrite (an erase or a compaction) replaces files, which
gives them other inodes; so when nothing moved, the cached partition is still current.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from game_memory.durable.names import identity_hash
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.growing import Growing
from game_memory.store.packs import PackIndex
from game_memory.store.retractions import Retraction
from game_memory.store.view import PartitionView

__all__ = ["Chain", "PackPart", "PartitionState", "Segment", "is_current", "session_folder"]

_Item = TypeVar("_Item")

#: A partition's read-file chain as the cache knows it (``read_path.py``): per part, in
#: order, how many memories it covers and its header's CRC-32 (what the next part names).
Chain = tuple[tuple[int, int], ...]


def _no_starts() -> npt.NDArray[np.int64]:
    return np.empty(0, np.int64)


@dataclass(frozen=True, slots=True)
class Segment(Generic[_Item]):
    """One log segment as read: file identity, where valid records end, its items
    (memories in a memory log, retractions in a retraction log)."""

    path: str
    device: int
    inode: int
    size: int
    end: int
    torn_bytes: int
    items: Sequence[_Item]
    #: Where each item's record starts (records are contiguous from byte 0 to ``end``).
    starts: npt.NDArray[np.int64] = field(default_factory=_no_starts)
    #: The buffer ``starts`` is a prefix of, which the next version may extend in place
    #: (``growing.Growing``); ``None``: extending copies.
    room: Growing | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class PackPart:
    """One owner's range of one pack, as read."""

    index: PackIndex
    memories: Sequence[GameMemory]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as read: its pack ranges, its log segments, its retraction log segments
    and the view of its memories (with their retractions).

    ``tail`` is the last memory log segment and ``retraction_tail`` the last retraction log
    segment, which writers append to after cutting off a torn tail.
    """

    session_hash: str
    owner_hash: str
    packs: tuple[PackPart, ...]
    segments: tuple[Segment[GameMemory], ...]
    view: PartitionView | None
    # What the state was read from: (path, inode, size, ctime) of every pack of the session and
    # every segment of the partition, and the next pack and segment names, which were absent.
    probes: tuple[tuple[str, int, int, int], ...] = ()
    absent: tuple[str, ...] = ()
    folder: tuple[str, int] | None = None  # the session folder and its inode, if it existed
    retraction_segments: tuple[Segment[Retraction], ...] = ()
    #: The partition's read-file chain (``read_path.py``): what of its memories it covers.
    read_chain: Chain = ()
    #: Its session's and its own rewrite counts before it was read (``rewrite_counts.py``;
    #: ``None``: counts off, or a state not read through the cache yet).
    rewrites: tuple[int, int] | None = None

    @property
    def read_file_count(self) -> int:
        """How many of the memories the partition's read files cover (its first ones)."""
        return sum(count for count, _ in self.read_chain)

    @property
    def memory_count(self) -> int:
        return len(self.view) if self.view is not None else 0

    @property
    def tail(self) -> Segment[GameMemory] | None:
        return self.segments[-1] if self.segments else None

    @property
    def retraction_tail(self) -> Segment[Retraction] | None:
        return self.retraction_segments[-1] if self.retraction_segments else None

    @property
    def retractions(self) -> tuple[Retraction, ...]:
        """Every retraction of the partition, in log order."""
        return tuple(item for segment in self.retraction_segments for item in segment.items)

    @property
    def retraction_count(self) -> int:
        return sum(len(segment.items) for segment in self.retraction_segments)

    def find(self, memory_id: str) -> GameMemory | None:
        """The memory with ``memory_id`` in this partition, if present."""
        if self.view is None:
            return None
        position = self.view.positions.get(memory_id)
        return None if position is None else self.view.memories[position]

    def has_memory_hash(self, memory_hash: str) -> bool:
        """Whether a memory whose id hashes to ``memory_hash`` is in this partition."""
        if self.view is None:
            return False
        # The ids are the view's positions (nothing is decoded for a lazily read view).
        return any(identity_hash(memory_id) == memory_hash for memory_id in self.view.positions)


def is_current(state: PartitionState) -> bool:
    """Whether every file ``state`` was read from is still the same and no file was added.

    Logs only grow and packs never change; packs and segments are only ever added (a pack
    is removed only when an uncommitted batch is rolled back), or replaced whole by a
    rewrite (a new inode). So the same inode, size and ctime for each, and still no next
    pack or segment, means the same content.
    """
    if not state.absent:
        return False
    if state.folder is not None:
        # A session folder swapped for a link (or anything else) has another inode.
        try:
            if os.lstat(state.folder[0]).st_ino != state.folder[1]:
                return False
        except OSError:
            return False
    for path, inode, size, changed in state.probes:
        try:
            info = os.lstat(path)
        except OSError:
            return False
        if info.st_ino != inode or info.st_size != size or info.st_ctime_ns != changed:
            return False
    # os.access answers "absent" without raising (cheaper than lstat on the hot path).
    return not any(os.access(path, os.F_OK, follow_symlinks=False) for path in state.absent)


def session_folder(session_directory: str | Path) -> int | None:
    """Check the data folder and a session folder are real folders; the session's inode.

    Returns ``None`` when the session folder does not exist (a session without memories).

    Raises:
        PersistenceError: either folder is a symbolic link or not a folder.
    """
    folder = os.fspath(session_directory)
    info: os.stat_result | None = None
    for path in (os.path.dirname(folder), folder):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc
        if not stat.S_ISDIR(info.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
            raise PersistenceError(
                f"refusing to read {path}: it is {kind}. A save folder must contain only "
                "real files and folders."
            )
    return None if info is None else info.st_ino
