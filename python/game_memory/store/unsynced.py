"""The unsynced-intents marker: which partitions may hold records whose intents are not durable.

A group commit (``group_writes.py``) makes one file durable per partition it writes to:
the record's log segment. It writes the ledger intents first (so a ``kill -9`` never
leaves a record without its intent: the kernel keeps both) but does not fsync them, so
after a power loss a durable, acknowledged record may have lost its intent. This file,
``unsynced.log``, is how recovery finds such records without scanning the store: before
a group writes its first record to a partition that the marker does not yet name, it
appends that partition to the marker and fsyncs it. Every record that can outlive its
intent is therefore in a partition the marker names, and every intent at or after the
marker's *watermark* (the ledger count when the marker was started, all durable then)
belongs to such a partition.

A **checkpoint** (``fsync`` the ledger, then empty the marker durably) ends a marker
generation: after it, every intent is durable again. The store checkpoints when the marker
would name more than :data:`MAXIMUM_PARTITIONS` partitions, when more than
:data:`MAXIMUM_UNSYNCED_INTENTS` intents follow the watermark, before any other kind of
write to the add ledger (a batch, a migration, an erase, a check), and when it closes.

Record layout (96 bytes, little-endian): magic ``GMU\\x01`` | zero u32 | watermark u64 |
sha256(session) | sha256(owner) | CRC-32 of the preceding 80 bytes | 12 zero bytes. The
records from the first incomplete, zero or checksum-failing one on are an append that never
completed (each append is fsynced before any record of its partitions is written, so only
the last one can be unsynced) and are ignored; two watermarks are corruption. An append
therefore writes at the end of the valid records, over whatever an append that never
completed left there, never after it: a power loss can leave an unsynced append's bytes
(zeros, a torn record) in the file, and a record written behind them would be ignored,
so its partition would not be reconciled (issue 11's power-loss explorer found it: an
acknowledged record lost its intent and ``count()`` fell one below ``enumerate``).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError

__all__ = ["MAXIMUM_PARTITIONS", "MAXIMUM_UNSYNCED_INTENTS", "Unsynced", "UnsyncedMarker"]

_RECORD = struct.Struct("<4sIQ32s32s")
_TRAILER = struct.Struct("<I12x")
_RECORD_BYTES = _RECORD.size + _TRAILER.size  # 96
_MAGIC = b"GMU\x01"
#: Partitions one marker generation names at most (recovery reads each of them).
MAXIMUM_PARTITIONS = 256
#: Intents after the watermark at most (recovery reads them all).
MAXIMUM_UNSYNCED_INTENTS = 4_096
_MAXIMUM_BYTES = (MAXIMUM_PARTITIONS + 1) * _RECORD_BYTES


class Unsynced:
    """One marker generation: the watermark and the partitions named, in marker order."""

    __slots__ = ("partitions", "watermark")

    def __init__(self, watermark: int, partitions: list[tuple[str, str]]) -> None:
        self.watermark = watermark
        self.partitions = partitions


class UnsyncedMarker:
    """The marker file of one store; call every method under the store lock."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Unsynced | None:
        """The current generation, or ``None`` when the marker is missing or empty.

        Raises:
            PersistenceError: the marker names two watermarks, is a link, or is larger than
                any marker the store writes.
        """
        return self._parse()[0]

    def _parse(self) -> tuple[Unsynced | None, int, int]:
        """The generation, the bytes its valid records take, and the file's size."""
        read = fs.read_file(self.path, _MAXIMUM_BYTES)
        if read is None or not read[0]:
            return None, 0, 0
        data = read[0]
        whole = len(data) // _RECORD_BYTES
        watermark: int | None = None
        partitions: list[tuple[str, str]] = []
        for number in range(whole):
            record = data[number * _RECORD_BYTES : (number + 1) * _RECORD_BYTES]
            magic, zero, mark, session, owner = _RECORD.unpack_from(record)
            (checksum,) = struct.unpack_from("<I", record, _RECORD.size)
            if magic != _MAGIC or zero or crc32(record[: _RECORD.size]) != checksum:
                break  # the last append never completed (only it can be unsynced)
            if watermark is not None and mark != watermark:
                raise PersistenceError(
                    f"{self.path} names two watermarks; restore the save from a backup"
                )
            watermark = mark
            partitions.append((session.hex(), owner.hex()))
        valid = len(partitions) * _RECORD_BYTES
        if watermark is None:
            return None, valid, len(data)
        return Unsynced(watermark, partitions), valid, len(data)

    def add(self, watermark: int, partitions: list[tuple[str, str]]) -> None:
        """Name ``partitions`` (with the generation's ``watermark``) durably, in one write.

        The write goes at the end of the valid records (see the module docstring), and
        anything after it (an append that never completed) is cut off before the fsync.
        Whether or not a power loss keeps that cut, the new records follow the valid ones.
        """
        chunks = []
        for session_hash, owner_hash in partitions:
            body = _RECORD.pack(
                _MAGIC, 0, watermark, bytes.fromhex(session_hash), bytes.fromhex(owner_hash)
            )
            chunks.append(body + _TRAILER.pack(crc32(body)))
        data = b"".join(chunks)
        _, valid, size = self._parse()
        with fs.open_append(self.path) as (fd, _):
            if size == valid:
                fs.append_bytes(fd, data, self.path)
                return
            try:
                os.ftruncate(fd, valid)
            except OSError as exc:
                raise PersistenceError(
                    f"could not cut the unfinished end of {self.path}: {exc.strerror}"
                ) from exc
            fs.append_bytes(fd, data, self.path)

    def clear(self) -> None:
        """End the generation: empty the marker durably (the file itself stays)."""
        try:
            fd = os.open(self.path, os.O_WRONLY | portable.OPEN_FLAGS)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise PersistenceError(f"could not open {self.path}: {exc.strerror}") from exc
        try:
            if os.fstat(fd).st_size:
                os.ftruncate(fd, 0)
                os.fsync(fd)
        except OSError as exc:
            raise PersistenceError(f"could not empty {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)
