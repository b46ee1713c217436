"""Packs: immutable files holding many owners' records of one session, for bulk writes.

A migration (or any bulk import) would otherwise create one file per owner partition,
which costs far more than the records themselves on most file systems. Instead it writes
one pack per session: the records grouped by owner, then an index of the owner ranges.
A reader of one owner's partition looks the owner up in the index and reads only that
range, so owner isolation holds for packs exactly as for logs.

Layout (little-endian)::

    "GMPACK01"                                   8 bytes
    records, grouped by owner (records.py framing)
    index: per owner, sorted by hash: sha256(owner) 32 | offset u64 | length u64 | count u32
    footer: index offset u64 | owner count u32 | CRC-32 of the index u32 | "GMPKEND1"

A pack is written to a temporary name and renamed into place, so a pack that exists is
complete; its bytes are made durable by the batch's barrier, and a batch that
never committed is rolled back by the journal (see engine.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.store.layout import salvage_advice
from game_memory.store.records import RecordCorruption, scan_records

__all__ = [
    "PACK_NAME",
    "PACK_OVERHEAD",
    "PackIndex",
    "encode_pack",
    "pack_path",
    "pack_records_region",
    "plan_packs",
    "read_pack_index",
    "read_pack_range",
    "write_pack",
]

_MAGIC = b"GMPACK01"
_END = b"GMPKEND1"
_ENTRY = struct.Struct("<32sQQI")
_FOOTER = struct.Struct("<QII8s")
PACK_NAME = re.compile(r"^p-([1-9][0-9]{0,8})\.pack$")
# The bytes of a pack that are not records, when it holds one owner.
PACK_OVERHEAD = len(_MAGIC) + _ENTRY.size + _FOOTER.size


def pack_path(session_directory: str | Path, number: int) -> str:
    """The path of pack ``number`` (1, 2, ...) of a session."""
    return f"{os.fspath(session_directory)}{os.sep}p-{number}.pack"


def encode_pack(groups: list[tuple[str, list[bytes]]]) -> bytes:
    """Build a pack from ``(owner_hash, framed records)`` groups."""
    body = [_MAGIC]
    offset = len(_MAGIC)
    index: list[bytes] = []
    for owner_hash, records in sorted(groups):
        data = b"".join(records)
        index.append(_ENTRY.pack(bytes.fromhex(owner_hash), offset, len(data), len(records)))
        body.append(data)
        offset += len(data)
    index_bytes = b"".join(index)
    footer = _FOOTER.pack(offset, len(index), crc32(index_bytes), _END)
    return b"".join(body) + index_bytes + footer


Groups = list[tuple[str, list[bytes]]]


def plan_packs(
    directory: str | Path, first_number: int, groups: Groups, maximum_file_bytes: int
) -> list[tuple[str, Groups]]:
    """Split ``(owner_hash, records)`` groups into packs no larger than ``maximum_file_bytes``.

    Returns ``(path, groups)`` per pack, numbered from ``first_number``. An owner's records
    may continue in the next pack. Every record must fit a pack on its own
    (``len(record) + PACK_OVERHEAD <= maximum_file_bytes``); the caller checks that.
    """
    number = first_number
    planned: list[tuple[str, Groups]] = []
    current: Groups = []
    size = len(_MAGIC) + _FOOTER.size
    for owner_hash, records in sorted(groups):
        chunk: list[bytes] = []
        for record in records:
            # Count an index entry per record: a chunk split across packs needs one in each.
            if size + len(record) + _ENTRY.size > maximum_file_bytes and (current or chunk):
                if chunk:
                    current.append((owner_hash, chunk))
                planned.append((pack_path(directory, number), current))
                number, current, chunk = number + 1, [], []
                size = len(_MAGIC) + _FOOTER.size
            chunk.append(record)
            size += len(record) + _ENTRY.size
        if chunk:
            current.append((owner_hash, chunk))
    if current:
        planned.append((pack_path(directory, number), current))
    return planned


def write_pack(path: str, groups: Groups) -> None:
    """Write a pack under a temporary name and rename it into place (not fsynced).

    A pack that exists is therefore complete. The caller makes the batch durable with one
    barrier (``fs.sync_all``) before committing it.

    Raises:
        PersistenceError: the pack exists already, or could not be written.
    """
    if os.path.lexists(path):
        raise PersistenceError(f"refusing to overwrite the existing pack {path}")
    temporary = f"{path}.{os.getpid()}.tmp"
    data = encode_pack(groups)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | portable.OPEN_FLAGS, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.rename(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise PersistenceError(f"could not write the pack {path}: {exc.strerror}") from exc


@dataclass(frozen=True, slots=True)
class PackIndex:
    """The owner ranges of one pack, identified by the file's device, inode, size and ctime."""

    path: str
    device: int
    inode: int
    size: int
    owners: dict[str, tuple[int, int, int]]
    changed: int = 0  # st_ctime_ns: with inode and size, tells a re-created pack apart


def _corrupt(path: str, what: str) -> PersistenceError:
    """The error for a damaged pack: what is wrong, and the salvage that repairs it.

    ``check --fix --accept-loss`` salvages every kind of pack damage (it reads the records
    without the index, keeps the intact ones and rewrites the pack), so that is the advice,
    as for a damaged log.
    """
    return PersistenceError(f"{path} is corrupt: {what}. {salvage_advice(path)}.")


def read_pack_index(path: str, info: os.stat_result, maximum_bytes: int) -> PackIndex:
    """Read and verify a pack's index (not its records).

    Raises:
        PersistenceError: the pack is truncated, corrupt, or larger than ``maximum_bytes``;
            the message says what is wrong and what repairs it.
    """
    if info.st_size > maximum_bytes:
        raise PersistenceError(
            f"{path} is not a valid pack for this store: it is {info.st_size:,} bytes, more "
            f"than maximum_file_bytes ({maximum_bytes:,}) allows. If the save was written with "
            "a larger maximum_file_bytes, open it with that one; otherwise the pack is "
            f"damaged. {salvage_advice(path)}."
        )
    if info.st_size < len(_MAGIC) + _FOOTER.size:
        raise _corrupt(path, f"it is cut short ({info.st_size:,} bytes: not a valid pack)")
    try:
        fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
    except OSError as exc:
        raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
    try:
        footer = portable.pread(fd, _FOOTER.size, info.st_size - _FOOTER.size)
        index_offset, owners, checksum, end = _FOOTER.unpack(footer)
        index_length = owners * _ENTRY.size
        if end != _END or index_offset + index_length + _FOOTER.size != info.st_size:
            raise _corrupt(path, "its footer is damaged")
        index = portable.pread(fd, index_length, index_offset)
        header = portable.pread(fd, len(_MAGIC), 0)
    except OSError as exc:
        raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if header != _MAGIC:
        raise _corrupt(path, "its header is damaged")
    if crc32(index) != checksum:
        raise _corrupt(path, "its index checksum is wrong")
    ranges: dict[str, tuple[int, int, int]] = {}
    for position in range(0, index_length, _ENTRY.size):
        owner, offset, length, count = _ENTRY.unpack_from(index, position)
        if offset < len(_MAGIC) or offset + length > index_offset:
            raise _corrupt(path, "an owner range is out of bounds")
        ranges[owner.hex()] = (offset, length, count)
    return PackIndex(path, info.st_dev, info.st_ino, info.st_size, ranges, info.st_ctime_ns)


def read_pack_range(index: PackIndex, owner_hash: str, maximum_payload: int) -> list[bytes]:
    """Read one owner's record payloads from a pack (empty if the owner is not in it).

    Raises:
        PersistenceError: the owner's range is damaged; the message names the repair.
    """
    entry = index.owners.get(owner_hash)
    if entry is None:
        return []
    offset, length, count = entry
    data = fs.read_range(index.path, offset, length)
    try:
        scan = scan_records(data, base_offset=offset, maximum_payload=maximum_payload)
    except RecordCorruption as exc:
        raise _corrupt(index.path, f"{exc.reason} at byte {exc.offset}") from exc
    if scan.torn_bytes or len(scan.payloads) != count:
        raise _corrupt(index.path, "an owner range is incomplete")
    return scan.payloads


def pack_records_region(data: bytes) -> tuple[int, int, str | None]:
    """Where a pack's records lie: ``(start, stop, problem)``, for salvaging a damaged pack.

    With a sound header, footer and index the region is the one the footer names and
    ``problem`` is ``None``; otherwise it is everything after the header (the index, if any
    is left, then reads as damage) and ``problem`` says what is wrong.
    """
    size = len(data)
    if size < len(_MAGIC) + _FOOTER.size:
        return len(_MAGIC), size, "the pack is too short to hold its footer"
    index_offset, owners, checksum, end = _FOOTER.unpack_from(data, size - _FOOTER.size)
    index_length = owners * _ENTRY.size
    if (
        end != _END
        or index_offset < len(_MAGIC)
        or index_offset + index_length + _FOOTER.size != size
        or crc32(data[index_offset : index_offset + index_length]) != checksum
    ):
        return len(_MAGIC), size, "its footer or index is damaged"
    if data[: len(_MAGIC)] != _MAGIC:
        return len(_MAGIC), index_offset, "its header is damaged"
    return len(_MAGIC), index_offset, None
