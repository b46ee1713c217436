"""The commit ledger: one fixed-size intent record per memory ever added to the store.

The ledger is how the store knows its size without rescanning (``count = file size / 128``)
and how it recovers from a crash. A writer, holding the store lock, appends the *intent*
(session, owner and memory hashes) **before** it appends the memory record to its
partition. So after a kill at any instant every partition record has an intent, and at
most the newest group of intents (or, during a migration batch, the intents after the
journal's mark) can lack its records. Recovery checks exactly those and drops the ones
whose record never landed. A group commit does not fsync its intents (the record is the
commit point; after a power loss ``unsynced.py`` names the partitions whose records may
have outlived their intents, and recovery writes those intents again).

Record layout (128 bytes, little-endian): magic ``GML\\x01`` | kind u32 | sequence u64 (the
record's own index) | sha256(session) | sha256(owner) | sha256(memory_id) | CRC-32 of the
preceding 112 bytes | *group start* u64 | CRC-32 of the preceding 124 bytes.

The last 12 bytes name the **group** an intent was written in: the position of the first
intent of the group commit (``group_writes.py``) that wrote it, checksummed on its own.
Releases before group commit wrote 12 zero bytes there and never read them; an intent
whose group field is zero or fails its checksum is a group of its own. Only the newest
group's intents can lack their records (a group commit in flight, or one whose writer
died before acknowledging it), so recovery and readers excuse exactly those.

Two ledgers use this format: ``ledger.log`` (kind 1, *add*: one intent per memory) and
``retraction-ledger.log`` (kind 2, *retract*: one intent per retraction a ``forget``
wrote, naming the memory it retracts). A record of the other kind in a ledger is
corruption.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.store.layout import salvage_advice

__all__ = [
    "KIND_ADD",
    "KIND_RETRACT",
    "MAXIMUM_GROUP",
    "RECORD_BYTES",
    "Ledger",
    "LedgerEntry",
    "group_start",
]

RECORD_BYTES = 128
_MAGIC = b"GML\x01"
_BODY = struct.Struct("<4sIQ32s32s32s")
KIND_ADD = 1
KIND_RETRACT = 2
_TRAILER = struct.Struct("<I12x")  # the CRC-32, then 12 zero bytes (no group)
_GROUP = struct.Struct("<QI")  # group start, CRC-32 of bytes 0-123
#: The most intents one group commit writes: the bound on what can be in flight at once.
MAXIMUM_GROUP = 64


def _checksums(data: memoryview, count: int) -> npt.NDArray[np.uint32]:
    """The CRC-32 of the first 112 bytes of each of ``count`` records of ``data``."""
    body, step = _BODY.size, RECORD_BYTES
    return np.fromiter(
        (crc32(data[start : start + body]) for start in range(0, count * step, step)),
        dtype="<u4",
        count=count,
    )


def group_start(record: bytes, index: int) -> int:
    """The first position of the group the intent ``record`` at ``index`` was written in.

    ``index`` itself when the record names no group (written by an older release, or by a
    writer that is not a group commit), or when the group field fails its checksum or
    names a position after ``index`` or more than :data:`MAXIMUM_GROUP` before it.
    """
    if len(record) < RECORD_BYTES:
        return index
    start, checksum = _GROUP.unpack_from(record, 116)
    if checksum == 0 or crc32(record[:124]) != checksum:
        return index
    if start > index or index - start >= MAXIMUM_GROUP:
        return index
    return int(start)


class LedgerEntry(NamedTuple):
    """One intent: the hex SHA-256 hashes naming a memory's partition and id.

    A named tuple (not a dataclass) because a migration builds one per memory.
    """

    session_hash: str
    owner_hash: str
    memory_hash: str


#: Where a save's ``maximum_entries`` is given: the Python call, the command line, the addon.
#: Here, the lowest module that says it (the ledger's own bound is made of it);
#: ``store/capacity.py`` builds its messages of it too.
BOUND_OPTIONS = (
    "open_memory(..., maximum_entries=N) (or FileGameMemoryStore(..., maximum_entries=N)), "
    "--maximum-entries N on game-memory serve and every other command, or the maximum_entries "
    "setting of the Godot GameMemory node that launches the sidecar"
)


def oversized_message(path: Path, size: int) -> str:
    """What to say of a ledger larger than a store opened with its ``maximum_entries``
    writes: most often a save grown under a larger bound, opened without it."""
    return (
        f"{path} is {size:,} bytes, more than a store opened with this maximum_entries "
        "writes. If the save was grown with a larger maximum_entries, open it with that "
        f"bound ({BOUND_OPTIONS}); otherwise it is not a file this store wrote"
    )


class Ledger:
    """The ledger file of one store. Mutating methods must be called under the store lock."""

    def __init__(self, path: Path, maximum_entries: int, kind: int = KIND_ADD) -> None:
        self.path = path
        self.kind = kind
        self._name = os.fspath(path)  # lstat takes a string without pathlib's overhead
        self._maximum_bytes = (maximum_entries + 1) * RECORD_BYTES * 2

    @property
    def maximum_bytes(self) -> int:
        """The largest ledger this store reads; a larger one is not a file it wrote."""
        return self._maximum_bytes

    def stat(self) -> os.stat_result | None:
        """``lstat`` of the ledger, or ``None`` when no memory was ever added.

        Raises:
            PersistenceError: the ledger is a symbolic link or not a regular file.
        """
        try:
            info = os.lstat(self._name)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PersistenceError(f"could not inspect {self.path}: {exc.strerror}") from exc
        if not stat.S_ISREG(info.st_mode):
            raise PersistenceError(
                f"refusing to use {self.path}: it should be a regular file, not a link or folder"
            )
        return info

    def _read_file(self, offset: int = 0) -> tuple[bytes, os.stat_result] | None:
        """``fs.read_file`` of the ledger from ``offset``, within :attr:`maximum_bytes`.

        Raises:
            PersistenceError: as ``fs.read_file``; for a ledger larger than this store
                reads, the message says which bound opens it (:func:`oversized_message`).
        """
        try:
            return fs.read_file(self.path, self._maximum_bytes, offset=offset)
        except PersistenceError as exc:
            info = self.stat()
            if info is not None and info.st_size > self._maximum_bytes:
                raise PersistenceError(oversized_message(self.path, info.st_size)) from exc
            raise

    def count(self) -> int:
        """How many intents the ledger holds (a torn partial record is not counted)."""
        info = self.stat()
        return 0 if info is None else info.st_size // RECORD_BYTES

    def read(self, start: int = 0, stop: int | None = None) -> list[LedgerEntry]:
        """Decode and verify intents ``start`` to ``stop`` (default: the end)."""
        read = self._read_file(start * RECORD_BYTES)
        if read is None:
            return []
        data, _ = read
        available = len(data) // RECORD_BYTES
        stop = available + start if stop is None else min(stop, available + start)
        entries: list[LedgerEntry] = []
        for index in range(start, stop):
            offset = (index - start) * RECORD_BYTES
            entries.append(self._decode(data[offset : offset + RECORD_BYTES], index))
        return entries

    def newest(self, count: int) -> LedgerEntry:
        """Decode and verify the newest of the ledger's ``count`` intents (for recovery).

        Raises:
            PersistenceError: as :meth:`read`; a damaged newest intent is named as such,
                since it stops every write until it is repaired.
        """
        read = self._read_file((count - 1) * RECORD_BYTES)
        if read is None or len(read[0]) < RECORD_BYTES:
            raise PersistenceError(f"{self.path} changed while it was being recovered; try again")
        return self._decode(read[0][:RECORD_BYTES], count - 1, newest=True)

    def read_tolerant(self) -> tuple[list[LedgerEntry | None], int]:
        """Every intent, ``None`` for each damaged one, and the bytes of the unwritten tail.

        For the checker: never raises for damaged records (a link, an unreadable or an
        oversized ledger still raise ``PersistenceError``).
        """
        read = self._read_file()
        if read is None:
            return [], 0
        data = read[0]
        unwritten = len(data) % RECORD_BYTES
        whole = len(data) // RECORD_BYTES
        while whole and data[(whole - 1) * RECORD_BYTES : whole * RECORD_BYTES] == bytes(
            RECORD_BYTES
        ):
            whole -= 1
            unwritten += RECORD_BYTES
        entries: list[LedgerEntry | None] = []
        for index in range(whole):
            try:
                entries.append(
                    self._decode(data[index * RECORD_BYTES : (index + 1) * RECORD_BYTES], index)
                )
            except PersistenceError:
                entries.append(None)
        return entries, unwritten

    def encode(self, entries: list[LedgerEntry], first_index: int) -> bytes:
        """Frame ``entries`` as records numbered from ``first_index``."""
        return self.encode_digests(
            (
                (
                    bytes.fromhex(entry.session_hash),
                    bytes.fromhex(entry.owner_hash),
                    bytes.fromhex(entry.memory_hash),
                )
                for entry in entries
            ),
            first_index,
        )

    def encode_digests(
        self, digests: Iterable[tuple[bytes, bytes, bytes]], first_index: int
    ) -> bytes:
        """Frame raw ``(session, owner, memory)`` SHA-256 digests as records."""
        chunks: list[bytes] = []
        for index, (session, owner, memory) in enumerate(digests, first_index):
            body = _BODY.pack(_MAGIC, self.kind, index, session, owner, memory)
            chunks.append(body + _TRAILER.pack(crc32(body)))
        return b"".join(chunks)

    def encode_group(self, entries: list[LedgerEntry], first_index: int) -> bytes:
        """Frame ``entries`` as one group: each record names ``first_index`` as its group.

        Raises:
            ValueError: more than :data:`MAXIMUM_GROUP` entries.
        """
        if len(entries) > MAXIMUM_GROUP:
            raise ValueError(f"a group holds at most {MAXIMUM_GROUP} intents")
        chunks: list[bytes] = []
        for index, entry in enumerate(entries, first_index):
            body = _BODY.pack(
                _MAGIC,
                self.kind,
                index,
                bytes.fromhex(entry.session_hash),
                bytes.fromhex(entry.owner_hash),
                bytes.fromhex(entry.memory_hash),
            )
            head = body + struct.pack("<IQ", crc32(body), first_index)
            chunks.append(head + struct.pack("<I", crc32(head)))
        return b"".join(chunks)

    def read_from(self, start: int) -> list[tuple[int, LedgerEntry | None, int]]:
        """Every intent from ``start`` on: ``(position, entry or None if damaged, group start)``.

        Tolerant like :meth:`read_tolerant` (an incomplete final record is left out), but
        reads only the tail (recovery after a group commit reads what followed its mark).
        """
        read = self._read_file(start * RECORD_BYTES)
        if read is None:
            return []
        data = read[0]
        found: list[tuple[int, LedgerEntry | None, int]] = []
        for number in range(len(data) // RECORD_BYTES):
            record = data[number * RECORD_BYTES : (number + 1) * RECORD_BYTES]
            index = start + number
            try:
                entry: LedgerEntry | None = self._decode(record, index)
            except PersistenceError:
                entry = None
            found.append((index, entry, group_start(record, index)))
        return found

    def sync(self) -> None:
        """Make every intent written so far durable (``fsync``), if the ledger exists."""
        if self.stat() is not None:
            fs.sync_all([self.path], [])

    def append(self, entries: list[LedgerEntry], *, first_index: int, durable: bool = True) -> None:
        """Append intents in one write; with ``durable`` (the default) also fsync them."""
        self.append_encoded(self.encode(entries, first_index), durable=durable)

    def append_encoded(self, records: bytes, *, durable: bool = True) -> None:
        """Append framed records in one write; with ``durable`` also fsync them.

        ``durable=False`` is for a migration batch, which the migration journal can undo and
        a barrier makes durable before its commit.
        """
        with fs.open_append(self.path, durable=durable) as (fd, _):
            fs.append_bytes(fd, records, self.path, durable=durable)

    def truncate(self, count: int) -> None:
        """Cut the ledger to its first ``count`` records, durably."""
        try:
            fd = os.open(self.path, os.O_WRONLY | portable.OPEN_FLAGS)
        except OSError as exc:
            raise PersistenceError(f"could not open {self.path}: {exc.strerror}") from exc
        try:
            os.ftruncate(fd, count * RECORD_BYTES)
            os.fsync(fd)
        except OSError as exc:
            raise PersistenceError(f"could not truncate {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def records(self) -> npt.NDArray[np.uint8]:
        """Every whole intent as a row of 128 bytes, each verified as :meth:`read` verifies
        it (the same errors, for the first bad record); an incomplete final record is left
        out. For a rewrite that drops a few intents of a large ledger: no entry objects, no
        hex (:meth:`rewrite_records`)."""
        read = self._read_file()
        if read is None:
            return np.empty((0, RECORD_BYTES), dtype=np.uint8)
        data = read[0]
        whole = len(data) // RECORD_BYTES
        rows = np.frombuffer(data, dtype=np.uint8, count=whole * RECORD_BYTES)
        rows = rows.reshape(whole, RECORD_BYTES)
        header = np.frombuffer(_MAGIC + self.kind.to_bytes(4, "little"), dtype=np.uint8)
        bad = ~np.all(rows[:, :8] == header, axis=1)
        sequences = rows[:, 8:16].copy().view("<u8").reshape(whole)
        misnumbered = sequences != np.arange(whole, dtype=np.uint64)
        checksums = rows[:, 112:116].copy().view("<u4").reshape(whole)
        bad |= checksums != _checksums(memoryview(data), whole)
        wrong = np.flatnonzero(bad | misnumbered)
        if wrong.size:
            first = int(wrong[0])
            self._decode(data[first * RECORD_BYTES : (first + 1) * RECORD_BYTES], first)
            raise AssertionError("a record the vector check refused was decoded")  # never
        return rows

    @staticmethod
    def partition_rows(
        rows: npt.NDArray[np.uint8], session_hash: str, owner_hash: str | None
    ) -> npt.NDArray[np.intp]:
        """The positions of the intents of one session (``owner_hash`` ``None``) or one
        partition among :meth:`records`' rows, in order."""
        match = np.all(rows[:, 16:48] == np.frombuffer(bytes.fromhex(session_hash), np.uint8), 1)
        if owner_hash is not None:
            owner = np.frombuffer(bytes.fromhex(owner_hash), np.uint8)
            match &= np.all(rows[:, 48:80] == owner, axis=1)
        return np.flatnonzero(match)

    @staticmethod
    def memory_hash(rows: npt.NDArray[np.uint8], position: int) -> str:
        """The hex memory hash of the intent at ``position`` of :meth:`records`' rows."""
        return rows[position, 80:112].tobytes().hex()

    def rewrite_records(self, rows: npt.NDArray[np.uint8], drop: npt.NDArray[np.bool_]) -> None:
        """:meth:`rewrite` with the intents of :meth:`records`' rows but those ``drop``
        marks: renumbered from 0, each with its checksum and no group, byte for byte what
        :meth:`rewrite` writes for the same entries."""
        kept = rows[~drop]
        count = kept.shape[0]
        kept[:, 8:16] = np.arange(count, dtype="<u8").view(np.uint8).reshape(count, 8)
        kept[:, 112:] = 0
        checksums = _checksums(kept.reshape(-1).data, count)
        kept[:, 112:116] = checksums.view(np.uint8).reshape(count, 4)
        fs.atomic_write(self.path, kept.reshape(-1).data)

    def rewrite(self, entries: list[LedgerEntry]) -> None:
        """Replace the whole ledger atomically and durably, renumbered from 0 (a salvage,
        an erase). Readers notice the new inode and read it again from the start."""
        fs.atomic_write(self.path, self.encode(entries, 0))

    def torn_bytes(self) -> int:
        """Bytes of an incomplete final record (a writer died mid-append)."""
        info = self.stat()
        return 0 if info is None else info.st_size % RECORD_BYTES

    def unwritten_tail(self, info: os.stat_result | None = None) -> int:
        """Bytes at the end that hold no intent: an incomplete record and, before it, whole
        records of zeros. ``info``: the ledger's :meth:`stat` just taken, if the caller has
        it (under the writer lock, where nothing else writes it).

        A power loss can keep the size an append gave the file without its data (file
        systems that write metadata before data), which reads as zeros. Zeros are never a
        valid intent (the magic), so they are cut; an acknowledged memory whose intent was
        lost this way (a group commit does not fsync its intents) has it written again by
        recovery from its durable record (``unsynced.py``, ``reconcile.py``).
        """
        if info is None:
            info = self.stat()
        if info is None:
            return 0
        whole = info.st_size // RECORD_BYTES
        end = whole
        while end > 0:
            read = self._read_file((end - 1) * RECORD_BYTES)
            if read is None or read[0][:RECORD_BYTES] != bytes(RECORD_BYTES):
                break
            end -= 1
        return info.st_size - end * RECORD_BYTES

    def _decode(self, record: bytes, index: int, *, newest: bool = False) -> LedgerEntry:
        """The intent ``record`` at ``index``, verified.

        Raises:
            PersistenceError: the record is damaged, or carries another position; the message
                names the repair (:meth:`_damage`).
        """
        body = record[: _BODY.size]
        magic, kind, sequence, session, owner, memory = _BODY.unpack(body)
        (checksum,) = struct.unpack_from("<I", record, _BODY.size)
        if magic != _MAGIC or kind != self.kind:
            raise PersistenceError(self._damage(index, "its header is damaged", newest=newest))
        if crc32(body) != checksum:
            raise PersistenceError(self._damage(index, "its checksum is wrong", newest=newest))
        if sequence != index:
            raise PersistenceError(
                self._damage(
                    index,
                    f"it carries sequence {sequence}: records were lost or reordered",
                    newest=newest,
                )
            )
        return LedgerEntry(session.hex(), owner.hex(), memory.hex())

    def _damage(self, index: int, what: str, *, newest: bool) -> str:
        """What to say of a damaged intent: where, what is wrong, and the repair that works.

        An intent only counts a record its partition holds (it names the memory, or the
        partition of a retraction), so ``check --fix --accept-loss`` rebuilds the ledger
        from the partitions and gives up nothing they still hold: the repair to name rather
        than a backup alone. ``check`` names what a damaged partition would lose as well.
        """
        if self.kind == KIND_RETRACT:
            thing, source = "retraction (forget)", "retraction logs"
        else:
            thing, source = "memory", "partitions"
        where = f"record {index}, its newest intent" if newest else f"record {index}"
        stops = (
            "; every write (append, forget) stops until it is repaired, since each first "
            "checks the newest intent"
            if newest
            else ""
        )
        return (
            f"{self.path} is corrupt at {where} ({what}){stops}. The ledger only counts what "
            f"the {source} hold, so the salvage below rebuilds it from them and gives up no "
            f"{thing} they still hold. {salvage_advice(self.path)}."
        )
