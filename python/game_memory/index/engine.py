"""``IndexEngine``: the blocking reads and writes of one derived index folder.

The layout (paths, format, identities) is :mod:`game_memory.index.layout`; the order of
file writes is :mod:`game_memory.index.writer`. Vectors are raw little-endian float32
rows, one file per partition, identity and file generation (``tag``, 8 hex digits, carried
by every entry record), so loading a partition is one read per file and never parses
numbers; searching it is one matrix-vector product. Entries name memories by
``sha256(memory_id)`` and carry a content digest; recall checks both against the
authoritative snapshot, so a record that is orphaned or computed from other content can
never enter a result.

Entries files and row files only grow between compactions, so a reader that already holds
a partition reads just the new tail of each (incremental loads; rows once read are never
read again). A reader that loses a race with a compaction gets
:class:`PartitionReplacedError` and simply reads the partition again.

The index is derived data: keep it outside the save folder; it may be deleted at any time
and rebuilt. A corrupt file raises ``DerivedIndexError`` and never touches the save.
Writers are serialized across processes by a lock; readers take none and ignore torn
tails (a record or row still being written).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.durable.fs import lstat_regular
from game_memory.errors import DerivedIndexError, GameMemoryError, PersistenceError
from game_memory.index import quantized
from game_memory.index.entries import ENTRY_BYTES, EntryRecord, EntryState, decode_entries
from game_memory.index.layout import (
    INDEX_FOLDER,
    IndexLayout,
    codes_leftovers,
    file_owner,
    identity_dimensions,
    leftover_names,
    list_names,
)
from game_memory.index.partition import (
    FloatMatrix,
    IndexPartition,
    PartitionReplacedError,
    RowBuffer,
    derived_error,
    extend_partition,
)
from game_memory.index.row_codes import codes_header, read_codes, rows_digest, write_codes
from game_memory.index.session_codes import record_codes
from game_memory.index.stamps import (
    STAMP_MINIMUM,
    EntriesStamp,
    FileIdentity,
    RowsStamp,
    Stamp,
    file_identity,
    read_stamp,
    remove_stamp,
    stamp_path,
    trusted_records,
    write_stamp,
)
from game_memory.index.writer import (
    append_files,
    append_ready,
    check_capacity,
    compact_files,
    remove_files,
    sweep_files,
)

__all__ = ["INDEX_FOLDER", "IndexEngine", "check_capacity", "identity_dimensions"]

_LOG = logging.getLogger("game_memory.index")
_MAXIMUM_ENTRIES_BYTES = 1 << 32
#: Index partitions kept read (entries and row buffers), least recently used first out.
#: A session-wide recall or ``get_status`` reads every NPC's partition: with 4,096 (until
#: 6 December 2026), a world of 5,000 NPCs re-read them all on every such call (a warm
#: session-wide recall 2.6 s, ``get_status`` 1.9–2.7 s, against 0.57 and 0.7 s at 4,000).
#: A small NPC's cached partition costs about 10 KB (its rows read, not mapped:
#: ``partition.SMALL_ROWS_BYTES``).
_CACHED_PARTITIONS = 16_384
_NO_BUFFERS: dict[int, RowBuffer] = {}  # never written: what a partition without buffers holds
#: ``IndexEngine._tidied`` of a partition found without entries file (and without mark).
_ABSENT = (0, 0, 0)


class IndexEngine(IndexLayout):
    """Blocking operations on one index folder; thread-safe.

    Reads keep bounded caches: at most 16,384 partitions' entries and their row buffers
    (``_CACHED_PARTITIONS``).
    Write methods must be called under :meth:`locked`.
    """

    def __init__(self, directory: Path, *, capacity: int, lock_timeout: float) -> None:
        super().__init__(directory, lock_timeout=lock_timeout)
        self.capacity = capacity
        self._partitions: OrderedDict[tuple[str, str], IndexPartition] = OrderedDict()
        #: Per cached partition, its row buffers by identity code (nested, so dropping a
        #: partition's buffers costs its own few codes, not a pass over every partition's).
        self._row_buffers: dict[tuple[str, str], dict[int, RowBuffer]] = {}
        self._cache_lock = threading.Lock()
        #: Partitions being read whole, each by one thread (``_read_whole``).
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        #: Partitions this engine appended to (stamped at close: ``stamp_written``).
        self._written: set[tuple[str, str]] = set()
        #: Per partition, the entries file this writer found holding no leftover of an
        #: interrupted rewrite (``tidy``): its inode, tag and how many of its records were
        #: seen to hold no tombstone; ``_ABSENT`` when it found no entries file. Used under
        #: the writer lock only.
        self._tidied: dict[tuple[str, str], tuple[int, int, int]] = {}

    # -- reading ------------------------------------------------------------------------

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
        if base is not None and _unchanged(base, info):
            return base
        if base is not None and (
            base.size > whole or (base.records and self._first_tag(path) != base.tag)
        ):
            # Shrunk in place (not something a writer does), or another file that reuses
            # the inode number of a replaced one: read it whole.
            base = None
        if base is None:
            return self._read_whole(session_hash, owner_hash, path)
        try:
            read = fs.read_file(path, _MAXIMUM_ENTRIES_BYTES, offset=base.size)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        if read is None:
            return None
        data, opened = read
        if opened.st_ino != base.inode:
            return self._reload(session_hash, owner_hash, path)
        partition = self._decode(base, data, opened, session_hash, owner_hash, path)
        self._remember(key, partition)
        return partition

    def cached_partition(self, session_hash: str, owner_hash: str) -> IndexPartition | None:
        """The cached partition when its entries file is unchanged since it was read (one
        ``lstat``, as :meth:`partition` makes), else ``None``: nothing is read."""
        try:
            info = lstat_regular(self.entries_path(session_hash, owner_hash))
        except PersistenceError:
            return None
        if info is None:
            return None
        with self._cache_lock:
            cached = self._partitions.get((session_hash, owner_hash))
        return cached if cached is not None and _unchanged(cached, info) else None

    def cached_matrix(
        self, partition: IndexPartition, code: int, dimensions: int
    ) -> FloatMatrix | None:
        """What :meth:`matrix` returns when it would read, verify and stamp nothing (the rows
        are held and every record was checked), else ``None``. Never waits for a lock."""
        needed = partition.rows_needed(code)
        if needed == 0:
            return np.empty((0, dimensions), dtype=np.float32)
        with self._cache_lock:
            buffer = self._buffers((partition.session_hash, partition.owner_hash)).get(code)
        if buffer is None or buffer.tag != partition.tag or buffer.dimensions != dimensions:
            return None
        return buffer.checked_rows(partition, needed)

    def _decode(
        self,
        base: IndexPartition | None,
        data: bytes | memoryview,
        opened: os.stat_result,
        session_hash: str,
        owner_hash: str,
        path: str,
        *,
        own: bool = False,
    ) -> IndexPartition:
        """The partition of ``base`` and the records of ``data`` (the file from ``base``'s end,
        or the whole file): a whole file's leading records a verified stamp vouches for
        (``stamps.py``) are not checked one by one, nor records this writer just encoded
        (``own``)."""
        stamp = read_stamp(stamp_path(path), session_hash, owner_hash) if base is None else None
        trusted = trusted_records(stamp, data, opened) if stamp is not None else 0
        try:
            records, torn = decode_entries(data, trusted, checked=own)
            partition = extend_partition(base, records, session_hash, owner_hash, opened)
        except ValueError as exc:
            raise DerivedIndexError(f"{path} is corrupt ({exc}); rebuild the index") from exc
        whole = memoryview(data)[: len(data) - torn]
        if stamp is not None and trusted and trusted == stamp.entries.records:
            partition.crc = crc32(whole[trusted * ENTRY_BYTES :], stamp.entries.crc)
        else:
            partition.crc = crc32(whole, base.crc if base is not None else 0)
        partition.file = file_identity(opened)
        partition.trusted = trusted if base is None else base.trusted
        partition.stamp = stamp if base is None else base.stamp
        return partition

    def _reload(self, session_hash: str, owner_hash: str, path: str) -> IndexPartition | None:
        with self._cache_lock:
            self._partitions.pop((session_hash, owner_hash), None)
        return self._read_whole(session_hash, owner_hash, path)

    def _read_whole(self, session_hash: str, owner_hash: str, path: str) -> IndexPartition | None:
        """The partition decoded from its whole entries file, mapped rather than copied
        (the columns copy what they keep, ``index/columns.py``; 10k records are 1.3 MB).
        Writers append to an entries file, cut only a torn tail or replace it whole, so the
        records mapped stay in the file while they are decoded.

        One thread reads a partition whole at a time (a search and the front door's
        prefetch of it meet here): a thread that waited takes what the other just read
        when the file did not change meanwhile."""
        key = (session_hash, owner_hash)
        with self._cache_lock:
            loading = self._loading.setdefault(key, threading.Lock())
        try:
            with loading:
                try:
                    info = lstat_regular(path)
                except PersistenceError as exc:
                    raise derived_error(exc) from exc
                with self._cache_lock:
                    cached = self._partitions.get(key)
                if info is not None and cached is not None and _unchanged(cached, info):
                    return cached
                try:
                    with fs.mapped_file(path, _MAXIMUM_ENTRIES_BYTES) as read:
                        if read is None:
                            return None
                        data, opened = read
                        partition = self._decode(None, data, opened, session_hash, owner_hash, path)
                except PersistenceError as exc:
                    raise derived_error(exc) from exc
                self._remember(key, partition)
                # A partition read whole may be a copied session folder's: what its codes
                # mean is judged again if the folder's record changed (one lstat).
                self.codes.recheck(session_hash)
                return partition
        finally:
            with self._cache_lock:
                if self._loading.get(key) is loading:
                    del self._loading[key]

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
                self._row_buffers.pop(evicted, None)

    def matrix(
        self, partition: IndexPartition, code: int, dimensions: int, *, stamp: bool = True
    ) -> FloatMatrix:
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
        with self._cache_lock:
            held = self._row_buffers.setdefault((partition.session_hash, partition.owner_hash), {})
            buffer = held.get(code)
            if buffer is None or buffer.tag != partition.tag or buffer.dimensions != dimensions:
                buffer = held[code] = RowBuffer(partition.tag, dimensions)
        path = self.vectors_path(partition.session_hash, partition.owner_hash, code, partition.tag)
        try:
            with buffer.lock:
                matrix = buffer.load(path, needed).view()
                _trust_stamp(buffer, partition, code)
                checked = buffer.verify(partition, code, path) >= STAMP_MINIMUM and stamp
                rows = (buffer.file, buffer.checked)
                if not buffer.codes_read and needed >= quantized.QUANTIZED_FROM_ROWS:
                    buffer.codes_read = True
                    self._offer_codes(partition, code, dimensions, matrix, buffer)
            # Written once the rows are free: a search waiting for them (a prefetch checked
            # them) goes on while this thread writes and syncs the stamp.
            if checked:
                self._stamp(partition, code, rows)
            matrix.flags.writeable = False  # shared by every reader: read-only
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

    def _offer_codes(
        self,
        partition: IndexPartition,
        code: int,
        dimensions: int,
        matrix: FloatMatrix,
        buffer: RowBuffer,
    ) -> None:
        """Offer the first passes the int8 copy of ``matrix``'s rows kept in their file of
        codes (``quantized.offer``: read on the copier after the first first pass that may
        use a copy found none, and used only when it proves itself theirs,
        ``row_codes.read_codes``). Once per row buffer, on the first read of a large
        partition."""
        path = self.codes_path(partition.session_hash, partition.owner_hash, code, partition.tag)
        held_rows, held = buffer.rows, weakref.ref(buffer)  # not the rows: keyed weakly

        def load() -> quantized.Int8Rows | None:
            copy = read_codes(path, partition, code, dimensions, held_rows)
            if (still := held()) is not None:
                still.codes_unusable = copy is None  # missing or refused: rewritten at close
            return copy

        quantized.offer(matrix, load)

    def keep_codes(self, written: set[tuple[str, str]]) -> int:
        """Write the int8 copy of each large partition's rows to its file of codes (at
        close) when the file is missing or lags its rows (``_codes_behind``), for
        partitions ``written`` (appended to by this engine: their rows are quantized now,
        1.1 µs a row, unless recalls made a copy) and for those whose copy a process's
        recalls began (completed now); how many files were written.
        A file covers every row of its partition as read (a partial copy would be of no use
        to a first pass).

        Under the writer lock, and only for a partition still of the generation read (a
        file of codes holds approximate vectors: it must never outlive its rows, which a
        rewrite removes with their generation). Never raises: the files only speed the
        next open up (``row_codes.py``).
        """
        if not quantized.available():
            return 0
        with self._cache_lock:
            held = [
                (key, code, buffer)
                for key, buffers in self._row_buffers.items()
                for code, buffer in buffers.items()
                if buffer.rows >= quantized.QUANTIZED_FROM_ROWS
            ]
        kept = 0
        for key, code, buffer in held:
            try:
                kept += self._keep_codes(key, code, buffer, key in written)
            except (GameMemoryError, OSError) as exc:  # a busy lock included
                _LOG.info("int8 codes were not written at close (%s)", exc)
        return kept

    def _keep_codes(
        self, key: tuple[str, str], code: int, buffer: RowBuffer, written: bool
    ) -> bool:
        session_hash, owner_hash = key
        path = self.codes_path(session_hash, owner_hash, code, buffer.tag)
        header = None if buffer.codes_unusable else codes_header(path)
        on_disk = header[1] if header is not None and header[0] == buffer.dimensions else 0
        if buffer.rows - on_disk < _codes_behind(buffer.rows):
            return False  # a cheap look first: most closes have nothing to write
        if not written and not quantized.begun(buffer.array[: buffer.rows]):
            return False  # read only, and its recalls did not start a copy: not worth one
        with self.locked():
            partition = self.partition(session_hash, owner_hash)
            if partition is None or partition.tag != buffer.tag:
                return False  # rewritten since: its codes would be another generation's
            matrix = self.cached_matrix(partition, code, buffer.dimensions)
            if matrix is None:
                return False  # rows not all checked: a copy must be of checked rows
            if matrix.shape[0] - on_disk < _codes_behind(matrix.shape[0]):
                return False
            copy = quantized.copy_of(matrix)
            if copy is not None and copy.rows != matrix.shape[0] and quantized.copy_now(matrix):
                copy = quantized.copy_of(matrix)  # a copy begun by recalls: completed
            if copy is None or copy.rows != matrix.shape[0]:
                copy = quantized.quantize(matrix)  # held by nobody once written
            if copy is None:
                return False
            self._remove_codes_leftovers(session_hash, owner_hash)
            write_codes(path, copy, rows_digest(partition, code, copy.rows))
            return True

    def _remove_codes_leftovers(self, session_hash: str, owner_hash: str) -> None:
        """Delete the temporary files of the owner's files of codes that a close killed
        midway left (under the lock: nobody is writing one; they hold codes of vectors)."""
        directory = self.session_directory(session_hash)
        for name in codes_leftovers(list_names(directory), owner_hash):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)

    def _stamp(
        self, partition: IndexPartition, code: int, checked: tuple[FileIdentity | None, int]
    ) -> None:
        """Record that ``partition``'s records and ``code``'s rows were checked in full
        (``checked``: the row file's identity and how many of its rows were checked, as
        the row buffer held them)."""
        file, count = checked
        if partition.file is None or file is None or count != partition.records:
            return
        rows = {code: RowsStamp(partition.tag, file, count)}
        with self._cache_lock:
            held = self._buffers((partition.session_hash, partition.owner_hash))
            others = [(number, other) for number, other in held.items() if number != code]
        for other_code, other in others:
            if other.file is not None and other.tag == partition.tag:
                rows[other_code] = RowsStamp(
                    other.tag, other.file, min(other.checked, partition.records)
                )
        entries = EntriesStamp(partition.file, partition.records, partition.crc)
        path = stamp_path(self.entries_path(partition.session_hash, partition.owner_hash))
        write_stamp(path, partition.session_hash, partition.owner_hash, Stamp(entries, rows))

    def _first_tag(self, path: str) -> int | None:
        """The vector-file tag of an entries file's first record (``None`` if it has none)."""
        try:
            fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
        except OSError:
            return None
        try:
            head = portable.pread(fd, 4, 112)
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

        The rows are read from disk again into a scratch buffer, not taken from the cache,
        so damage to rows this process had already loaded is found too.

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
            self._verify_rows(partition, code, identity_dimensions(identities[code]))

    def _verify_rows(self, partition: IndexPartition, code: int, dimensions: int) -> None:
        needed = partition.rows_needed(code)
        if needed == 0:
            return
        path = self.vectors_path(partition.session_hash, partition.owner_hash, code, partition.tag)
        scratch = RowBuffer(partition.tag, dimensions)
        try:
            scratch.load(path, needed)
            scratch.verify(partition, code, path)
        except FileNotFoundError:
            if self._replaced(partition):
                raise PartitionReplacedError(
                    "the partition was compacted while it was verified; verify it again"
                ) from None
            raise DerivedIndexError(
                f"{path} is missing although entries refer to it; the derived index is "
                "damaged, rebuild it"
            ) from None

    # -- writing (call under the lock) --------------------------------------------------

    def is_tidy(self, session_hash: str, owner_hash: str, current: IndexPartition | None) -> bool:
        """Whether this writer already found ``current`` (the partition as just read, under
        the lock) free of what an interrupted rewrite leaves (see :meth:`tidy`): the same
        entries file, grown since by records none of which is a tombstone. Touches no file;
        ``False`` for a partition without entries."""
        if current is None:
            return False
        key = (session_hash, owner_hash)
        mark = self._tidied.get(key)
        if mark is None or mark[0] != current.inode or mark[1] != current.tag:
            return False
        seen = mark[2]
        if seen == current.records:
            return True
        if seen > current.records or bool((current.states[seen:] == EntryState.DELETED).any()):
            return False  # tombstones another writer appended: an erase, maybe killed
        self._tidied[key] = (current.inode, current.tag, current.records)
        return True

    def tidy(
        self,
        session_hash: str,
        owner_hash: str,
        current: IndexPartition | None,
        *,
        sweep: bool = False,
    ) -> IndexPartition | None:
        """``current`` (the partition as just read, under the lock) once nothing is left of
        a rewrite that a killed writer interrupted; the partition as it is then.

        An erase appends tombstones, then rewrites the partition (``compact``): new row
        files, the entries file, then the old generation's files are deleted. Killed before
        the rewrite, the tombstones are there and the erased rows with them: the partition
        is compacted now. Killed during it, the rewrite mark is there and so may be row
        files of another generation and temporary files, holding the erased vectors: the
        owner's files the live entries do not use are deleted (``writer.sweep_files``).

        The first use of a partition by this writer, and the first after another writer
        replaced its entries file or appended tombstones, costs an ``lstat`` of the mark
        (and a scan of the records for tombstones); later appends cost a dictionary
        lookup (:meth:`is_tidy`). With ``sweep`` the files are looked for by a listing of
        the folder even without a mark (a check's repair: the mark came with this rule).
        """
        if not sweep and self.is_tidy(session_hash, owner_hash, current):
            return current
        key = (session_hash, owner_hash)
        if current is not None and bool((current.states == EntryState.DELETED).any()):
            self.compact(session_hash, owner_hash, set(range(len(self.identities()))))
            current = self.partition(session_hash, owner_hash)
        elif sweep or os.path.lexists(self.rewriting_path(session_hash, owner_hash)):
            keep = current.tag if current is not None and current.records else None
            removed = sweep_files(self, session_hash, owner_hash, keep)
            if removed:
                _LOG.info(
                    "removed %d file(s) an interrupted rewrite of a partition left in %s",
                    len(removed),
                    self.session_directory(session_hash),
                )
        self._tidied[key] = (
            (current.inode, current.tag, current.records) if current is not None else _ABSENT
        )
        return current

    def untidy_owners(self, session_hash: str) -> list[str]:
        """The session's owners whose files hold what an interrupted rewrite left (see
        :meth:`tidy`): tombstones not compacted away, a rewrite mark, row files of a
        generation the entries do not name or temporary files of entries or rows (sorted).

        An owner with no entries file counts when a rewrite mark, row files or files of
        codes (of any generation) or temporary files of them are left: what an erase
        killed midway leaves, a first append killed before its entries, or the files of
        codes an erase by a build that predates them left when it deleted the entries and
        rows. They may hold erased memories' vectors, and nothing else ever removes them
        (no entries name them), so the session reads as damaged until an erase or a rebuild
        does.

        One listing of the session folder and the partitions as :meth:`partition` reads
        them, without the lock: a rewrite (or an owner's first append) in progress shows the
        same, so confirm under the lock. A partition that cannot be read is left to
        :meth:`verify_partition`.
        """
        names: dict[str, list[str]] = {}
        for name in list_names(self.session_directory(session_hash)):
            owner = file_owner(name)
            if owner is not None:
                names.setdefault(owner, []).append(name)
        found = []
        for owner_hash, files in sorted(names.items()):
            marked = f"o-{owner_hash}.rewriting" in files
            try:
                partition = self.partition(session_hash, owner_hash)
            except DerivedIndexError:
                continue
            if partition is None:
                if marked or leftover_names(files, owner_hash, None):
                    found.append(owner_hash)
                continue
            keep = partition.tag if partition.records else None
            if (
                marked
                or leftover_names(files, owner_hash, keep, codes=False)
                or bool((partition.states == EntryState.DELETED).any())
            ):
                found.append(owner_hash)
        return found

    def _tidied_after(
        self, key: tuple[str, str], clean: bool, info: os.stat_result, tag: int
    ) -> None:
        """After this writer appended records (none a tombstone) to a partition it found
        tidy (``clean``): the entries file as it is now (``info``) is tidy too."""
        if clean:
            self._tidied[key] = (info.st_ino, tag, info.st_size // ENTRY_BYTES)

    def _was_tidy(self, key: tuple[str, str], current: IndexPartition | None) -> bool:
        if current is None:
            return self._tidied.get(key) == _ABSENT
        return self.is_tidy(key[0], key[1], current)

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

        See :func:`~game_memory.index.writer.append_files`: rows are flushed before the
        entries that point at them. The partition is not tidied (:meth:`tidy`): a writer
        of memories' entries calls that first.
        """
        current = self.partition(session_hash, owner_hash)
        return self.append_to(current, session_hash, owner_hash, records, vectors, durable)

    def append_to(
        self,
        current: IndexPartition | None,
        session_hash: str,
        owner_hash: str,
        records: list[EntryRecord],
        vectors: dict[int, FloatMatrix] | None,
        durable: bool,
    ) -> list[EntryRecord]:
        """:meth:`append` onto ``current``, the partition as :meth:`partition` returned it
        under this hold of the lock (a writer that read it already: nothing appends
        meanwhile)."""
        key = (session_hash, owner_hash)
        self._written.add(key)
        clean = self._was_tidy(key, current)
        placed, data, info, tag = append_files(
            self, session_hash, owner_hash, current, records, vectors, durable=durable
        )
        if records:
            self._tidied_after(
                key, clean and all(r.state is not EntryState.DELETED for r in records), info, tag
            )
        if current is not None:
            self._install(current, data, info)
        return placed

    def append_ready(
        self,
        current: IndexPartition | None,
        session_hash: str,
        owner_hash: str,
        code: int,
        matrix: FloatMatrix,
        digests: list[tuple[bytes, bytes]],
        durable: bool,
    ) -> None:
        """:meth:`append_to` of one ready record per row of ``matrix`` (``digests``: each
        memory's hash and content digest), framed in one pass (``writer.append_ready``)."""
        key = (session_hash, owner_hash)
        self._written.add(key)
        clean = self._was_tidy(key, current)
        written = append_ready(
            self, session_hash, owner_hash, current, code, matrix, digests, durable=durable
        )
        if digests:
            self._tidied_after(key, clean, written.entries, written.tag)
        if current is None:
            return
        grown = self._install(current, written.data, written.entries)
        if grown is None:
            return
        with self._cache_lock:
            buffer = self._buffers((session_hash, owner_hash)).get(code)
        if buffer is not None and buffer.tag == grown.tag:
            # Held already: the next search finds the rows without a read or a check.
            path = self.vectors_path(session_hash, owner_hash, code, grown.tag)
            buffer.take_written(path, written.first_row, written.rows, current, grown)

    def _install(
        self, current: IndexPartition, data: bytes, info: os.stat_result
    ) -> IndexPartition | None:
        """Cache ``current`` grown by the entry bytes this writer just appended, as a read
        of the file would (``_decode`` of the same bytes), without reading them back.

        Only when the file (``info``: its ``fstat`` after the write) is ``current``'s plus
        exactly ``data`` (same inode, that size): under the writer lock nothing else
        appends, so that is what a read would find; otherwise nothing is installed and the
        next read reads the file as before. The records are this writer's own encoding, so
        they are not checked again (a read of the file checks them). Returns the partition
        installed, or ``None``.
        """
        if info.st_ino != current.inode or info.st_size != current.size + len(data):
            return None
        path = self.entries_path(current.session_hash, current.owner_hash)
        try:
            grown = self._decode(
                current, data, info, current.session_hash, current.owner_hash, path, own=True
            )
        except DerivedIndexError:
            return None  # what the next read will find and name
        self._remember((current.session_hash, current.owner_hash), grown)
        return grown

    def close_upkeep(self) -> None:
        """At close: stamp the partitions written (:meth:`stamp_written`), then keep the
        int8 codes of the large ones (:meth:`keep_codes`). Never raises: both only speed
        the next open up (a writer lock another process holds past the lock timeout, or
        a disk that fails, leaves them for a later close)."""
        written = set(self._written)
        for step in (self.stamp_written, lambda: self.keep_codes(written)):
            try:
                step()
            except (GameMemoryError, OSError) as exc:
                _LOG.info("the index's upkeep at close was skipped (%s)", exc)

    def stamp_written(self) -> int:
        """Check and stamp every partition this engine appended to (at close), so the next
        open of the unchanged files checks nothing (``stamps.py``); how many were stamped.

        Under the writer lock (no append runs meanwhile): the partition is read as it is
        now, its entries file and the row files of its ready records are fsynced (writes are
        not durable by default, and a stamp must never outlive the bytes it vouches for:
        after a power loss they might read back as zeros under the same size), then every
        row not checked yet is checked against its checksum, as a reader's first recall
        would, and the stamp names the files as they are. Never raises: a stamp is an
        optimisation, and damage it meets is left for the next reader to find and name.
        """
        stamped = 0
        if not self._written:
            return 0
        identities = self.identities()
        with self.locked():
            for session_hash, owner_hash in sorted(self._written):
                try:
                    stamped += self._stamp_now(session_hash, owner_hash, identities)
                except (DerivedIndexError, PersistenceError, OSError) as exc:
                    _LOG.info("a partition was not stamped at close (%s)", exc)
            self._written.clear()
        return stamped

    def _stamp_now(self, session_hash: str, owner_hash: str, identities: list[str]) -> bool:
        partition = self.partition(session_hash, owner_hash)
        if partition is None or partition.records < STAMP_MINIMUM or partition.file is None:
            return False
        ready = partition.states == EntryState.READY
        codes = sorted(set(partition.identities[ready].tolist()))
        if any(code >= len(identities) for code in codes):
            return False  # what a reader names as damage
        paths = [self.entries_path(session_hash, owner_hash)]
        paths += [
            self.vectors_path(session_hash, owner_hash, code, partition.tag) for code in codes
        ]
        fs.sync_all([Path(path) for path in paths], [])
        info = fs.lstat_regular(paths[0])
        if info is None or file_identity(info) != partition.file:
            return False  # changed since it was read: the next reader checks it
        buffers: list[tuple[int, FileIdentity, int]] = []
        for code in codes:
            self.matrix(partition, code, identity_dimensions(identities[code]), stamp=False)
            with self._cache_lock:
                buffer = self._buffers((session_hash, owner_hash)).get(code)
            if buffer is None or buffer.checked != partition.records or buffer.file is None:
                return False
            buffers.append((code, buffer.file, buffer.checked))
        rows = {code: RowsStamp(partition.tag, file, checked) for code, file, checked in buffers}
        entries = EntriesStamp(partition.file, partition.records, partition.crc)
        path = stamp_path(paths[0])
        return write_stamp(path, session_hash, owner_hash, Stamp(entries, rows))

    def compact(
        self,
        session_hash: str,
        owner_hash: str,
        keep_codes: set[int],
        names: list[str] | None = None,
    ) -> bool:
        """Rewrite a partition without superseded records, dead rows or unused identities;
        whether it was rewritten.

        The session folder's vectors of another model (``session_codes.py``) are dropped
        too, whatever ``keep_codes`` says. A crash leaves either version whole; a
        concurrent reader either sees the old entries with the old rows or gets
        :class:`PartitionReplacedError`. A partition with nothing to drop is left as it is
        (:meth:`_compacted`: a rewrite would write the same records and rows under a new
        tag), so a rebuild that found nothing to change rewrites no partition.

        ``names``: the owner's files, from a :meth:`session_files` made under this hold of
        the lock with nothing but entry appends to the owner's files since (an operation
        over a session's partitions lists its folder once); ``None`` lists the folder.
        """
        partition = self.partition(session_hash, owner_hash)
        if partition is None:
            return False
        verdict = self.codes.verdict(session_hash)
        # Another model's vectors (a copied session folder, ``session_codes.py``) never
        # survive a rewrite: their memories are embedded again by the next rebuild.
        keep = set() if verdict.damaged else keep_codes - verdict.foreign
        identities = self.identities()
        if names is None:
            names = self.session_files(session_hash).get(owner_hash, [])
        if self._compacted(partition, keep, names, identities):
            return False
        compact_files(
            self,
            partition,
            identities,
            lambda code, dimensions: self.matrix(partition, code, dimensions),
            keep,
            names,
        )
        self._forget(session_hash, owner_hash)
        self._tidied.pop((session_hash, owner_hash), None)
        return True

    def _compacted(
        self, partition: IndexPartition, keep: set[int], names: list[str], identities: list[str]
    ) -> bool:
        """Whether a compaction of ``partition`` keeping identity codes ``keep`` would write
        what is there already: one record per memory (no superseded record, no tombstone),
        ready ones only of codes kept, each code's rows numbered 0.. in record order, row
        files of the entries' generation holding exactly those rows (no dead row a killed
        append left), an entries file without a torn tail, and no other file of the owner
        among ``names`` (another generation's rows, a temporary file, a rewrite mark).
        Costs an ``lstat`` per file and a pass over the records; any doubt says no (the
        compaction then runs, and names what it meets)."""
        session_hash, owner_hash = partition.session_hash, partition.owner_hash
        if partition.records != partition.live:
            return False
        expected = {f"o-{owner_hash}.entries"}
        if not _regular_of_size(self.entries_path(session_hash, owner_hash), partition.size):
            return False
        ready = partition.states == EntryState.READY
        codes, rows = partition.identities[ready], partition.rows[ready]
        for code in np.unique(codes).tolist():
            if code not in keep or code >= len(identities):
                return False
            numbered = rows[codes == code]
            if not np.array_equal(numbered, np.arange(numbered.size, dtype=numbered.dtype)):
                return False
            path = self.vectors_path(session_hash, owner_hash, code, partition.tag)
            row_bytes = identity_dimensions(identities[code]) * 4
            if not _regular_of_size(path, numbered.size * row_bytes):
                return False
            expected.add(os.path.basename(path))
            expected.add(
                os.path.basename(self.codes_path(session_hash, owner_hash, code, partition.tag))
            )
        return expected.issuperset(names)

    def session_files(self, session_hash: str) -> dict[str, list[str]]:
        """The session folder's partition files per owner hash, from one listing: entries,
        row files and their codes, their temporary files and rewrite marks (not stamps),
        of owners with an entries file or not (``layout.file_owner``). Under the lock it
        stays true but for what this writer writes itself."""
        files: dict[str, list[str]] = {}
        for name in list_names(self.session_directory(session_hash)):
            owner = file_owner(name)
            if owner is not None:
                files.setdefault(owner, []).append(name)
        return files

    def claim_session(self, session_hash: str, code: int) -> None:
        """Make the session folder's record name identity ``code`` as the table does, before
        vectors of ``code`` are written there (under the lock; ``session_codes.py``).

        A dictionary lookup once this process has recorded or read it. Otherwise the record
        is read again; when it names some code as another model's (a copied session
        folder), the partitions holding such vectors are compacted without them first, and
        only then is the record rewritten with the table: a kill in between leaves the old
        record, which still disowns whatever vectors are left, and the next write drops
        them. A folder without a record (an earlier release's, or a new one) gets one.

        Raises:
            DerivedIndexError: the folder, a partition or the record could not be written.
        """
        held = self.codes.cached(session_hash)
        if held is not None and held.vouches(code):
            return
        verdict = self.codes.judge(session_hash)
        if verdict.vouches(code):
            return
        table = self.identities()
        if not verdict.agrees:
            keep = set() if verdict.damaged else set(range(len(table))) - verdict.foreign
            dropped = 0
            for owner_hash, names in sorted(self.session_files(session_hash).items()):
                partition = self.partition(session_hash, owner_hash)
                if partition is not None and _holds_other(partition, keep):
                    self.compact(session_hash, owner_hash, keep, names)
                    dropped += 1
            _LOG.warning(
                "dropped another embedding model's vectors from %d partition(s) of %s before "
                "writing there; a rebuild embeds their memories again",
                dropped,
                self.session_directory(session_hash),
            )
        path = self.codes.path(session_hash)
        try:
            fs.ensure_directory(path.parent)
            file = record_codes(path, table)
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        except OSError as exc:
            raise DerivedIndexError(
                f"could not write {path} ({exc.strerror or exc}); it is derived data: delete "
                "it if it is not a file, then run the rebuild"
            ) from exc
        self.codes.recorded(session_hash, file, table)

    def reset_partition(
        self, session_hash: str, owner_hash: str, names: list[str] | None = None
    ) -> None:
        """Delete a partition's entries and row files: its memories have no vectors after.

        Derived data only; the rebuild uses it to recover from a damaged partition.
        ``names``: the owner's files, as :meth:`compact` takes them (``None``: a listing).
        """
        remove_files(self, session_hash, owner_hash, names)
        remove_stamp(stamp_path(self.entries_path(session_hash, owner_hash)))
        self._forget(session_hash, owner_hash)
        self._tidied[(session_hash, owner_hash)] = _ABSENT

    def _buffers(self, key: tuple[str, str]) -> dict[int, RowBuffer]:
        """The row buffers held for a partition (empty when none; call under the cache lock)."""
        return self._row_buffers.get(key, _NO_BUFFERS)

    def _forget(self, session_hash: str, owner_hash: str) -> None:
        """Drop the cached versions of a partition that was replaced or deleted."""
        with self._cache_lock:
            self._partitions.pop((session_hash, owner_hash), None)
            self._row_buffers.pop((session_hash, owner_hash), None)


def _regular_of_size(path: str, size: int) -> bool:
    """Whether ``path`` is a regular file (not a link) of exactly ``size`` bytes."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == size


def _holds_other(partition: IndexPartition, keep: set[int]) -> bool:
    """Whether ``partition`` has ready records of identity codes not in ``keep``."""
    ready = partition.states == EntryState.READY
    return bool(set(partition.identities[ready].tolist()) - keep)


def _codes_behind(rows: int) -> int:
    """How far a file of codes may lag its rows before a close writes it again: an eighth
    of them, at least ``STALE_ROWS``. A lagging copy costs little (the rows after it are
    scored beside it, and once ``STALE_ROWS`` wait the copier extends it in place, 1.1 µs a
    row), while rewriting 100k rows' codes made a session's close 100 ms longer."""
    return max(quantized.STALE_ROWS, rows // 8)


def _unchanged(cached: IndexPartition, info: os.stat_result) -> bool:
    """Whether ``info`` (an ``lstat`` of the entries file) is the file ``cached`` was read
    from, as it was: the same inode, the same whole records, the same change time."""
    return (
        cached.inode == info.st_ino
        and cached.size == info.st_size // ENTRY_BYTES * ENTRY_BYTES
        and cached.changed == info.st_ctime_ns
    )


def _trust_stamp(buffer: RowBuffer, partition: IndexPartition, code: int) -> None:
    """Take the rows a verified stamp vouches for as checked (see ``stamps.py``): only for
    the very row file that was checked, and records the stamp also vouched for."""
    stamp = partition.stamp
    if stamp is None or buffer.file is None:
        return
    rows = stamp.rows.get(code)
    if rows is None or rows.tag != partition.tag or rows.file != buffer.file:
        return
    if rows.checked <= partition.trusted and rows.checked > buffer.checked:
        buffer.checked = rows.checked
