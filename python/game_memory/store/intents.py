"""What the ledger promises each partition holds, read incrementally by readers and writers.

The ledger (``ledger.py``) has one intent per memory ever added, naming its session, owner
and memory by hash. :class:`LedgerIndex` keeps, per partition, the positions of its
intents, so a read of a partition can check in one comparison that every acknowledged
memory is there: a partition whose files lost records (a cut log, a deleted segment)
holds fewer memories than its intents, and the store fails closed instead of answering
without them. Only the newest intent can be an append still in flight (or one whose
writer died before acknowledging it), and during a migration batch the batch's intents
(after the journal's mark) precede their packs; the engine excuses exactly those.

The index reads only what was appended since its last look (the ledger only grows between
recoveries); a shorter ledger, another inode or a changed last record (cut, then grown
back) makes it read the ledger again from the start. Trailing all-zero records are an
append that never reached the disk (a power loss can leave the size without the data)
and are not counted; a damaged record elsewhere is skipped here and reported by ``check``.

A large ledger's index is restored from its intent file (``intent_files.py``: derived,
checked against the ledger's bytes first) instead of being rebuilt record by record, and
the records after it are read as always.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from game_memory.durable import portable
from game_memory.durable.checksum import crc32
from game_memory.errors import PersistenceError
from game_memory.store.intent_files import (
    PERSIST_MINIMUM,
    GrownPositions,
    Intents,
    Positions,
    count_before,
    head,
    load_intents,
    write_intents,
)
from game_memory.store.ledger import RECORD_BYTES, Ledger, group_start, oversized_message

__all__ = ["LedgerIndex", "LedgerMark"]

_LOG = logging.getLogger("game_memory.store")
_HEAD = struct.Struct("<4sIQ")
_CRC = struct.Struct("<I")
_ZERO = bytes(RECORD_BYTES)
_CHUNK_RECORDS = 1 << 16
#: From this many intents on, the writer's own are indexed with numpy (``_index_own``).
_GROUPED_MINIMUM = 64


def _record(data: bytes, index: int) -> bytes:
    return data[index * RECORD_BYTES : (index + 1) * RECORD_BYTES]


@dataclass(frozen=True, slots=True)
class LedgerMark:
    """The ledger as one refresh saw it: ``count`` readable positions (zero tail excluded).

    ``pending_from`` is where the newest group of intents starts (``ledger.group_start``):
    the intents that may still lack their records (``count - 1`` for a single append).
    """

    count: int
    inode: int
    pending_from: int = -1


class LedgerIndex:
    """Per-partition intent positions of one ledger; thread-safe.

    Args:
        ledger: The ledger file to follow.

    ``background``, when set (the file store sets its read-file thread's ``submit``), writes
    the intent file off the refreshing thread: a refresh that read :data:`PERSIST_MINIMUM`
    records the file does not cover takes a snapshot (a few references per partition) and
    queues the write (the positions' arrays, a CRC, an fsync), so the append that crosses
    the mark does not wait for it. Without it the file is written in the caller.
    """

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._lock = threading.Lock()
        self.background: Callable[[Callable[[], None]], object] | None = None
        self._generation = 0  # bumped by every reset: a queued write of an older one is moot
        self._queued = False  # a background write is queued or running
        self._reset(None)

    def _reset(self, inode: int | None) -> None:
        self._generation += 1
        self._inode = inode
        self._seen: tuple[int, int, int] | None = None  # (inode, size, ctime) last refreshed
        self._seen_stat: os.stat_result | None = None  # that refresh's stat of the ledger
        self._parsed = 0
        self._last = b""
        self._positions: dict[bytes, Positions] = {}
        self._owners: dict[bytes, set[bytes]] = {}
        self._damaged: list[int] = []
        self._crc = 0  # CRC-32 of the records parsed (for the intent file)
        self._persisted = 0  # records the intent file covers (read or written)
        self._renamed = False  # it covers them but names the ledger by an older identity

    # -- refresh ------------------------------------------------------------------------

    def refresh(self, info: os.stat_result | None = None, *, stated: bool = False) -> LedgerMark:
        """Bring the index up to date with the ledger file; return what it now covers.

        With ``stated``, ``info`` is the ledger's ``Ledger.stat`` just taken under the
        writer lock (``None``: no ledger), which nothing else changes meanwhile.

        Raises:
            PersistenceError: the ledger is a link or not a regular file.
        """
        with self._lock:
            if not stated:
                info = self._ledger.stat()
            if info is None:
                if self._inode is not None or self._parsed:
                    self._reset(None)
                return LedgerMark(0, 0)
            seen = (info.st_ino, info.st_size, info.st_ctime_ns)
            if seen == self._seen:
                return self._mark(info.st_ino)  # nothing was written since
            if info.st_size > self._ledger.maximum_bytes:
                raise PersistenceError(oversized_message(self._ledger.path, info.st_size))
            whole = info.st_size // RECORD_BYTES
            if (
                info.st_ino != self._inode
                or whole < self._parsed
                or (self._parsed and self._read(self._parsed - 1, self._parsed) != self._last)
            ):
                self._reset(info.st_ino)
            if self._parsed == 0 and whole >= PERSIST_MINIMUM:
                self._restore(info)
            if whole > self._parsed:
                self._parse(whole)
            self._persist(info)  # a cheap test unless enough is new (or the file is stale)
            self._seen = seen
            self._seen_stat = info
            return self._mark(info.st_ino)

    def unchanged(self) -> LedgerMark | None:
        """What :meth:`refresh` would return, when it would read nothing: the ledger is
        the file, at the size and change time, the index's last refresh saw (or there is
        none and the index is empty). ``None`` otherwise (a refresh must read the ledger).
        One ``lstat``; for a caller that may not block on the file (``StoreReader.
        cached_views``).

        Raises:
            PersistenceError: the ledger is a link or not a regular file.
        """
        info = self._ledger.stat()
        with self._lock:
            if info is None:
                return LedgerMark(0, 0) if self._inode is None and not self._parsed else None
            if (info.st_ino, info.st_size, info.st_ctime_ns) != self._seen:
                return None
            return self._mark(info.st_ino)

    def absorb(self, first: int, data: bytes, info: os.stat_result | None) -> None:
        """Index the intents this process just appended under the writer lock (``data``,
        framed, from position ``first``) as the next refresh would, without reading them
        back.

        Only when the index covers exactly the ledger before them (the inode and the
        ``first`` whole records its last refresh saw) and the file is now that plus
        ``data`` (``info``: its ``lstat`` after the write): nothing else writes the ledger
        under the lock, so those are the bytes a read would find, and ``info`` is what a
        refresh right then would have seen. Otherwise nothing changes, and the next
        refresh reads the file as before.
        """
        count = len(data) // RECORD_BYTES
        if info is None or not count or len(data) != count * RECORD_BYTES:
            return
        with self._lock:
            seen = self._seen
            if (
                seen is None
                or seen[:2] != (info.st_ino, first * RECORD_BYTES)
                or self._inode != info.st_ino
                or self._parsed != first
                or info.st_size != (first + count) * RECORD_BYTES
            ):
                return
            self._index_own(data, first, first + count)
            self._crc = crc32(data, self._crc)
            self._last = _record(data, count - 1)
            self._parsed = first + count
            self._persist(info)
            self._seen = (info.st_ino, info.st_size, info.st_ctime_ns)
            self._seen_stat = info

    def _mark(self, inode: int) -> LedgerMark:
        newest = self._parsed - 1
        pending = group_start(self._last, newest) if newest >= 0 else 0
        return LedgerMark(self._parsed, inode, pending)

    def _read(self, start: int, stop: int) -> bytes:
        """Records ``start`` to ``stop`` of the ledger file (fewer if it is shorter)."""
        path = os.fspath(self._ledger.path)
        try:
            fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PersistenceError(f"{path} should be a regular file")
            chunks: list[bytes] = []
            position, end = start * RECORD_BYTES, stop * RECORD_BYTES
            while position < end:
                chunk = portable.pread(fd, min(end - position, 1 << 24), position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _parse(self, whole: int) -> None:
        start = self._parsed
        while start < whole:
            stop = min(whole, start + _CHUNK_RECORDS)
            data = self._read(start, stop)
            available = len(data) // RECORD_BYTES
            if stop == whole:
                # Zero records at the very end: an append that never reached the disk.
                while available and _record(data, available - 1) == _ZERO:
                    available -= 1
            if available == 0:
                return
            self._index(data, start, start + available)
            self._crc = crc32(memoryview(data)[: available * RECORD_BYTES], self._crc)
            self._last = _record(data, available - 1)
            self._parsed = start + available
            if start + available < stop:
                return
            start = stop

    def _restore(self, info: os.stat_result) -> None:
        """Start from the ledger's intent file when it matches the ledger (read side only)."""
        intents = load_intents(self._ledger.path, info)
        if intents is None or intents.count == 0:
            return
        self._positions = intents.positions
        owners: dict[bytes, set[bytes]] = {}
        for key in intents.positions:
            owners.setdefault(key[:32], set()).add(key[32:])
        self._owners = owners
        self._damaged = list(intents.damaged)
        self._parsed = intents.count
        current = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        # A file accepted by its CRC (a copied save) covers every record but names the
        # ledger as it was: closing the store (or the next write of the file) names it as it
        # is, so a later open hashes nothing. Not written now: the first read of a copied save
        # would pay a thread and the file's arrays beside its own work (about 1 ms at 10k).
        self._persisted = intents.count
        self._renamed = intents.ledger != current
        self._last = intents.last
        self._crc = intents.crc

    def _persist(self, info: os.stat_result, *, closing: bool = False) -> None:
        """Write the intent file when enough records were read since it was (call under the
        lock): :data:`PERSIST_MINIMUM` of them, or with ``closing`` any (for a ledger of at
        least that many records), so the next open reads nothing but the file.

        In the background when there is one (see the class), from a snapshot: the ledger's
        count, CRC and last record, and per partition its positions list with its length
        then (the lists only ever grow at their end, so their first ``length`` items stay
        what they were; a reset replaces the dictionary, never a list's items).
        """
        parsed, persisted = self._parsed, self._persisted
        wanted = 1 if closing and parsed >= PERSIST_MINIMUM else PERSIST_MINIMUM
        if parsed - persisted < wanted and not (closing and self._renamed):
            return
        snapshot = [(key, found, len(found)) for key, found in self._positions.items()]
        crc, last, damaged = self._crc, self._last, list(self._damaged)
        generation = self._generation
        path = self._ledger.path

        def write() -> bool:
            positions: dict[bytes, Positions] = {
                key: head(found, length) for key, found, length in snapshot
            }
            return write_intents(path, info, Intents(parsed, crc, last, positions, damaged))

        background = None if closing else self.background
        if background is None:
            if write():
                self._persisted, self._renamed = parsed, False
            return
        if self._queued:
            return  # the queued write will be followed by another once it is done

        def later() -> None:
            written = False
            try:
                written = write()
            except Exception as exc:  # an optimisation: never let it fail anything
                _LOG.info("an intent file was not written (%s)", exc)
            finally:
                with self._lock:
                    self._queued = False
                    if written and generation == self._generation:
                        self._persisted = max(self._persisted, parsed)
                        self._renamed = False

        self._queued = True
        try:
            background(later)
        except RuntimeError:  # shut down: closing writes what the file does not cover
            self._queued = False

    def persist(self) -> None:
        """Bring the index up to date and write the intent file for every record it does
        not cover yet, in the caller (at close: the next open then reads no ledger record).
        Never raises: the file is an optimisation."""
        try:
            self.refresh()
            with self._lock:
                # The stat the parsed records were read under: the file names that identity.
                if self._seen_stat is not None:
                    self._persist(self._seen_stat, closing=True)
        except PersistenceError as exc:
            _LOG.info("an intent file was not written at close (%s)", exc)

    def _index_own(self, data: bytes, start: int, stop: int) -> None:
        """:meth:`_index` of records this process just encoded (valid by construction, so
        not checked again), grouped by partition with numpy when there are many (a batch
        of 10,000 intents is mostly one partition's)."""
        count = stop - start
        if count < _GROUPED_MINIMUM:
            self._index(data, start, stop)
            return
        keys = (
            np.frombuffer(data, np.uint8, count * RECORD_BYTES)
            .reshape(count, RECORD_BYTES)[:, 16:80]
            .copy()
            .view(np.dtype((np.void, 64)))
            .ravel()
        )
        unique, inverse = np.unique(keys, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate(([0], np.cumsum(np.bincount(inverse, minlength=unique.size))))
        positions, owners = self._positions, self._owners
        for number, value in enumerate(unique):
            key = value.tobytes()
            added = (order[bounds[number] : bounds[number + 1]] + start).tolist()
            found = positions.get(key)
            if found is None:
                positions[key] = added
                owners.setdefault(key[:32], set()).add(key[32:])
            elif isinstance(found, np.ndarray):  # restored from the intent file
                positions[key] = GrownPositions(found, added)
            else:
                found.extend(added)

    def _index(self, data: bytes, start: int, stop: int) -> None:
        view = memoryview(data)
        positions, owners, damaged = self._positions, self._owners, self._damaged
        kind_wanted = self._ledger.kind
        for index in range(start, stop):
            offset = (index - start) * RECORD_BYTES
            magic, kind, sequence = _HEAD.unpack_from(data, offset)
            (checksum,) = _CRC.unpack_from(data, offset + 112)
            if (
                magic != b"GML\x01"
                or kind != kind_wanted
                or sequence != index
                or crc32(view[offset : offset + 112]) != checksum
            ):
                damaged.append(index)
                continue
            key = bytes(view[offset + 16 : offset + 80])
            found = positions.get(key)
            if found is None:
                positions[key] = [index]
                owners.setdefault(key[:32], set()).add(key[32:])
            elif isinstance(found, np.ndarray):  # restored from the intent file
                positions[key] = GrownPositions(found, [index])
            else:
                found.append(index)

    # -- queries ------------------------------------------------------------------------

    def intents(self, session_hash: str, owner_hash: str, mark: LedgerMark) -> int:
        """How many intents of the partition lie before ``mark`` (as the refresh saw it)."""
        key = bytes.fromhex(session_hash + owner_hash)
        with self._lock:
            found = self._positions.get(key)
            return 0 if found is None else count_before(found, mark.count)

    def positions(self, session_hash: str, owner_hash: str, mark: LedgerMark) -> list[int]:
        """The positions of the partition's intents before ``mark``."""
        key = bytes.fromhex(session_hash + owner_hash)
        with self._lock:
            found = self._positions.get(key)
            if found is None:
                return []
            before = head(found, count_before(found, mark.count))
            return before if isinstance(before, list) else before.tolist()

    def owner_hashes(self, session_hash: str) -> list[str]:
        """Every owner the ledger names in the session (sorted hex hashes)."""
        with self._lock:
            owners = self._owners.get(bytes.fromhex(session_hash), set())
            return sorted(owner.hex() for owner in owners)

    def session_hashes(self) -> Iterator[str]:
        """Every session the ledger names (hex hashes)."""
        with self._lock:
            sessions = list(self._owners)
        return (session.hex() for session in sessions)

    def largest(self, limit: int) -> list[tuple[str, str, int]]:
        """The ``limit`` partitions with the most intents: ``(session, owner hash, count)``."""
        with self._lock:
            counts = [(len(found), key) for key, found in self._positions.items()]
        counts.sort(key=lambda item: (-item[0], item[1]))
        return [(key[:32].hex(), key[32:].hex(), count) for count, key in counts[:limit]]

    def damaged(self) -> list[int]:
        """Positions of records that failed their checks (skipped, not counted)."""
        with self._lock:
            return list(self._damaged)

    def memory_hashes(self, positions: list[int]) -> dict[int, str]:
        """The memory hash named by each intent position (read from the file)."""
        found: dict[int, str] = {}
        for index in positions:
            record = self._read(index, index + 1)
            if len(record) == RECORD_BYTES:
                found[index] = record[80:112].hex()
        return found
