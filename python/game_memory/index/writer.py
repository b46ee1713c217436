"""Writing an index partition's files: appends, compaction, reset (call under the lock).

Functions over their explicit inputs (the layout, the partition as last read, the rows to
keep); the engine reads the current partition first and forgets its caches after. The
order of every write is what makes a crash harmless:

* an append flushes the rows before the entries that point at them, so a reader never
  sees an entry whose row is missing;
* a compaction writes the new generation's row files under a new tag, renames the new
  entries file into place, and only then deletes the old generation's rows, so a crash
  leaves either version whole and a concurrent reader gets the old pair or
  ``PartitionReplacedError``. A crash can leave unreferenced row files and temporary
  files, which may hold the vectors of memories an erase was removing: so a compaction
  (and a reset) first creates the partition's *rewrite mark* ``o-<owner>.rewriting`` and
  deletes it after its last removal, and the next writer of the partition that finds the
  mark removes every file its live entries do not use (:func:`sweep_files`, called by
  ``IndexEngine.tidy``): one ``lstat`` per partition and process, no folder listing.

A rewrite removes the old generation's files by name from a listing of the session folder.
An operation that rewrites many partitions (an erase of a session, the rebuild's removal
of orphans) lists the folder once under the lock and hands each rewrite its owner's names
(``names``): under the lock no other writer adds files to the folder, and what the
operation wrote itself since (entry appends, this rewrite's new generation) is nothing a
rewrite removes, so the names are what a listing made then would find. A listing per
rewrite made an erase of a session of 2,000 NPCs list 4 million names.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from game_memory.durable import fs, portable
from game_memory.errors import CapacityExceededError, DerivedIndexError, PersistenceError
from game_memory.index.entries import (
    ENTRY_BYTES,
    NO_VALUE,
    EntryRecord,
    EntryState,
    encode_entry,
    encode_ready,
    row_checksums,
)
from game_memory.index.layout import (
    ROWS_NAME,
    IndexLayout,
    identity_dimensions,
    leftover_names,
    list_names,
)
from game_memory.index.partition import FloatMatrix, IndexPartition, derived_error, new_tag

__all__ = [
    "ReadyAppend",
    "append_files",
    "append_ready",
    "check_capacity",
    "compact_files",
    "remove_files",
    "sweep_files",
]


class ReadyAppend(NamedTuple):
    """What :func:`append_ready` appended: the entry bytes and the entries file's ``fstat``
    after, the number of the first row written and the row file's ``fstat`` after, and the
    generation tag of the records."""

    data: bytes
    entries: os.stat_result
    first_row: int
    rows: os.stat_result
    tag: int


#: ``rows(code, dimensions)``: the matrix of identity ``code`` of the partition.
Rows = Callable[[int, int], FloatMatrix]


def append_files(
    layout: IndexLayout,
    session_hash: str,
    owner_hash: str,
    current: IndexPartition | None,
    records: list[EntryRecord],
    vectors: dict[int, FloatMatrix] | None,
    *,
    durable: bool,
) -> tuple[list[EntryRecord], bytes, os.stat_result, int]:
    """Append vectors (per identity code) and entry records; return the records with
    their rows, the bytes appended to the entries file, that file's ``fstat`` after and the
    records' generation tag.

    Each ready record's ``row`` is an offset into the ``vectors`` rows of its identity
    given here; it is rewritten to the row's position in the partition's row file.
    ``current`` is the partition as read just before, under the lock (its entries file
    exists, so its folder does: only a first write makes sure of the folder).
    """
    fresh = current is None or not current.records
    tag = new_tag(0) if fresh or current is None else current.tag
    entries = layout.entries_path(session_hash, owner_hash)
    written: list[str] = []
    try:
        if current is None:
            fs.ensure_directory(layout.session_directory(session_hash))
        first_rows: dict[int, int] = {}
        sums: dict[int, list[int]] = {}
        for code, matrix in (vectors or {}).items():
            sums[code] = row_checksums(matrix).tolist()
            path = layout.vectors_path(session_hash, owner_hash, code, tag)
            written.append(path)
            first_rows[code], _ = _append_rows(path, matrix, durable)
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
        data = b"".join(encode_entry(r, tag) for r in placed)
        info = _append_entries(entries, data, durable)
    except BaseException as exc:
        if fresh:
            _remove_unreferenced_rows(entries, written)
        if isinstance(exc, PersistenceError):
            raise derived_error(exc) from exc
        if isinstance(exc, OSError):
            raise DerivedIndexError(f"could not write the vector index: {exc}") from exc
        raise
    return placed, data, info, tag


def append_ready(
    layout: IndexLayout,
    session_hash: str,
    owner_hash: str,
    current: IndexPartition | None,
    code: int,
    matrix: FloatMatrix,
    digests: Sequence[tuple[bytes, bytes]],
    *,
    durable: bool,
) -> ReadyAppend:
    """:func:`append_files` of one ready record per row of ``matrix`` (identity ``code``;
    ``digests``: each memory's hash and content digest), the records framed in one pass
    (``entries.encode_ready``). The same files, order and bytes as :func:`append_files` of
    those records."""
    fresh = current is None or not current.records
    tag = new_tag(0) if fresh or current is None else current.tag
    entries = layout.entries_path(session_hash, owner_hash)
    rows_path = layout.vectors_path(session_hash, owner_hash, code, tag)
    try:
        if current is None:
            fs.ensure_directory(layout.session_directory(session_hash))
        sums = row_checksums(matrix)
        first, rows_info = _append_rows(rows_path, matrix, durable)
        hashes = [hashed for hashed, _ in digests]
        contents = [content for _, content in digests]
        data = encode_ready(code, first, hashes, contents, sums, tag)
        info = _append_entries(entries, data, durable)
    except BaseException as exc:
        if fresh:
            _remove_unreferenced_rows(entries, [rows_path])
        if isinstance(exc, PersistenceError):
            raise derived_error(exc) from exc
        if isinstance(exc, OSError):
            raise DerivedIndexError(f"could not write the vector index: {exc}") from exc
        raise
    return ReadyAppend(data, info, first, rows_info, tag)


def _append_entries(path: str, data: bytes, durable: bool) -> os.stat_result:
    """Append entry records (after the rows they point at); the file's ``fstat`` after.

    A write or fsync that fails (a full disk, an I/O error) cuts the file back to its size
    before, best effort: records of a failed append are never left for a reader."""
    fd, size = _open_whole(path, ENTRY_BYTES)
    try:
        try:
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
        return os.fstat(fd)
    finally:
        os.close(fd)


def _remove_unreferenced_rows(entries: str, rows: Sequence[str]) -> None:
    """After a failed first write of a partition (a fresh generation tag, so no record
    named it before): delete the row files that write created, unless a record reached
    the entries file after all (one whole record: then they are in use, and stay).

    Left in place, such a file was of another generation than the records the next
    write gives the partition, which reads as the leftovers of an interrupted rewrite
    (``IndexEngine.untidy_owners``): the session's status said "damaged" until a rebuild
    after one full disk during a new NPC's first memory. Best effort: a file that cannot
    be deleted stays, as a killed writer's would."""
    try:
        if os.stat(entries).st_size >= ENTRY_BYTES:
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    for path in rows:
        with contextlib.suppress(OSError):
            os.unlink(path)


def compact_files(
    layout: IndexLayout,
    partition: IndexPartition,
    identities: list[str],
    rows: Rows,
    keep_codes: set[int],
    names: Sequence[str] | None = None,
) -> None:
    """Rewrite a partition without superseded records, dead rows or unused identities.

    ``names``: the owner's files in the session folder (``IndexEngine.session_files``), as
    listed under this hold of the lock with nothing but entry appends to the owner's files
    since; ``None`` lists the folder (see the module docstring).
    """
    session_hash, owner_hash = partition.session_hash, partition.owner_hash
    tag = new_tag(partition.tag)
    records: list[EntryRecord] = []
    vectors: dict[int, list[FloatMatrix]] = {}
    for memory_hash in partition.position:
        record = partition.record(memory_hash)
        assert record is not None
        if record.state is EntryState.READY:
            if record.identity not in keep_codes:
                continue
            matrix = rows(record.identity, identity_dimensions(identities[record.identity]))
            kept = vectors.setdefault(record.identity, [])
            kept.append(matrix[record.row])
            record = EntryRecord(
                record.state,
                record.identity,
                len(kept) - 1,
                record.memory_hash,
                record.digest,
                record.code,
                record.checksum,
            )
        records.append(record)
    directory = layout.session_directory(session_hash)
    mark = layout.rewriting_path(session_hash, owner_hash)
    try:
        _create_mark(mark)
        for code, kept in vectors.items():
            target = layout.vectors_path(session_hash, owner_hash, code, tag)
            fs.atomic_write(Path(target), np.asarray(kept, dtype="<f4").tobytes())
        fs.atomic_write(
            Path(layout.entries_path(session_hash, owner_hash)),
            b"".join(encode_entry(r, tag) for r in records),
        )
        _remove_row_files(directory, owner_hash, keep_tag=tag, names=names)
        _remove_mark(mark)
        fs.fsync_directory(directory)
    except OSError as exc:
        raise DerivedIndexError(f"could not compact {directory}: {exc}") from exc
    except PersistenceError as exc:
        raise derived_error(exc) from exc


def remove_files(
    layout: IndexLayout,
    session_hash: str,
    owner_hash: str,
    names: Sequence[str] | None = None,
) -> None:
    """Delete a partition's entries and row files: its memories have no vectors after.

    ``names``: the owner's files in the session folder, as :func:`compact_files` takes them.
    """
    directory = layout.session_directory(session_hash)
    mark = layout.rewriting_path(session_hash, owner_hash)
    try:
        with contextlib.suppress(FileNotFoundError):  # no folder: nothing to remove
            _create_mark(mark)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(layout.entries_path(session_hash, owner_hash))
        _remove_row_files(directory, owner_hash, keep_tag=None, names=names)
        _remove_mark(mark)
        fs.fsync_directory(directory)
    except OSError as exc:
        raise DerivedIndexError(f"could not reset a partition in {directory}: {exc}") from exc
    except PersistenceError as exc:
        raise derived_error(exc) from exc


def sweep_files(
    layout: IndexLayout, session_hash: str, owner_hash: str, keep_tag: int | None
) -> list[str]:
    """Delete what an interrupted rewrite of a partition left: the owner's row files of
    generations other than ``keep_tag`` (the live entries' tag; ``None`` when no entries
    name rows), temporary files of its entries and rows, then its rewrite mark; the names
    deleted. Under the lock (no other writer has one of them open); a reader in another
    process that mapped an old row file keeps its mapping, and one that opens it after
    finds the entries replaced and reads them again (as after a compaction)."""
    directory = layout.session_directory(session_hash)
    try:
        removed = leftover_names(list_names(directory), owner_hash, keep_tag)
        for name in removed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)
        _remove_mark(layout.rewriting_path(session_hash, owner_hash))
        fs.fsync_directory(directory)
    except OSError as exc:
        raise DerivedIndexError(f"could not tidy a partition in {directory}: {exc}") from exc
    except PersistenceError as exc:
        raise derived_error(exc) from exc
    return removed


def check_capacity(partition: IndexPartition | None, new: int, capacity: int) -> None:
    """Raise ``CapacityExceededError`` if ``new`` more memories exceed an owner's capacity."""
    live = partition.live if partition is not None else 0
    if live + new > capacity:
        raise CapacityExceededError(
            f"an owner partition of the vector index would hold {live + new:,} entries, more "
            f"than the index capacity of {capacity:,}; open the index with a larger capacity",
            bound="capacity",
        )


def _remove_row_files(
    directory: Path, owner_hash: str, *, keep_tag: int | None, names: Sequence[str] | None
) -> None:
    """Delete the owner's row files of every generation but ``keep_tag``, and the
    temporary files a writer killed mid atomic write left (they may hold vectors of
    memories an erase is removing; under the lock no other writer has one open); found
    among ``names`` (the owner's files listed under the lock), or a listing of the folder
    when ``None``."""
    leftover = f"o-{owner_hash}."
    for name in list_names(directory) if names is None else names:
        match = ROWS_NAME.match(name)
        other_generation = (
            match is not None
            and match.group(1) == owner_hash
            and int(match.group(3), 16) != keep_tag
        )
        if other_generation or (name.startswith(leftover) and name.endswith(".tmp")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)


def _create_mark(path: str) -> None:
    """Create a partition's rewrite mark (kept if a killed rewrite left it; no link)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | portable.OPEN_FLAGS, 0o644))


def _remove_mark(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _append_rows(path: str, matrix: FloatMatrix, durable: bool) -> tuple[int, os.stat_result]:
    """Append ``matrix``'s rows; the number of the first and the file's ``fstat`` after."""
    row_bytes = int(matrix.shape[1]) * 4
    fd, size = _open_whole(path, row_bytes)
    try:
        _write_all(fd, np.ascontiguousarray(matrix, dtype="<f4").tobytes())
        if durable:
            os.fsync(fd)
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return size // row_bytes, info


def _open_whole(path: str, unit: int) -> tuple[int, int]:
    """Open a partition file for appending (created if missing; links refused), with a torn
    tail (a record or row a killed writer left unfinished) cut back to whole ``unit``s;
    the descriptor and the file's size. A file it creates has its folder fsynced, durable
    writes or not (as before: once per file, so its name outlives a power loss).

    Raises:
        PersistenceError: a link or not a regular file.
        OSError: the file could not be opened, inspected or cut.
    """
    flags = os.O_WRONLY | os.O_APPEND | portable.OPEN_FLAGS
    created = False
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:  # another writer created it meanwhile (not under our lock)
            fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PersistenceError(f"refusing to append to {path}: it is a symbolic link") from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PersistenceError(f"{path} should be a regular file")
        size = info.st_size
        if size % unit:
            size -= size % unit
            os.ftruncate(fd, size)
        if created:
            fs.fsync_directory(Path(os.path.dirname(path)))
    except BaseException:
        os.close(fd)
        raise
    return fd, size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
