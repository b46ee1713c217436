"""Where the derived index keeps its files, what its folder says, and its identity table.

Layout of ``<index>/.game-memory-index/`` (format version 1)::

    format.json                    {"format": "game-memory-vector-index", "format_version": 1}
    identities.json                the embedding identities seen; an entry stores its position
    lock                           the writer lock
    s-<sha256(session)>/codes.json                           what the session's codes mean
                                                             (session_codes.py)
    s-<sha256(session)>/o-<sha256(owner)>.entries            128-byte entry records (entries.py)
    s-<sha256(session)>/o-<sha256(owner)>.<code>.<tag>.f32   float32 rows of identity <code>
    s-<sha256(session)>/o-<sha256(owner)>.<code>.<tag>.q8    their int8 copy (row_codes.py)
    s-<sha256(session)>/o-<sha256(owner)>.rewriting          an owner rewrite in progress (empty)

:class:`IndexLayout` names these paths, creates or verifies the folder, lists sessions and
owners, and keeps the identity table (identity string -> small code). The reading and
writing of partitions is :class:`~game_memory.index.engine.IndexEngine`'s job.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.lock import ProcessLock
from game_memory.errors import DerivedIndexError, PersistenceError
from game_memory.index.partition import derived_error
from game_memory.index.session_codes import SessionCodes
from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = [
    "INDEX_FOLDER",
    "ROWS_NAME",
    "IndexLayout",
    "codes_leftovers",
    "identity_dimensions",
    "leftover_names",
    "list_names",
]

INDEX_FOLDER = ".game-memory-index"
_FORMAT = "game-memory-vector-index"
_ENTRIES = re.compile(r"^o-([0-9a-f]{64})\.entries$")
_SESSION = re.compile(r"^s-([0-9a-f]{64})$")
#: A row file's name, or its file of int8 codes': owner hash, identity code, generation
#: tag (a generation's codes live and die with its rows: both hold vectors).
ROWS_NAME = re.compile(r"^o-([0-9a-f]{64})\.([0-9]+)\.([0-9a-f]{8})\.(?:f32|q8)$")
#: The temporary file of an atomic write of an entries or row file (``fs.atomic_write``:
#: ``<name>.<uuid>.tmp``), which a writer killed mid write leaves with records or rows.
_DATA_TEMPORARY = re.compile(
    r"^o-([0-9a-f]{64})\.(?:entries|[0-9]+\.[0-9a-f]{8}\.f32)\.[0-9a-f]{32}\.tmp$"
)
#: The temporary file of a file of int8 codes a close was writing when it was killed: it
#: holds codes of vectors, so it goes with the owner's leftovers, but it is no sign of an
#: interrupted rewrite (the next close that writes the partition's codes removes it).
_CODES_TEMPORARY = re.compile(r"^o-([0-9a-f]{64})\.[0-9]+\.[0-9a-f]{8}\.q8\.[0-9a-f]{32}\.tmp$")
#: The mark of a rewrite (compaction or reset) of an owner's files in progress: created
#: before its first write, deleted after its last removal (``writer.compact_files``).
_REWRITING = re.compile(r"^o-([0-9a-f]{64})\.rewriting$")


class IndexLayout:
    """The paths, the format check, the listings and the identity table of one index folder.

    Thread-safe for reading; :meth:`identity_code` with ``create`` must be called under the
    writer lock (:meth:`locked`).
    """

    def __init__(self, directory: Path, *, lock_timeout: float) -> None:
        self.root = directory
        self.data = directory / INDEX_FOLDER
        self._lock = ProcessLock(self.data / "lock", lock_timeout)
        self._identities: list[str] = []
        self._opened = False
        #: Per session folder, whether its vectors' codes mean what this folder's table says.
        self.codes = SessionCodes(self.data, self.identities)

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` found (or made) the layout."""
        return self._opened

    def open(self, *, create: bool = True) -> None:
        """Create or verify the layout (idempotent).

        With ``create=False`` a folder that does not exist is left alone and stays
        unopened: an index that was never written reads as an empty one.
        """
        if self._opened:
            return
        if not create and not os.path.lexists(self.root):
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
            if fs.refused_access(exc) is not None:
                refused = PersistenceError(
                    f"could not create the index folder {self.root}: {exc.strerror or exc}"
                )
                refused.__cause__ = exc  # what derived_error reads the refusal from
                raise derived_error(refused) from exc
            raise DerivedIndexError(f"could not open the index at {self.root}: {exc}") from exc
        self._opened = True

    def reset(self) -> None:
        """Empty the whole index: every session's files, a fresh format and identity table.

        For damage that no single partition explains (a corrupt ``format.json`` or
        ``identities.json``: entries store identity *codes*, so without the table no vector
        of any session can be trusted). Derived data only; every session then needs a
        rebuild. Call under :meth:`locked` (the data folder must exist).
        """
        try:
            fs.check_no_symlinks(self.root)
            fs.ensure_directory(self.data, create=False)
            for name in list_names(self.data):
                if not _SESSION.match(name):
                    continue
                folder = self.data / name
                fs.ensure_directory(folder, create=False)
                for leaf in list_names(folder):
                    os.unlink(folder / leaf)
                os.rmdir(folder)
            fs.fsync_directory(self.data)
            document = {"format": _FORMAT, "format_version": 1}
            fs.atomic_write(self.data / "format.json", json.dumps(document).encode())
            empty = {"format_version": 1, "identities": []}
            fs.atomic_write(self.data / "identities.json", json.dumps(empty).encode())
        except PersistenceError as exc:
            raise derived_error(exc) from exc
        except OSError as exc:
            raise DerivedIndexError(f"could not reset the index at {self.root}: {exc}") from exc
        self._identities = []
        self.codes.forget()
        self._opened = False

    def session_directory(self, session_hash: str) -> Path:
        """The folder of one session's partitions."""
        return self.data / f"s-{session_hash}"

    def locked(self) -> ProcessLock:
        """The cross-process writer lock (a context manager)."""
        return self._lock

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

    def known_identity_code(self, identity: MemoryEmbeddingIdentity) -> int | None:
        """The code of ``identity`` if this process already read it, else ``None`` (nothing
        is read: for callers that must not block)."""
        names = self._identities
        name = str(identity)
        return names.index(name) if name in names else None

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

    def session_code(self, session_hash: str, identity: MemoryEmbeddingIdentity) -> int | None:
        """The code of ``identity``'s vectors in one session folder: its code in the table,
        unless the folder records that code as another model's (a session folder copied
        from another index: ``session_codes.py``), then ``None`` (its vectors are stale).
        Reads the folder's record on the first call per session (then a dictionary
        lookup while it agrees)."""
        code = self.identity_code(identity, create=False)
        if code is None or self.codes.verdict(session_hash).is_foreign(code):
            return None
        return code

    def known_session_code(
        self, session_hash: str, identity: MemoryEmbeddingIdentity
    ) -> int | None:
        """:meth:`session_code` when this process already judged the session and knows the
        code, else ``None`` (nothing is read: for callers that must not block)."""
        code = self.known_identity_code(identity)
        verdict = self.codes.cached(session_hash)
        if code is None or verdict is None or verdict.is_foreign(code):
            return None
        return code

    def entries_path(self, session_hash: str, owner_hash: str) -> str:
        """The entries file of a partition."""
        # Formatted, not joined with pathlib: this runs on every append and recall.
        return f"{self.data}{os.sep}s-{session_hash}{os.sep}o-{owner_hash}.entries"

    def vectors_path(self, session_hash: str, owner_hash: str, code: int, tag: int) -> str:
        """The row file of identity ``code`` in generation ``tag`` of a partition."""
        return f"{self.data}{os.sep}s-{session_hash}{os.sep}o-{owner_hash}.{code}.{tag:08x}.f32"

    def codes_path(self, session_hash: str, owner_hash: str, code: int, tag: int) -> str:
        """The file of int8 codes of a row file (``row_codes.py``)."""
        return f"{self.data}{os.sep}s-{session_hash}{os.sep}o-{owner_hash}.{code}.{tag:08x}.q8"

    def rewriting_path(self, session_hash: str, owner_hash: str) -> str:
        """The mark of a rewrite of a partition in progress (or killed: its files may hold
        another generation's rows, which the next writer of the partition removes)."""
        return f"{self.data}{os.sep}s-{session_hash}{os.sep}o-{owner_hash}.rewriting"

    def owner_hashes(self, session_hash: str) -> list[str]:
        """Owners with an entries file in the session (sorted)."""
        names = list_names(self.session_directory(session_hash))
        return sorted(m.group(1) for name in names if (m := _ENTRIES.match(name)))

    def owners_with_files(self, session_hash: str) -> list[str]:
        """Owners with an entries file *or a row file* in the session (sorted).

        A writer killed after appending rows and before their entries leaves row files of
        an owner with no entries file; an erase must find them too (they hold vectors). So
        are owners with only a temporary file or a rewrite mark a killed writer left.
        """
        names = list_names(self.session_directory(session_hash))
        return sorted({owner for name in names if (owner := file_owner(name)) is not None})

    def session_hashes(self) -> list[str]:
        """Sessions with a folder in the index."""
        return sorted(m.group(1) for name in list_names(self.data) if (m := _SESSION.match(name)))


def identity_dimensions(name: str) -> int:
    """The dimensions of an identity string ``provider/model@version:dims``.

    Raises:
        ValueError: the string does not end in ``:<dimensions>``.
    """
    head, separator, tail = name.rpartition(":")
    if not separator or not head or not tail.isdigit() or not 1 <= int(tail) <= 65_536:
        raise ValueError(f"{name!r} is not an embedding identity")
    return int(tail)


def file_owner(name: str) -> str | None:
    """The owner hash of a partition's file (entries, rows, a temporary file of either, the
    rewrite mark; not the stamp), else ``None``."""
    match = (
        _ENTRIES.match(name)
        or ROWS_NAME.match(name)
        or _DATA_TEMPORARY.match(name)
        or _CODES_TEMPORARY.match(name)
        or _REWRITING.match(name)
    )
    return match.group(1) if match is not None else None


def leftover_names(
    names: list[str], owner_hash: str, keep_tag: int | None, *, codes: bool = True
) -> list[str]:
    """The owner's files among ``names`` that its entries of generation ``keep_tag`` (``None``:
    no entries, or none that name rows) do not use: row files (and files of codes) of other
    generations and temporary files of entries and rows (what a rewrite killed midway leaves;
    they may hold erased memories' vectors), and with ``codes`` the temporary files of files
    of codes (what a close killed midway leaves: codes of vectors, but no sign of a rewrite).
    Not the rewrite mark nor the stamp's temporary file (a reader may be writing that one;
    it holds no vector)."""
    found = []
    for name in names:
        rows = ROWS_NAME.match(name)
        if rows is not None:
            if rows.group(1) == owner_hash and int(rows.group(3), 16) != keep_tag:
                found.append(name)
        elif _owned(_DATA_TEMPORARY, name, owner_hash) or (
            codes and _owned(_CODES_TEMPORARY, name, owner_hash)
        ):
            found.append(name)
    return found


def codes_leftovers(names: list[str], owner_hash: str) -> list[str]:
    """The temporary files of the owner's files of codes among ``names`` (what a close
    killed while writing one leaves)."""
    return [name for name in names if _owned(_CODES_TEMPORARY, name, owner_hash)]


def _owned(pattern: re.Pattern[str], name: str, owner_hash: str) -> bool:
    """Whether ``name`` matches ``pattern`` (owner hash first) for ``owner_hash``."""
    match = pattern.match(name)
    return match is not None and match.group(1) == owner_hash


def list_names(directory: Path) -> list[str]:
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
