"""The rewrite journal: an erase (or a compaction) that a crash interrupted is finished.

``rewrite.json`` is written durably, under the writer lock, before an erase or a
compaction changes anything, and removed (durably) when it is done. It names what the
rewrite covers, by hashes only (never an id or a text)::

    {"format_version": 1, "operation": "erase" | "compact",
     "phase": "copies" | "files" | "switch",
     "session_hash": "<64 hex>", "owner_hash": "<64 hex>" | null,
     "memory_hashes": ["<64 hex>", ...] | null,
     "segments": n | null, "retraction_segments": n | null,
     "generation": G, "ledgers": [adds, retractions], "erased_intents": [n, "<64 hex>"]}

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

**A journal is finished only in the save its rewrite left.** An old copy put back after the
rewrite was done (a cloud sync or a backup tool restoring one file) would otherwise "finish"
an erase again, and erase whatever its owner learned since. Every journal carries a
``generation``, shared with the batch journal (``journal.py``): one more than the newest
the save finished, recorded when the journal is removed in its trace (``rewrite.done.json``:
``{"generation": G}``, nothing else, since an erase's journal names the erased memories'
hashes, which must not outlive it). A journal whose generation is not newer than a trace's
(0 without one: an earlier release's) is refused by :meth:`RewriteJournal.read`, so by
every reader and writer alike. The other two fields let the writer that finishes a journal
check the save against it, for when no trace can judge it (``rewriting.py``): ``ledgers``,
the counts of both ledgers as the phase found them (for ``switch``, as the rewrite of the
ledgers left them), and for an erase ``erased_intents``, how many intents of the memories
it erases the ledger held when it began and a SHA-256 of their positions and hashes. An
earlier release's journal has neither, and is judged by its generation alone.

So in a save with a trace it is refused even where it is the journal of an erase an earlier
release was interrupted in after this one finished an operation there: nothing tells that
from an old copy (not staged files either: a sync tool brings them back with the journal),
and finishing an old copy destroys what was learned since. ``check --fix`` sets it aside,
and what it names is erased again (``check.py``). :meth:`RewriteJournal.named` reads a
journal without that judgement, for ``check`` alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError
from game_memory.store.journal_traces import (
    REWRITE_JOURNAL,
    StaleJournalError,
    finished_path,
    last_finished,
    next_generation,
    older,
)
from game_memory.store.ledger import Ledger

__all__ = ["REWRITE_JOURNAL", "Rewrite", "RewriteJournal", "erased_intents", "mismatch"]

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
    #: One more than the last finished rewrite's (0: an earlier release's journal).
    generation: int = 0
    #: The add and retraction ledgers' counts as the phase found them (``None``: not known).
    ledgers: tuple[int, int] | None = None
    #: For an erase: how many intents of what it erases the ledger held when it began, and
    #: the SHA-256 of their positions and memory hashes (``None``: not known).
    erased_intents: tuple[int, str] | None = None

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
        """The journal's JSON object (see the module docstring)."""
        document: dict[str, object] = {
            "format_version": 1,
            "operation": self.operation,
            "phase": self.phase,
            "session_hash": self.session_hash,
            "owner_hash": self.owner_hash,
            "memory_hashes": None if self.memory_hashes is None else sorted(self.memory_hashes),
            "segments": self.segments,
            "retraction_segments": self.retraction_segments,
            "generation": self.generation,
        }
        if self.ledgers is not None:
            document["ledgers"] = list(self.ledgers)
        if self.erased_intents is not None:
            document["erased_intents"] = list(self.erased_intents)
        return document


def erased_intents(ledger: Ledger, rewrite: Rewrite) -> tuple[int, str]:
    """How many intents of what ``rewrite`` erases ``ledger`` (the add ledger) holds, and
    the SHA-256 of their positions (8 bytes, little-endian) and memory hashes, in order.

    Raises:
        PersistenceError: the ledger is damaged.
    """
    rows = ledger.records()
    digest = hashlib.sha256()
    count = 0
    hashes = rewrite.memory_hashes
    positions = ledger.partition_rows(rows, rewrite.session_hash, rewrite.owner_hash)
    for position in positions.tolist():
        memory_hash = rows[position, 80:112].tobytes()
        if hashes is None or memory_hash.hex() in hashes:
            digest.update(position.to_bytes(8, "little") + memory_hash)
            count += 1
    return count, digest.hexdigest()


def mismatch(rewrite: Rewrite, ledger: Ledger, retraction_ledger: Ledger) -> str | None:
    """Why the save, by its ledgers, is in no state ``rewrite`` leaves at its phase, or
    ``None``: it is, or the journal records nothing to check (an earlier release's).
    Under the writer lock. With the counts and the digest its journal recorded:

    * ``copies``: both ledgers as the rewrite began, and the intents of what it erases the
      same ones, at the same positions;
    * ``files``: the same, or (the ledgers rewritten) the add ledger shorter by exactly
      those intents and holding none of what it erases; the retraction ledger no longer;
    * ``switch``: both ledgers as the rewrite of the ledgers left them, holding nothing it
      erases.

    Raises:
        PersistenceError: the ledger is damaged.
    """
    if rewrite.ledgers is None:
        return None
    adds, retractions = ledger.count(), retraction_ledger.count()
    expected_adds, expected_retractions = rewrite.ledgers
    if rewrite.phase == "switch":
        if (adds, retractions) != rewrite.ledgers:
            return (
                f"the ledgers hold {adds:,} memory and {retractions:,} retraction intents where "
                f"its rewrite left {expected_adds:,} and {expected_retractions:,}: the save "
                "changed after it"
            )
    elif retractions > expected_retractions or (
        rewrite.phase == "copies" and retractions != expected_retractions
    ):
        return (
            f"the retraction ledger holds {retractions:,} intents where its rewrite began "
            f"with {expected_retractions:,}: the save changed after it"
        )
    if not rewrite.erases or rewrite.erased_intents is None:
        if adds == expected_adds:
            return None
        return (
            f"the ledger holds {adds:,} intents where its rewrite began with "
            f"{expected_adds:,}: the save changed after it"
        )
    erased, digest = rewrite.erased_intents
    now = erased_intents(ledger, rewrite)
    untouched = adds == expected_adds and now == (erased, digest)
    rewritten = adds == expected_adds - erased and now[0] == 0
    if rewrite.phase == "switch" and now[0] == 0:
        return None
    if (rewrite.phase == "copies" and untouched) or (
        rewrite.phase == "files" and (untouched or rewritten)
    ):
        return None
    return (
        f"the intents of the memories it erases are not those it began with ({now[0]:,} now, "
        f"{erased:,} then, with their places), and the ledger holds {adds:,} intents where "
        f"it began with {expected_adds:,}: memories were added or erased after it"
    )


class RewriteJournal:
    """The rewrite journal of one store. :meth:`current` is for readers (no lock, cached);
    the other methods are called under the writer lock."""

    def __init__(self, data: Path) -> None:
        self.path = data / REWRITE_JOURNAL
        #: Where the journal of the last finished rewrite goes (see the module docstring).
        self.finished = finished_path(self.path)
        self._name = os.fspath(self.path)
        self._lock = threading.Lock()
        self._cached: tuple[tuple[int, int, int], Rewrite] | None = None

    def current(self) -> Rewrite | None:
        """The unfinished rewrite, or ``None`` (one ``lstat`` when there is none).

        Raises:
            PersistenceError: the journal is corrupt, not a regular file, or an old copy
                of a finished rewrite's (:meth:`read`).
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
                operation or phase, or an unsupported version), or its rewrite is finished
                (an old copy put back: see the module docstring).
        """
        # The traces first: a live journal read after them is newer than they are.
        finished = last_finished(self.path.parent)
        rewrite = self.named()
        if rewrite is None:
            return None
        stale = older(rewrite.generation, finished)
        if stale is not None:
            raise StaleJournalError(self.path, stale)
        return rewrite

    def named(self) -> Rewrite | None:
        """What the journal names, however old it is (no trace consulted); ``None`` if
        there is none. Only for ``check``, which must know what an erase journal it sets
        aside names (its memories get no intent from that check); every reader and writer
        uses :meth:`read`, which refuses an old copy.

        Raises:
            PersistenceError: the journal is corrupt (as :meth:`read`).
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
            generation, ledgers, erased = _checks(document, operation)
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
            generation,
            ledgers,
            erased,
        )

    def begin(self, rewrite: Rewrite) -> Rewrite:
        """Write the journal of a new rewrite, its generation one more than the newest the
        save finished (atomically and durably: an erase's commit); return it as written."""
        begun = dataclasses.replace(rewrite, generation=next_generation(self.path.parent))
        self.write(begun)
        return begun

    def write(self, rewrite: Rewrite) -> None:
        """Write (or advance) the journal atomically and durably."""
        fs.atomic_write(self.path, json.dumps(rewrite.document()).encode())

    def remove(self, generation: int = 0) -> None:
        """Mark the rewrite ``generation`` done: remove the journal durably, then record the
        generation in the trace (see the module docstring).

        The trace is written after the removal, never before: a crash between the two then
        leaves the older trace, never a live journal that looks finished. And it holds the
        generation alone: the journal of an erase names the erased memories' hashes, which
        must not outlive the erase.
        """
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PersistenceError(f"could not remove {self.path}: {exc.strerror}") from exc
        fs.fsync_directory(self.path.parent)
        fs.atomic_write(self.finished, json.dumps({"generation": generation}).encode())


def _checks(
    document: dict[str, object], operation: str
) -> tuple[int, tuple[int, int] | None, tuple[int, str] | None]:
    """The generation, ledger counts and erased intents of a journal (the last two
    ``None`` in an earlier release's journal).

    Raises:
        ValueError: one of them is malformed.
    """
    generation = document.get("generation", 0)
    if not isinstance(generation, int) or not _count(generation):
        raise ValueError("a bad generation")
    ledgers: tuple[int, int] | None = None
    found = document.get("ledgers")
    if found is not None:
        if not isinstance(found, list) or len(found) != 2 or not all(map(_count, found)):
            raise ValueError("bad ledger counts")
        ledgers = (found[0], found[1])
    erased: tuple[int, str] | None = None
    found = document.get("erased_intents")
    if found is not None:
        if (
            operation != "erase"
            or not isinstance(found, list)
            or len(found) != 2
            or not _count(found[0])
            or not isinstance(found[1], str)
            or not _HASH.match(found[1])
        ):
            raise ValueError("bad erased intents")
        erased = (found[0], found[1])
    return generation, ledgers, erased


def _count(value: object) -> bool:
    """Whether ``value`` is a non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
