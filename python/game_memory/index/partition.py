"""One owner partition of the derived index as read, and the loading of its vector rows.

An :class:`IndexPartition` is an immutable version of a partition's entry records (every
record, and the latest per memory); a newer version extends an older one when the file
only grew. A :class:`RowBuffer` loads (and checksums once per row) the float32 rows of
one identity and generation, growing as rows are appended.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from game_memory.errors import DerivedIndexError, PersistenceError
from game_memory.index.entries import (
    ENTRY_BYTES,
    EntryRecord,
    EntryState,
    row_checksums,
)

__all__ = [
    "FloatMatrix",
    "IndexPartition",
    "PartitionReplacedError",
    "RowBuffer",
    "derived_error",
    "extend_partition",
    "new_tag",
]

MAXIMUM_ROWS_BYTES = 1 << 40
FloatMatrix = npt.NDArray[np.float32]


class PartitionReplacedError(DerivedIndexError):
    """A compaction replaced the partition while it was being read; read it again."""


def derived_error(exc: PersistenceError) -> DerivedIndexError:
    return DerivedIndexError(
        f"{exc} (this is the derived vector index, not the save: delete the index folder or "
        "run a rebuild)"
    )


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
    position: dict[bytes, int]
    states: npt.NDArray[np.uint8]
    identities: npt.NDArray[np.uint32]
    rows: npt.NDArray[np.uint32]
    checksums: npt.NDArray[np.uint32]
    hashes: bytes
    digests: bytes
    codes: npt.NDArray[np.bytes_]
    needed: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

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
        return self.digests[slot * 32 : slot * 32 + 32]

    def memory_hash(self, slot: int) -> bytes:
        """The ``sha256(memory_id)`` of the record in ``slot``."""
        return self.hashes[slot * 32 : slot * 32 + 32]

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
    position = dict(base.position) if base is not None else {}
    hashes = records["memory"].tobytes()
    deleted = (records["state"] == EntryState.DELETED).tolist()
    for index in range(count):
        memory = hashes[index * 32 : index * 32 + 32]
        if deleted[index]:
            position.pop(memory, None)
        else:
            position[memory] = start + index
    if base is not None and start:
        states = np.concatenate((base.states, records["state"]))
        identities = np.concatenate((base.identities, records["identity"]))
        rows = np.concatenate((base.rows, records["row"]))
        checksums = np.concatenate((base.checksums, records["checksum"]))
        all_hashes = base.hashes + hashes
        digests = base.digests + records["digest"].tobytes()
        codes = np.concatenate((base.codes, records["code"]))
    else:
        states = records["state"].copy()
        identities = records["identity"].copy()
        rows = records["row"].copy()
        checksums = records["checksum"].copy()
        all_hashes = hashes
        digests = records["digest"].tobytes()
        codes = records["code"].copy()
    return IndexPartition(
        session_hash,
        owner_hash,
        file.st_ino,
        file.st_ctime_ns,
        (start + count) * ENTRY_BYTES,
        tag,
        position,
        states,
        identities,
        rows,
        checksums,
        all_hashes,
        digests,
        codes,
    )


class RowBuffer:
    """The rows of one row file read so far, in a buffer with room to grow.

    Rows of a file generation never change once whole, so a reload reads only the rows
    appended since, and ``checked`` records (a prefix, the same in every version of the
    generation's entries file) have had their rows' checksums verified. Slices handed out
    stay valid when the buffer is replaced by a larger one. Use under ``lock``.
    """

    def __init__(self, tag: int, dimensions: int) -> None:
        self.tag = tag
        self.dimensions = dimensions
        self.array: FloatMatrix = np.empty((0, dimensions), dtype=np.float32)
        self.rows = 0
        self.checked = 0
        self.lock = threading.Lock()

    def load(self, path: str, needed: int) -> FloatMatrix:
        """Return the first ``needed`` rows, reading the file's new whole rows if short.

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

    def verify(self, partition: IndexPartition, code: int, path: str) -> None:
        """Check the rows that records after ``checked`` refer to against their checksums.

        Raises:
            DerivedIndexError: a row differs from what was written.
        """
        start = self.checked
        if start >= partition.records:
            return
        chosen = (partition.states[start:] == EntryState.READY) & (
            partition.identities[start:] == code
        )
        rows = partition.rows[start:][chosen].astype(np.int64)
        expected = partition.checksums[start:][chosen]
        for first in range(0, rows.size, 8_192):
            block = rows[first : first + 8_192]
            actual = row_checksums(self.array[block])
            bad = np.flatnonzero(actual != expected[first : first + 8_192])
            if bad.size:
                raise DerivedIndexError(
                    f"vector {int(block[bad[0]])} of {path} fails its checksum; the derived "
                    "index is damaged, rebuild it"
                )
        self.checked = partition.records

    def _read(self, path: str) -> None:
        row_bytes = self.dimensions * 4
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
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
            array = self.array
            if total > array.shape[0]:
                # Room for growth, so appends after a load do not copy the matrix each time.
                grown = np.empty((total + total // 8 + 64, self.dimensions), dtype=np.float32)
                grown[: self.rows] = array[: self.rows]
                array = grown
            target = array[self.rows : total].data.cast("B")
            offset, done = self.rows * row_bytes, 0
            while done < len(target):
                read = os.preadv(fd, [target[done:]], offset + done)
                if read == 0:
                    break
                done += read
            self.array, self.rows = array, self.rows + done // row_bytes
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise DerivedIndexError(f"could not read {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)
