"""Verified stamps: what of a partition's index files was last checked, so it is not again.

Opening a partition used to check every entry record's CRC-32 one call at a time and the
checksum of every vector row (100k entries: 100k calls and 154 MB summed) before the
first recall could score. After such a full check the reader writes a **stamp**
``s-<sha256(session)>/o-<sha256(owner)>.verified`` beside the partition's files, naming:

* the entries file (device, inode, size, modification and change times) and how many
  leading records were checked, with the CRC-32 of exactly those bytes;
* per identity code, the row file that was mapped (tag, device, inode, size, times) and
  how many leading entry records had their rows checked.

A later open trusts the checked entry records if the file still holds those bytes: when
it is the same file (device and inode) with its size and both times unchanged nothing is
hashed, otherwise (the file grew, or it is a copy of the index: another device or inode)
one CRC-32 over the prefix (about 2 GB/s) replaces the per-record calls, since a record's
check depends on its bytes alone; the records after the prefix are checked one by one as
before. It trusts the checked rows
only if the row file is unchanged (same device, inode, size, modification and change
time: every write moves the change time, which user code cannot set back) and the entry
records they were checked for are trusted. Anything else (a stamp of another partition,
format or generation, a stamp failing its own CRC-32, a file appended to or replaced) is
a full check, as without a stamp, followed by a new stamp. What a stamp cannot see is
damage that leaves a row file's size and times unchanged (a disk returning other bytes):
the rows of such a file are not checked again; ``verify`` (which a rebuild runs) reads
and checks every row again, ignoring stamps.

A reader writes a stamp after a full check; a writer, at close, for every partition it
appended to (``IndexEngine.stamp_written``: the files fsynced first, then the rows not
checked yet checked, under the writer lock), so a save closed cleanly opens without
checking its index again. A stamp is derived data about derived data: written atomically
(temporary file, fsync, rename), never required, safe to delete; a write that fails is
skipped. Compaction makes a
new generation (another entries inode and row tag), which no old stamp matches; resetting
a partition deletes its stamp.

Layout: ``GMSTAMP1`` (8) · CRC-32 of the body u32 · body (JSON).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable.checksum import crc32
from game_memory.durable.framed_json import read_framed, write_framed
from game_memory.errors import PersistenceError

__all__ = [
    "STAMP_MINIMUM",
    "EntriesStamp",
    "FileIdentity",
    "RowsStamp",
    "Stamp",
    "file_identity",
    "read_stamp",
    "remove_stamp",
    "stamp_path",
    "trusted_records",
    "write_stamp",
]

#: A full check of at least this many records or rows writes a stamp (smaller is cheap;
#: 1,024 until 5 December 2026, when an NPC of 500 entries was checked in full each open).
STAMP_MINIMUM = 128
FORMAT_VERSION = 1
_MAGIC = b"GMSTAMP1"
_MAXIMUM_BYTES = 1 << 16
_LOG = logging.getLogger("game_memory.index")

#: ``(device, inode, size, mtime_ns, ctime_ns)`` of a file as it was checked.
FileIdentity = tuple[int, int, int, int, int]


def file_identity(info: os.stat_result) -> FileIdentity:
    """The identity of a file a stamp compares (see the module docstring)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@dataclass(frozen=True, slots=True)
class EntriesStamp:
    """The first ``records`` entry records of ``file`` were checked; ``crc`` is their CRC-32."""

    file: FileIdentity
    records: int
    crc: int


@dataclass(frozen=True, slots=True)
class RowsStamp:
    """The rows the first ``checked`` entry records name in ``file`` (generation ``tag``)
    passed their checksums."""

    tag: int
    file: FileIdentity
    checked: int


@dataclass(frozen=True, slots=True)
class Stamp:
    """A partition's stamp: its entries and, per identity code, its rows."""

    entries: EntriesStamp
    rows: dict[int, RowsStamp]


def stamp_path(entries_path: str) -> str:
    """The stamp beside an entries file (``o-<owner>.entries`` -> ``o-<owner>.verified``)."""
    return entries_path[: -len(".entries")] + ".verified"


def trusted_records(stamp: Stamp | None, data: bytes | memoryview, info: os.stat_result) -> int:
    """How many leading records of ``data`` (the entries file, read whole) ``stamp`` vouches for.

    ``info`` is the file as opened for that read. Zero when the stamp is absent or names
    another file or other bytes.
    """
    if stamp is None:
        return 0
    entries = stamp.entries
    end = entries.records * 128
    if end > len(data):
        return 0
    if entries.file == file_identity(info):
        return entries.records  # not written to since it was checked
    # Another state of the file, or another file (a copy of the index: other device and
    # inode): the records checked were exactly these bytes if their CRC-32 holds, and a
    # record's check is a function of its bytes alone.
    if crc32(memoryview(data)[:end]) != entries.crc:
        return 0
    return entries.records


def read_stamp(path: str, session_hash: str, owner_hash: str) -> Stamp | None:
    """The partition's stamp, or ``None`` when absent, damaged or another partition's."""
    try:
        document = read_framed(Path(path), _MAGIC, _MAXIMUM_BYTES)
        if document is None:
            return None
        if document["format_version"] != FORMAT_VERSION:
            raise ValueError(f"format version {document['format_version']!r}")
        if (document["session"], document["owner"]) != (session_hash, owner_hash):
            raise ValueError("it belongs to another partition")
        file, records, entries_crc = document["entries"]
        rows = {
            int(code): RowsStamp(int(tag), _identity(identity), int(checked))
            for code, (tag, identity, checked) in document["rows"].items()
        }
        return Stamp(EntriesStamp(_identity(file), int(records), int(entries_crc)), rows)
    except (ValueError, KeyError, TypeError) as exc:
        _LOG.info("the stamp %s is unusable (%s); the partition is checked in full", path, exc)
        return None


def _identity(value: object) -> FileIdentity:
    if not isinstance(value, list) or len(value) != 5:
        raise ValueError("a file identity is five numbers")
    device, inode, size, modified, changed = (int(item) for item in value)
    return (device, inode, size, modified, changed)


def write_stamp(path: str, session_hash: str, owner_hash: str, stamp: Stamp) -> bool:
    """Replace the partition's stamp atomically; whether it was written (never raises)."""
    document = {
        "format_version": FORMAT_VERSION,
        "session": session_hash,
        "owner": owner_hash,
        "entries": [list(stamp.entries.file), stamp.entries.records, stamp.entries.crc],
        "rows": {
            str(code): [rows.tag, list(rows.file), rows.checked]
            for code, rows in sorted(stamp.rows.items())
        },
    }
    try:
        write_framed(Path(path), _MAGIC, document)
    except (PersistenceError, OSError) as exc:
        _LOG.info("the stamp %s was not written (%s)", path, exc)
        return False
    return True


def remove_stamp(path: str) -> None:
    """Delete a partition's stamp (its files were reset). Idempotent."""
    if os.path.lexists(path):  # most partitions have none: no failing unlink for them
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
