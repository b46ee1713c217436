"""The migration journal: how a bulk batch is undone exactly when it did not commit.

``migration.json`` (``{"format_version": 1, "ledger_records_before": N, "packs": [...]}``)
is written durably before a batch writes anything else and removed to commit it. While it
exists the batch can be undone: delete its packs, cut the ledger back to ``N``, delete the
journal. The order of that undo matters under a power loss: the packs' removal is made
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

from game_memory.durable import fs
from game_memory.errors import PersistenceError
from game_memory.store.ledger import Ledger

__all__ = ["MigrationJournal"]

_PACK_RELATIVE = re.compile(r"^s-[0-9a-f]{64}/p-[1-9][0-9]{0,8}\.pack$")
_MAXIMUM_BYTES = 1 << 24


class MigrationJournal:
    """The journal file of one store; call every method under the store lock."""

    def __init__(self, data: Path, ledger: Ledger) -> None:
        self.data = data
        self.path = data / "migration.json"
        self._ledger = ledger

    def read(self) -> tuple[int, list[Path]] | None:
        """The ledger mark and the packs of an uncommitted batch, or ``None`` if none.

        Raises:
            PersistenceError: the journal is corrupt, names a pack outside the store, or
                marks more intents than the ledger holds.
        """
        read = fs.read_file(self.path, _MAXIMUM_BYTES)
        if read is None:
            return None
        try:
            document = json.loads(read[0])
            before = document["ledger_records_before"]
            names = document["packs"]
            if document["format_version"] != 1 or not isinstance(before, int) or before < 0:
                raise ValueError("bad fields")
            if not isinstance(names, list) or any(
                not isinstance(name, str) or not _PACK_RELATIVE.match(name) for name in names
            ):
                raise ValueError("a pack path is outside the store")
        except (ValueError, KeyError, TypeError) as exc:
            raise PersistenceError(
                f"{self.path} is corrupt ({exc}); restore the save from a backup"
            ) from exc
        if before > self._ledger.count():
            raise PersistenceError(
                f"{self.path} marks {before} intents but the ledger holds fewer; the save "
                "cannot be reconciled safely. Restore it from a backup."
            )
        return before, [self.data / name for name in names]

    def write(self, ledger_count: int, packs: list[str]) -> None:
        """Mark the start of a batch: the ledger count before it and the packs it adds."""
        document = {
            "format_version": 1,
            "ledger_records_before": ledger_count,
            "packs": [os.path.relpath(path, self.data) for path in packs],
        }
        fs.atomic_write(self.path, json.dumps(document).encode())

    def commit(self) -> None:
        """Mark the batch committed (all its records durable): remove the journal durably."""
        _remove(self.path)
        fs.fsync_directory(self.data)

    def roll_back(self) -> bool:
        """Undo an uncommitted batch (see the module docstring); whether there was one."""
        found = self.read()
        if found is None:
            return False
        before, packs = found
        folders: set[Path] = set()
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
