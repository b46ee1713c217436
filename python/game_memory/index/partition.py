"""One owner partition of the derived index as read, and the loading of its vector rows.

An :class:`IndexPartition` is an immutable version of a partition's entry records (every
record, and the latest per memory); a newer version extends an older one when the file
only grew. Its ``position`` (memory hash to latest slot) is a :class:`Positions` mapping
built on first use: a recall whose entries line up with the snapshot (``join.py``) never
needs it, so opening a large partition creates no object per entry. A
:class:`RowBuffer` holds the float32 rows of one identity and generation, memory-mapped
from the row file (read-only; the page cache is shared, nothing is copied; a grown file is
mapped in place, ``row_map.py``) unless the file is small (read into memory: a map per small
NPC would cost the process two address ranges each), and checksums each row once (or trusts
a verified stamp, ``stamps.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from game_memory.durable import fs, portable
from game_memory.durable.buffers import empty_buffer
from game_memory.errors import DerivedIndexError, PersistenceError
from game_memory.index.columns import EntryColumns
from game_memory.index.entries import (
    ENTRY_BYTES,
    EntryRecord,
    EntryState,
    row_checksums,
)
from game_memory.index.row_map import RowMap
from game_memory.index.stamps import Stamp

__all__ = [
    "FloatMatrix",
    "IndexPartition",
    "PartitionReplacedError",
    "Positions",
    "RowBuffer",
    "derived_error",
    "extend_partition",
    "new_tag",
]

MAXIMUM_ROWS_BYTES = 1 << 40
#: A row file of at most this many bytes is read into memory, not mapped (``RowBuffer``):
#: 85 rows of 384 values, 32 of 1,024.
SMALL_ROWS_BYTES = 128 << 10
FloatMatrix = npt.NDArray[np.float32]


class PartitionReplacedError(DerivedIndexError):
    """A compaction replaced the partition while it was being read; read it again."""


def derived_error(exc: PersistenceError) -> DerivedIndexError:
    """``exc``, met in the derived index's files, as the ``DerivedIndexError`` to raise,
    saying what to do: make the folder writable when the file system refused this process
    (deleting the folder or a rebuild cannot help then), free space when the disk is full,
    else delete it or rebuild."""
    if fs.refused_access(exc) is not None:
        return DerivedIndexError(
            f"{exc} (this is the derived vector index, not the save: its folder is not "
            "writable, read-only or without permission for this process; make it readable and "
            "writable, as neither deleting it nor a rebuild can help until then; recall is "
            "lexical meanwhile)"
        )
    if fs.disk_full(exc) is not None:
        return DerivedIndexError(
            f"{exc} (this is the derived vector index, not the save: free space on the index "
            "folder's disk; the memories are saved, and one left without a vector gets it when "
            "it is sent again or at the next rebuild; recall is lexical for it meanwhile)"
        )
    return DerivedIndexError(
        f"{exc} (this is the derived vector index, not the save: delete the index folder or "
        "run a rebuild)"
    )


class Positions(Mapping[bytes, int]):
    """``sha256(memory_id)`` -> slot of its latest record, for live memories; built on first use.

    Built from the partition's own arrays (every record's hash and whether it is a
    tombstone), starting from an older version's dictionary when that one was built.
    ``unique`` is set by whoever proves that every record names another memory and none is
    a tombstone (the join, when the entries line up with the snapshot): the length is then
    the record count, without building anything.
    """

    __slots__ = ("_base", "_built", "_hashes", "_lock", "_start", "_states", "unique")

    _states: npt.NDArray[np.uint8]
    _built: dict[bytes, int] | None

    def __init__(
        self, base: Positions | None, hashes: bytes | memoryview, states: npt.NDArray[np.uint8]
    ) -> None:
        built = base._built if isinstance(base, Positions) else None
        self._base = built  # only a built dictionary (never a chain of unbuilt versions)
        self._start = int(base._states.size) if isinstance(base, Positions) and built else 0
        self._hashes = hashes  # every record's memory hash, 32 bytes each
        # Every record's state; which are tombstones is read only for the records after
        # ``_start`` and only when the dictionary is built (an append adds one record to a
        # partition of any size: nothing here may cost in proportion to the partition).
        self._states = states
        self._built = None
        self._lock = threading.Lock()
        self.unique = False

    def _dictionary(self) -> dict[bytes, int]:
        built = self._built
        if built is not None:
            return built
        with self._lock:
            if self._built is None:
                position = dict(self._base) if self._base is not None else {}
                start = self._start
                hashes = bytes(self._hashes[start * 32 :])  # the keys must be bytes
                deleted_flags = (self._states[start:] == EntryState.DELETED).tolist()
                for index, deleted in enumerate(deleted_flags, start):
                    at = (index - start) * 32
                    memory = hashes[at : at + 32]
                    if deleted:
                        position.pop(memory, None)
                    else:
                        position[memory] = index
                self._built = position
                self._base = None
            return self._built

    @property
    def is_built(self) -> bool:
        """Whether the dictionary exists (for tests and bounds)."""
        return self._built is not None

    def __getitem__(self, key: bytes) -> int:
        return self._dictionary()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._dictionary()

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._dictionary())

    def __len__(self) -> int:
        if self._built is None and self.unique:
            return int(self._states.size)
        return len(self._dictionary())

    def values(self) -> ValuesView[int]:
        return self._dictionary().values()

    def items(self) -> ItemsView[bytes, int]:
        return self._dictionary().items()


def new_tag(previous: int) -> int:
    while True:
        tag = int.from_bytes(os.urandom(4), "little")
        if tag not in (0, previous):
            return tag


@dataclass(eq=False)
class IndexPartition:
    """One owner partition of the index as read: every record, and the latest per memory.

    Slots index the arrays of *all* whole records read so far, superseded ones included;
    ``position`` maps ``sha256(memory_id)`` to the slot of its latest record, for live
    memories only (a tombstone removes the memory). ``tag`` names the generation of the
    partition's row files (0 before the first record). Immutable once built.
    """

    session_hash: str
    owner_hash: str
    inode: int
    changed: int
    size: int
    tag: int
    position: Mapping[bytes, int]
    states: npt.NDArray[np.uint8]
    identities: npt.NDArray[np.uint32]
    rows: npt.NDArray[np.uint32]
    checksums: npt.NDArray[np.uint32]
    hashes: bytes | memoryview
    digests: bytes | memoryview
    codes: npt.NDArray[np.bytes_]
    needed: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The entries file as read (``stamps.file_identity``), the CRC-32 of its whole
    #: records, how many leading records a verified stamp vouched for, and that stamp.
    file: tuple[int, int, int, int, int] | None = None
    crc: int = 0
    trusted: int = 0
    stamp: Stamp | None = None
    #: The growing buffers these arrays are prefixes of (``columns.py``), which the next
    #: version extends in place; ``None`` for a partition built otherwise (PostgreSQL's).
    columns: EntryColumns | None = None

    @property
    def records(self) -> int:
        """How many whole records were read (superseded and tombstones included)."""
        return int(self.states.size)

    @property
    def live(self) -> int:
        """How many memories have an entry."""
        return len(self.position)

    def digest(self, slot: int) -> bytes:
        """The content digest of the record in ``slot``."""
        return bytes(self.digests[slot * 32 : slot * 32 + 32])

    def memory_hash(self, slot: int) -> bytes:
        """The ``sha256(memory_id)`` of the record in ``slot``."""
        return bytes(self.hashes[slot * 32 : slot * 32 + 32])

    def record(self, memory_hash: bytes) -> EntryRecord | None:
        """The latest entry of a memory, or ``None``."""
        slot = self.position.get(memory_hash)
        if slot is None:
            return None
        return EntryRecord(
            EntryState(int(self.states[slot])),
            int(self.identities[slot]),
            int(self.rows[slot]),
            memory_hash,
            self.digest(slot),
            bytes(self.codes[slot]).decode("ascii", "replace"),
            int(self.checksums[slot]),
        )

    def rows_needed(self, code: int) -> int:
        """One past the highest row of identity ``code`` any record refers to."""
        with self.lock:
            cached = self.needed.get(code)
            if cached is None:
                ready = (self.states == EntryState.READY) & (self.identities == code)
                referenced = self.rows[ready]
                cached = int(referenced.max()) + 1 if referenced.size else 0
                self.needed[code] = cached
            return cached


def extend_partition(
    base: IndexPartition | None,
    records: np.ndarray,
    session_hash: str,
    owner_hash: str,
    file: os.stat_result,
) -> IndexPartition:
    """Build a partition from ``base`` (whose records are a prefix) and the records after it.

    Raises:
        ValueError: the records carry different vector-file tags.
    """
    start = base.records if base is not None else 0
    count = int(records.size)
    tags = records["tag"]
    tag = base.tag if base is not None and start else (int(tags[0]) if count else 0)
    if count and (tags != tag).any():
        raise ValueError("its records name different vector-file generations")
    lineage = base.columns if base is not None and start else None
    if lineage is not None:
        columns, arrays = lineage.extended(start, records)
    else:
        columns, arrays = EntryColumns.of(records)
    previous = base.position if base is not None and start else None
    position = Positions(
        previous if isinstance(previous, Positions) else None,
        arrays.hashes,
        arrays.states,
    )
    return IndexPartition(
        session_hash,
        owner_hash,
        file.st_ino,
        file.st_ctime_ns,
        (start + count) * ENTRY_BYTES,
        tag,
        position,
        arrays.states,
        arrays.identities,
        arrays.rows,
        arrays.checksums,
        arrays.hashes,
        arrays.digests,
        arrays.codes,
        columns=columns,
    )


class RowBuffer:
    """The rows of one row file read so far: a read-only memory map of its whole rows.

    Rows of a file generation never change once whole, so the file is mapped (the page
    cache is shared: nothing is copied), and once it grew (appends) its new pages are
    mapped in place after the others (:class:`~game_memory.index.row_map.RowMap`); where a
    map cannot grow in place, the rows are held in memory with room to spare, each new row
    read once (:meth:`_grow`). ``checked`` records (a prefix, the same in every version of
    the generation's entries file) have had their rows' checksums verified. Arrays handed
    out keep their map or memory alive and stay valid when the buffer grows. Use under
    ``lock``.

    A buffer filled in memory (the in-memory index) sets ``array`` and ``rows`` itself.
    """

    def __init__(self, tag: int, dimensions: int) -> None:
        self.tag = tag
        self.dimensions = dimensions
        self.array: FloatMatrix = np.empty((0, dimensions), dtype=np.float32)
        self.rows = 0
        self.checked = 0
        self.file: tuple[int, int, int, int, int] | None = None  # what was mapped (stamps.py)
        self._spare: FloatMatrix | None = None  # rows held in memory, with room (``_grow``)
        self._map: RowMap | None = None  # the map ``array`` views, unless rows were copied
        self._small = False  # first read whole into memory (``SMALL_ROWS_BYTES``)
        #: Whether the rows' file of int8 codes was offered to first passes (once), and
        #: whether reading it found none it could use (``row_codes.py``).
        self.codes_read = False
        self.codes_unusable = False
        self.lock = threading.Lock()

    def load(self, path: str, needed: int) -> FloatMatrix:
        """Return the first ``needed`` rows, reading the file again if it holds too few.

        Raises:
            FileNotFoundError: the file does not exist.
            DerivedIndexError: it is not a regular file, is too large, or holds too few rows.
        """
        if self.rows < needed:
            self._read(path)
        if self.rows < needed:
            raise DerivedIndexError(
                f"{path} holds {self.rows} vectors but its entries refer to {needed}; the "
                "derived index is damaged, rebuild it"
            )
        return self.array[:needed]

    def checked_rows(self, partition: IndexPartition, needed: int) -> FloatMatrix | None:
        """The first ``needed`` rows, read-only, when they are held and every record of
        ``partition`` was verified: what :meth:`load` and :meth:`verify` would give without
        reading or checking anything. ``None`` otherwise, or while another thread holds the
        lock (it is only tried: the caller must not block)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if self.rows < needed or self.checked < partition.records:
                return None
            matrix = self.array[:needed].view()
        finally:
            self.lock.release()
        matrix.flags.writeable = False
        return matrix

    def take_written(
        self,
        path: str,
        first: int,
        info: os.stat_result,
        before: IndexPartition,
        after: IndexPartition,
    ) -> bool:
        """Hold the rows a writer just appended to the row file at ``path`` (from row
        ``first``; ``info``: the file's ``fstat`` after) as checked, as a read and a check
        of them would, without checking them again: when the buffer holds every row
        before them, every record of ``before`` was checked, ``after`` is ``before`` plus
        this writer's records of these rows (their checksums are of the values written),
        and the file is still what the writer left, and they can be mapped in place or
        read into held room (:meth:`_read`): a few rows, nothing copied or paged in again.
        Otherwise (a map that cannot grow in place would copy every row first: a search
        does that in the pool), or while a reader holds the lock (only tried: a writer on
        the event loop must not wait), nothing is checked and the next search reads and
        checks them. Returns whether they were taken.
        """
        if not self.lock.acquire(blocking=False):
            return False
        try:
            in_place = self._map is not None and self._map.extendable
            room = self._spare is not None and info.st_size <= self._spare.nbytes
            if (
                self.rows != first
                or self.checked != before.records
                or self.file is None
                or self.file[:2] != (info.st_dev, info.st_ino)
                or not (in_place or room)  # a first copy of every row: a search's work
            ):
                return False
            try:
                self._read(path)
            except (OSError, DerivedIndexError):
                return False
            if self.file[:3] != (info.st_dev, info.st_ino, info.st_size):
                return False  # another write came between: the next search checks them
            self.checked = after.records
            return True
        finally:
            self.lock.release()

    def verify(self, partition: IndexPartition, code: int, path: str) -> int:
        """Check the rows that records after ``checked`` refer to against their checksums.

        Returns how many rows were checked now. Rows in file order (the usual case: each
        record has the next row) are summed in place, without a gathered copy.

        Raises:
            DerivedIndexError: a row differs from what was written.
        """
        start = self.checked
        if start >= partition.records:
            return 0
        chosen = (partition.states[start:] == EntryState.READY) & (
            partition.identities[start:] == code
        )
        rows = partition.rows[start:][chosen].astype(np.int64)
        expected = partition.checksums[start:][chosen]
        step = 8_192
        sequential = bool(rows.size) and bool(np.all(np.diff(rows) == 1))
        for first in range(0, rows.size, step):
            block = rows[first : first + step]
            if sequential:
                actual = row_checksums(self.array[int(block[0]) : int(block[-1]) + 1])
            else:
                actual = row_checksums(self.array[block])
            bad = np.flatnonzero(actual != expected[first : first + step])
            if bad.size:
                raise DerivedIndexError(
                    f"vector {int(block[bad[0]])} of {path} fails its checksum; the derived "
                    "index is damaged, rebuild it"
                )
        self.checked = partition.records
        return int(rows.size)

    def _grow(self, fd: int, total: int, *, small: bool = False) -> int:
        """Read rows ``rows..total`` into spare room after the rows held; return the rows
        now held (fewer than ``total`` only if the file ended early). Where a map cannot
        be extended in place (``row_map.py``).

        Mapping the whole grown file again would page-fault on every row at the next
        product (5–15 ms at 100k rows of 384 values, the first recall after an append).
        The first growth copies the mapped rows into memory with room to spare (half again,
        at least 1,024 rows: room never written costs address space, not memory), releasing
        each window of the map once copied so that the process never holds the rows twice
        (:func:`_copy_rows`); later ones read only the new rows into the room. Arrays
        handed out view rows before ``rows``, which are never written again, so they stay
        valid and unchanged.
        """
        spare = self._spare
        if spare is None or spare.shape[0] < total:
            # A small file read whole (``small``): room of half again, at least 16 rows;
            # a few kilobytes from the heap, not an address range of its own.
            room = total + max(total // 2, 16) if small else max(total + total // 2, total + 1_024)
            grown = empty_buffer((room, self.dimensions), np.float32)
            _copy_rows(grown, self.array, self.rows, self._map)
            spare = self._spare = grown
            self._map = None
        row_bytes = self.dimensions * 4
        target = spare[self.rows : total].data.cast("B")
        done = 0
        while done < len(target):
            count = portable.pread_into(fd, target[done:], self.rows * row_bytes + done)
            if count <= 0:
                break
            done += count
        held = self.rows + done // row_bytes
        self.array = spare[:held]
        return held

    def _read(self, path: str) -> None:
        row_bytes = self.dimensions * 4
        try:
            fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise DerivedIndexError(
                f"could not open {path} ({exc.strerror}); it should be a vector file this "
                "index wrote"
            ) from exc
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAXIMUM_ROWS_BYTES:
                raise DerivedIndexError(f"{path} is not a vector file this index wrote")
            total = info.st_size // row_bytes
            if total <= self.rows:
                return
            # Whole rows only: a torn tail (a row being written) is not mapped. The map
            # outlives the descriptor; a compaction unlinks the file, never cuts its rows.
            held = self._map
            same = self.file is not None and self.file[:2] == (info.st_dev, info.st_ino)
            if held is not None and self.rows and same and held.extend(fd, total):
                self.array = held.array()  # mapped in place: nothing paged in again
            elif (
                total * row_bytes <= SMALL_ROWS_BYTES or not portable.HELD_FILES_REPLACEABLE
            ) and (not self.rows or self._small):
                # A small NPC's rows: read, not mapped. A map is two address ranges of the
                # process (the rows and the reserve after them), and a world of thousands
                # of small NPCs would hold thousands (the kernel allows 65,530 by default)
                # for a few kilobytes each. On Windows every NPC's: a mapped file could not
                # be removed or replaced there (``portable.HELD_FILES_REPLACEABLE``).
                self._small = True
                total = self._grow(fd, total, small=True)
            elif self.rows and not self._small and (held is None or not held.extendable):
                total = self._grow(fd, total)  # no map grows in place here: copy
            else:  # the first read, a small file grown large, or a map it outgrew: map it
                self._small = False
                self._spare = None  # arrays handed out keep their rows alive
                if not self.rows and hasattr(os, "posix_fadvise"):
                    # The first read of a large file: the disk reads it while the recall
                    # does its other stages, not page by page as its product faults.
                    with contextlib.suppress(OSError):  # advice only
                        os.posix_fadvise(fd, 0, total * row_bytes, os.POSIX_FADV_WILLNEED)
                self._map = RowMap(fd, total, self.dimensions)
                self.array = self._map.array()
            self.rows = total
            self.file = (
                info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns
            )  # fmt: skip
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise DerivedIndexError(f"could not read {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)


#: Rows are copied out of a map in windows of about this many bytes (:func:`_copy_rows`).
_COPY_WINDOW_BYTES = 8 << 20


def _copy_rows(target: FloatMatrix, source: FloatMatrix, rows: int, mapped: RowMap | None) -> None:
    """``target[:rows] = source[:rows]``, window by window. When ``source`` is the rows of
    ``mapped``, each window is released from the process once copied
    (:meth:`RowMap.release`): without it, the copy of a 100k × 384 save's rows (154 MB) was
    made while every mapped page was still held, 434 MB at its peak where the rows held
    once are 265 MB. Anonymous memory is never released (that would zero it)."""
    step = max(1, _COPY_WINDOW_BYTES // max(1, int(source.strides[0])))
    for first in range(0, rows, step):
        last = min(rows, first + step)
        target[first:last] = source[first:last]
        if mapped is not None:
            mapped.release(first, last)
