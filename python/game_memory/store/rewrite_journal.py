"""The rewrite journal: an erase (or a compaction) that a crash interrupted is finished.

``rewrite.json`` is written durably, under the writer lock, before an erase or a
compaction changes anything, and removed (durably) when it is done. It names what the
rewrite covers, by hashes only (never an id or a text)::

    {"format_version": 1, "operation": "erase" | "compact",
     "phase": "copies" | "files" | "switch",
     "session_hash": "<64 hex>", "owner_hash": "<64 hex>" | null,
     "memory_hashes": ["<64 hex>", ...] | null,
     "segments": n | null, "retraction_segments": n | null}

An erase covers a whole session (``owner_hash`` null), one owner partition
(``memory_hashes`` null) or the listed memories of one owner. Writing the journal is the
erase's commit: from then on the erase is never undone, only finished, by the writer that
started it or by the next writer's recovery (``rewriting.py``), and readers already
see it done (a reader that finds a journal waits for the writer lock, finishing the
rewrite first if its writer died: ``engine.py``). ``phase`` says how far it got:
``copies`` while the copies of the erased memories outside the partition (legacy backups,
the damaged files set aside) are removed; ``files`` while the ledgers are rewritten and the
partition's new files are written under staging names (``*.new``); ``switch`` once every
staged file is complete and durable, while they are renamed over the old files, with the
number of segments each new series has (older segments past it are deleted). A compaction
erases nothing and starts at ``files``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError

__all__ = ["REWRITE_JOURNAL", "Rewrite", "RewriteJournal"]

REWRITE_JOURNAL = "rewrite.json"
_HASH = re.compile(r"^[0-9a-f]{64}$")
_OPERATIONS = ("erase", "compact")
_PHASES = ("copies", "files", "switch")
_MAXIMUM_BYTES = 1 << 27  # 1,000,000 hashes of 66 bytes each fit


@dataclass(frozen=True, slots=True)
class Rewrite:
    """One rewrite as its journal names it (see the module docstring)."""

    operation: str
    session_hash: str
    owner_hash: str | None = None
    memory_hashes: frozenset[str] | None = None
    phase: str = "copies"
    segments: int | None = None
    retraction_segments: int | None = None

    @property
    def erases(self) -> bool:
        return self.operation == "erase"

    def touches(self, session_hash: str, owner_hash: str) -> bool:
        """Whether the rewrite concerns the partition (it may change its files)."""
        return session_hash == self.session_hash and (
            self.owner_hash is None or owner_hash == self.owner_hash
        )

    def covers(self, session_hash: str, owner_hash: str, memory_hash: str) -> bool:
        """Whether the rewrite erases this memory."""
        return (
            self.erases
            and self.touches(session_hash, owner_hash)
            and (self.memory_hashes is None or memory_hash in self.memory_hashes)
        )

    def document(self) -> dict[str, object]:
        return {
            "format_version": 1,
            "operation": self.operation,
            "phase": self.phase,
            "session_hash": self.session_hash,
            "owner_hash": self.owner_hash,
            "memory_hashes": None if self.memory_hashes is None else sorted(self.memory_hashes),
            "segments": self.segments,
            "retraction_segments": self.retraction_segments,
        }


class RewriteJournal:
    """The rewrite journal of one store. :meth:`current` is for readers (no lock, cached);
    the other methods are called under the writer lock."""

    def __init__(self, data: Path) -> None:
        self.path = data / REWRITE_JOURNAL
        self._name = os.fspath(self.path)
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, int, int], Rewrite] | None = None

    def current(self) -> Rewrite | None:
        """The unfinished rewrite, or ``None`` (one ``lstat`` when there is none).

        Raises:
            PersistenceError: the journal is corrupt or not a regular file.
        """
        info = fs.lstat_regular(self._name)
        if info is None:
            return None
        seen = (info.st_ino, info.st_size, info.st_ctime_ns)
        with self._lock:
            cached = self._cached
        if cached is not None and cached[0] == seen:
            return cached[1]
        found = self.read()
        if found is not None:
            with self._lock:
                self._cached = (seen, found)
        return found

    def read(self) -> Rewrite | None:
        """Read the journal from disk; ``None`` if there is none.

        Raises:
            PersistenceError: the journal is corrupt (names anything but hashes, an unknown
                operation or phase, or an unsupported version).
        """
        read = fs.read_file(self.path, _MAXIMUM_BYTES)
        if read is None:
            return None
        try:
            document = json.loads(read[0])
            if document["format_version"] != 1:
                raise ValueError("an unsupported version")
            operation, phase = document["operation"], document["phase"]
            session, owner = document["session_hash"], document["owner_hash"]
            hashes = document["memory_hashes"]
            counts = (document["segments"], document["retraction_segments"])
            if operation not in _OPERATIONS or phase not in _PHASES:
                raise ValueError("an unknown operation or phase")
            if any(
                count is not None
                and (isinstance(count, bool) or not isinstance(count, int) or count < 0)
                for count in counts
            ) or ((phase == "switch") != (None not in counts)):
                raise ValueError("bad segment counts")
            if not isinstance(session, str) or not _HASH.match(session):
                raise ValueError("a bad session hash")
            if owner is not None and (not isinstance(owner, str) or not _HASH.match(owner)):
                raise ValueError("a bad owner hash")
            if hashes is not None and (
                owner is None
                or not isinstance(hashes, list)
                or not all(isinstance(h, str) and _HASH.match(h) for h in hashes)
            ):
                raise ValueError("bad memory hashes")
        except (ValueError, KeyError, TypeError) as exc:
            raise PersistenceError(
                f"{self.path} is corrupt ({exc}); restore the save from a backup"
            ) from exc
        return Rewrite(
            operation,
            session,
            owner,
            None if hashes is None else frozenset(hashes),
            phase,
            counts[0],
            counts[1],
        )

    def write(self, rewrite: Rewrite) -> None:
        """Write (or advance) the journal atomically and durably."""
        fs.atomic_write(self.path, json.dumps(rewrite.document()).encode())

    def remove(self) -> None:
        """Mark the rewrite done: remove the journal durably."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PersistenceError(f"could not remove {self.path}: {exc.strerror}") from exc
        fs.fsync_directory(self.path.parent)
