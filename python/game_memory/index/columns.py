"""The columns of an index partition's entry records, grown in place as the file grows.

An :class:`~game_memory.index.partition.IndexPartition` is an immutable version of a
partition's entries; after an append the next version holds every record of the last one
and one more. Building it by concatenation copied every column (about 93 bytes per record:
9.3 MB at 100k memories) on every append, which was most of a durable append's cost at
that size. :class:`EntryColumns` instead keeps each column in a buffer with room to spare
and hands out read-only prefixes: a version's arrays are ``buffer[:records]``, so writing
records after that prefix (the next version) never changes what an older version sees.

Only one lineage extends a buffer in place: the version whose length is the buffer's
filled end. Extending any other version (two readers that decoded the same growth, or an
older version kept somewhere) copies its prefix into new buffers, so versions never share
a slot that one of them could overwrite. A buffer that is full grows by half (at least
256 records), and a large partition's columns read from its file start with that room
(allocated, not written): the spare room is bounded by half the columns' size, and a
copy happens once per that many appends instead of once per append.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from game_memory.durable.buffers import empty_buffer

__all__ = ["ColumnArrays", "EntryColumns"]

#: The fields of the entry records (``entries.ENTRY_DTYPE``) kept as columns, and the
#: dtype of each column (``memory`` and ``digest`` as 32 bytes per record).
_FIELDS = ("state", "identity", "row", "checksum", "memory", "digest", "code")
_MINIMUM_GROWTH = 256
#: From this many records on, buffers read from a file get room for half as many again.
_ROOMY = 4_096


@dataclass(frozen=True, slots=True)
class ColumnArrays:
    """One version's columns: read-only arrays of ``records`` values each.

    ``hashes`` and ``digests`` are read-only byte views (32 bytes per record) that compare
    equal to ``bytes`` of the same content and can be sliced and handed to
    ``np.frombuffer``.
    """

    states: npt.NDArray[np.uint8]
    identities: npt.NDArray[np.uint32]
    rows: npt.NDArray[np.uint32]
    checksums: npt.NDArray[np.uint32]
    hashes: memoryview
    digests: memoryview
    codes: npt.NDArray[np.bytes_]


class EntryColumns:
    """The growing buffers of one lineage of partition versions (see the module docstring).

    Thread-safe: extending takes the lineage's lock, and arrays already handed out are
    never written again.
    """

    __slots__ = ("_buffers", "_filled", "_lock")

    def __init__(self, buffers: dict[str, np.ndarray], filled: int) -> None:
        self._buffers = buffers
        self._filled = filled
        self._lock = threading.Lock()

    @classmethod
    def of(cls, records: np.ndarray) -> tuple[EntryColumns, ColumnArrays]:
        """New buffers holding ``records`` (entry records, ``ENTRY_DTYPE``).

        From :data:`_ROOMY` records on, with room for half as many again: the first append
        after a large partition was read then writes into that room instead of copying
        every column into grown buffers (4 to 20 ms at 100k records, most of it faulting
        in the new pages, on the append's path). The room is allocated, not written, so it
        costs address space, not memory, until appends fill it. Smaller reads get exactly
        their records (growing those is cheap, and many small partitions stay cached).
        """
        count = int(records.size)
        size = count + count // 2 if count >= _ROOMY else count
        buffers = {name: _grown(_column(records, name), count, size) for name in _FIELDS}
        columns = cls(buffers, count)
        return columns, columns._arrays(count)

    @property
    def capacity(self) -> int:
        """How many records the buffers hold room for (for tests and bounds)."""
        return int(self._buffers["state"].shape[0])

    def extended(self, start: int, records: np.ndarray) -> tuple[EntryColumns, ColumnArrays]:
        """The columns of a version of ``start`` records of this lineage, then ``records``.

        In place when ``start`` is the filled end (the newest version is being extended);
        otherwise in new buffers holding a copy of the first ``start`` records.
        """
        count = int(records.size)
        with self._lock:
            if start == self._filled:
                if start + count > self.capacity:
                    size = max(start + count, start + max(start // 2, _MINIMUM_GROWTH))
                    self._buffers = {
                        name: _grown(buffer, start, size) for name, buffer in self._buffers.items()
                    }
                self._write(start, records)
                self._filled = start + count
                return self, self._arrays(start + count)
        # Another version was extended past ``start``: fork (its slots are not ours).
        size = start + count
        buffers = {name: _grown(buffer, start, size) for name, buffer in self._buffers.items()}
        fork = EntryColumns(buffers, size)
        fork._write(start, records)
        return fork, fork._arrays(size)

    def _write(self, start: int, records: np.ndarray) -> None:
        stop = start + int(records.size)
        for name, buffer in self._buffers.items():
            buffer[start:stop] = _column(records, name)

    def _arrays(self, count: int) -> ColumnArrays:
        parts = {name: buffer[:count] for name, buffer in self._buffers.items()}
        for part in parts.values():
            part.flags.writeable = False
        return ColumnArrays(
            parts["state"],
            parts["identity"],
            parts["row"],
            parts["checksum"],
            parts["memory"].reshape(-1).data,
            parts["digest"].reshape(-1).data,
            parts["code"],
        )


#: A 32-byte field's values seen as 32 bytes each: a view of the records, not a copy.
_BYTES_32 = np.dtype((np.uint8, (32,)))


def _column(records: np.ndarray, name: str) -> np.ndarray:
    """One field of the records as a view (32-byte fields as ``(n, 32)`` uint8), which
    the caller copies into its buffer: one copy per column, no intermediate array."""
    values = records[name]
    if name in ("memory", "digest"):
        return values.view(_BYTES_32)
    return values


def _grown(buffer: np.ndarray, keep: int, size: int) -> np.ndarray:
    """A new buffer of ``size`` records holding the first ``keep`` of ``buffer``."""
    grown = empty_buffer((size, *buffer.shape[1:]), buffer.dtype)
    grown[:keep] = buffer[:keep]
    return grown
