"""The batch journal: how a bulk batch is undone exactly when it did not commit.

``migration.json`` (``{"format_version": 1, "ledger_records_before": N, "packs": [...]}``)
is written durably before a batch writes anything else and removed to commit it. While it
exists the batch can be undone: delete its packs, cut the ledger back to ``N``, delete the
journal. Two kinds of batch use it: a legacy migration (packs) and an ``append_many``
(records appended to owner logs). The latter writes format version 2, which
adds ``"segments": [[path, size_before], ...]``: every log segment the batch appends to,
with its valid size before the batch (``-1`` for a segment the batch creates). Undoing it
cuts each segment back to that size (deleting the ones it created) before the ledger is
cut. An older release refuses a version-2 journal as corrupt (it fails closed) rather than
undo only half of it. The order of that undo matters under a power loss: the packs' removal is made
durable (their session folders fsynced) *before* the journal's removal is, so a power loss
can never bring back the packs of a batch whose journal is gone (their memories would be in
the partitions with no intent in the ledger, and the next migration would skip them as
already migrated).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from game_memory.durable import fs, portable
from game_memory.errors import PersistenceError
from game_memory.store.ledger import Ledger

__all__ = ["MigrationJournal"]

_PACK_RELATIVE = re.compile(r"^s-[0-9a-f]{64}/p-[1-9][0-9]{0,8}\.pack$")
_SEGMENT_RELATIVE = re.compile(r"^s-[0-9a-f]{64}/o-[0-9a-f]{64}(\.[1-9][0-9]{0,8})?\.log$")
_MAXIMUM_BYTES = 1 << 24


class MigrationJournal:
    """The journal file of one store; call every method under the store lock."""

    def __init__(self, data: Path, ledger: Ledger) -> None:
        self.data = data
        self.path = data / "migration.json"
        self._ledger = ledger
        #: The format version of the journal last read: 1 a legacy migration's batch, 2 an
        #: ``append_many`` batch (what ``check`` calls it), ``None`` before any was read.
        self.last_version: int | None = None

    def read(self) -> tuple[int, list[Path]] | None:
        """The ledger mark and the packs of an uncommitted batch, or ``None`` if none.

        Raises:
            PersistenceError: the journal is corrupt, names a pack outside the store, or
                marks more intents than the ledger holds.
        """
        found = self.read_all()
        return None if found is None else (found[0], found[1])

    def read_all(self) -> tuple[int, list[Path], list[tuple[Path, int]]] | None:
        """Like :meth:`read`, plus the log segments of the batch and their sizes before it."""
        read = fs.read_file(self.path, _MAXIMUM_BYTES)
        if read is None:
            return None
        try:
            document = json.loads(read[0])
            before = document["ledger_records_before"]
            names = document["packs"]
            version = document["format_version"]
            segments = document.get("segments", []) if version == 2 else []
            if version not in (1, 2) or not isinstance(before, int) or before < 0:
                raise ValueError("bad fields")
            if not isinstance(names, list) or any(
                not isinstance(name, str) or not _PACK_RELATIVE.match(name) for name in names
            ):
                raise ValueError("a pack path is outside the store")
            if not isinstance(segments, list) or any(
                not isinstance(item, list)
                or len(item) != 2
                or not isinstance(item[0], str)
                or not _SEGMENT_RELATIVE.match(item[0])
                or not isinstance(item[1], int)
                or isinstance(item[1], bool)
                or item[1] < -1
                for item in segments
            ):
                raise ValueError("a segment entry is malformed or outside the store")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PersistenceError(
                f"{self.path} is corrupt ({exc}); restore the save from a backup"
            ) from exc
        if before > self._ledger.count():
            raise PersistenceError(
                f"{self.path} marks {before} intents but the ledger holds fewer; the save "
                "cannot be reconciled safely. Restore it from a backup."
            )
        tails = [(self.data / name, size) for name, size in segments]
        self.last_version = version
        return before, [self.data / name for name in names], tails

    def write(
        self,
        ledger_count: int,
        packs: list[str],
        segments: list[tuple[str, int]] | None = None,
    ) -> None:
        """Mark the start of a batch: the ledger count before it, the packs it adds and
        (a log batch) the segments it appends to with their sizes before it (-1: new)."""
        document: dict[str, object] = {
            "format_version": 1 if segments is None else 2,
            "ledger_records_before": ledger_count,
            "packs": [os.path.relpath(path, self.data) for path in packs],
        }
        if segments is not None:
            document["segments"] = [
                [os.path.relpath(path, self.data), size] for path, size in segments
            ]
        fs.atomic_write(self.path, json.dumps(document).encode())

    def commit(self) -> None:
        """Mark the batch committed (all its records durable): remove the journal durably."""
        _remove(self.path)
        fs.fsync_directory(self.data)

    def roll_back(self) -> bool:
        """Undo an uncommitted batch (see the module docstring); whether there was one."""
        found = self.read_all()
        if found is None:
            return False
        before, packs, segments = found
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
        return True


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
