"""The batch journal: how a bulk batch is undone exactly when it did not commit, and only then.

``migration.json`` (``{"format_version": 1, "generation": G, "ledger_records_before": N,
"packs": [...]}``) is written durably before a batch writes anything else and taken away
to commit it. While it exists the batch can be undone: delete its packs, cut the ledger
back to ``N``, take the journal away. Two kinds of batch use it: a legacy migration (packs)
and an ``append_many`` (records appended to owner logs). The latter writes format version
2, which adds ``"segments": [[path, size_before], ...]``: every log segment the batch
appends to, with its valid size before the batch (``-1`` for a segment the batch creates),
and, to tell its own state from a later one, ``"ledger_records_after"`` (the ledger's count
once the batch is written) and ``"segment_limits"`` (the most bytes each segment holds
while the batch is uncommitted). Undoing it cuts each segment back to its size before
(deleting the ones it created) before the ledger is cut. An older release refuses a
version-2 journal as corrupt (it fails closed) rather than undo only half of it. The order
of that undo matters under a power loss: the packs' removal is made durable (their session
folders fsynced) *before* the journal's removal is, so a power loss can never bring back
the packs of a batch whose journal is gone (their memories would be in the partitions with
no intent in the ledger, and the next migration would skip them as already migrated).

**A journal is applied only to the save its batch left.** An old copy of the journal put
back after its batch finished (a cloud sync or a backup tool restoring one file) would
otherwise "undo" a batch that committed long ago: cut the ledger and the logs back and
destroy every memory acknowledged since, the batch's own included. Two checks stand in
the way, and a journal that fails either is never applied (:class:`PersistenceError`
naming it and the repair, ``journal_traces.StaleJournalError``):

* **Generations**, shared with the rewrite journal (``rewrite_journal.py``). Each journal,
  of a batch or of a rewrite, carries a ``generation``, one more than the newest its save
  finished, and finishing one records its generation in the journal's trace:
  ``migration.done.json`` (the journal itself, renamed there instead of deleted: the same
  one rename and folder fsync) or ``rewrite.done.json``. Nothing else can finish while a
  journal is there (the next writer resolves it first), so a journal whose generation is
  not newer than a trace's (one without a generation, an earlier release's, counts as 0)
  is an old copy: its operation finished, and so did a later one. Readers read the traces
  *before* the journal, so a live batch is never mistaken for a finished one.
* **The save against the journal**, for when no trace can judge it (traces lost, or a save
  this release never finished a journal in): the ledger must hold at least ``N`` intents
  and at most ``ledger_records_after``; every intent after ``N`` must be of a partition the
  batch writes (its segments' owners, its packs' sessions) and written by a batch, not by
  an append (a group commit names its group in the intent: ``ledger.py``); no segment may
  hold more than its limit. Every state a kill or a power loss leaves mid-batch passes;
  memories appended after the batch do not.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.errors import PersistenceError
from game_memory.store.journal_traces import (
    BATCH_JOURNAL,
    REWRITE_JOURNAL,
    StaleJournalError,
    last_finished,
    next_generation,
    older,
    retire,
    whole_number,
)
from game_memory.store.ledger import RECORD_BYTES, Ledger

__all__ = ["BATCH_JOURNAL", "REWRITE_JOURNAL", "MigrationJournal", "RolledBack"]

_PACK_RELATIVE = re.compile(r"^s-([0-9a-f]{64})/p-[1-9][0-9]{0,8}\.pack$")
_SEGMENT_RELATIVE = re.compile(r"^s-([0-9a-f]{64})/o-([0-9a-f]{64})(\.[1-9][0-9]{0,8})?\.log$")
_MAXIMUM_BYTES = 1 << 24
_GROUP_FIELD = 116  # where an intent's group field starts (zero: no group commit wrote it)
_ATTEMPTS = 3  # reads of a journal a live batch keeps replacing (an unlocked reader)


@dataclass(frozen=True, slots=True)
class _Batch:
    """A journal as read (see the module docstring); names relative to the data folder."""

    version: int
    generation: int
    before: int
    packs: list[str]
    segments: list[tuple[str, int]]
    after: int | None
    limits: list[int] | None


@dataclass(frozen=True, slots=True)
class RolledBack:
    """A batch :meth:`MigrationJournal.roll_back` undid, for ``check`` to name."""

    #: An ``append_many`` batch (journal version 2), not a legacy migration's.
    appended: bool
    #: How many of its intents the ledger held when it was undone (all cut).
    intents: int


class MigrationJournal:
    """The journal file of one store; call every method but :meth:`read` under the store
    lock (:meth:`read` is safe beside a running batch)."""

    def __init__(self, data: Path, ledger: Ledger) -> None:
        self.data = data
        self.path = data / BATCH_JOURNAL
        self._ledger = ledger
        #: The format version of the journal last read: 1 a legacy migration's batch, 2 an
        #: ``append_many`` batch (what ``check`` calls it), ``None`` before any was read.
        self.last_version: int | None = None

    def read(self) -> tuple[int, list[Path]] | None:
        """The ledger mark and the packs of an uncommitted batch, or ``None`` if none.

        Raises:
            PersistenceError: the journal is corrupt, names a pack outside the store, or
                disagrees with the save (an old copy: see the module docstring).
        """
        found = self.read_all()
        return None if found is None else (found[0], found[1])

    def read_all(self) -> tuple[int, list[Path], list[tuple[Path, int]]] | None:
        """Like :meth:`read`, plus the log segments of the batch and their sizes before it."""
        for _attempt in range(_ATTEMPTS):
            # The traces first: a live journal read after them is newer than they are.
            finished = last_finished(self.data)
            read = fs.read_file(self.path, _MAXIMUM_BYTES)
            if read is None:
                return None
            batch = self._parse(read[0])
            stale = older(batch.generation, finished)
            if stale is not None:
                raise StaleJournalError(self.path, stale)
            problem = self._mismatch(batch)
            if problem is None:
                self.last_version = batch.version
                tails = [(self.data / name, size) for name, size in batch.segments]
                return batch.before, [self.data / name for name in batch.packs], tails
            if _unchanged(self.path, read[1]):
                raise StaleJournalError(self.path, problem)
            # A live batch committed while this (unlocked) read looked: read again.
        raise PersistenceError(f"{self.path} kept changing while it was read; try again")

    def write(
        self,
        ledger_count: int,
        packs: list[str],
        segments: list[tuple[str, int]] | None = None,
        *,
        ledger_after: int | None = None,
        ends: list[int] | None = None,
    ) -> None:
        """Mark the start of a batch: the ledger count before it, the packs it adds and
        (a log batch) the segments it appends to with their sizes before it (-1: new).

        ``ledger_after``: the ledger's count once the batch is written; ``ends``: each
        segment's size then (a torn tail the batch cuts first may make it longer now: its
        limit is the larger). Both let a recovery tell the batch's state from a later one.
        """
        document: dict[str, object] = {
            "format_version": 1 if segments is None else 2,
            "generation": next_generation(self.data),
            "ledger_records_before": ledger_count,
            "packs": [os.path.relpath(path, self.data) for path in packs],
        }
        if ledger_after is not None:
            document["ledger_records_after"] = ledger_after
        if segments is not None:
            document["segments"] = [
                [os.path.relpath(path, self.data), size] for path, size in segments
            ]
            if ends is not None:
                document["segment_limits"] = [
                    max(end, _size(Path(path)))
                    for (path, _size_before), end in zip(segments, ends, strict=True)
                ]
        fs.atomic_write(self.path, json.dumps(document).encode())

    def commit(self) -> None:
        """Mark the batch committed (all its records durable): take the journal away
        durably (renamed to its trace: see the module docstring)."""
        retire(self.path)

    def roll_back(self) -> RolledBack | None:
        """Undo an uncommitted batch (see the module docstring); what it undid, ``None`` if
        there was none.

        Raises:
            PersistenceError: the journal is corrupt or disagrees with the save (then
                nothing is undone), or a file could not be cut or removed.
        """
        found = self.read_all()
        if found is None:
            return None
        before, packs, segments = found
        undone = RolledBack(self.last_version == 2, max(0, self._ledger.count() - before))
        folders: set[Path] = set()
        for path, size in segments:
            if size < 0:
                if _remove(path):
                    folders.add(path.parent)
            else:
                _cut(path, size)
        for path in packs:
            if _remove(path):
                folders.add(path.parent)
        for folder in sorted(folders):
            fs.fsync_directory(folder)  # the packs stay gone, whatever happens next
        if self._ledger.count() > before:
            self._ledger.truncate(before)
        self.commit()
        return undone

    def _parse(self, data: bytes) -> _Batch:
        """The journal's fields, checked for shape.

        Raises:
            PersistenceError: the journal is corrupt or names a file outside the store.
        """
        try:
            document = json.loads(data)
            before = document["ledger_records_before"]
            names = document["packs"]
            version = document["format_version"]
            segments = document.get("segments", []) if version == 2 else []
            generation = document.get("generation", 0)
            after = document.get("ledger_records_after")
            limits = document.get("segment_limits") if version == 2 else None
            if version not in (1, 2) or not whole_number(before):
                raise ValueError("bad fields")
            if not whole_number(generation) or (
                after is not None and not whole_number(after, before)
            ):
                raise ValueError("a bad generation or ledger count")
            if not isinstance(names, list) or any(
                not isinstance(name, str) or not _PACK_RELATIVE.match(name) for name in names
            ):
                raise ValueError("a pack path is outside the store")
            if not isinstance(segments, list) or any(
                not isinstance(item, list)
                or len(item) != 2
                or not isinstance(item[0], str)
                or not _SEGMENT_RELATIVE.match(item[0])
                or not whole_number(item[1], -1)
                for item in segments
            ):
                raise ValueError("a segment entry is malformed or outside the store")
            if limits is not None and (
                not isinstance(limits, list)
                or len(limits) != len(segments)
                or not all(whole_number(limit) for limit in limits)
            ):
                raise ValueError("bad segment limits")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PersistenceError(
                f"{self.path} is corrupt ({exc}); restore the save from a backup"
            ) from exc
        return _Batch(
            version,
            generation,
            before,
            names,
            [(name, size) for name, size in segments],
            after,
            limits,
        )

    def _mismatch(self, batch: _Batch) -> str | None:
        """Why the save is in no state the batch leaves uncommitted, or ``None`` (it is)."""
        return self._sizes_problem(batch) or self._intents_problem(batch)

    def _sizes_problem(self, batch: _Batch) -> str | None:
        """The ledger's count and the segments' sizes against the journal's bounds."""
        count = self._ledger.count()
        if batch.before > count:
            return (
                f"it marks {batch.before:,} intents before its batch but the ledger holds {count:,}"
            )
        if batch.after is not None and count > batch.after:
            return (
                f"the ledger holds {count - batch.before:,} intents after its mark, more than "
                f"the {batch.after - batch.before:,} of its batch: memories were added after it"
            )
        if batch.limits is not None:
            for (name, _before), limit in zip(batch.segments, batch.limits, strict=True):
                size = _size(self.data / name)
                if size > limit:
                    return (
                        f"{name} holds {size:,} bytes, more than the {limit:,} its batch "
                        "leaves: records were appended after it"
                    )
        return None

    def _intents_problem(self, batch: _Batch) -> str | None:
        """Each intent after the mark: of a partition the batch writes, not a group's."""
        written = set()
        for name, _size_before in batch.segments:
            match = _SEGMENT_RELATIVE.match(name)
            assert match is not None  # checked by _parse
            written.add((match.group(1), match.group(2)))
        sessions = set()
        for name in batch.packs:
            match = _PACK_RELATIVE.match(name)
            assert match is not None
            sessions.add(match.group(1))
        groups = self._group_fields(batch.before)
        for (index, entry, _start), group in zip(
            self._ledger.read_from(batch.before), groups, strict=False
        ):
            if entry is None:
                continue  # unwritten (zeros a power loss left) or torn: never acknowledged
            if any(group):
                return (
                    f"ledger intent {index:,}, after its mark, was written by an append (it "
                    "names its group commit), not by a batch: memories were appended after it"
                )
            if (entry.session_hash, entry.owner_hash) in written or entry.session_hash in sessions:
                continue
            return (
                f"ledger intent {index:,}, after its mark, is of a partition its batch does "
                f"not write (s-{entry.session_hash[:12]}…/o-{entry.owner_hash[:12]}…): "
                "memories were added after it"
            )
        return None

    def _group_fields(self, start: int) -> list[bytes]:
        """The group field (bytes 116-127, zero unless a group commit wrote the intent:
        ``docs/storage-format.md``) of every whole intent from ``start`` on."""
        read = fs.read_file(
            self._ledger.path, self._ledger.maximum_bytes, offset=start * RECORD_BYTES
        )
        if read is None:
            return []
        data = read[0]
        return [
            data[offset + _GROUP_FIELD : offset + RECORD_BYTES]
            for offset in range(0, len(data) - RECORD_BYTES + 1, RECORD_BYTES)
        ]


def _unchanged(path: Path, info: os.stat_result) -> bool:
    """Whether ``path`` is still the file ``info`` describes (same inode, size and mtime)."""
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc
    return (now.st_ino, now.st_size, now.st_mtime_ns) == (
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
    )


def _size(path: Path) -> int:
    """The size of a file, ``-1`` if it does not exist."""
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return -1
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc


def _remove(path: Path) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise PersistenceError(f"could not remove {path}: {exc.strerror}") from exc
    return True


def _cut(path: Path, size: int) -> None:
    """Durably cut a log segment back to ``size`` (nothing if it is not longer)."""
    try:
        fd = os.open(path, os.O_WRONLY | portable.OPEN_FLAGS)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PersistenceError(f"could not open {path}: {exc.strerror}") from exc
    try:
        if os.fstat(fd).st_size > size:
            os.ftruncate(fd, size)
            os.fsync(fd)
    except OSError as exc:
        raise PersistenceError(f"could not cut {path} back: {exc.strerror}") from exc
    finally:
        os.close(fd)
