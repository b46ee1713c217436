"""The synchronous core of one store folder: layout, lock, appends, reads and recovery.

Everything here blocks; :class:`~game_memory.store.file_store.FileGameMemoryStore` runs it
in a bounded thread pool. Layout of ``<save>/.game-memory/`` (format version 1, described
in full in ``docs/storage-format.md``)::

    format.json          {"format": "game-memory-store", "format_version": 2}  (1: read too)
    lock                 the cross-process writer lock (flock)
    ledger.log           one 128-byte intent per memory (see ledger.py)
    migration.json       present only while a legacy migration batch is uncommitted
    s-<sha256(session)>/o-<sha256(owner)>[.N].log   the partition log segments
    s-<sha256(session)>/p-N.pack                    packs written by migrations
    legacy/              legacy documents moved here after their migration

An append, under the lock: recover; read the partition; return if an equivalent memory is
there (or raise on a conflict); check capacity with the ledger count; append+fsync the
intent; append+fsync the record (fsyncing new files' folders). Acknowledged appends are
durable; a crash leaves at most one pending intent, which the next writer resolves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.lock import ProcessLock
from game_memory.errors import (
    CapacityExceededError,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
)
from game_memory.model import GameMemory, check_bounded_id, ordinal_key
from game_memory.store.documents import encode_document
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.packs import plan_packs
from game_memory.store.partitions import (
    PartitionCache,
    PartitionState,
    identity_hash,
    partition_hash,
    segment_path,
)
from game_memory.store.records import encode_record
from game_memory.store.view import PartitionView

__all__ = ["DATA_FOLDER", "STORE_FORMAT_VERSION", "StoreEngine"]

DATA_FOLDER = ".game-memory"
_PACK_RELATIVE = re.compile(r"^s-[0-9a-f]{64}/p-[1-9][0-9]{0,8}\.pack$")
#: The format new saves get. Format 1 (before ``belief_key``) is read and written as is;
#: the first memory with a ``belief_key`` upgrades a format-1 save to 2 (format.json is
#: replaced atomically before its record is written), so older releases then refuse it.
STORE_FORMAT_VERSION = 2
_READABLE_FORMATS = (1, 2)
_FORMAT_NAME = "game-memory-store"


def _validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


class StoreEngine:
    """Blocking operations on one store folder; thread-safe; shared by one store object."""

    def __init__(
        self,
        root: Path,
        *,
        maximum_entries: int,
        maximum_file_bytes: int,
        lock_timeout: float,
        cache_entries: int,
    ) -> None:
        self.root = root
        self.data = root / DATA_FOLDER
        self._data_prefix = os.path.join(self.data, "")
        self.maximum_entries = maximum_entries
        self.maximum_file_bytes = maximum_file_bytes
        self.ledger = Ledger(self.data / "ledger.log", maximum_entries)
        self.journal_path = self.data / "migration.json"
        self.cache = PartitionCache(maximum_file_bytes, cache_entries)
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._verified: tuple[int, int] | None = None

    # -- layout -------------------------------------------------------------------------

    def open_layout(self) -> None:
        """Check the folders for links, create the layout if needed, and verify its format."""
        fs.check_no_symlinks(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        fs.ensure_directory(self.root, create=False)
        fs.ensure_directory(self.data)
        if self._read_format() is None:
            with self.locked():
                if self._read_format() is None:
                    if self.ledger.stat() is not None:
                        raise PersistenceError(
                            f"{self.data / 'format.json'} is missing but the store holds data; "
                            "the save is damaged. Restore it from a backup."
                        )
                    document = {"format": _FORMAT_NAME, "format_version": STORE_FORMAT_VERSION}
                    fs.atomic_write(self.data / "format.json", json.dumps(document).encode())

    def _read_format(self) -> int | None:
        path = self.data / "format.json"
        read = fs.read_file(path, 65_536)
        if read is None:
            return None
        try:
            document = json.loads(read[0])
            version = document["format_version"]
            if document["format"] != _FORMAT_NAME or not isinstance(version, int):
                raise ValueError("not a game-memory store")
        except (ValueError, KeyError, TypeError) as exc:
            raise PersistenceError(f"{path} is not a valid store format file: {exc}") from exc
        if version not in _READABLE_FORMATS:
            raise PersistenceError(
                f"{self.root} was written in store format {version}; this game-memory reads "
                f"formats 1 and {STORE_FORMAT_VERSION}. Upgrade game-memory to open it."
            )
        return version

    def _require_format(self, version: int) -> None:
        """Upgrade format.json to ``version`` if it is older (under the writer lock)."""
        current = self._read_format()
        if current is not None and current < version:
            document = {"format": _FORMAT_NAME, "format_version": version}
            fs.atomic_write(self.data / "format.json", json.dumps(document).encode())

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cross-process writer lock."""
        with self._lock:
            yield

    def session_directory(self, session_hash: str) -> Path:
        return self.data / f"s-{session_hash}"

    # -- reads --------------------------------------------------------------------------

    def session_folder(self, session_hash: str) -> str:
        """``session_directory`` as a string (the hot read path avoids ``pathlib``)."""
        return f"{self._data_prefix}s-{session_hash}"

    def read_partition(self, session_hash: str, owner_hash: str) -> PartitionState:
        """Read one owner partition (through the cache)."""
        return self.cache.read(self.session_folder(session_hash), session_hash, owner_hash)

    def views(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionView]:
        """The partition views of a session (or one owner), in owner order.

        Raises:
            CapacityExceededError: more than ``bound`` memories (``maximum_snapshot_entries``).
        """
        session_hash = partition_hash(_validated_id(session_id, "session_id"))
        if owner_id is not None:
            hashes = [partition_hash(_validated_id(owner_id, "owner_id"))]
        else:
            hashes = self.cache.owner_hashes(self.session_folder(session_hash))
        views: list[PartitionView] = []
        total = 0
        for owner_hash in hashes:
            view = self.read_partition(session_hash, owner_hash).view
            if view is None:
                continue
            total += len(view)
            if total > bound:
                raise CapacityExceededError(
                    f"the snapshot of session {session_id!r} holds more than {bound:,} memories "
                    "(maximum_snapshot_entries); query one owner, or raise the bound",
                    bound="maximum_snapshot_entries",
                )
            views.append(view)
        if len(views) > 1:
            views.sort(key=lambda view: ordinal_key(view.owner_id))
        return views

    # -- writes -------------------------------------------------------------------------

    def append(self, memory: GameMemory) -> bool:
        """Durably add ``memory``; ``False`` if an equivalent memory is already stored.

        Raises:
            MemoryConflictError: the id holds different content (nothing written).
            CapacityExceededError: the store is full or the record is too large.
        """
        record = encode_record(encode_document(memory))
        if len(record) > self.maximum_file_bytes:
            raise CapacityExceededError(
                f"memory {memory.memory_id!r} takes {len(record):,} bytes on disk, more than "
                f"maximum_file_bytes ({self.maximum_file_bytes:,}); shorten its payload or text",
                bound="maximum_file_bytes",
            )
        session_hash = partition_hash(memory.session_id)
        owner_hash = partition_hash(memory.owner_id)
        with self.locked():
            self.recover()
            state = self.read_partition(session_hash, owner_hash)
            existing = state.find(memory.memory_id)
            if existing is not None:
                if existing == memory:
                    return False
                raise MemoryConflictError(
                    f"memory id {memory.memory_id!r} of owner {memory.owner_id!r} in session "
                    f"{memory.session_id!r} already holds different content; an id cannot be "
                    "reused. Use a new id (derive_memory_id gives stable ones)."
                )
            if memory.belief_key is not None:
                self._require_format(2)
            count = self.ledger.count()
            if count >= self.maximum_entries:
                raise CapacityExceededError(
                    f"the store holds {count:,} memories, its maximum_entries; open it with a "
                    "larger maximum_entries to add more",
                    bound="maximum_entries",
                )
            entry = LedgerEntry(session_hash, owner_hash, identity_hash(memory.memory_id))
            self.ledger.append([entry], first_index=count)
            fs.ensure_directory(self.session_directory(session_hash))
            self.write_records(state, [record], durable=True)
            self._note_verified()
            return True

    def write_records(
        self, state: PartitionState, records: list[bytes], *, durable: bool
    ) -> list[str]:
        """Append framed ``records`` to a partition's last segment(s); return touched files.

        Cuts off a torn tail first and starts a new segment when one would grow past
        ``maximum_file_bytes``. With ``durable=False`` nothing is fsynced (the caller syncs
        the whole batch once).
        """
        directory = self.session_directory(state.session_hash)
        tail = state.tail
        if tail is not None and tail.torn_bytes:
            self.cut_tail(tail.path, tail.end)
        index = len(state.segments) - 1 if tail is not None else 0
        size = tail.end if tail is not None else 0
        touched: list[str] = []
        pending: list[bytes] = []

        def flush() -> None:
            path = segment_path(directory, state.owner_hash, index)
            data = b"".join(pending)
            if durable:
                with fs.open_append(Path(path)) as (fd, _):
                    fs.append_bytes(fd, data, Path(path))
            else:
                try:
                    fd = os.open(
                        path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644
                    )
                except OSError as exc:
                    raise PersistenceError(f"could not write {path}: {exc.strerror}") from exc
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                except OSError as exc:
                    raise PersistenceError(f"could not write {path}: {exc.strerror}") from exc
                finally:
                    os.close(fd)
            touched.append(path)
            pending.clear()

        for record in records:
            if size and size + len(record) > self.maximum_file_bytes:
                flush()
                index += 1
                size = 0
            pending.append(record)
            size += len(record)
        if pending:
            flush()
        return touched

    def cut_tail(self, path: str, end: int) -> None:
        """Durably cut a segment back to ``end`` (dropping a torn tail). Call under the lock."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, end)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise PersistenceError(
                f"could not cut the torn tail of {path}: {exc.strerror}"
            ) from exc

    # -- recovery -----------------------------------------------------------------------

    def recover(self, *, force: bool = False) -> None:
        """Resolve what a crashed writer left behind. Call under the lock.

        Cuts a torn ledger record; resolves an uncommitted migration batch (keeping the
        intents whose records landed); drops the newest intent if its record never landed.
        The newest intent is re-checked only when the ledger changed since this process
        last verified it (or with ``force``).
        """
        if force:
            self._verified = None
        torn = self.ledger.torn_bytes()
        if torn:
            self.ledger.truncate(self.ledger.count())
        journal = fs.read_file(self.journal_path, 1 << 24)
        if journal is not None:
            # An uncommitted bulk batch: its legacy sources still exist, so undo it whole.
            before, packs = self._read_journal(journal[0])
            for path in packs:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            if self.ledger.count() > before:
                self.ledger.truncate(before)
            self._remove(self.journal_path)
            self._verified = None
        info = self.ledger.stat()
        if info is None or (info.st_ino, info.st_size) == self._verified:
            return
        count = info.st_size // RECORD_BYTES
        if count and not self.is_present(self.ledger.read(count - 1, count)[0], newest=True):
            self.ledger.truncate(count - 1)
        self._note_verified()

    def is_present(self, entry: LedgerEntry, *, newest: bool = False) -> bool:
        """Whether the memory an intent names has its record in its partition."""
        state = self.read_partition(entry.session_hash, entry.owner_hash)
        tail = state.tail
        # The newest intent's record, if it landed, is its partition's last record.
        if (
            newest
            and tail is not None
            and tail.memories
            and identity_hash(tail.memories[-1].memory_id) == entry.memory_hash
        ):
            return True
        return state.has_memory_hash(entry.memory_hash)

    def write_journal(self, ledger_count: int, packs: list[str]) -> None:
        """Mark the start of a bulk batch: the ledger count before it and the packs it adds."""
        document = {
            "format_version": 1,
            "ledger_records_before": ledger_count,
            "packs": [os.path.relpath(path, self.data) for path in packs],
        }
        fs.atomic_write(self.journal_path, json.dumps(document).encode())

    def commit_journal(self) -> None:
        """Mark the bulk batch committed (all its records durable)."""
        self._remove(self.journal_path)

    def _read_journal(self, data: bytes) -> tuple[int, list[Path]]:
        try:
            document = json.loads(data)
            before = document["ledger_records_before"]
            names = document["packs"]
            if document["format_version"] != 1 or not isinstance(before, int) or before < 0:
                raise ValueError("bad fields")
            packs = [self.data / name for name in names]
            if any(not _PACK_RELATIVE.match(name) for name in names):
                raise ValueError("a pack path is outside the store")
        except (ValueError, KeyError, TypeError) as exc:
            raise PersistenceError(
                f"{self.journal_path} is corrupt ({exc}); restore the save from a backup"
            ) from exc
        if before > self.ledger.count():
            raise PersistenceError(
                f"{self.journal_path} marks {before} intents but the ledger holds fewer; "
                "the save cannot be reconciled safely. Restore it from a backup."
            )
        return before, packs

    def plan_packs(
        self, session_hash: str, groups: list[tuple[str, list[bytes]]]
    ) -> list[tuple[str, list[tuple[str, list[bytes]]]]]:
        """Split one session's ``(owner_hash, records)`` into the session's next packs."""
        directory = self.session_directory(session_hash)
        first = len(self.cache.pack_indexes(directory)) + 1
        return plan_packs(directory, first, groups, self.maximum_file_bytes)

    def _remove(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise PersistenceError(f"could not remove {path}: {exc.strerror}") from exc
        fs.fsync_directory(path.parent)

    def _note_verified(self) -> None:
        info = self.ledger.stat()
        self._verified = None if info is None else (info.st_ino, info.st_size)
