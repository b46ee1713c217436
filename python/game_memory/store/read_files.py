"""Read files: what a partition's reads derive from its records, persisted beside the save.

Opening a large partition used to decode every record into a ``GameMemory`` and tokenize
every text before the first recall could answer. A partition's **read files** keep what a
recall needs instead, for its first memories (in append order), as a **chain of parts**:
``.game-memory/read/s-<sha256(session)>/o-<sha256(owner)>.read`` (part 0, from the first
memory) and ``o-<sha256(owner)>.<n>.read`` (part ``n``), each covering the ``count``
memories from its ``start``, the memories after those of the part before it, whose header
CRC-32 it names (``previous``). A part holds, for its memories:

* where each record is (file, offset, length), so a memory is decoded only when it is
  handed out (``lazy.py``);
* its id, ``sha256(id)`` and content digest (the derived vector index joins on them);
* the visibility columns (``columns.py``, with the chain's code tables as of its end: each
  part's tables extend the tables of the part before), its postings and token counts
  (``postings.py``; document numbers are positions in the partition), and the
  belief/consolidation scan of ``view.py`` as of its end.

While the store is open, new memories cost a new part of their own size, never a rewrite
of the partition's (parts are merged as a binary counter). Closing the store leaves a
partition of up to ``read_path.CLOSING_MERGE_MEMORIES`` memories as one part, since a load
maps a lone part and copies a chain's arrays; a larger one gets a part for what the chain
does not cover (``read_path.persist``).

It is **derived, disposable and never trusted over the save**. It names every file it was
derived from (the owner's pack ranges and log segments) with its device, inode, the byte
range covered and the CRC-32 of those bytes; :func:`load_read_file` uses it only if every
such file still holds exactly those bytes (the CRC is computed again from the file, unless
the file is the very file it was computed from and was not written to since: same device,
inode, size, modification and change time; a copy of the save, of other inodes, passes by
its CRC), the segments after the first are unchanged in size, and the read file's own
checksums hold.
Anything else (a file replaced by an erase or a compaction, damage, another format, a cut
or foreign read file) makes it ignored: the partition is read from its records as before,
and a new read file replaces it. Records appended since it was written are read from the
logs. The ledger check of every read (``reader.py``) is unchanged, and every memory handed
out is read from the save and checked there. Deleting the ``read`` folder is always safe.
A partition's read files go with it: an erase or compaction that rewrites it removes them,
an erase that finds its records already gone (erased by a build that predates read files)
removes them too, and ``compact`` removes those of every partition with neither records nor
ledger intents, and the folders of sessions the save no longer holds
(:func:`remove_unheld_read_files`): they hold the erased memories' ids and text.

Written atomically (temporary file, fsync, rename), so a kill or a power loss leaves the
old file, the new one, or a temporary file readers never look at.

**Verified stamps.** Computing the CRC-32 of every array is most of an open's cost. After a
load has checked them all, a stamp ``o-<sha256(owner)>.verified`` beside the read file
records the read file's identity (device, inode, size, modification and change times, as
``fstat`` saw it before the check) and its header's CRC-32; a later load of the very same
file (equal identity and header CRC) skips the arrays' CRCs and the checks that scan an
array's values (postings and tags name memories the part holds, locations name files it
covers: the checked load made them on these very bytes). The stamp is written only after
the read file is fsynced (its bytes as checked are then durable: a power loss cannot give
the stamped file other bytes) and only if the file's identity did not change while it was
checked and synced, and only while the partition still has records (a read file left of an
erased partition is never stamped); the stamp itself is written atomically and durably
(temporary file, fsync, rename, folder fsync) and carries its own CRC-32. A partition's
load hands the stamp to the store's read-file thread (``later``): its three fsyncs stay off
the first recall after a load (a load of 10k memories after a session that appended took
21.8 ms with them and 10.7 without, where an fsync takes 2 ms), and the thread stamps the
file only if it still has the identity the load checked, or the store does as it closes
(``upkeep.py``). Any write to the read file moves its change time (user code cannot set it
back), and a replaced file is another inode: either way the stamp no longer matches and the
next load checks everything again, then stamps anew. A write moves the change time only to
the file system's clock tick, which can be coarse (a few ms; 2 s on FAT), so a file changed
less than :data:`SETTLED_NS` before the load is not stamped: a write in the very tick of
its last change could leave its identity as it was. A missing, damaged or mismatching stamp
is simply a full check. What a stamp cannot see is damage that leaves the file's size and
times unchanged (a disk returning other bytes), as for the save files a read file covers
(``Covered.unchanged``); deleting the stamps (or the ``read`` folder) brings the full check
back.

Layout: ``GMREAD01`` (8) · header length u32 · CRC-32 of the header u32 · header (JSON) ·
arrays (each at its offset from the end of the header, with its own CRC-32). Format 4,
whose header names the tokenizer its postings come from (``tokenizer.TOKENIZER_ID``; another
is ignored and rebuilt, as formats 3, tokenized before 7 December 2026, and 2, one file per
partition rewritten whole, are). A stamp:
``GMRSTMP1`` (8) · device, inode, size u64 · mtime_ns, ctime_ns i64 · header CRC-32 u32 ·
CRC-32 of the preceding 52 bytes u32.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from game_memory.durable import fs, portable
from game_memory.durable.checksum import crc32
from game_memory.durable.names import segment_path
from game_memory.errors import PersistenceError
from game_memory.store.descriptors import out_of_descriptors
from game_memory.store.packed_ids import PackedIds, unpacked_ids
from game_memory.store.packs import read_pack_index
from game_memory.store.postings import encode_terms
from game_memory.store.read_stamps import (
    Identity,
    map_file,
    read_stamp,
    stamp_path,
    stamp_unchanged,
    write_stamp,
)
from game_memory.store.tokenizer import TOKENIZER_ID

__all__ = [
    "COLUMN_NAMES",
    "READ_FOLDER",
    "SETTLED_NS",
    "Covered",
    "Later",
    "Part",
    "ReadFile",
    "encode_terms",
    "file_crc",
    "file_times",
    "header_crc_of",
    "load_read_file",
    "read_file_path",
    "read_folders_real",
    "read_stamp",
    "remove_parts",
    "remove_read_files",
    "remove_unheld_read_files",
    "stamp_path",
    "unheld_read_files",
    "write_read_file",
]

#: Where a load hands the upkeep of derived files it need not wait for (jobs that never
#: raise): the file store's ``upkeep.Upkeep``, drained by its read-file thread.
Later = Callable[[Callable[[], object]], object]

READ_FOLDER = "read"
#: 4 since 7 December 2026: text that is not ASCII tokenizes otherwise (NFKC, marks,
#: Hangul: ``tokenizer.py``), so the postings of a format-3 file may be stale; it is rebuilt.
FORMAT_VERSION = 4
_MAGIC = b"GMREAD01"
_HEAD = struct.Struct("<8sII")
_MAXIMUM_BYTES = 1 << 31
_READ_BUFFER = 1 << 18
#: The largest file :func:`file_crc` maps (a record file is rolled over long before).
_MAXIMUM_MAPPED = 1 << 40
_LOG = logging.getLogger("game_memory.store")
_TABLES = ("timelines", "scopes", "beliefs", "tags")

#: A session's folder of read files (``s-<sha256(session)>``) and an owner's file in it (a
#: part, its stamps, a temporary file of either: ``o-<sha256(owner)>.``...).
_SESSION_NAME = re.compile(r"^s-([0-9a-f]{64})$")
_OWNER_FILE = re.compile(r"^o-([0-9a-f]{64})\.")

#: A read file is stamped only if its change time is at least this old (ns) when a load
#: takes its identity: later writes then land on a later clock tick and move it.
SETTLED_NS = 2_000_000_000


@dataclass(frozen=True, slots=True)
class Covered:
    """One file a read file was derived from: its name in the session folder, identity, the
    byte range covered (a pack's owner range, or a log segment from byte 0) and its CRC-32,
    and the file's size, modification and change times (ns) when that CRC was computed."""

    name: str
    device: int
    inode: int
    start: int
    end: int
    crc: int
    size: int = -1
    modified: int = 0
    changed: int = 0

    def unchanged(self, path: str) -> bool:
        """Whether ``path`` is this very file, not written to since its CRC was computed
        (same device, inode, size and both times: every write moves the change time)."""
        try:
            info = os.lstat(path)
        except OSError:
            return False
        return self.size >= 0 and (
            info.st_dev,
            info.st_ino,
            info.st_size,
            info.st_mtime_ns,
            info.st_ctime_ns,
        ) == (self.device, self.inode, self.size, self.modified, self.changed)


def file_times(path: str) -> tuple[int, int, int]:
    """``(size, mtime_ns, ctime_ns)`` of ``path`` (``(-1, 0, 0)`` if it cannot be seen):
    taken *before* its CRC is computed, so a write during the CRC is never vouched for."""
    try:
        info = os.lstat(path)
    except OSError:
        return (-1, 0, 0)
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns)


#: The column arrays a part holds (``columns.py``'s export, sliced to the part).
COLUMN_NAMES = (
    "ticks",
    "importance",
    "timeline_codes",
    "has_expiry",
    "expiry_ticks",
    "scope_codes",
    "kind_codes",
    "belief_codes",
)


@dataclass(frozen=True, slots=True)
class Part:
    """What one part of a read-file chain holds (see the module docstring).

    ``columns`` are the arrays named :data:`COLUMN_NAMES` (one value per memory) and
    ``tag_offsets``/``tag_documents`` (per tag of ``tables["tags"]``, the positions holding
    it, ascending); ``term_blob``/``term_offsets`` are the sorted terms (UTF-8, byte order),
    ``posting_*`` their documents (positions) and frequencies, ``lengths`` the token counts.
    """

    start: int
    count: int
    files: tuple[Covered, ...]
    ids: Sequence[str]
    location_files: npt.NDArray[np.uint32]
    location_offsets: npt.NDArray[np.int64]
    location_lengths: npt.NDArray[np.uint32]
    hashes: bytes | memoryview
    digests: bytes | memoryview
    columns: dict[str, npt.NDArray[Any]]
    tables: dict[str, list[str]]
    term_blob: bytes
    term_offsets: npt.NDArray[np.int64]
    posting_offsets: npt.NDArray[np.int64]
    posting_documents: npt.NDArray[np.int32]
    posting_frequencies: npt.NDArray[np.int32]
    lengths: npt.NDArray[np.int64]
    scan: Any

    @property
    def end(self) -> int:
        """One past the last memory position the part covers."""
        return self.start + self.count


@dataclass(frozen=True, slots=True)
class ReadFile:
    """A loaded, checked part: its content, the header CRC of the part it continues
    (``previous``, 0 for part 0) and its own header's CRC-32 (what the next part names)."""

    part: Part
    previous: int
    header_crc: int


def read_folders_real(data: Path, session: str | None = None) -> bool:
    """Whether the ``read`` folder (and ``read/<session>``) is a real folder or absent.

    A symbolic link (or a file) in their place is never followed: the derived files behind
    it are not read, stamped or deleted, and none is written through it (``check`` names
    the link). Two ``lstat`` calls, once per partition load or removal.
    """
    folder = data / READ_FOLDER
    for path in (folder,) if session is None else (folder, folder / session):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        if not stat.S_ISDIR(info.st_mode):  # a link's own mode is never a directory
            return False
    return True


def _unlink_link(data: Path, session: str) -> None:
    """Remove a link (or file) standing where the ``read`` folder or ``read/<session>``
    should be, never what it points to: derived, and nothing of the save may lead out of
    it. Never raises (logged)."""
    for path in (data / READ_FOLDER, data / READ_FOLDER / session):
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                os.unlink(path)
                _LOG.warning("removed %s: a link or file where a folder of read files goes", path)
                return
        except FileNotFoundError:
            return
        except OSError as exc:
            _LOG.warning("%s is not a folder and could not be removed (%s)", path, exc)
            return


def read_file_path(session_directory: str, owner_hash: str, number: int = 0) -> Path:
    """Where part ``number`` of a partition's read-file chain lives
    (``<data>/read/s-<hash>/o-<hash>.read``, then ``o-<hash>.<number>.read``)."""
    data, session = os.path.split(session_directory)
    name = f"o-{owner_hash}.read" if number == 0 else f"o-{owner_hash}.{number}.read"
    return Path(data) / READ_FOLDER / session / name


def remove_parts(session_directory: str, owner_hash: str, first: int) -> None:
    """Delete parts ``first``, ``first + 1``... of a chain and their stamps (until one is
    missing): parts a merge or a rewrite of an earlier part left unreachable. Never raises
    (they would be ignored anyway: each names the header of the part it continues)."""
    data, session = os.path.split(session_directory)
    if not read_folders_real(Path(data), session):
        return  # never through a link (``read_folders_real``)
    number = first
    while True:
        path = read_file_path(session_directory, owner_hash, number)
        if not os.path.lexists(path):
            return
        for stale in (path, stamp_path(path), path.with_suffix(".covered")):
            try:
                os.unlink(stale)
            except FileNotFoundError:
                pass
            except OSError as exc:
                _LOG.info("the read file %s was not removed (%s)", stale, exc)
                return
        number += 1


def remove_read_files(
    data: Path, session_hash: str, owner_hash: str | None = None, *, durable: bool = False
) -> int:
    """Delete the read files of a session, or of one owner of it (an erase or compaction
    rewrote it): parts, stamps and temporary files; how many. Idempotent.

    ``durable`` fsyncs the folder after a removal, so a power loss cannot bring the files
    back: for an erase that rewrote nothing (the partition's records were already gone,
    erased by a build that predates read files), whose only removal is this one.

    An owner's rewrite leaves the session's other owners' read files: they hold none of
    its memories, and one naming a pack the rewrite replaced no longer matches that file
    (its range's CRC-32 is computed again from the new pack) and is replaced at its next
    read, like any stale part. Until 7 December 2026 they were removed too, which on
    Windows fails for a file this process has mapped (one of another NPC it recalled).

    Raises:
        PersistenceError: the folder could not be listed or a file removed.
    """
    folder = data / READ_FOLDER / f"s-{session_hash}"
    if not read_folders_real(data, folder.name):
        _unlink_link(data, folder.name)  # nothing behind it is listed or deleted
        return 0
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise PersistenceError(f"could not list {folder}: {exc.strerror}") from exc
    owned = None if owner_hash is None else f"o-{owner_hash}."
    return _remove_names(
        folder, [name for name in names if owned is None or name.startswith(owned)], durable
    )


def unheld_read_files(data: Path, held: Mapping[str, Collection[str]]) -> list[Path]:
    """The read files of every partition that holds nothing: what
    :func:`remove_unheld_read_files` removes (for a check that reports before it repairs).

    Raises:
        PersistenceError: a folder could not be listed.
    """
    root = data / READ_FOLDER
    return [
        root / session / name
        for session in _session_names(data)
        if read_folders_real(data, session)
        for name in _unheld_names(root / session, held.get(session[2:]))
    ]


def remove_unheld_read_files(data: Path, held: Mapping[str, Collection[str]]) -> int:
    """Delete the read files of every partition that holds nothing, durably; how many.

    ``held`` maps each session the save still holds to its owners that have records or
    ledger intents (the caller's view under the writer lock, after recovery). Every owner's
    files in ``read/s-<session>/`` whose owner is not held go (parts, stamps, temporary
    files), and so does the folder of a session not held at all.

    Why: an erase by a build that predates read files deletes the partition's records and
    leaves its read files, which hold the erased memories' ids, hashes and tokenized text;
    no load replaces them (the partition is never read again), so without this sweep they
    outlived the erase for good. Only the files this module names are removed (a foreign
    file in a session's folder stays, and so does that folder); links are removed, never
    followed, and a ``read`` folder that is a link is left alone (``check`` names it).

    Raises:
        PersistenceError: a folder could not be listed or a file removed.
    """
    root = data / READ_FOLDER
    removed = 0
    for session in _session_names(data):
        owners = held.get(session[2:])
        if not read_folders_real(data, session):
            if owners is None:
                _unlink_link(data, session)  # the link itself, never what it names
            continue
        folder = root / session
        removed += _remove_names(folder, _unheld_names(folder, owners), durable=True)
        if owners is None:
            _remove_empty_read_folder(folder)
    return removed


def _session_names(data: Path) -> list[str]:
    """The session folders (``s-<hash>``) in the ``read`` folder, sorted; none when it is
    absent or a link (never followed)."""
    root = data / READ_FOLDER
    if not read_folders_real(data):
        return []
    try:
        return sorted(name for name in os.listdir(root) if _SESSION_NAME.match(name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise PersistenceError(f"could not list {root}: {exc.strerror}") from exc


def _unheld_names(folder: Path, owners: Collection[str] | None) -> list[str]:
    """The names in a session's folder of read files of an owner not among ``owners``
    (``None``: of any owner), sorted: exactly what :func:`_remove_names` removes, so a
    check never reports what its ``--fix`` leaves (a folder with such a name is not one:
    this module writes none; a link is, removed itself, never followed)."""
    try:
        with os.scandir(folder) as entries:
            found = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise PersistenceError(f"could not list {folder}: {exc.strerror}") from exc
    return sorted(
        name
        for name, folder_named_so in found
        if not folder_named_so
        and (match := _OWNER_FILE.match(name)) is not None
        and (owners is None or match.group(1) not in owners)
    )


def _remove_names(folder: Path, names: Sequence[str], durable: bool) -> int:
    """Unlink ``names`` in ``folder`` (a link itself, never what it names; a folder among
    them is left alone: this module writes none); how many went. With ``durable`` the
    folder is fsynced after a removal."""
    removed = 0
    for name in names:
        path = folder / name
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise PersistenceError(f"could not remove {path}: {exc.strerror}") from exc
        removed += 1
    if removed and durable:
        fs.fsync_directory(folder)
    return removed


def _remove_empty_read_folder(folder: Path) -> None:
    """Remove a session's folder of read files if nothing is left in it (a reader may have
    written a file meanwhile, or a foreign file stays: then the folder stays too)."""
    try:
        os.rmdir(folder)
    except OSError as exc:
        _LOG.debug("the read folder %s was not removed (%s)", folder, exc)
        return
    fs.fsync_directory(folder.parent)


def file_crc(path: str, start: int, end: int, *, mapped: bool = False) -> int | None:
    """CRC-32 of bytes ``start..end`` of ``path``, or ``None`` if it holds fewer bytes (or
    cannot be read).

    ``mapped`` maps the file instead of reading it in chunks (a 4 MB record file of a
    freshly opened copied save: 0.4 against 2.6 ms, the fresh memory of the chunks being
    most of it); only for files no writer cuts in place (``fs.mapped_file``): record files,
    never the ledger, whose recovery truncates it.
    """
    if mapped:
        try:
            with fs.mapped_file(path, _MAXIMUM_MAPPED) as found:
                if found is None or len(found[0]) < end:
                    return None
                return crc32(memoryview(found[0])[start:end])
        except PersistenceError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
    except OSError:
        return None
    try:
        crc, position = 0, start
        # One buffer, reused: fresh memory per chunk would fault in a page per 4 kB (a copied
        # 10k save's ledger of 1.3 MB: 0.6-1.1 ms in a new process, 0.2-0.3 with the buffer).
        buffer = memoryview(bytearray(max(0, min(_READ_BUFFER, end - start))))
        while position < end:
            count = portable.pread_into(fd, buffer[: min(len(buffer), end - position)], position)
            if count <= 0:
                return None
            crc = crc32(buffer[:count], crc)
            position += count
        return crc
    except OSError:
        return None
    finally:
        os.close(fd)


def _array(array: npt.NDArray[Any]) -> tuple[str, memoryview]:
    """The array's dtype as stored and its bytes, a view (not a copy) where it is
    contiguous: a read file is written from these pieces as they are."""
    contiguous = np.ascontiguousarray(array)
    return contiguous.dtype.str, contiguous.data.cast("B")


def _strings(values: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(item) for item in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), np.uint8), offsets


def _unstrings(blob: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> list[str]:
    data = blob.tobytes()
    bounds = offsets.tolist()
    if data.isascii():  # one character per byte: slice one decoded string
        text = data.decode("ascii")
        return [text[a:b] for a, b in itertools.pairwise(bounds)]
    return [data[a:b].decode("utf-8") for a, b in itertools.pairwise(bounds)]


def write_read_file(
    path: Path, *, session_hash: str, owner_hash: str, part: Part, previous: int
) -> int | None:
    """Write one part of a chain atomically (see the module docstring); its header's CRC-32
    (what the next part names), or ``None`` when it was not written.

    A read file is an optimisation: when it cannot be written (a read-only save, a full
    disk) reads simply go on without one.
    """
    arrays: dict[str, npt.NDArray[Any]] = {}
    arrays.update({f"column_{name}": array for name, array in part.columns.items()})
    arrays["term_blob"] = np.frombuffer(part.term_blob, np.uint8)
    arrays["term_offsets"] = part.term_offsets
    arrays.update(
        posting_offsets=part.posting_offsets,
        posting_documents=part.posting_documents,
        posting_frequencies=part.posting_frequencies,
    )
    arrays["lengths"] = part.lengths
    # Ids end with a NUL each when none holds one: restoring them is then one split.
    ids = part.ids
    separated = isinstance(ids, PackedIds) or not any("\0" in memory_id for memory_id in ids)
    if isinstance(ids, PackedIds):  # already the blob, less its encoding (merged parts)
        arrays["id_blob"] = np.frombuffer(ids.blob, np.uint8)
        arrays["id_offsets"] = np.zeros(1, np.int64)
    elif separated:
        joined = "\0".join(ids) + "\0" if ids else ""
        arrays["id_blob"] = np.frombuffer(joined.encode("utf-8"), np.uint8)
        arrays["id_offsets"] = np.zeros(1, np.int64)
    else:
        arrays["id_blob"], arrays["id_offsets"] = _strings(ids)
    arrays["location_files"] = part.location_files
    arrays["location_offsets"] = part.location_offsets
    arrays["location_lengths"] = part.location_lengths
    arrays["hashes"] = np.frombuffer(part.hashes, np.uint8)
    arrays["digests"] = np.frombuffer(part.digests, np.uint8)
    body: list[bytes | memoryview] = []
    described: dict[str, list[Any]] = {}
    position = 0
    for name, array in arrays.items():
        dtype, data = _array(array)
        padding = -position % 8
        body.append(b"\0" * padding)
        position += padding
        described[name] = [dtype, int(array.size), position, len(data), crc32(data)]
        body.append(data)
        position += len(data)
    header = {
        "format_version": FORMAT_VERSION,
        "tokenizer": TOKENIZER_ID,
        "session": session_hash,
        "owner": owner_hash,
        "start": part.start,
        "count": part.count,
        "previous": previous,
        "files": [list(vars_of(covered)) for covered in part.files],
        "tables": part.tables,
        "ids_separated": separated,
        "scan": part.scan,
        "arrays": described,
    }
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    header_crc = crc32(encoded)
    pieces = [_HEAD.pack(_MAGIC, len(encoded), header_crc) + encoded, *body]
    try:
        fs.ensure_directory(path.parent.parent, durable=False)
        fs.ensure_directory(path.parent, durable=False)
        fs.atomic_write(path, pieces)
    except PersistenceError as exc:
        _LOG.info("the read file %s was not written (%s); reads go on without it", path, exc)
        return None
    return header_crc


def vars_of(covered: Covered) -> tuple[str, int, int, int, int, int, int, int, int]:
    return (
        covered.name, covered.device, covered.inode, covered.start, covered.end, covered.crc,
        covered.size, covered.modified, covered.changed,
    )  # fmt: skip


def load_read_file(
    path: Path, session_hash: str, owner_hash: str, later: Later | None = None
) -> ReadFile | None:
    """Load and check a read file on its own (not yet against the save: see
    :func:`game_memory.store.read_chain.seeded_state`); ``None`` when absent or unusable.

    The arrays' CRCs are skipped when a verified stamp names this very file (see the module
    docstring); a load that checked them all stamps the file: at once, or with ``later``
    in a job handed to ``later``, which runs it afterwards (``upkeep.Upkeep``). The arrays
    are views of a map that keeps no descriptor open (``descriptors.map_untracked``).

    Raises:
        PersistenceError: only when the process has no descriptor left (said so, named by
            ``descriptors.out_of_descriptors``); anything else about the file is ``None``.
    """
    started = time.time_ns()  # before the identity is taken (see SETTLED_NS)
    try:
        mapped = map_file(path, _MAXIMUM_BYTES)
    except PersistenceError as exc:
        if out_of_descriptors(exc):
            raise  # no file could be opened: reading the partition whole would fail too
        _LOG.info("the read file %s is unusable (%s); the partition is read whole", path, exc)
        return None
    if mapped is None:
        return None
    data, fd, identity = mapped
    try:
        stamp = read_stamp(stamp_path(path))
        vouched = stamp[1] if stamp is not None and stamp[0] == identity else None
        try:
            read, header_crc = _decode(data, session_hash, owner_hash, vouched)
        except (ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
            _LOG.info("the read file %s is damaged or stale (%s); it will be rebuilt", path, exc)
            return None
        if vouched != header_crc and started - identity[4] >= SETTLED_NS:
            files = read.part.files
            if later is None:
                if _partition_held(path, session_hash, owner_hash, files):
                    write_stamp(path, fd, identity, header_crc)
            else:
                later(
                    functools.partial(
                        _stamp_held, path, session_hash, owner_hash, files, identity, header_crc
                    )
                )
        return read
    finally:
        os.close(fd)


def _stamp_held(
    path: Path,
    session_hash: str,
    owner_hash: str,
    files: Sequence[Covered],
    identity: Identity,
    header_crc: int,
) -> bool:
    """The stamp job a load hands to ``later``: :func:`read_stamps.stamp_unchanged`, if
    the partition still has records (:func:`_partition_held`); whether a stamp was written
    (never raises). Checked here, on the read-file thread, not by the load."""
    if not _partition_held(path, session_hash, owner_hash, files):
        return False
    return stamp_unchanged(path, identity, header_crc)


def _partition_held(
    path: Path, session_hash: str, owner_hash: str, files: Sequence[Covered]
) -> bool:
    """Whether the partition whose read file is at ``path`` (covering ``files``) still has
    records in the save: its first log segment exists, or a pack the part covers still
    lists the owner. Never raises (an unreadable pack counts as not listing it).

    A read file of a partition with no records is never stamped: an erase by a build that
    predates read files leaves them behind, holding the erased memories' ids and text, and
    a stamp would be one more file about them (``compact`` removes both). A part that only
    no longer matches the save is left unstamped too: it is stale, and replaced at its
    next read. One ``lstat`` for a partition that has a log, the index of a pack or two for
    one compacted into packs.
    """
    directory = path.parent.parent.parent / f"s-{session_hash}"
    if os.path.lexists(segment_path(directory, owner_hash, 0)):
        return True
    for covered in files:
        if not covered.name.startswith("p-"):
            continue
        pack = os.path.join(directory, covered.name)
        try:
            info = os.lstat(pack)
            if stat.S_ISREG(info.st_mode) and owner_hash in (
                read_pack_index(pack, info, info.st_size).owners
            ):
                return True
        except (OSError, PersistenceError):
            continue
    return False


def header_crc_of(path: Path) -> int | None:
    """The header CRC-32 a part names itself by (what the next part names as previous),
    read from its first 16 bytes without checking anything else; ``None`` if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | portable.OPEN_FLAGS)
    except OSError:
        return None
    try:
        head = portable.pread(fd, _HEAD.size, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(head) != _HEAD.size:
        return None
    magic, _, crc = _HEAD.unpack(head)
    return int(crc) if magic == _MAGIC else None


def _decode(
    data: memoryview, session_hash: str, owner_hash: str, vouched: int | None = None
) -> tuple[ReadFile, int]:
    """The part and its header's CRC; the arrays' CRCs are computed unless a stamp
    ``vouched`` for this very file with that header CRC."""
    magic, length, crc = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a read file")
    encoded = bytes(data[_HEAD.size : _HEAD.size + length])
    if len(encoded) != length or crc32(encoded) != crc:
        raise ValueError("its header fails its checksum")
    header = json.loads(encoded)
    if header["format_version"] != FORMAT_VERSION:
        raise ValueError(f"format version {header['format_version']!r}")
    if header.get("tokenizer") != TOKENIZER_ID:  # another Unicode database: other tokens
        raise ValueError(f"tokenizer {header.get('tokenizer')!r}, not {TOKENIZER_ID!r}")
    if header["session"] != session_hash or header["owner"] != owner_hash:
        raise ValueError("it belongs to another partition")
    start = _HEAD.size + length
    verify = vouched != crc
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, (dtype, size, offset, nbytes, checksum) in header["arrays"].items():
        chunk = data[start + offset : start + offset + nbytes]
        if len(chunk) != nbytes or (verify and crc32(chunk) != checksum):
            raise ValueError(f"array {name} fails its checksum")
        array = np.frombuffer(chunk, np.dtype(dtype))
        if array.size != size:
            raise ValueError(f"array {name} has the wrong size")
        arrays[name] = array
    first, count, previous = int(header["start"]), int(header["count"]), int(header["previous"])
    if first < 0 or count < 0 or (first == 0) != (previous == 0):
        raise ValueError("its place in the chain is not one a writer gives")
    end = first + count
    columns = {name: arrays[f"column_{name}"] for name in COLUMN_NAMES}
    # ``copy=False``: written as int64, they stay views of the map (copies cost their page
    # faults: a few milliseconds per open at 100k memories, with the ids and columns).
    columns["tag_offsets"] = arrays["column_tag_offsets"].astype(np.int64, copy=False)
    columns["tag_documents"] = arrays["column_tag_documents"].astype(np.int64, copy=False)
    tables = {key: [str(value) for value in header["tables"][key]] for key in _TABLES}
    for name in COLUMN_NAMES:
        if columns[name].shape != (count,):
            raise ValueError(f"column {name} does not match its count")
    tag_offsets, tag_documents = columns["tag_offsets"], columns["tag_documents"]
    if tag_offsets.shape != (len(tables["tags"]) + 1,) or int(tag_offsets[-1]) != (
        tag_documents.size
    ):
        raise ValueError("its tag columns do not match their table")
    if (
        verify
        and tag_documents.size
        and (int(tag_documents.min()) < first or int(tag_documents.max()) >= end)
    ):
        raise ValueError("a tag names a memory the part does not hold")
    term_offsets = arrays["term_offsets"].astype(np.int64, copy=False)
    posting_offsets = arrays["posting_offsets"].astype(np.int64, copy=False)
    documents = arrays["posting_documents"]
    frequencies = arrays["posting_frequencies"]
    lengths = arrays["lengths"]
    if lengths.shape != (count,) or documents.shape != frequencies.shape:
        raise ValueError("its postings do not match its count")
    if posting_offsets.shape != (term_offsets.size,) or (
        posting_offsets.size and int(posting_offsets[-1]) != documents.size
    ):
        raise ValueError("its postings do not match their terms")
    if verify and documents.size and (int(documents.min()) < first or int(documents.max()) >= end):
        raise ValueError("its postings name memories the part does not hold")
    ids: Sequence[str]
    if header["ids_separated"] is True:
        blob = arrays["id_blob"].data  # the map's bytes: decoded once, never copied
        packed = PackedIds.of_blob(blob)
        ids = packed if packed is not None else unpacked_ids(bytes(blob))
    else:
        ids = _unstrings(arrays["id_blob"], arrays["id_offsets"])
    if any(len(entry) != 9 for entry in header["files"]):
        raise ValueError("a covered file is not described in full")
    files = tuple(Covered(*entry) for entry in header["files"])
    location_files = arrays["location_files"]
    if len(ids) != count or location_files.size != count:
        raise ValueError("its ids or locations do not match its count")
    if verify and count and int(location_files.max()) >= len(files):
        raise ValueError("a location names a file it does not cover")
    # Views of the map, not copies: the first recall compares them once (index/join.py).
    hashes, digests = arrays["hashes"].data, arrays["digests"].data
    if len(hashes) != 32 * count or len(digests) != 32 * count:
        raise ValueError("its digests do not match its count")
    part = Part(
        first,
        count,
        files,
        ids,
        location_files,
        arrays["location_offsets"],
        arrays["location_lengths"],
        hashes,
        digests,
        columns,
        tables,
        arrays["term_blob"].tobytes(),
        term_offsets,
        posting_offsets,
        documents.astype(np.int32, copy=False),
        frequencies.astype(np.int32, copy=False),
        lengths.astype(np.int64, copy=False),
        header["scan"],
    )
    return ReadFile(part, previous, crc), crc
