"""The int8 copy of a partition's rows, kept in a file beside them: a first pass from the
first recall after an open.

Why: the int8 first pass (``quantized.py``) scores a large NPC's rows from a copy a
quarter their size, but a process makes that copy only after an NPC's 4th recall, in the
background while no recall runs (about 1.1 µs a row: 110 ms at 100k), so the first recalls
of every process, and every recall of a process that asks back to back, multiplied the
float32 rows. With the copy in a file, the first recall after an open reads it (39 MB at
100k × 384, with its checksum: about 20 ms into fresh memory, on the copier thread once that
recall is answered: ``quantized.offer``; a megabyte at a time, each after the process's
running appends, whose fsyncs it would otherwise queue behind its reads) and
the next ones score from it.

Layout of ``o-<owner>.<code>.<tag>.q8`` (the row file's name with ``.q8`` for ``.f32``;
little-endian)::

    0   magic "GMQ8ROW2"       8  format version u32 (2) 12 dimensions u32
    16  rows u64               24 spread f64 (U)        32 residual f64 (R)
    40  CRC-32 of the rows' checksums u32               44 CRC-32 of bytes 64.. u32
    48  12 zero bytes                                   60 CRC-32 of bytes 0..59 u32
    64  scales float32 × rows, zero-padded to a multiple of 64 bytes
        codes int8 × rows × dimensions

The header has a checksum of its own because the first pass trusts its bounds: a ``U`` or
``R`` too small (one flipped exponent bit made them ~1e-155, still finite and positive)
would have the first pass drop rows that belong in the best, and a recall would answer
other memories than the float32 product, silently. Layout 1 (magic ``GMQ8ROW1``, written
by earlier releases) left bytes 0..63 unchecked: such a file is not trusted, only noted
(an informational log, not a warning: it is an upgrade, not damage) and, like a missing
file, written again in this layout at the next close that writes the partition's codes.
The bounds are not checked against the codes themselves: ``U`` could be recomputed from
them (a pass as long as the read), ``R`` cannot (it needs the float32 rows), and under the
header's checksum a bound is as trustworthy as the codes are.

Read into memory with room for appended rows, as a copy made in memory is (``d + 4`` bytes
a row), not mapped: appends extend the copy in place, where a map would have been copied
whole into memory of its own, twice the bytes at that moment. Once read, the file's pages
are dropped from the page cache (``POSIX_FADV_DONTNEED``): the process holds the codes.

Derived data about derived data, never trusted over the rows: a file is used only when its
own CRC-32s (of its header and of its body) hold, its width is the rows', it covers no more
rows than the row file holds, and the CRC-32 of the entry records' row checksums for those
rows (every ready record of the identity; a row no record names counts as 0) is the one it
was written with. Rows of one generation never change once written (``entries.py``), and
every row the codes were made from was checked against those checksums first, so equal
checksums mean the codes are those of the rows now (up to the checksums' own strength,
which is what the rows themselves are checked with). A file failing any of this is
ignored, the reason logged with its name, and replaced at the next close that writes one:
the float32 product answers meanwhile.

Written at close (``IndexEngine.keep_codes``) under the writer lock, atomically
(``fs.atomic_write``: a kill leaves the old file or the new, and a ``.tmp`` that the next
close writing the partition's codes, a sweep or an erase removes; it is no sign of an
interrupted rewrite, so ``get_status`` does not report it). It holds (approximate)
vectors, so it lives and dies with its row file: a compaction's new generation has a new
tag, and removing a generation's row files removes its codes
(``writer._remove_row_files``); an erase that rewrites a partition leaves no copy of an
erased memory's vector behind.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
from io import FileIO
from pathlib import Path

import numpy as np

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.index.entries import EntryState
from game_memory.index.partition import IndexPartition
from game_memory.index.quantized import Int8Rows, appending, copy_buffers

__all__ = ["HEADER_BYTES", "codes_header", "read_codes", "rows_digest", "write_codes"]

_MAGIC = b"GMQ8ROW2"
FORMAT_VERSION = 2
#: The magic of layout 1, whose header no checksum covered: never trusted, rewritten.
_OLD_MAGIC = b"GMQ8ROW1"
#: The header less its own checksum (bytes 0..59), then that checksum (bytes 60..63).
_FIELDS = struct.Struct("<8sIIQddII12x")
_HEADER_CHECK = struct.Struct("<I")
HEADER_BYTES = _FIELDS.size + _HEADER_CHECK.size  # 64
_LOG = logging.getLogger("game_memory.index")


def rows_digest(partition: IndexPartition, code: int, rows: int) -> int:
    """The CRC-32 of the checksums of identity ``code``'s rows ``0 .. rows − 1`` as
    ``partition``'s ready records give them (u32 each, in row order; 0 for a row no ready
    record names): what binds a file of codes to the rows it was made from."""
    ready = (partition.states == EntryState.READY) & (partition.identities == code)
    named = partition.rows[ready]
    inside = named < rows
    checks = np.zeros(rows, dtype="<u4")
    checks[named[inside]] = partition.checksums[ready][inside]
    return crc32(checks.tobytes())


def _padded(size: int) -> int:
    return -(-size // 64) * 64


def write_codes(path: str, copy: Int8Rows, digest: int) -> None:
    """Write ``copy`` (of rows whose :func:`rows_digest` is ``digest``) to ``path``,
    atomically and durably.

    Raises:
        PersistenceError: the file could not be written.
    """
    scales = np.ascontiguousarray(copy.scales, dtype="<f4").tobytes()
    scales += bytes(_padded(len(scales)) - len(scales))
    codes = np.ascontiguousarray(copy.codes, dtype=np.int8).reshape(-1).view(np.uint8).data
    body = crc32(codes, crc32(scales))
    fields = _FIELDS.pack(
        _MAGIC, FORMAT_VERSION, copy.codes.shape[1], copy.rows, copy.spread, copy.residual,
        digest, body,
    )  # fmt: skip
    header = fields + _HEADER_CHECK.pack(crc32(fields))
    fs.atomic_write(Path(path), [header, scales, codes])


def codes_header(path: str) -> tuple[int, int] | None:
    """``(dimensions, rows)`` of the file of codes at ``path`` as its header says, or
    ``None`` when there is none or its header is not one of this layout that holds its
    checksum (nothing else is checked: for deciding whether to write a newer one; a file
    of layout 1 reads as none, so it is written again)."""
    try:
        head = fs.read_range(path, 0, HEADER_BYTES)
    except PersistenceError:
        return None
    fields = _header_fields(head)
    if fields is None:
        return None
    _, _, dimensions, rows, *_ = fields
    return int(dimensions), int(rows)


def _header_fields(head: bytes) -> tuple[bytes, int, int, int, float, float, int, int] | None:
    """The fields of a header of this layout whose checksum holds, else ``None``."""
    if len(head) != HEADER_BYTES:
        return None
    fields = head[: _FIELDS.size]
    (check,) = _HEADER_CHECK.unpack(head[_FIELDS.size :])
    unpacked: tuple[bytes, int, int, int, float, float, int, int] = _FIELDS.unpack(fields)
    if unpacked[0] != _MAGIC or unpacked[1] != FORMAT_VERSION or crc32(fields) != check:
        return None
    return unpacked


def read_codes(
    path: str, partition: IndexPartition, code: int, dimensions: int, held_rows: int
) -> Int8Rows | None:
    """The copy in the file at ``path`` for identity ``code``'s rows of ``partition``
    (``dimensions`` wide; the row file holds ``held_rows``), read into buffers with room
    for appended rows (``quantized.copy_buffers``: extended in place, as a copy made in
    memory, never copied again); ``None`` when there is no such file or it does not prove
    itself theirs (module docstring: the reason is logged, naming the file)."""
    try:
        fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _ignored(path, exc.strerror or str(exc))
        return None
    try:
        with os.fdopen(fd, "rb", buffering=0) as file:
            return _read(file, path, partition, code, dimensions, held_rows)
    except OSError as exc:
        _ignored(path, exc.strerror or str(exc))
        return None


def _read(
    file: FileIO,
    path: str,
    partition: IndexPartition,
    code: int,
    dimensions: int,
    held_rows: int,
) -> Int8Rows | None:
    """:func:`read_codes` of the file open as ``file`` (read front to back, once)."""
    info = os.fstat(file.fileno())
    if not stat.S_ISREG(info.st_mode):
        _ignored(path, "it is not a regular file")
        return None
    head = _read_exactly(file, HEADER_BYTES)
    if head is None:
        _ignored(path, "it is shorter than its header")
        return None
    fields = _header_fields(head)
    if fields is None:
        _refused_header(path, head)
        return None
    _, _, width, rows, spread, residual, digest, body = fields
    if width != dimensions or not 0 < rows <= held_rows:
        _ignored(path, f"it holds {rows} rows of {width} values, the rows {held_rows}")
        return None
    scale_bytes = _padded(rows * 4)
    if info.st_size != HEADER_BYTES + scale_bytes + rows * width:
        _ignored(path, "its size is not what its header says")
        return None
    if not (np.isfinite(spread) and np.isfinite(residual) and spread >= 0 and residual >= 0):
        _ignored(path, "its bounds are not finite")
        return None
    if rows_digest(partition, code, rows) != digest:
        _ignored(path, "the rows it was made from are not the rows now")
        return None
    codes, scales = copy_buffers(rows, width)
    scale_data = _read_exactly(file, scale_bytes)
    code_data = codes[:rows].reshape(-1).view(np.uint8).data
    if scale_data is None or (checked := _read_checked(file, code_data, crc32(scale_data))) is None:
        _ignored(path, "it ended early")
        return None
    if checked != body:
        _ignored(path, "it fails its checksum")
        return None
    scales[:rows] = np.frombuffer(scale_data, dtype="<f4", count=rows)
    if hasattr(os, "posix_fadvise"):  # held in memory now: the page cache need not hold it too
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return Int8Rows(
        int(rows), codes[:rows], scales[:rows], float(spread), float(residual), (codes, scales)
    )


#: Bytes of codes read at a time, each after the process's running appends (``appending``):
#: one read of a 100k NPC's 39 MB, right after its first recall, made the appends that
#: followed wait up to 37 ms for their ``fsync`` (the disk busy with it).
_CHUNK_BYTES = 1 << 20


def _read_checked(file: FileIO, target: memoryview, crc: int) -> int | None:
    """Fill ``target`` from ``file``'s position on, a chunk at a time, giving way to the
    process's running appends before each; the CRC-32 of its bytes continuing ``crc``,
    or ``None`` when the file held fewer."""
    for start in range(0, len(target), _CHUNK_BYTES):
        appending.give_way()
        chunk = target[start : start + _CHUNK_BYTES]
        if not _read_into(file, chunk):
            return None
        crc = crc32(chunk, crc)
    return crc


def _read_exactly(file: FileIO, length: int) -> bytes | None:
    data = bytearray(length)
    return bytes(data) if _read_into(file, memoryview(data)) else None


def _read_into(file: FileIO, target: memoryview) -> bool:
    """Fill ``target`` from ``file``'s position on; whether the file held that much."""
    done = 0
    while done < len(target):
        count = file.readinto(target[done : done + (1 << 24)])
        if not count:
            return False
        done += count
    return True


def _refused_header(path: str, head: bytes) -> None:
    """Say why the header ``head`` of the file at ``path`` is not used: a file of layout 1
    quietly (an upgrade: written again at the next close that writes codes), any other
    with a warning naming what is wrong."""
    if head[:8] == _OLD_MAGIC:
        _LOG.info(
            "the int8 codes %s are of an earlier layout, whose header had no checksum; they "
            "are not used and are written again at the next close that writes codes (the "
            "float32 rows are scored meanwhile)",
            path,
        )
    elif head[:8] != _MAGIC or _FIELDS.unpack(head[: _FIELDS.size])[1] != FORMAT_VERSION:
        _ignored(path, "it is not a file of int8 codes of this format")
    else:
        _ignored(path, "its header fails its checksum")


def _ignored(path: str, reason: str) -> None:
    _LOG.warning("ignoring the int8 codes %s: %s (the float32 rows are scored)", path, reason)
    return None
