"""What each identity code of a session folder means, recorded in that folder.

Entry records and row-file names carry an identity *code*, a position in the index
folder's table (``identities.json``, ``layout.py``), so nothing in a session folder
names the model of its vectors. A session folder copied from another index folder, whose
table gives the same code to another model of the same width, would have its vectors
scored as the active model's. So each session folder keeps ``codes.json``: the table's
identities as they were when the folder first used a code (``GMCODES1`` · CRC-32 of the
body · JSON, ``durable/framed_json.py``; written atomically: a kill mid write leaves the
old record or the new one).

A process compares it with the table once per session (cached: :class:`SessionCodes`),
again when one of the session's partitions is read whole (a copy replaces its files), and
on every use while the session disagrees (rare; a writer fixing it is seen at once). A code
whose recorded identity is not the table's holds *another model's* vectors here: they are
stale (not scored, the session needs a rebuild), the next write to the session drops them
before it records the table's identities, and compactions drop them. A session folder
without the record (written by an earlier release, or never written) is trusted, and gets
the record at its next write; a damaged record vouches for no code.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable.framed_json import read_framed, write_framed

__all__ = ["CODES_NAME", "CodesVerdict", "SessionCodes", "record_codes"]

#: The record's name in a session folder.
CODES_NAME = "codes.json"
_MAGIC = b"GMCODES1"
_FORMAT_VERSION = 1
_MAXIMUM_BYTES = 1 << 20
_LOG = logging.getLogger("game_memory.index")

#: ``(inode, size, mtime_ns, ctime_ns)`` of a record as it was read; ``None``: no record.
RecordIdentity = tuple[int, int, int, int] | None


@dataclass(frozen=True, slots=True)
class CodesVerdict:
    """What one session folder's record says against the index folder's table.

    Attributes:
        file: The record as read (``None``: there was none).
        listed: How many codes the record names (0 without a record).
        foreign: The codes whose vectors in this session are another model's.
        damaged: The record could not be read: no code is vouched for.
    """

    file: RecordIdentity
    listed: int
    foreign: frozenset[int]
    damaged: bool = False

    def is_foreign(self, code: int) -> bool:
        """Whether this session's vectors of ``code`` are another model's."""
        return self.damaged or code in self.foreign

    def vouches(self, code: int) -> bool:
        """Whether the record names ``code`` as the table does (a writer needs nothing)."""
        return self.file is not None and code < self.listed and not self.is_foreign(code)

    @property
    def agrees(self) -> bool:
        """Whether no code of the session is another model's."""
        return not self.damaged and not self.foreign


def record_identity(path: Path) -> RecordIdentity:
    """The record at ``path`` as an ``lstat`` sees it (``None`` when absent or unreadable)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def read_codes(path: Path) -> tuple[RecordIdentity, list[str] | None]:
    """The record at ``path`` (its identity before the read, and its identities).

    Returns:
        ``(None, None)`` when there is none; ``(identity, None)`` when it is damaged
        (another magic, a failed checksum, not a list of strings: logged).
    """
    before = record_identity(path)
    if before is None:
        return None, None
    try:
        document = read_framed(path, _MAGIC, _MAXIMUM_BYTES)
        if document is None:
            return None, None
        if document["format_version"] != _FORMAT_VERSION:
            raise ValueError(f"format version {document['format_version']!r}")
        names = document["identities"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("its identities are not a list of strings")
    except (ValueError, KeyError, TypeError) as exc:
        _LOG.warning(
            "%s is damaged (%s): the session's vectors are not trusted until a rebuild rewrites it",
            path,
            exc,
        )
        return before, None
    return before, names


def judge(file: RecordIdentity, recorded: list[str] | None, table: list[str]) -> CodesVerdict:
    """The verdict of a record (``file``, ``recorded`` as :func:`read_codes` returned them)
    against the index folder's ``table``."""
    if file is None:
        return CodesVerdict(None, 0, frozenset())
    if recorded is None:
        return CodesVerdict(file, 0, frozenset(), damaged=True)
    foreign = frozenset(
        code for code, name in enumerate(recorded) if code >= len(table) or table[code] != name
    )
    return CodesVerdict(file, len(recorded), foreign)


def record_codes(path: Path, table: list[str]) -> RecordIdentity:
    """Replace the record at ``path`` with ``table`` atomically and durably; the record as
    written.

    Raises:
        PersistenceError, OSError: it could not be written (the old record stays).
    """
    write_framed(path, _MAGIC, {"format_version": _FORMAT_VERSION, "identities": table})
    return record_identity(path)


class SessionCodes:
    """The verdicts of one index folder's session records, cached per session.

    Thread-safe (a verdict is replaced whole; two threads judging one session at once
    reach the same one). ``table`` returns the index folder's identities, reloaded.
    """

    def __init__(self, data: Path, table: Callable[[], list[str]]) -> None:
        self._data = data
        self._table = table
        self._verdicts: dict[str, CodesVerdict] = {}
        self._warned: set[tuple[str, RecordIdentity]] = set()

    def path(self, session_hash: str) -> Path:
        """The record of a session folder."""
        return self._data / f"s-{session_hash}" / CODES_NAME

    def cached(self, session_hash: str) -> CodesVerdict | None:
        """The verdict this process holds for the session, if any (nothing is read)."""
        return self._verdicts.get(session_hash)

    def verdict(self, session_hash: str) -> CodesVerdict:
        """The session's verdict: cached while it agrees; one that disagrees is checked
        again (an ``lstat``) on every call, so a writer's fix is seen at once."""
        held = self._verdicts.get(session_hash)
        if held is not None and (
            held.agrees or held.file == record_identity(self.path(session_hash))
        ):
            return held
        return self.judge(session_hash)

    def recheck(self, session_hash: str) -> None:
        """Forget the session's verdict if its record changed since (one ``lstat``): for a
        partition read whole, which a copied session folder makes."""
        held = self._verdicts.get(session_hash)
        if held is not None and held.file != record_identity(self.path(session_hash)):
            self._verdicts.pop(session_hash, None)

    def recorded(self, session_hash: str, file: RecordIdentity, table: list[str]) -> None:
        """Hold the verdict of a record this process just wrote (``table``)."""
        self._verdicts[session_hash] = CodesVerdict(file, len(table), frozenset())

    def forget(self) -> None:
        """Drop every verdict (the index folder was emptied)."""
        self._verdicts.clear()

    def drop(self, session_hash: str) -> None:
        """Delete the session's record (its folder emptied by an erase of the session) and
        forget its verdict; the next write of vectors there records the table again.

        Raises:
            OSError: the record could not be deleted (it is still there).
        """
        self._verdicts.pop(session_hash, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(session_hash))

    def judge(self, session_hash: str) -> CodesVerdict:
        """Read the session's record again and hold its verdict (a disagreement is logged
        once per record)."""
        path = self.path(session_hash)
        file, recorded = read_codes(path)
        table = self._table()
        verdict = judge(file, recorded, table)
        if verdict.foreign and (session_hash, file) not in self._warned:
            self._warned.add((session_hash, file))
            named = ", ".join(
                f"{code} ({recorded[code]!r} there, "
                f"{table[code] if code < len(table) else 'undefined'!r} here)"
                for code in sorted(verdict.foreign)
                if recorded is not None
            )
            _LOG.warning(
                "the session folder %s holds vectors of another embedding model than this "
                "index's table names for identity code(s) %s (copied from another index "
                "folder?): they are stale, recall of the session is lexical until a rebuild "
                "embeds its memories again",
                path.parent,
                named,
            )
        self._verdicts[session_hash] = verdict
        return verdict
