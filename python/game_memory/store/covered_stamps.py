"""Covered stamps: the save files a read-file part covers, as a load last found them holding
their bytes, so a copied save hashes its logs once, not at every open.

A part names each byte range of the save it covers with the CRC-32 of those bytes and the
identity (device, inode, size, mtime, ctime) of the file the CRC was taken from; a load
skips the CRC of a range whose file still has that identity (``read_files.Covered``). A
copy of the save (another disk, a restored backup or cloud save) has files of other
identities, so every open of the copy would hash every covered byte again (40 MB for 100k
memories in one NPC). After a load that found a part's ranges holding their bytes by their
CRCs, a **covered stamp** ``o-<hash>[.N].covered`` beside the part records, per range, the
identity the file had just before its CRC was computed; a later load takes a range whose
file still has that identity as checked, exactly as if the part itself named it.

It is derived data about derived data: it belongs to one part (it names that part's
header CRC-32), it holds its own CRC-32, it is written atomically (temporary file, fsync,
rename), and anything wrong with it (absent, damaged, another part's, another number of
ranges) only means the ranges are hashed again. A range whose file changed less than
:data:`~game_memory.store.read_files.SETTLED_NS` before the check is not recorded (a write
in the same tick of the file system's clock could leave its identity as it was). Erasing
and compacting remove it with its owner's read files; deleting it is always safe.

Layout: ``GMRCOV01`` (8) · CRC-32 of the body u32 · body (JSON: the part's header CRC-32 and
per range its identity, or ``null``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from game_memory.durable.framed_json import read_framed, write_framed
from game_memory.errors import PersistenceError

__all__ = ["covered_path", "read_covered", "write_covered"]

_MAGIC = b"GMRCOV01"
_MAXIMUM_BYTES = 1 << 24
_LOG = logging.getLogger("game_memory.store")

#: ``(device, inode, size, mtime_ns, ctime_ns)`` of a covered file as it was checked.
Identity = tuple[int, int, int, int, int]


def covered_path(part: Path) -> Path:
    """The covered stamp beside a part (``o-<hash>[.n].read`` -> ``o-<hash>[.n].covered``)."""
    return part.with_suffix(".covered")


def read_covered(part: Path, header_crc: int, ranges: int) -> list[Identity | None] | None:
    """The identities a covered stamp records for the part whose header CRC-32 is
    ``header_crc`` and which covers ``ranges`` ranges; ``None`` if there is no usable one."""
    try:
        document = read_framed(covered_path(part), _MAGIC, _MAXIMUM_BYTES)
        if document is None:
            return None
        if document["part"] != header_crc or len(document["ranges"]) != ranges:
            return None  # another part's, or stale: not an error
        identities: list[Identity | None] = []
        for entry in document["ranges"]:
            if entry is None:
                identities.append(None)
            elif isinstance(entry, list) and len(entry) == 5:
                device, inode, size, modified, changed = (int(value) for value in entry)
                identities.append((device, inode, size, modified, changed))
            else:
                raise ValueError("a range's identity is not five numbers")
        return identities
    except (ValueError, KeyError, TypeError) as exc:
        _LOG.info("the covered stamp of %s is unusable (%s); its ranges are hashed", part, exc)
        return None


def write_covered(part: Path, header_crc: int, identities: Sequence[Identity | None]) -> bool:
    """Replace the part's covered stamp atomically; whether it was written (never raises)."""
    document = {
        "part": header_crc,
        "ranges": [None if at is None else list(at) for at in identities],
    }
    try:
        write_framed(covered_path(part), _MAGIC, document)
    except (PersistenceError, OSError) as exc:
        _LOG.info("the covered stamp of %s was not written (%s)", part, exc)
        return False
    return True
