"""Write and read Godot 4 resource packs (``.pck``, format version 3).

A pack is what ``--main-pack`` (or the web runtime's ``mainPack``) mounts as ``res://``. The
layout, little-endian throughout, as Godot 4.4+ reads it (``core/io/file_access_pack.cpp``)::

    0x00  "GDPC"  u32 format=3  u32 major  u32 minor  u32 patch
    0x14  u32 pack_flags       bit 0 DIR_ENCRYPTED, bit 1 REL_FILEBASE
    0x18  u64 file_base        absolute start of the file data
    0x20  u64 dir_offset       absolute offset of the directory (after the data in v3)
    0x28  16 x u32 reserved    -> 0x68, padded to the alignment
    data  each file starts on an ``alignment`` boundary
    dir   u32 count, then per file: u32 path_len (a multiple of 4), the path without "res://"
          zero-padded to path_len, u64 offset (relative to file_base with REL_FILEBASE),
          u64 size, 16-byte md5 of the data, u32 flags (bit 0 ENCRYPTED, bit 1 REMOVAL)

This module writes unencrypted packs with ``REL_FILEBASE`` and reads them back, checking every
offset, size and md5, so a round trip proves the writer. It knows nothing about projects; see
``project_pack`` for turning a project folder into a pack that boots.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FORMAT_VERSION",
    "PackEntry",
    "PackFormatError",
    "PackIndex",
    "read_pack",
    "write_pack",
]

MAGIC = b"GDPC"
#: The pack format this module writes and reads (Godot 4.4 and later).
FORMAT_VERSION = 3
_FLAG_DIR_ENCRYPTED = 1
_FLAG_REL_FILEBASE = 2
_FILE_ENCRYPTED = 1
_FILE_REMOVAL = 2
_HEADER = struct.Struct("<4sIIIIIQQ16I")  # magic .. reserved; 0x68 bytes
_ENTRY_TAIL = struct.Struct("<QQ16sI")  # offset, size, md5, flags
_MAX_PATH_BYTES = 4096


class PackFormatError(ValueError):
    """A pack, or a file list to pack, breaks the PCK v3 rules; the message says which rule."""


@dataclass(frozen=True)
class PackEntry:
    """One file in a pack's directory.

    Attributes:
        path: the ``res://`` path without its prefix, e.g. ``addons/x/y.gd``.
        offset: absolute offset of the file's data in the pack.
        size: length of the data in bytes.
        md5: md5 digest of the data, as stored in the directory.
        flags: per-file flags (0 for the plain files this module writes).
    """

    path: str
    offset: int
    size: int
    md5: bytes
    flags: int


@dataclass(frozen=True)
class PackIndex:
    """A pack's header and directory, as read back by ``read_pack``."""

    engine_version: tuple[int, int, int]
    pack_flags: int
    file_base: int
    dir_offset: int
    entries: tuple[PackEntry, ...]

    def paths(self) -> list[str]:
        """Return the ``res://``-relative paths in directory order."""
        return [entry.path for entry in self.entries]


def _pad(length: int, alignment: int) -> int:
    return (alignment - length % alignment) % alignment


def _check_path(path: str) -> bytes:
    if path.startswith("res://"):
        raise PackFormatError(f"pack path {path!r} must be given without the res:// prefix")
    if not path or path.startswith("/") or "\\" in path:
        raise PackFormatError(f"pack path {path!r} must be a relative path with '/' separators")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise PackFormatError(f"pack path {path!r} has an empty, '.' or '..' component")
    encoded = path.encode("utf-8")
    if len(encoded) > _MAX_PATH_BYTES:
        raise PackFormatError(f"pack path {path[:60]!r}... is over {_MAX_PATH_BYTES} bytes")
    return encoded


def write_pack(
    destination: Path,
    files: Mapping[str, bytes],
    *,
    engine_version: tuple[int, int, int] = (4, 6, 0),
    alignment: int = 16,
) -> PackIndex:
    """Write ``files`` (``res://``-relative path -> bytes) as an unencrypted PCK v3 pack.

    Files are stored in sorted path order so the same input always gives the same bytes. The
    file is written to a sibling temporary name and renamed into place, so a crash never leaves
    a truncated pack at ``destination``.

    Args:
        destination: where to write the pack.
        files: the contents, keyed by path without ``res://``.
        engine_version: the (major, minor, patch) recorded in the header; the runtime refuses a
            pack newer than itself.
        alignment: every file's data starts on a multiple of this (a power of two, >= 4).

    Returns:
        The index that was written, identical to what ``read_pack`` returns for the file.

    Raises:
        PackFormatError: a path is absolute, has ``res://``, ``..`` or backslashes, or the
            alignment is not a power of two of at least 4.
    """
    if alignment < 4 or alignment & (alignment - 1):
        raise PackFormatError(f"alignment {alignment} must be a power of two of at least 4")
    encoded_paths = {path: _check_path(path) for path in files}
    header_size = _HEADER.size
    file_base = header_size + _pad(header_size, alignment)
    body = bytearray()
    entries: list[PackEntry] = []
    for path in sorted(files):
        data = files[path]
        body += b"\0" * _pad(len(body), alignment)
        entries.append(
            PackEntry(path, file_base + len(body), len(data), hashlib.md5(data).digest(), 0)
        )
        body += data
    dir_offset = file_base + len(body)
    directory = bytearray(struct.pack("<I", len(entries)))
    for entry in entries:
        raw = encoded_paths[entry.path]
        padded = raw + b"\0" * _pad(len(raw), 4)
        directory += struct.pack("<I", len(padded)) + padded
        directory += _ENTRY_TAIL.pack(entry.offset - file_base, entry.size, entry.md5, 0)
    major, minor, patch = engine_version
    header = _HEADER.pack(
        MAGIC,
        FORMAT_VERSION,
        major,
        minor,
        patch,
        _FLAG_REL_FILEBASE,
        file_base,
        dir_offset,
        *([0] * 16),
    )
    blob = header + b"\0" * (file_base - header_size) + bytes(body) + bytes(directory)
    temporary = destination.with_name(destination.name + ".tmp")
    temporary.write_bytes(blob)
    temporary.replace(destination)
    return PackIndex(engine_version, _FLAG_REL_FILEBASE, file_base, dir_offset, tuple(entries))


def read_pack(source: Path, *, verify: bool = True) -> tuple[PackIndex, dict[str, bytes]]:
    """Read a PCK v3 pack's directory and contents, checking it against the format rules.

    Args:
        source: the pack file.
        verify: when true, check each file's md5 against its directory entry.

    Returns:
        The index and a mapping of ``res://``-relative path -> file bytes.

    Raises:
        PackFormatError: wrong magic or version, an encrypted directory or file, an offset or
            size outside the file, data overlapping the header or directory, a path that does
            not decode, or (with ``verify``) an md5 mismatch. The message names the path.
    """
    blob = source.read_bytes()
    if len(blob) < _HEADER.size:
        raise PackFormatError(f"{source}: {len(blob)} bytes is too short for a PCK header")
    fields = _HEADER.unpack_from(blob, 0)
    magic, version, major, minor, patch, pack_flags, file_base, dir_offset = fields[:8]
    if magic != MAGIC:
        raise PackFormatError(f"{source}: magic {magic!r} is not {MAGIC!r}")
    if version != FORMAT_VERSION:
        raise PackFormatError(f"{source}: pack format {version}, only {FORMAT_VERSION} is read")
    if pack_flags & _FLAG_DIR_ENCRYPTED:
        raise PackFormatError(f"{source}: the directory is encrypted")
    base = file_base if pack_flags & _FLAG_REL_FILEBASE else 0
    if not _HEADER.size <= file_base <= dir_offset <= len(blob) - 4:
        raise PackFormatError(
            f"{source}: file_base {file_base} / dir_offset {dir_offset} are outside the pack"
        )
    (count,) = struct.unpack_from("<I", blob, dir_offset)
    cursor = dir_offset + 4
    entries: list[PackEntry] = []
    contents: dict[str, bytes] = {}
    for number in range(count):
        if cursor + 4 > len(blob):
            raise PackFormatError(f"{source}: directory entry {number} runs past the end")
        (path_len,) = struct.unpack_from("<I", blob, cursor)
        cursor += 4
        if path_len > _MAX_PATH_BYTES or cursor + path_len + _ENTRY_TAIL.size > len(blob):
            raise PackFormatError(f"{source}: directory entry {number} has a bad path length")
        try:
            path = blob[cursor : cursor + path_len].rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PackFormatError(f"{source}: entry {number} path is not UTF-8") from exc
        cursor += path_len
        relative, size, md5, flags = _ENTRY_TAIL.unpack_from(blob, cursor)
        cursor += _ENTRY_TAIL.size
        if flags & _FILE_ENCRYPTED:
            raise PackFormatError(f"{source}: {path} is encrypted")
        offset = base + relative
        if offset < file_base or offset + size > dir_offset:
            raise PackFormatError(
                f"{source}: {path} data [{offset}, {offset + size}) lies outside the data area"
            )
        data = blob[offset : offset + size]
        if verify and hashlib.md5(data).digest() != md5:
            raise PackFormatError(f"{source}: {path} does not match its md5")
        entries.append(PackEntry(path, offset, size, md5, flags))
        if not flags & _FILE_REMOVAL:
            contents[path] = data
    index = PackIndex((major, minor, patch), pack_flags, file_base, dir_offset, tuple(entries))
    return index, contents
