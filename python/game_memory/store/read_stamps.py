"""Verified stamps of read-file parts: a load that checked every array of a part says so.

Computing the CRC-32 of every array is most of an open's cost. After a load has checked
them all, a stamp ``o-<sha256(owner)>[.n].verified`` beside the part records the part's
identity (device, inode, size, modification and change times, as ``fstat`` saw it before
the check) and its header's CRC-32; a later load of the very same file (equal identity and
header CRC) skips the arrays' CRCs. See ``read_files.py`` for when one is written (only
after the part is fsynced, and only for a file changed at least ``SETTLED_NS`` before).

Layout: ``GMRSTMP1`` (8) · device, inode, size u64 · mtime_ns, ctime_ns i64 · header CRC-32
u32 · CRC-32 of the preceding 52 bytes u32.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.store.descriptors import (
    descriptors_exhausted,
    map_untracked,
    out_of_descriptors,
)

__all__ = ["Identity", "map_file", "read_stamp", "stamp_path", "stamp_unchanged", "write_stamp"]

_LOG = logging.getLogger("game_memory.store")
_STAMP_MAGIC = b"GMRSTMP1"
_STAMP = struct.Struct("<8sQQQqqI")
_STAMP_BYTES = _STAMP.size + 4

#: ``(device, inode, size, mtime_ns, ctime_ns)`` of a read file as a stamp names it.
Identity = tuple[int, int, int, int, int]


def stamp_path(path: Path) -> Path:
    """The verified stamp beside a read file (``o-<hash>[.n].read`` -> ``.verified``)."""
    return path.with_suffix(".verified")


def read_stamp(path: Path) -> tuple[Identity, int] | None:
    """A stamp's read-file identity and header CRC; ``None`` if absent or unusable."""
    try:
        found = fs.read_file(path, _STAMP_BYTES)
    except PersistenceError:
        return None
    if found is None or len(found[0]) != _STAMP_BYTES:
        return None
    body = found[0][: _STAMP.size]
    if crc32(body) != int.from_bytes(found[0][_STAMP.size :], "little"):
        return None
    magic, device, inode, size, modified, changed, header_crc = _STAMP.unpack(body)
    if magic != _STAMP_MAGIC:
        return None
    return (device, inode, size, modified, changed), header_crc


def _identity(info: os.stat_result) -> Identity:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def write_stamp(path: Path, fd: int, identity: Identity, header_crc: int) -> bool:
    """Stamp the read file open as ``fd`` (``identity`` taken before its arrays were
    checked) as verified; whether a stamp was written (never raises).

    The file is fsynced first, so the stamp never outlives the bytes it vouches for, and no
    stamp is written if the file changed meanwhile.
    """
    try:
        os.fsync(fd)
        if _identity(os.fstat(fd)) != identity:
            return False
    except OSError:
        return False
    body = _STAMP.pack(_STAMP_MAGIC, *identity, header_crc)
    try:
        fs.atomic_write(stamp_path(path), body + crc32(body).to_bytes(4, "little"))
    except (PersistenceError, OSError) as exc:
        _LOG.info("the stamp of %s was not written (%s)", path, exc)
        return False
    return True


def stamp_unchanged(path: Path, identity: Identity, header_crc: int) -> bool:
    """:func:`write_stamp` for the read file at ``path`` from a job run after the load that
    checked it, if it is still that very file (``identity``, as the load took it before
    the check); whether a stamp was written (never raises). A file replaced or written
    since has another identity: it is left unstamped, for the next load to check whole."""
    try:
        fd = os.open(path, portable.SYNCED_READ | portable.OPEN_FLAGS)  # fsynced by write_stamp
    except OSError:
        return False
    try:
        if _identity(os.fstat(fd)) != identity:
            return False
        return write_stamp(path, fd, identity, header_crc)  # fsyncs, then checks again
    except OSError:
        return False
    finally:
        os.close(fd)


def map_file(path: Path, maximum_bytes: int) -> tuple[memoryview, int, Identity] | None:
    """A read-only map of a regular file (``None`` if absent): arrays over it copy nothing.
    Where a mapped file could not be replaced or removed (``portable``: Windows), its bytes
    read into memory instead.

    Returns the map, the descriptor (the caller closes it) and the file's identity as
    ``fstat`` saw it before the map. The map keeps no descriptor of its own once the
    caller closes it (``descriptors.map_untracked``): a cached partition's read file
    costs the process none.

    Raises:
        PersistenceError: a link, not a regular file, larger than ``maximum_bytes``, or
            unreadable; or no descriptor left (``descriptors.out_of_descriptors`` finds
            that cause, which is no damage).
    """
    try:
        fd = os.open(path, portable.SYNCED_READ | portable.OPEN_FLAGS)  # fsynced by write_stamp
    except FileNotFoundError:
        return None
    except OSError as exc:
        if out_of_descriptors(exc):
            raise descriptors_exhausted(path, exc) from exc
        raise PersistenceError(f"could not open {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > maximum_bytes:
            raise PersistenceError(f"{path} is not a file this store wrote")
        if info.st_size == 0:
            return memoryview(b""), fd, _identity(info)
        if not portable.HELD_FILES_REPLACEABLE:  # Windows: a map would pin the file
            data = bytearray(info.st_size)
            done = 0
            while done < len(data):
                count = portable.pread_into(fd, memoryview(data)[done:], done)
                if not count:
                    raise PersistenceError(f"{path} was cut while it was read")
                done += count
            return memoryview(data), fd, _identity(info)
        return map_untracked(fd, info.st_size), fd, _identity(info)
    except OSError as exc:
        os.close(fd)
        raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
    except BaseException:
        os.close(fd)
        raise
