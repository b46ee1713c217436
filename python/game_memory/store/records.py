"""The checksummed record format of the append-only partition logs (and of packs).

A record is ``magic "GMR\\x01" (4) | payload length (u32 LE) | CRC-32 of the length field
(u32 LE) | CRC-32 of length+payload (u32 LE) | payload``. Records are appended with one
``write`` call, so a writer killed mid-append leaves a *torn tail*: a prefix of one record
(or, after a power loss on some file systems, zero bytes). Scanning tells three cases apart:

* valid records, up to ``end``;
* a torn tail after ``end``: zero bytes only, a prefix of a header, or a header that is
  itself intact (its length checksum holds) followed by fewer payload bytes than it
  declares. It was never acknowledged; readers treat it as absent and the next writer
  cuts it off under the lock;
* anything else (bad magic, a length whose checksum fails, an absurd length, a payload
  checksum mismatch, a record header inside what would be a torn tail): corruption,
  raised as :class:`RecordCorruption` so the store fails closed.

The length checksum is what keeps a damaged length field from passing for a torn tail:
without it, a flipped bit that made a length point past the end of the file would hide
the record (and every later one) as "torn", and the next writer would cut them off.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from game_memory.durable.checksum import crc32

__all__ = [
    "HEADER_BYTES",
    "RecordCorruption",
    "Salvaged",
    "ScanResult",
    "encode_record",
    "salvage_records",
    "scan_records",
]

MAGIC = b"GMR\x01"
_HEADER = struct.Struct("<4sIII")
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
    length_check = crc32(length)
    checksum = crc32(payload, length_check)
    return _HEADER.pack(MAGIC, len(payload), length_check, checksum) + payload


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
        if remaining < HEADER_BYTES:
            tail = bytes(view[position:])
            if any(tail) and not MAGIC.startswith(tail[:4]):
                raise RecordCorruption(base_offset + position, "bad magic")
            break  # a prefix of a header (or zero bytes): torn tail
        magic, length, length_check, checksum = _HEADER.unpack_from(data, position)
        if magic != MAGIC:
            if not any(view[position:]):
                break  # zero-filled tail: an unacknowledged write after a power loss
            raise RecordCorruption(base_offset + position, "bad magic")
        length_bytes = data[position + 4 : position + 8]
        if crc32(length_bytes) != length_check:
            raise RecordCorruption(base_offset + position, "the length field is damaged")
        if length > maximum_payload:
            raise RecordCorruption(base_offset + position, f"declared length {length} too large")
        end = position + HEADER_BYTES + length
        if end > size:
            # A torn tail holds part of one payload, which is JSON text: it never contains
            # a record header, so one there means later records exist and this is damage.
            if data.find(MAGIC, position + HEADER_BYTES) != -1:
                raise RecordCorruption(base_offset + position, "a record is cut short")
            break  # incomplete record: torn tail
        if crc32(view[position + HEADER_BYTES : end], length_check) != checksum:
            raise RecordCorruption(base_offset + position, "checksum mismatch")
        payloads.append(bytes(view[position + HEADER_BYTES : end]))
        position = end
    return ScanResult(payloads, base_offset + position, size - position)


@dataclass(frozen=True, slots=True)
class Salvaged:
    """What a tolerant scan of damaged data found.

    Attributes:
        records: ``(offset, length, payload)`` of every intact record, in file order
            (``length`` includes the header).
        damage: ``(offset, length, reason)`` of every damaged stretch, skipped.
        end: Where the last intact record (or damaged stretch) ends.
        torn_bytes: Bytes of a torn tail after ``end`` (a record never acknowledged).
    """

    records: list[tuple[int, int, bytes]]
    damage: list[tuple[int, int, str]]
    end: int
    torn_bytes: int


def _record_at(data: bytes, position: int, maximum_payload: int) -> int:
    """The length of a wholly valid record starting at ``position``, or 0."""
    if len(data) - position < HEADER_BYTES:
        return 0
    magic, length, length_check, checksum = _HEADER.unpack_from(data, position)
    length = int(length)
    if magic != MAGIC or crc32(data[position + 4 : position + 8]) != length_check:
        return 0
    end = position + HEADER_BYTES + length
    if length > maximum_payload or end > len(data):
        return 0
    if crc32(memoryview(data)[position + HEADER_BYTES : end], length_check) != checksum:
        return 0
    return HEADER_BYTES + length


def salvage_records(data: bytes, *, base_offset: int = 0, maximum_payload: int) -> Salvaged:
    """Split damaged ``data`` into its intact records, its damaged stretches and a torn tail.

    Records are framed and checksummed, so after damage the scan resynchronizes on the next
    offset where a whole record checks out (magic, length checksum, payload checksum); the
    bytes in between are damage. A torn tail (as :func:`scan_records` defines it) is only
    recognised after the last intact record. Never raises for bad data.
    """
    records: list[tuple[int, int, bytes]] = []
    damage: list[tuple[int, int, str]] = []
    position = 0
    size = len(data)
    while position < size:
        length = _record_at(data, position, maximum_payload)
        if length:
            payload = data[position + HEADER_BYTES : position + length]
            records.append((base_offset + position, length, payload))
            position += length
            continue
        try:
            # No whole record starts here, so this finds a torn tail or raises.
            scan_records(data[position:], maximum_payload=maximum_payload)
        except RecordCorruption as exc:
            reason = exc.reason
        else:
            return Salvaged(records, damage, base_offset + position, size - position)
        following = position + 1
        while True:
            following = data.find(MAGIC, following)
            if following == -1 or _record_at(data, following, maximum_payload):
                break
            following += 1
        stop = size if following == -1 else following
        damage.append((base_offset + position, stop - position, reason))
        position = stop
    return Salvaged(records, damage, base_offset + position, 0)
