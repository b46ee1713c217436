"""Intent files: a ledger's per-partition index, persisted so an open does not rebuild it.

:class:`~game_memory.store.intents.LedgerIndex` keeps, per partition, the positions of its
intents; building it means checking every 128-byte ledger record (its CRC-32, one call
each) and a dictionary insert per record: 0.3-0.5 s for 100k memories, on every open. An
**intent file** ``.game-memory/read/<ledger name>.intents`` keeps what that build found
for the ledger's first ``count`` records:

* the ledger's inode, ``count``, the CRC-32 of those ``count * 128`` bytes, and the last
  of them (what the index compares to notice a ledger cut and grown back);
* each partition's 64-byte key (session and owner hashes) and its intent positions, and
  the positions of damaged records (skipped, as the index skips them).

It is **derived, disposable and never trusted over the save**: it is used only when the
ledger holds those bytes (the CRC-32 is computed again from the ledger, one pass instead
of one call per record, unless the ledger is exactly as it was read then: same device,
inode, size, mtime and ctime; any write moves the ctime), and its own checksums hold. The
index is a function of those bytes alone, so a ledger of another inode with the same
bytes (a save copied elsewhere, restored from a backup or a cloud sync) passes by its CRC:
content decides, not identity. (Until 4 December 2026 the inode had to match, so a copied
save's first open read its whole ledger again.)
Anything else (a ledger rewritten by an erase or a salvage with other bytes, cut,
damaged; another format; a damaged intent file) makes it ignored: the index reads the
ledger from the start as before and a new intent file replaces this one. Records after
``count`` are read from the ledger as always. Deleting it is always safe.

Written atomically (temporary file, fsync, rename) when the index read at least
:data:`PERSIST_MINIMUM` records the file did not cover (on the file store's read-file
thread, off the append that crossed the mark: ``LedgerIndex.background``), and by closing
the store for any record it does not cover, or when it names the ledger by an older
identity (a copy accepted by its CRC; ``LedgerIndex.persist``), so a start after a clean
exit reads no ledger record and hashes none. Writing it costs a few milliseconds per 100k
records; reading that many records from the ledger about 0.4 s. An open keeps its
positions as arrays (``Positions``) until a partition grows.

Layout: ``GMINTS01`` (8) · header length u32 · CRC-32 of the header u32 · header (JSON) ·
keys (64 bytes per partition) · offsets (u64 per partition + 1) · positions (u64), each
with its CRC-32 in the header.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from game_memory.durable import fs
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.store.read_files import file_crc, read_folders_real
from game_memory.store.read_stamps import map_file

__all__ = [
    "PERSIST_MINIMUM",
    "GrownPositions",
    "Intents",
    "Positions",
    "count_before",
    "head",
    "intent_file_path",
    "load_intents",
    "write_intents",
]

#: Ledgers with fewer records are indexed from the ledger itself (it is cheap).
PERSIST_MINIMUM = 1_024
FORMAT_VERSION = 1
_MAGIC = b"GMINTS01"
_HEAD = struct.Struct("<8sII")
_RECORD = 128
_MAXIMUM_BYTES = 1 << 31
_LOG = logging.getLogger("game_memory.store")


@dataclass(frozen=True, slots=True)
class Intents:
    """What an index of a ledger's first ``count`` records holds (see the module)."""

    count: int
    crc: int
    last: bytes
    #: Per partition key, its positions in ledger order: a list, or (as a file restores
    #: them) a read-only array, extended by the index as a ``GrownPositions``.
    positions: dict[bytes, Positions]
    damaged: list[int]
    #: The ledger's device, inode, size, mtime and ctime when the records were read: a
    #: ledger still exactly so is not hashed again.
    ledger: tuple[int, ...] = ()


class GrownPositions:
    """A restored partition's positions (the file's read-only array, never copied) followed
    by those the index added since (a list), all ascending.

    Growing it costs what is added, not the array's length: turning a 100k-position array
    into a list cost about 2 ms, paid by the first append after every open of a large save.
    The list only grows at its end, so a prefix taken earlier (``head``) stays what it was.
    """

    __slots__ = ("base", "tail")

    def __init__(self, base: npt.NDArray[np.uint64], tail: list[int]) -> None:
        self.base = base
        self.tail = tail

    def __len__(self) -> int:
        return int(self.base.size) + len(self.tail)

    def append(self, position: int) -> None:
        self.tail.append(position)

    def extend(self, positions: list[int]) -> None:
        self.tail.extend(positions)


#: A partition's intent positions, ascending: a list, a read-only array of a restored file,
#: or such an array grown since.
Positions = list[int] | npt.NDArray[np.uint64] | GrownPositions


def count_before(found: Positions, stop: int) -> int:
    """How many of ``found`` lie before ``stop``."""
    if isinstance(found, list):
        return bisect.bisect_left(found, stop)
    if isinstance(found, GrownPositions):
        base = found.base
        if base.size and stop <= int(base[-1]):
            return int(np.searchsorted(base, stop, "left"))
        return int(base.size) + bisect.bisect_left(found.tail, stop)
    return int(np.searchsorted(found, stop, "left"))


def head(found: Positions, length: int) -> list[int] | npt.NDArray[np.uint64]:
    """The first ``length`` of ``found`` (a list, or an array for a restored one)."""
    if not isinstance(found, GrownPositions):
        return found[:length]
    base = found.base
    if length <= base.size:
        return base[:length]
    return np.concatenate((base, np.array(found.tail[: length - base.size], np.uint64)))


def intent_file_path(ledger: Path) -> Path:
    """Where a ledger's intent file lives: ``<data>/read/<ledger stem>.intents``."""
    return ledger.parent / "read" / f"{ledger.stem}.intents"


def _ledger_crc(ledger: Path, end: int) -> tuple[int, bytes] | None:
    """CRC-32 of the ledger's first ``end`` bytes and its last record there, or ``None``."""
    crc = file_crc(os.fspath(ledger), 0, end)
    if crc is None:
        return None
    try:
        last = fs.read_range(ledger, end - _RECORD, _RECORD) if end else b""
    except PersistenceError:
        return None
    return crc, last


def load_intents(ledger: Path, info: os.stat_result) -> Intents | None:
    """The intent file of ``ledger`` if it matches the ledger as it is now, else ``None``.

    ``info`` is the ledger's ``lstat`` as the caller just saw it. Never raises for a stale
    or damaged intent file (it is ignored and logged).
    """
    size = info.st_size
    path = intent_file_path(ledger)
    if not read_folders_real(ledger.parent):
        _LOG.warning("the intent file %s is behind a link or a file: not used", path)
        return None
    try:
        data = _contents(path)
    except PersistenceError as exc:
        _LOG.info("the intent file %s is unusable (%s); the ledger is read whole", path, exc)
        return None
    if data is None:
        return None
    try:
        intents = _decode(data, ledger.stem)
    except (ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
        _LOG.info("the intent file %s is damaged or stale (%s); it will be rebuilt", path, exc)
        return None
    if intents.count * _RECORD > size:
        return None
    if intents.ledger == _identity(info):
        return intents  # the very ledger it was built from, not written to since
    checked = _ledger_crc(ledger, intents.count * _RECORD)
    if checked is None or checked != (intents.crc, intents.last):
        _LOG.info("the intent file %s no longer matches its ledger; it will be rebuilt", path)
        return None
    return intents


def _contents(path: Path) -> bytes | memoryview | None:
    """The intent file's bytes, mapped where a mapped file can still be replaced by a rename
    (POSIX): reading 0.8 MB (100k intents) into fresh memory cost 0.55 ms of page faults
    and copying at every open, a map's pages are the page cache's. On Windows a file with a
    map open cannot be replaced, and the index keeps the positions until partitions grow,
    so ``map_file`` reads it there (``portable.HELD_FILES_REPLACEABLE``)."""
    mapped = map_file(path, _MAXIMUM_BYTES)
    if mapped is None:
        return None
    os.close(mapped[1])  # the map keeps the file
    return mapped[0]


def _decode(data: bytes | memoryview, name: str) -> Intents:
    magic, length, crc = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not an intent file")
    encoded = bytes(data[_HEAD.size : _HEAD.size + length])
    if len(encoded) != length or crc32(encoded) != crc:
        raise ValueError("its header fails its checksum")
    header = json.loads(encoded)
    if header["format_version"] != FORMAT_VERSION or header["ledger"] != name:
        raise ValueError("another format or ledger")
    start = _HEAD.size + length
    arrays: dict[str, memoryview] = {}
    whole = memoryview(data)  # views, not copies: the positions are most of the file
    for key, (offset, nbytes, checksum) in header["arrays"].items():
        chunk = whole[start + offset : start + offset + nbytes]
        if len(chunk) != nbytes or crc32(chunk) != checksum:
            raise ValueError(f"{key} fails its checksum")
        arrays[key] = chunk
    keys = bytes(arrays["keys"])
    offsets = np.frombuffer(arrays["offsets"], "<u8").tolist()
    positions = np.frombuffer(arrays["positions"], "<u8")
    if len(keys) % 64 or len(offsets) != len(keys) // 64 + 1 or offsets[0] != 0:
        raise ValueError("its keys and offsets do not match")
    if offsets[-1] != positions.size:
        raise ValueError("its offsets and positions do not match")
    count = int(header["count"])
    if positions.size and int(positions.max()) >= count:
        raise ValueError("a position lies past its count")
    # Arrays, not lists: a restored index reads them (counts, a bisection) until a
    # partition grows; a list per partition cost 2.2 ms per 100k intents at every open.
    found: dict[bytes, Positions] = {}
    for number in range(len(offsets) - 1):
        found[keys[number * 64 : number * 64 + 64]] = positions[
            offsets[number] : offsets[number + 1]
        ]
    last = bytes.fromhex(header["last"])
    if count and len(last) != _RECORD:
        raise ValueError("its last record is not a record")
    damaged = [int(position) for position in header["damaged"]]
    seen = tuple(int(value) for value in header["file"])
    if len(seen) != 5:
        raise ValueError("its ledger identity is not five numbers")
    return Intents(count, int(header["crc"]), last, found, damaged, seen)


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def write_intents(ledger: Path, info: os.stat_result, intents: Intents) -> bool:
    """Write ``ledger``'s intent file atomically; whether it was written (never raises)."""
    keys = b"".join(intents.positions)
    lengths = [len(found) for found in intents.positions.values()]
    offsets = np.zeros(len(lengths) + 1, "<u8")
    np.cumsum(lengths, out=offsets[1:])
    found = [np.asarray(head(found, len(found)), "<u8") for found in intents.positions.values()]
    positions = np.concatenate(found) if found else np.empty(0, "<u8")
    parts = {"keys": keys, "offsets": offsets.tobytes(), "positions": positions.tobytes()}
    described: dict[str, list[int]] = {}
    body: list[bytes] = []
    position = 0
    for name, chunk in parts.items():
        described[name] = [position, len(chunk), crc32(chunk)]
        body.append(chunk)
        position += len(chunk)
    header = {
        "format_version": FORMAT_VERSION,
        "ledger": ledger.stem,
        "inode": info.st_ino,
        "file": list(_identity(info)),
        "count": intents.count,
        "crc": intents.crc,
        "last": intents.last.hex(),
        "damaged": intents.damaged,
        "arrays": described,
    }
    encoded = json.dumps(header, separators=(",", ":")).encode("ascii")
    data = _HEAD.pack(_MAGIC, len(encoded), crc32(encoded)) + encoded + b"".join(body)
    path = intent_file_path(ledger)
    try:
        fs.ensure_directory(path.parent, durable=False)
        fs.atomic_write(path, data)
    except (PersistenceError, OSError) as exc:
        _LOG.info("the intent file %s was not written (%s); opens read the ledger", path, exc)
        return False
    return True
