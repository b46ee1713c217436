"""``FileVectorMemoryIndex``: the derived, disposable, rebuildable index of memory vectors.

Layout of ``<index>/.game-memory-index/`` (format version 1)::

    format.json                    {"format": "game-memory-vector-index", "format_version": 1}
    identities.json                the embedding identities seen; an entry stores its position
    lock                           the writer lock
    s-<sha256(session)>/o-<sha256(owner)>.entries            128-byte entry records (entries.py)
    s-<sha256(session)>/o-<sha256(owner)>.<code>.<tag>.f32   float32 rows of identity <code>

Vectors are raw little-endian float32 rows, one file per partition, identity and file
generation (``tag``, 8 hex digits, carried by every entry record), so loading a partition
is one read per file and never parses numbers; searching it is one matrix-vector product.
Entries name memories by ``sha256(memory_id)`` and carry a content digest; the hybrid store
checks both against the authoritative snapshot, so a record that is orphaned or computed
from other content can never enter a result.

Entries files and row files only grow between compactions, so a reader that already holds
a partition reads just the new tail of each (incremental loads; rows once read are never
read again). A compaction writes the new row files under a new tag *before* it renames the
new entries file into place and only then deletes the old generation, so an entries file is
always read together with the rows it was written against; a reader that loses the race
gets :class:`PartitionReplacedError` and simply reads the partition again.

The index is derived data: keep it outside the save folder; it may be deleted at any time
and rebuilt. A corrupt file raises ``DerivedIndexError`` and never touches the save.
Writers are serialized across processes by a lock; readers take none and ignore torn
tails (a record or row still being written).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from game_memory.durable import fs
from game_memory.durable.fs import lstat_regular
from game_memory.durable.lock import ProcessLock
from game_memory.errors import CapacityExceededError, DerivedIndexError, PersistenceError
from game_memory.index.entries import (
    ENTRY_BYTES,
    NO_VALUE,
    EntryRecord,
    EntryState,
    decode_entries,
    encode_entry,
    row_checksums,
)
from game_memory.index.partition import (
    FloatMatrix,
    IndexPartition,
    PartitionReplacedError,
    RowBuffer,
    derived_error,
    extend_partition,
    new_tag,
)
from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = [
    "INDEX_FOLDER",
    "IndexEngine",
    "check_capacity",
    "identity_dimensions",
]

INDEX_FOLDER = ".game-memory-index"
_FORMAT = "game-memory-vector-index"
_ENTRIES = re.compile(r"^o-([0-9a-f]{64})\.entries$")
_SESSION = re.compile(r"^s-([0-9a-f]{64})$")
_ROWS = re.compile(r"^o-([0-9a-f]{64})\.([0-9]+)\.([0-9a-f]{8})\.f32$")
_MAXIMUM_ENTRIES_BYTES = 1 << 32
_CACHED_PARTITIONS = 4_096


class IndexEngine:
    """Blocking operations on one index folder; thread-safe."""

    def __init__(self, directory: Path, *, capacity: int, lock_timeout: float) -> None:
        self.root = directory
        self.data = directory / INDEX_FOLDER
        self.capacity = capacity
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._identities: list[str] = []
        self._partitions: OrderedDict[tuple[str, str], IndexPartition] = OrderedDict()
        self._row_buffers: dict[tuple[str, str, int], RowBuffer] = {}
        self._cache_lock = threading.Lock()
        self._opened = False

    # -- layout -------------------------------------------------------------------------

    def open(self) -> None:
        """Create or verify the layout (idempotent)."""
        if self._opened:
            return
        try:
            fs.check_no_symlinks(self.root)
            self.root.mkdir(parents=True, exist_ok=True)
            fs.ensure_directory(self.data)
            read = fs.read_file(self.data / "format.json", 65_536)
            if read is None:
                document = {"format": _FORMAT, "format_version": 1}
                fs.atomic_write(self.data / "format.json", json.dumps(document).encode())
                if not os.path.lexists(self.data / "identities.json") and not self.session_hashes():
                    # Written up front: its absence beside entries then always means damage.
                    empty = {"format_version": 1, "identities": []}
                    fs.atomic_write(self.data / "identities.json", json.dumps(empty).encode())
            else:
                try:
                    document = json.loads(read[0])
                except ValueError as exc:
                    raise DerivedIndexError(
                        f"{self.data / 'format.json'} is corrupt; delete the index folder and "
                        "rebuild"
                    ) from exc
                if (
                    not isinstance(document, dict)
                    or document.get("format") != _FORMAT
                    or document.get("format_version") != 1
                ):
                    raise DerivedIndexError(
                        f"{self.data} holds an index of another format or version; delete the "
                        "index folder and rebuild"
                    )
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        except OSError as exc:
            raise DerivedIndexError(f"could not open the index at {self.root}: {exc}") from exc
        self._opened = True

    def session_directory(self, session_hash: str) -> Path:
        """The folder of one session's partitions."""
        return self.data / f"s-{session_hash}"

    def locked(self) -> ProcessLock:
        """The cross-process writer lock (a context manager)."""
        return self._lock

    # -- identities ---------------------------------------------------------------------

    def identities(self) -> list[str]:
        """Every identity code's identity string (reloaded when another process added one)."""
        try:
            read = fs.read_file(self.data / "identities.json", 1 << 20)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        if read is None:
            if self.session_hashes():
                # Entries store identity *codes*: without this file they could be taken for
                # another model's vectors.
                raise DerivedIndexError(
                    f"{self.data / 'identities.json'} is missing but the index holds entries; "
                    "delete the index folder and rebuild"
                )
            return []
        try:
            names = json.loads(read[0])["identities"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("not a list of strings")
            for name in names:
                identity_dimensions(name)
        except (ValueError, KeyError, TypeError) as exc:
            raise DerivedIndexError(
                f"{self.data / 'identities.json'} is corrupt ({exc}); delete the index folder "
                "and rebuild"
            ) from exc
        self._identities = names
        return names

    def identity_code(self, identity: MemoryEmbeddingIdentity, *, create: bool) -> int | None:
        """The code of ``identity``; with ``create`` (under the lock) add it if new."""
        name = str(identity)
        names = self._identities if name in self._identities else self.identities()
        if name in names:
            return names.index(name)
        if not create:
            return None
        names = [*names, name]
        try:
            document = {"format_version": 1, "identities": names}
            fs.atomic_write(self.data / "identities.json", json.dumps(document).encode())
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        self._identities = names
        return len(names) - 1

    # -- reading ------------------------------------------------------------------------

    def entries_path(self, session_hash: str, owner_hash: str) -> str:
        """The entries file of a partition."""
        return f"{self.session_directory(session_hash)}{os.sep}o-{owner_hash}.entries"

    def vectors_path(self, session_hash: str, owner_hash: str, code: int, tag: int) -> str:
        """The row file of identity ``code`` in generation ``tag`` of a partition."""
        return f"{self.session_directory(session_hash)}{os.sep}o-{owner_hash}.{code}.{tag:08x}.f32"

    def partition(self, session_hash: str, owner_hash: str) -> IndexPartition | None:
        """The partition's current entries, or ``None`` when it has no entries file.

        Cached; when the file only grew since, just the new records are read.

        Raises:
            DerivedIndexError: the file is corrupt, a link, or unreadable.
        """
        path = self.entries_path(session_hash, owner_hash)
        try:
            info = lstat_regular(path)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        if info is None:
            return None
        key = (session_hash, owner_hash)
        with self._cache_lock:
            cached = self._partitions.get(key)
        whole = info.st_size // ENTRY_BYTES * ENTRY_BYTES
        base = cached if cached is not None and cached.inode == info.st_ino else None
        if base is not None and base.size == whole and base.changed == info.st_ctime_ns:
            return base
        if base is not None and (
            base.size > whole or (base.records and self._first_tag(path) != base.tag)
        ):
            # Shrunk in place (not something a writer does), or another file that reuses
            # the inode number of a replaced one: read it whole.
            base = None
        offset = base.size if base is not None else 0
        try:
            read = fs.read_file(path, _MAXIMUM_ENTRIES_BYTES, offset=offset)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        if read is None:
            return None
        data, opened = read
        if base is not None and opened.st_ino != base.inode:
            return self._reload(session_hash, owner_hash, path)
        try:
            records, _ = decode_entries(data)
            partition = extend_partition(base, records, session_hash, owner_hash, opened)
        except ValueError as exc:
            raise DerivedIndexError(f"{path} is corrupt ({exc}); rebuild the index") from exc
        self._remember(key, partition)
        return partition

    def _reload(self, session_hash: str, owner_hash: str, path: str) -> IndexPartition | None:
        with self._cache_lock:
            self._partitions.pop((session_hash, owner_hash), None)
        try:
            read = fs.read_file(path, _MAXIMUM_ENTRIES_BYTES)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        if read is None:
            return None
        data, opened = read
        try:
            records, _ = decode_entries(data)
            partition = extend_partition(None, records, session_hash, owner_hash, opened)
        except ValueError as exc:
            raise DerivedIndexError(f"{path} is corrupt ({exc}); rebuild the index") from exc
        self._remember((session_hash, owner_hash), partition)
        return partition

    def _remember(self, key: tuple[str, str], partition: IndexPartition) -> None:
        with self._cache_lock:
            current = self._partitions.get(key)
            if (
                current is None
                or current.inode != partition.inode
                or (current.size <= partition.size)
            ):
                self._partitions[key] = partition
            self._partitions.move_to_end(key)
            while len(self._partitions) > _CACHED_PARTITIONS:
                evicted, _ = self._partitions.popitem(last=False)
                for buffer_key in [k for k in self._row_buffers if k[:2] == evicted]:
                    del self._row_buffers[buffer_key]

    def owner_hashes(self, session_hash: str) -> list[str]:
        """Owners with an entries file in the session (sorted)."""
        names = _names(self.session_directory(session_hash))
        return sorted(m.group(1) for name in names if (m := _ENTRIES.match(name)))

    def session_hashes(self) -> list[str]:
        """Sessions with a folder in the index."""
        return sorted(m.group(1) for name in _names(self.data) if (m := _SESSION.match(name)))

    def matrix(self, partition: IndexPartition, code: int, dimensions: int) -> FloatMatrix:
        """The float32 rows of identity ``code`` that ``partition``'s records refer to.

        Read-only, shared, and cached across partition versions (only new rows are read);
        every row a record refers to is verified against its checksum once.

        Raises:
            PartitionReplacedError: a compaction replaced the partition since it was read;
                read the partition again.
            DerivedIndexError: the row file is missing, damaged, or too short.
        """
        needed = partition.rows_needed(code)
        if needed == 0:
            return np.empty((0, dimensions), dtype=np.float32)
        key = (partition.session_hash, partition.owner_hash, code)
        with self._cache_lock:
            buffer = self._row_buffers.get(key)
            if buffer is None or buffer.tag != partition.tag or buffer.dimensions != dimensions:
                buffer = self._row_buffers[key] = RowBuffer(partition.tag, dimensions)
        path = self.vectors_path(partition.session_hash, partition.owner_hash, code, partition.tag)
        try:
            with buffer.lock:
                matrix = buffer.load(path, needed)
                buffer.verify(partition, code, path)
                return matrix
        except FileNotFoundError:
            if self._replaced(partition):
                raise PartitionReplacedError(
                    f"{self.entries_path(partition.session_hash, partition.owner_hash)} was "
                    "compacted while it was read; read it again"
                ) from None
            raise DerivedIndexError(
                f"{path} is missing although entries refer to it; the derived index is "
                "damaged, rebuild it"
            ) from None
        except DerivedIndexError:
            if self._replaced(partition):
                raise PartitionReplacedError(
                    "the partition was compacted while it was read; read it again"
                ) from None
            raise

    def _first_tag(self, path: str) -> int | None:
        """The vector-file tag of an entries file's first record (``None`` if it has none)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            head = os.pread(fd, 4, 112)
        except OSError:
            return None
        finally:
            os.close(fd)
        return int.from_bytes(head, "little") if len(head) == 4 else None

    def _replaced(self, partition: IndexPartition) -> bool:
        """Whether the partition's entries file now belongs to another generation."""
        return self._first_tag(self.entries_path(partition.session_hash, partition.owner_hash)) != (
            partition.tag
        )

    def verify_partition(self, session_hash: str, owner_hash: str) -> None:
        """Read a partition and every row its ready records refer to, checksums included.

        Raises:
            DerivedIndexError: anything of the partition is damaged or missing.
        """
        partition = self.partition(session_hash, owner_hash)
        if partition is None:
            return
        identities = self.identities()
        ready = partition.states == EntryState.READY
        for code in sorted(set(partition.identities[ready].tolist())):
            if code >= len(identities):
                raise DerivedIndexError(
                    f"{self.entries_path(session_hash, owner_hash)} names identity code {code}, "
                    f"which {self.data / 'identities.json'} does not define"
                )
            self.matrix(partition, code, identity_dimensions(identities[code]))

    # -- writing (call under the lock) --------------------------------------------------

    def reset_partition(self, session_hash: str, owner_hash: str) -> None:
        """Delete a partition's entries and row files: its memories have no vectors after.

        Derived data only; the rebuild uses it to recover from a damaged partition.
        """
        directory = self.session_directory(session_hash)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.entries_path(session_hash, owner_hash))
            self._remove_row_files(directory, owner_hash, keep_tag=None)
            fs.fsync_directory(directory)
        except OSError as exc:
            raise DerivedIndexError(f"could not reset a partition in {directory}: {exc}") from exc
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        self._forget(session_hash, owner_hash)

    def _remove_row_files(self, directory: Path, owner_hash: str, *, keep_tag: int | None) -> None:
        """Delete the owner's row files of every generation but ``keep_tag``."""
        for name in _names(directory):
            match = _ROWS.match(name)
            if match and match.group(1) == owner_hash and int(match.group(3), 16) != keep_tag:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(directory / name)

    def _forget(self, session_hash: str, owner_hash: str) -> None:
        """Drop the cached versions of a partition that was replaced or deleted."""
        with self._cache_lock:
            self._partitions.pop((session_hash, owner_hash), None)
            for key in [k for k in self._row_buffers if k[:2] == (session_hash, owner_hash)]:
                del self._row_buffers[key]

    def append(
        self,
        session_hash: str,
        owner_hash: str,
        records: list[EntryRecord],
        vectors: dict[int, FloatMatrix] | None = None,
        *,
        durable: bool = True,
    ) -> list[EntryRecord]:
        """Append vectors (per identity code) and entry records; return records with rows.

        Each ready record's ``row`` is an offset into the ``vectors`` rows of its identity
        given here; it is rewritten to the row's position in the partition's row file.
        Vectors are written (and flushed) before the entries that point at them, so a
        reader never sees an entry whose row is missing.
        """
        current = self.partition(session_hash, owner_hash)
        tag = current.tag if current is not None and current.records else new_tag(0)
        try:
            fs.ensure_directory(self.session_directory(session_hash))
            first_rows: dict[int, int] = {}
            sums: dict[int, list[int]] = {}
            for code, matrix in (vectors or {}).items():
                sums[code] = row_checksums(matrix).tolist()
                first_rows[code] = self._append_rows(
                    self.vectors_path(session_hash, owner_hash, code, tag), matrix, durable
                )
            placed = [
                EntryRecord(
                    r.state,
                    r.identity,
                    first_rows[r.identity] + r.row,
                    r.memory_hash,
                    r.digest,
                    r.code,
                    sums[r.identity][r.row],
                )
                if r.state is EntryState.READY
                else EntryRecord(r.state, NO_VALUE, NO_VALUE, r.memory_hash, r.digest, r.code)
                for r in records
            ]
            path = self.entries_path(session_hash, owner_hash)
            self._cut_torn(path, ENTRY_BYTES)
            data = b"".join(encode_entry(r, tag) for r in placed)
            with fs.open_append(Path(path)) as (fd, _):
                if durable:
                    fs.append_bytes(fd, data, Path(path))
                else:
                    _write_all(fd, data)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        except OSError as exc:
            raise DerivedIndexError(f"could not write the vector index: {exc}") from exc
        return placed

    def _append_rows(self, path: str, matrix: FloatMatrix, durable: bool) -> int:
        row_bytes = int(matrix.shape[1]) * 4
        self._cut_torn(path, row_bytes)
        with fs.open_append(Path(path)) as (fd, _):
            first = os.fstat(fd).st_size // row_bytes
            data = np.ascontiguousarray(matrix, dtype="<f4").tobytes()
            if durable:
                fs.append_bytes(fd, data, Path(path))
            else:
                _write_all(fd, data)
        return first

    def _cut_torn(self, path: str, unit: int) -> None:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if info.st_size % unit:
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                os.ftruncate(fd, info.st_size - info.st_size % unit)
            finally:
                os.close(fd)

    def compact(self, session_hash: str, owner_hash: str, keep_codes: set[int]) -> None:
        """Rewrite a partition without superseded records, dead rows or unused identities.

        Writes the new row files under a new tag, then renames the new entries file into
        place, then deletes the previous generation's row files: a crash leaves either
        version whole (plus, at worst, unreferenced row files the next compaction removes),
        and a concurrent reader either sees the old entries with the old rows or gets
        :class:`PartitionReplacedError`.
        """
        partition = self.partition(session_hash, owner_hash)
        if partition is None:
            return
        identities = self.identities()
        tag = new_tag(partition.tag)
        records: list[EntryRecord] = []
        vectors: dict[int, list[FloatMatrix]] = {}
        for memory_hash in partition.position:
            record = partition.record(memory_hash)
            assert record is not None
            if record.state is EntryState.READY:
                if record.identity not in keep_codes:
                    continue
                dimensions = identity_dimensions(identities[record.identity])
                matrix = self.matrix(partition, record.identity, dimensions)
                rows = vectors.setdefault(record.identity, [])
                rows.append(matrix[record.row])
                record = EntryRecord(
                    record.state,
                    record.identity,
                    len(rows) - 1,
                    record.memory_hash,
                    record.digest,
                    record.code,
                    record.checksum,
                )
            records.append(record)
        directory = self.session_directory(session_hash)
        try:
            for code, rows in vectors.items():
                target = self.vectors_path(session_hash, owner_hash, code, tag)
                fs.atomic_write(Path(target), np.asarray(rows, dtype="<f4").tobytes())
            fs.atomic_write(
                Path(self.entries_path(session_hash, owner_hash)),
                b"".join(encode_entry(r, tag) for r in records),
            )
            self._remove_row_files(directory, owner_hash, keep_tag=tag)
            fs.fsync_directory(directory)
        except OSError as exc:
            raise DerivedIndexError(f"could not compact {directory}: {exc}") from exc
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        self._forget(session_hash, owner_hash)


def identity_dimensions(name: str) -> int:
    """The dimensions of an identity string ``provider/model@version:dims``.

    Raises:
        ValueError: the string does not end in ``:<dimensions>``.
    """
    head, separator, tail = name.rpartition(":")
    if not separator or not head or not tail.isdigit() or not 1 <= int(tail) <= 65_536:
        raise ValueError(f"{name!r} is not an embedding identity")
    return int(tail)


def _names(directory: Path) -> list[str]:
    """The names in an index folder (none if it is missing); the folder must not be a link.

    Entries inside may be anything: readers open files with ``O_NOFOLLOW`` and check that
    they are regular, so a planted link is reported as damage (which a rebuild deletes)
    instead of making the whole session unreadable.
    """
    try:
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode):
            raise DerivedIndexError(f"{directory} should be a folder, not a file or link")
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in entries)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DerivedIndexError(f"could not list {directory}: {exc.strerror}") from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def check_capacity(partition: IndexPartition | None, new: int, capacity: int) -> None:
    """Raise ``CapacityExceededError`` if ``new`` more memories exceed an owner's capacity."""
    live = partition.live if partition is not None else 0
    if live + new > capacity:
        raise CapacityExceededError(
            f"an owner partition of the vector index would hold {live + new:,} entries, more "
            f"than the index capacity of {capacity:,}; open the index with a larger capacity",
            bound="capacity",
        )
