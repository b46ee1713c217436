"""``FileVectorMemoryIndex``: the derived, disposable, rebuildable index of memory vectors.

Layout of ``<index>/.game-memory-index/`` (format version 1)::

    format.json                    {"format": "game-memory-vector-index", "format_version": 1}
    identities.json                the embedding identities seen; an entry stores its position
    lock                           the writer lock
    s-<sha256(session)>/o-<sha256(owner)>.entries      128-byte entry records (entries.py)
    s-<sha256(session)>/o-<sha256(owner)>.<code>.f32   float32 rows of identity <code>

Vectors are raw little-endian float32 rows, one file per partition and identity, so loading
a partition is one read per file and never parses numbers; searching it is one
matrix-vector product. Entries name memories by ``sha256(memory_id)`` and carry a content
digest; the hybrid store checks both against the authoritative snapshot, so a record that
is orphaned or computed from other content can never enter a result.

The index is derived data: keep it outside the save folder; it may be deleted at any time
and rebuilt. A corrupt file raises ``DerivedIndexError`` and never touches the save.
Writers are serialized across processes by a lock; readers take none and ignore torn
tails (a record or row still being written).
"""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from game_memory.errors import CapacityExceededError, DerivedIndexError, PersistenceError
from game_memory.store import fs
from game_memory.store.lock import ProcessLock
from game_memory.vector.entries import (
    ENTRY_BYTES,
    NO_VALUE,
    EntryRecord,
    EntryState,
    decode_entries,
    encode_entry,
)
from game_memory.vector.identity import MemoryEmbeddingIdentity

__all__ = ["INDEX_FOLDER", "IndexEngine", "IndexPartition", "check_capacity", "identity_dimensions"]

INDEX_FOLDER = ".game-memory-index"
_FORMAT = "game-memory-vector-index"
_ENTRIES = re.compile(r"^o-([0-9a-f]{64})\.entries$")
_SESSION = re.compile(r"^s-([0-9a-f]{64})$")
FloatMatrix = npt.NDArray[np.float32]


def _derived(exc: PersistenceError) -> DerivedIndexError:
    return DerivedIndexError(
        f"{exc} (this is the derived vector index, not the save: delete the index folder or "
        "run a rebuild)"
    )


@dataclass(eq=False)
class IndexPartition:
    """One owner partition of the index as read: the latest entry per memory.

    ``position`` maps ``sha256(memory_id)`` to a slot of the parallel arrays; deleted
    memories are absent. Matrices of each identity are loaded on demand and cached.
    """

    session_hash: str
    owner_hash: str
    inode: int
    size: int
    records: int
    position: dict[bytes, int]
    states: npt.NDArray[np.uint8]
    identities: npt.NDArray[np.uint32]
    rows: npt.NDArray[np.uint32]
    digests: list[bytes]
    codes: list[str]
    matrices: dict[int, FloatMatrix] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def live(self) -> int:
        """How many memories have an entry."""
        return len(self.position)

    def record(self, memory_hash: bytes) -> EntryRecord | None:
        """The latest entry of a memory, or ``None``."""
        slot = self.position.get(memory_hash)
        if slot is None:
            return None
        return EntryRecord(
            EntryState(int(self.states[slot])),
            int(self.identities[slot]),
            int(self.rows[slot]),
            memory_hash,
            self.digests[slot],
            self.codes[slot],
        )


def _build_partition(
    session_hash: str,
    owner_hash: str,
    inode: int,
    size: int,
    records: np.ndarray,
) -> IndexPartition:
    position: dict[bytes, int] = {}
    latest: list[int] = []
    for index, (state, memory) in enumerate(zip(records["state"], records["memory"], strict=True)):
        slot = position.get(memory)
        if state == EntryState.DELETED:
            if slot is not None:
                latest[slot] = -1
                del position[memory]
            continue
        if slot is None:
            position[memory] = len(latest)
            latest.append(index)
        else:
            latest[slot] = index
    keep = [index for index in latest if index >= 0]
    chosen = records[np.asarray(keep, dtype=np.int64)] if keep else records[:0]
    position = {bytes(memory): slot for slot, memory in enumerate(chosen["memory"])}
    return IndexPartition(
        session_hash,
        owner_hash,
        inode,
        size,
        int(records.size),
        position,
        chosen["state"].copy(),
        chosen["identity"].copy(),
        chosen["row"].copy(),
        [bytes(digest) for digest in chosen["digest"]],
        [bytes(code).rstrip(b"\0").decode("ascii", "replace") for code in chosen["code"]],
    )


class IndexEngine:
    """Blocking operations on one index folder; thread-safe."""

    def __init__(self, directory: Path, *, capacity: int, lock_timeout: float) -> None:
        self.root = directory
        self.data = directory / INDEX_FOLDER
        self.capacity = capacity
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._identities: list[str] = []
        self._partitions: OrderedDict[tuple[str, str], IndexPartition] = OrderedDict()
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
            else:
                try:
                    document = json.loads(read[0])
                except ValueError as exc:
                    raise DerivedIndexError(f"{self.data / 'format.json'} is corrupt") from exc
                if document.get("format") != _FORMAT or document.get("format_version") != 1:
                    raise DerivedIndexError(
                        f"{self.data} holds an index of another format or version; delete the "
                        "index folder and rebuild"
                    )
        except PersistenceError as exc:
            raise _derived(exc) from exc
        self._opened = True

    def session_directory(self, session_hash: str) -> Path:
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
            raise _derived(exc) from exc
        if read is None:
            return []
        try:
            names = json.loads(read[0])["identities"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValueError("not a list of strings")
        except (ValueError, KeyError, TypeError) as exc:
            raise DerivedIndexError(f"{self.data / 'identities.json'} is corrupt: {exc}") from exc
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
            raise _derived(exc) from exc
        self._identities = names
        return len(names) - 1

    # -- reading ------------------------------------------------------------------------

    def entries_path(self, session_hash: str, owner_hash: str) -> str:
        return f"{self.session_directory(session_hash)}{os.sep}o-{owner_hash}.entries"

    def vectors_path(self, session_hash: str, owner_hash: str, code: int) -> str:
        return f"{self.session_directory(session_hash)}{os.sep}o-{owner_hash}.{code}.f32"

    def partition(self, session_hash: str, owner_hash: str) -> IndexPartition | None:
        """The partition's current entries (cached until its file changes), or ``None``."""
        path = self.entries_path(session_hash, owner_hash)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise DerivedIndexError(f"could not inspect {path}: {exc.strerror}") from exc
        if not stat.S_ISREG(info.st_mode):
            raise DerivedIndexError(f"{path} should be a regular file, not a link or folder")
        key = (session_hash, owner_hash)
        with self._cache_lock:
            cached = self._partitions.get(key)
        whole = info.st_size // ENTRY_BYTES * ENTRY_BYTES
        if cached is not None and cached.inode == info.st_ino and cached.size == whole:
            return cached
        try:
            read = fs.read_file(path, max(whole, 1) + ENTRY_BYTES + (1 << 30))
        except PersistenceError as exc:
            raise _derived(exc) from exc
        if read is None:
            return None
        data, opened = read
        try:
            records, _ = decode_entries(data)
        except ValueError as exc:
            raise DerivedIndexError(f"{path} is corrupt ({exc}); rebuild the index") from exc
        partition = _build_partition(
            session_hash, owner_hash, opened.st_ino, records.size * ENTRY_BYTES, records
        )
        with self._cache_lock:
            self._partitions[key] = partition
            self._partitions.move_to_end(key)
            while len(self._partitions) > 4_096:
                self._partitions.popitem(last=False)
        return partition

    def owner_hashes(self, session_hash: str) -> list[str]:
        """Owners with an entries file in the session (sorted)."""
        try:
            entries = fs.list_directory(self.session_directory(session_hash))
        except PersistenceError as exc:
            raise _derived(exc) from exc
        return sorted(m.group(1) for e in entries if (m := _ENTRIES.match(e.name)))

    def session_hashes(self) -> list[str]:
        """Sessions with a folder in the index."""
        try:
            entries = fs.list_directory(self.data)
        except PersistenceError as exc:
            raise _derived(exc) from exc
        return sorted(m.group(1) for e in entries if (m := _SESSION.match(e.name)))

    def matrix(self, partition: IndexPartition, code: int, dimensions: int) -> FloatMatrix:
        """The float32 rows of identity ``code`` in ``partition`` (loaded once, cached)."""
        with partition.lock:
            cached = partition.matrices.get(code)
            rows_of_code = partition.rows[partition.identities == code].astype(np.int64)
            needed = int(rows_of_code.max(initial=-1)) + 1
            if cached is not None and cached.shape[0] >= needed:
                return cached
            path = self.vectors_path(partition.session_hash, partition.owner_hash, code)
            row_bytes = dimensions * 4
            try:
                read = fs.read_file(path, 1 << 40)
            except PersistenceError as exc:
                raise _derived(exc) from exc
            data = read[0] if read is not None else b""
            rows = len(data) // row_bytes
            if rows < needed:
                raise DerivedIndexError(
                    f"{path} holds {rows} vectors but its entries refer to {needed}; the "
                    "derived index is damaged, rebuild it"
                )
            matrix = np.frombuffer(data, dtype="<f4", count=rows * dimensions).reshape(
                rows, dimensions
            )
            partition.matrices[code] = matrix
            return matrix

    # -- writing (call under the lock) --------------------------------------------------

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
        given here; it is rewritten to the row's position in the partition's vector file.
        Vectors are written (and flushed) before the entries that point at them.
        """
        try:
            fs.ensure_directory(self.session_directory(session_hash))
            first_rows: dict[int, int] = {}
            for code, matrix in (vectors or {}).items():
                first_rows[code] = self._append_rows(
                    self.vectors_path(session_hash, owner_hash, code), matrix, durable
                )
            placed = [
                EntryRecord(
                    r.state,
                    r.identity,
                    first_rows[r.identity] + r.row if r.state is EntryState.READY else NO_VALUE,
                    r.memory_hash,
                    r.digest,
                    r.code,
                )
                for r in records
            ]
            path = self.entries_path(session_hash, owner_hash)
            self._cut_torn(path, ENTRY_BYTES)
            data = b"".join(encode_entry(r) for r in placed)
            with fs.open_append(Path(path)) as (fd, _):
                if durable:
                    fs.append_bytes(fd, data, Path(path))
                else:
                    _write_all(fd, data)
        except PersistenceError as exc:
            raise _derived(exc) from exc
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

        Writes new files beside the old ones and renames them into place; a crash leaves
        either version, both valid.
        """
        partition = self.partition(session_hash, owner_hash)
        if partition is None:
            return
        identities = self.identities()
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
                record = EntryRecord(
                    record.state,
                    record.identity,
                    len(rows),
                    record.memory_hash,
                    record.digest,
                    record.code,
                )
                rows.append(matrix[int(partition.rows[partition.position[memory_hash]])])
            records.append(record)
        directory = self.session_directory(session_hash)
        try:
            for code in range(len(identities)):
                target = self.vectors_path(session_hash, owner_hash, code)
                if code in vectors:
                    fs.atomic_write(Path(target), np.asarray(vectors[code], dtype="<f4").tobytes())
                elif os.path.lexists(target):
                    os.unlink(target)
            fs.atomic_write(
                Path(self.entries_path(session_hash, owner_hash)),
                b"".join(encode_entry(r) for r in records),
            )
            fs.fsync_directory(directory)
        except OSError as exc:
            raise DerivedIndexError(f"could not compact {directory}: {exc}") from exc
        except PersistenceError as exc:
            raise _derived(exc) from exc
        with self._cache_lock:
            self._partitions.pop((session_hash, owner_hash), None)


def identity_dimensions(name: str) -> int:
    """The dimensions of an identity string ``provider/model@version:dims``."""
    return int(name.rsplit(":", 1)[1])


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
