"""One owner partition of the in-memory vector index: its records, rows, compaction and check.

A :class:`MemoryPartition` is the in-memory counterpart of a partition's files in the file
index: the 128-byte entry records (:func:`~game_memory.index.entries.encode_entry`, CRC-32
each) in a byte buffer, the float32 rows of each identity in a
:class:`~game_memory.index.partition.RowBuffer` (a checksum per row in the records), and the
latest :class:`~game_memory.index.partition.IndexPartition` version, extended from the
previous one. ``generation`` plays the file's inode: a compaction makes a new partition
object, so readers and joins of the old one notice.

Not thread-safe by itself: :class:`~game_memory.index.memory.InMemoryVectorIndex` mutates
it under its lock. Records and rows only grow within a generation, so a version or a row
slice handed out stays valid while new ones are added.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from game_memory.errors import DerivedIndexError
from game_memory.index.entries import EntryRecord, EntryState, decode_entries, encode_entry
from game_memory.index.layout import identity_dimensions
from game_memory.index.partition import (
    FloatMatrix,
    IndexPartition,
    RowBuffer,
    extend_partition,
    new_tag,
)

__all__ = ["MemoryPartition"]


@dataclass(slots=True)
class MemoryPartition:
    """One owner partition held in memory (see the module docstring)."""

    session_hash: str
    owner_hash: str
    generation: int
    tag: int
    entries: bytearray = field(default_factory=bytearray)
    rows: dict[int, RowBuffer] = field(default_factory=dict)
    partition: IndexPartition | None = None

    @property
    def label(self) -> str:
        """How messages name the partition (there is no file to name)."""
        return f"in-memory index partition o-{self.owner_hash[:12]}… of s-{self.session_hash[:12]}…"

    def version(self) -> os.stat_result:
        """What :func:`extend_partition` reads of a file (its inode and size), for this one."""
        fields = (0, self.generation, 0, 0, 0, 0, len(self.entries), 0, 0, 0)
        return os.stat_result(fields, {"st_ctime_ns": 0})

    def add(self, records: Sequence[EntryRecord]) -> None:
        """Append the encoded records and extend the partition version (decoding them back,
        so the version is exactly what a reader of the file index would build)."""
        data = b"".join(encode_entry(record, self.tag) for record in records)
        decoded, _ = decode_entries(data)
        self.entries += data
        self.partition = extend_partition(
            self.partition, decoded, self.session_hash, self.owner_hash, self.version()
        )

    def add_rows(self, code: int, matrix: FloatMatrix) -> int:
        """Copy rows after identity ``code``'s rows (growing as ``RowBuffer`` does); return
        the first new row. Slices handed out earlier stay valid: they never cover new rows."""
        buffer = self.rows.setdefault(code, RowBuffer(self.tag, int(matrix.shape[1])))
        first, total = buffer.rows, buffer.rows + int(matrix.shape[0])
        if total > buffer.array.shape[0]:
            grown = np.empty((total + total // 8 + 64, buffer.dimensions), dtype=np.float32)
            grown[:first] = buffer.array[:first]
            buffer.array = grown
        buffer.array[first:total] = matrix
        buffer.rows = total
        return first

    def compacted(self, generation: int) -> MemoryPartition | None:
        """A new generation with only the live records and their rows (``None`` if none),
        in the file index's order (latest record per memory, in ``position`` order).

        Raises:
            DerivedIndexError: a row fails its checksum (it is never copied forward).
        """
        partition = self.partition
        assert partition is not None
        for code, buffer in self.rows.items():
            with buffer.lock:
                buffer.verify(partition, code, self.label)
        records: list[EntryRecord] = []
        kept: dict[int, list[FloatMatrix]] = {}
        for memory_hash in partition.position:
            record = partition.record(memory_hash)
            assert record is not None
            if record.state is EntryState.READY:
                rows = kept.setdefault(record.identity, [])
                rows.append(self.rows[record.identity].array[record.row])
                record = dataclasses.replace(record, row=len(rows) - 1)
            records.append(record)
        if not records:
            return None
        fresh = MemoryPartition(self.session_hash, self.owner_hash, generation, new_tag(self.tag))
        for code, rows in kept.items():
            fresh.add_rows(code, np.asarray(rows, dtype=np.float32))
        fresh.add(records)
        return fresh

    def probes(self) -> tuple[bytes, dict[int, RowBuffer]]:
        """A copy of the records and unchecked buffers over the rows as they are now.

        Call under the index lock (a write may swap a buffer's array for a grown one);
        :meth:`check` then runs on the copy without it.
        """
        probes: dict[int, RowBuffer] = {}
        for code, buffer in self.rows.items():
            probe = probes[code] = RowBuffer(buffer.tag, buffer.dimensions)  # checked = 0
            probe.array, probe.rows = buffer.array, buffer.rows
        return bytes(self.entries), probes

    def check(
        self, entries: bytes, buffers: dict[int, RowBuffer], identities: Sequence[str]
    ) -> None:
        """Decode a copy of the records from scratch; check every row a ready record names.

        ``entries`` and ``buffers`` come from :meth:`probes`. Unlike a live buffer's
        :meth:`RowBuffer.verify` (new rows only), every row is checked again: here the
        buffer *is* the storage.

        Raises:
            DerivedIndexError: a record fails its CRC, names another generation or an
                unknown identity, or a row is missing, of the wrong width, or fails its
                checksum.
        """
        try:
            records, torn = decode_entries(entries)
            if torn:
                raise ValueError(f"it ends with {torn} bytes of a partial record")
            partition = extend_partition(
                None, records, self.session_hash, self.owner_hash, self.version()
            )
            if partition.records and partition.tag != self.tag:
                raise ValueError("its records name another generation of rows")
        except ValueError as exc:
            raise DerivedIndexError(f"the {self.label} is corrupt ({exc}); rebuild it") from exc
        ready = partition.states == EntryState.READY
        for code in sorted(set(partition.identities[ready].tolist())):
            buffer = buffers.get(code)
            if code >= len(identities) or buffer is None:
                raise DerivedIndexError(f"the {self.label} names vectors it does not hold")
            if buffer.dimensions != identity_dimensions(identities[code]):
                raise DerivedIndexError(f"the {self.label} holds rows of the wrong width")
            if partition.rows_needed(code) > buffer.rows:
                raise DerivedIndexError(f"the {self.label} lacks rows its entries refer to")
            buffer.verify(partition, code, f"the {self.label}")
