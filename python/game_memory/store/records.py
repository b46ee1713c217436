"""The checksummed record format of the append-only partition logs.

A record is ``magic (4) | payload length (u32 LE) | CRC-32 of length+payload (u32 LE) |
payload``. Records are appended with one ``write`` call, so a writer killed mid-append
leaves a *torn tail*: a prefix of one record (or, after a power loss on some file systems,
zero bytes). Scanning tells three cases apart:

* valid records, up to ``end``;
* a torn tail after ``end`` (an incomplete record or all zero bytes): never acknowledged,
  treated as absent by readers and cut off by the next writer under the lock;
* anything else (bad magic, bad checksum, absurd length): corruption, raised as
  :class:`RecordCorruption` so the store fails closed.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

__all__ = ["HEADER_BYTES", "RecordCorruption", "ScanResult", "encode_record", "scan_records"]

MAGIC = b"GMR\x01"
_HEADER = struct.Struct("<4sII")
HEADER_BYTES = _HEADER.size


class RecordCorruption(Exception):
    """A record that is complete on disk but wrong: the file is corrupt at ``offset``."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan found: the payloads, where valid data ends, and whether a torn tail follows."""

    payloads: list[bytes]
    end: int
    torn_bytes: int


def encode_record(payload: bytes) -> bytes:
    """Frame ``payload`` as one record."""
    length = struct.pack("<I", len(payload))
    checksum = zlib.crc32(payload, zlib.crc32(length))
    return _HEADER.pack(MAGIC, len(payload), checksum) + payload


def scan_records(data: bytes, *, base_offset: int = 0, maximum_payload: int) -> ScanResult:
    """Split ``data`` into record payloads.

    Args:
        data: Bytes read from a log, starting at a record boundary.
        base_offset: Where ``data`` starts in the file (for error messages and ``end``).
        maximum_payload: Larger declared lengths are corruption, not a torn tail.

    Returns:
        The payloads, the file offset where valid records end, and the size of a torn tail.

    Raises:
        RecordCorruption: A complete record is invalid.
    """
    payloads: list[bytes] = []
    position = 0
    size = len(data)
    view = memoryview(data)
    while position < size:
        remaining = size - position
        if not any(view[position:]):
            break  # zero-filled tail: an unacknowledged write after a power loss
        if remaining < HEADER_BYTES:
            if not MAGIC.startswith(bytes(view[position : position + min(4, remaining)])):
                raise RecordCorruption(base_offset + position, "bad magic")
            break
        magic, length, checksum = _HEADER.unpack_from(data, position)
        if magic != MAGIC:
            raise RecordCorruption(base_offset + position, "bad magic")
        if length > maximum_payload:
            raise RecordCorruption(base_offset + position, f"declared length {length} too large")
        end = position + HEADER_BYTES + length
        if end > size:
            break  # incomplete record: torn tail
        payload = bytes(view[position + HEADER_BYTES : end])
        if zlib.crc32(payload, zlib.crc32(data[position + 4 : position + 8])) != checksum:
            raise RecordCorruption(base_offset + position, "checksum mismatch")
        payloads.append(payload)
        position = end
    return ScanResult(payloads, base_offset + position, size - position)
