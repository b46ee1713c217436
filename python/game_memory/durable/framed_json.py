"""A small JSON document behind a magic and its CRC-32: the file format of derived stamps.

Layout: magic (8 bytes) · CRC-32 of the body (u32, little-endian) · body (compact ASCII
JSON). Written atomically (temporary file, fsync, rename). A stamp is derived data about
derived data: one that is absent, unreadable or damaged only means its files are checked
again, so :func:`read_framed` tells "nothing usable" (``None``) from "damaged"
(``ValueError``, for the caller to log) and never raises anything else for the bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from game_memory.durable import fs
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError

__all__ = ["read_framed", "write_framed"]

_HEAD = struct.Struct("<8sI")


def read_framed(path: Path, magic: bytes, maximum_bytes: int) -> Any | None:
    """The document at ``path``; ``None`` when there is none or it cannot be read.

    Raises:
        ValueError: the file is not a document of ``magic`` (too short, another magic,
            a failed checksum, not JSON).
    """
    try:
        found = fs.read_file(path, maximum_bytes)
    except PersistenceError:
        return None
    if found is None:
        return None
    data = found[0]
    try:
        found_magic, crc = _HEAD.unpack_from(data)
    except struct.error as exc:
        raise ValueError("it is too short") from exc
    body = data[_HEAD.size :]
    if found_magic != magic or crc32(body) != crc:
        raise ValueError("it fails its checksum")
    return json.loads(body)


def write_framed(path: Path, magic: bytes, document: object) -> None:
    """Replace ``path`` with ``document`` atomically and durably.

    Raises:
        PersistenceError, OSError: it could not be written (nothing replaced then).
    """
    body = json.dumps(document, separators=(",", ":")).encode("ascii")
    fs.atomic_write(path, _HEAD.pack(magic, crc32(body)) + body)
