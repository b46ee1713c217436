"""Rewrite counts: how a process learns that another one's rewrite replaced files it cached.

A process caches each partition it parsed and reuses it while ``lstat`` shows its files
unchanged, or reads on from where it stopped when a log grew and its last record read is
still there (``partitions.py``). A rewrite (an erase, a compaction) deletes or replaces a
partition's files, and the file system may give a file created afterwards the inode number
a deleted one had. A log created by the next append after its owner was erased could then
show the inode and the size of the log another process had cached (an NPC reset and
refilled from the same templates, as sizes go): that process kept serving the erased
memories, text included, and its writes judged against them (an append of an erased memory
taken for a duplicate and dropped, a conflicting id written as new: a save every process
then refused to read).

So every rewrite, under the writer lock and before it deletes or replaces a file, bumps a
counter here: its partition's (the slot of its session and owner hashes), or its session's
for a whole session. A cached partition keeps both counters as they were before it was
read, and is reused or read on only while they are unchanged; otherwise it is read again
from its files. Two partitions sharing a slot only cost each other a re-read.

``rewrite-counts`` in the data folder: ``GMRWC001`` (8 bytes), 8 bytes reserved, then
:data:`SLOTS` little-endian u64 counters, mapped shared and read-only by every process (a
load per check, no system call) and bumped with ``pwrite`` (the page cache is one: every
map sees it). Advisory and derived, so never fsynced (a power loss ends every
process that cached anything): created at open when missing (a save of an earlier
release, whose writers do not bump it: a process of that release beside this one keeps the
old rules). A file of another size or header (damaged) is written again by the next open
that may write; where none can be written (a read-only folder), the cache keeps the old
rules.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from pathlib import Path

import numpy as np
import numpy.typing as npt

from game_memory.durable import fs, portable
from game_memory.errors import PersistenceError

__all__ = ["REWRITE_COUNTS", "SLOTS", "RewriteCounts", "Stamp"]

REWRITE_COUNTS = "rewrite-counts"
SLOTS = 1024
_MAGIC = b"GMRWC001"
_HEADER = 16
_BYTES = _HEADER + 8 * SLOTS

#: A partition's two counters (its session's, its own) as a read found them.
Stamp = tuple[int, int]


def _slots(session_hash: str, owner_hash: str | None) -> tuple[int, int]:
    """The session's slot and the partition's (hex hashes: their leading bits are uniform)."""
    session = int(session_hash[:8], 16)
    if owner_hash is None:
        return session % SLOTS, -1
    return session % SLOTS, (session ^ int(owner_hash[:8], 16)) % SLOTS


class RewriteCounts:
    """The mapped counters of one save (see the module docstring); thread-safe to read,
    bumped under the writer lock only."""

    def __init__(self, data: Path) -> None:
        self.path = data / REWRITE_COUNTS
        self._counts: npt.NDArray[np.uint64] | None = None
        self._map: mmap.mmap | None = None
        self._writer: int | None = None  # a descriptor bumps are written through

    @property
    def usable(self) -> bool:
        return self._counts is not None

    def open(self) -> None:
        """Map the counters, if the file is there and sound. Never raises for it: a file
        that cannot be used leaves the counts off (see the module docstring)."""
        if self._counts is not None:
            return
        with contextlib.suppress(OSError, PersistenceError, ValueError):
            self._map = _mapped(self.path)
        if self._map is not None:
            self._counts = np.frombuffer(self._map, dtype="<u8", offset=_HEADER)

    def write(self) -> None:
        """Write the file (under the writer lock): missing (a save of an earlier release)
        or unusable (damaged; a process that mapped an earlier file keeps counting in it).
        Then map it. A failure (a read-only folder) leaves the counts off."""
        self.close()
        with contextlib.suppress(PersistenceError):
            fs.atomic_write(self.path, _MAGIC + bytes(_BYTES - len(_MAGIC)))
        self.open()

    def stamp(self, session_hash: str, owner_hash: str) -> Stamp | None:
        """The partition's counters now (``None`` when the counts are off)."""
        counts = self._counts
        if counts is None:
            return None
        session, partition = _slots(session_hash, owner_hash)
        return int(counts[session]), int(counts[partition])

    def bump(self, session_hash: str, owner_hash: str | None) -> None:
        """Count a rewrite of one partition (``owner_hash``) or of a whole session (``None``),
        before it deletes or replaces a file. Under the writer lock."""
        counts = self._counts
        if counts is None:
            return
        session, partition = _slots(session_hash, owner_hash)
        slot = session if owner_hash is None else partition
        # Written with pwrite, not through the map (mapped read-only everywhere): every
        # change to a save goes through a call the crash tests' recorder logs.
        value = (int(counts[slot]) + 1) & 0xFFFF_FFFF_FFFF_FFFF
        try:
            if self._writer is None:
                flags = os.O_RDWR | portable.OPEN_FLAGS
                self._writer = os.open(self.path, flags)
            portable.pwrite(self._writer, value.to_bytes(8, "little"), _HEADER + 8 * slot)
        except OSError as exc:
            raise PersistenceError(
                f"could not write {self.path}: {exc.strerror}; nothing was rewritten"
            ) from exc

    def close(self) -> None:
        self._counts = None
        if self._writer is not None:
            with contextlib.suppress(OSError):
                os.close(self._writer)
            self._writer = None
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a stamp being read holds no view
                self._map.close()
            self._map = None


def _mapped(path: Path) -> mmap.mmap | None:
    """The file mapped shared and read-only, if it is the counters."""
    flags = os.O_RDONLY | portable.OPEN_FLAGS
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != _BYTES:
            return None
        mapped = mmap.mmap(fd, _BYTES, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    if mapped[: len(_MAGIC)] != _MAGIC:
        mapped.close()
        return None
    return mapped
