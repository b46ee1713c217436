"""Copies of memories outside their partition, which an erase removes with them.

The store keeps some bytes of a memory outside its owner's partition files:

* **legacy documents** it migrated, moved into the backup folder ``.game-memory/legacy/``
  (flat ``v1/<sha256(session\\nowner\\nid)>.memory.json``; the C# runtime's folder whole,
  ``memory-v2*/s-<sha256(session)>/o-<sha256(owner)>/<sha256(id)>.memory.json``), or still
  in the save folder when a crash stopped the move (the next migration would bring them
  back if they stayed);
* **damaged files set aside** by ``check --fix --accept-loss`` in ``.game-memory/damaged/
  <time>/s-<session hash>.<file name>``, which may hold any record of their partition;
* **temporary files** a crash left in the session folder (``*.tmp``: an interrupted pack
  or file replacement, a copy of records).

:func:`remove_copies` deletes those of an erase durably (every folder it changed is
fsynced), before the erase touches the partition itself, so that a crash in between can
still name them from the partition's records. Of the damaged files set aside it deletes
every one that may hold a record of the erased partition: for a whole session all of the
session's, else the owner's log and retraction log segments and the session's packs (a
pack holds many owners). Their ``report.json`` stays: it names lost memories by id and
hash, never their text.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from game_memory.durable import fs
from game_memory.durable.names import identity_hash
from game_memory.errors import PersistenceError

__all__ = ["ErasedId", "remove_copies", "remove_temporary", "remove_tree"]

_LEGACY_SUFFIX = ".memory.json"
_CSHARP_FOLDER = ".memory-v2"


class ErasedId(NamedTuple):
    """What names an erased memory's copies outside its partition: its three ids."""

    session_id: str
    owner_id: str
    memory_id: str


def remove_copies(
    root: Path,
    data: Path,
    session_hash: str,
    owner_hash: str | None,
    erased: Iterable[ErasedId],
    *,
    whole_partitions: bool,
) -> int:
    """Delete the copies of ``erased`` outside their partitions; return how many files went.

    Args:
        root: The save folder (legacy documents not yet moved into the backup).
        data: Its ``.game-memory`` folder.
        session_hash: The session the erase covers.
        owner_hash: Its owner, or ``None`` for the whole session.
        erased: The memories erased (their ids name their legacy documents).
        whole_partitions: The erase covers whole partitions (a session, an owner), so the
            C# runtime's folders of the partition go whole.

    Raises:
        PersistenceError: a copy could not be removed.
    """
    removed = 0
    backup = data / "legacy"
    flat_names = set()
    csharp_names: dict[str, set[str]] = {}
    for memory in erased:
        key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
        flat_names.add(identity_hash(key) + _LEGACY_SUFFIX)
        owner_folder = f"o-{identity_hash(memory.owner_id)}"
        csharp_names.setdefault(owner_folder, set()).add(
            identity_hash(memory.memory_id) + _LEGACY_SUFFIX
        )
    for folder in (root, backup / "v1"):
        removed += _remove_named(folder, flat_names)
    for base in [root / _CSHARP_FOLDER, *_csharp_backups(backup)]:
        session = base / f"s-{session_hash}"
        if owner_hash is None and whole_partitions:
            removed += remove_tree(session)
        elif whole_partitions and owner_hash is not None:
            removed += remove_tree(session / f"o-{owner_hash}")
        else:
            for owner_folder, names in csharp_names.items():
                folder = session / owner_folder
                # The C# runtime's temporary files of a document (an add it never finished)
                # are named after it: <sha256(id)>.memory.json.<32 hex>.tmp.
                temporary = {
                    name
                    for name in _names(folder)
                    if name.endswith(".tmp") and name.split(".", 1)[0] + _LEGACY_SUFFIX in names
                }
                removed += _remove_named(folder, names | temporary)
    removed += _remove_set_aside(data / "damaged", session_hash, owner_hash)
    removed += remove_temporary(data / f"s-{session_hash}")
    return removed


def remove_temporary(folder: Path) -> int:
    """Delete the temporary files (``*.tmp``) a crash left in a folder; how many."""
    names = {name for name in _names(folder) if name.endswith(".tmp")}
    return _remove_named(folder, names)


def remove_tree(path: Path) -> int:
    """Delete a folder and everything in it, durably; how many files went (0 if absent).

    Links are removed, never followed.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        _unlink(path)
        fs.fsync_directory(path.parent)
        return 1
    removed = 0
    for name in _names(path):
        child = path / name
        if stat.S_ISDIR(os.lstat(child).st_mode):
            removed += remove_tree(child)
        else:
            _unlink(child)
            removed += 1
    fs.fsync_directory(path)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PersistenceError(f"could not remove the folder {path}: {exc.strerror}") from exc
    fs.fsync_directory(path.parent)
    return removed


def _csharp_backups(backup: Path) -> list[Path]:
    return [backup / name for name in _names(backup) if name.startswith("memory-v2")]


def _remove_set_aside(damaged: Path, session_hash: str, owner_hash: str | None) -> int:
    prefix = f"s-{session_hash}."
    removed = 0
    for stamp in _names(damaged):
        folder = damaged / stamp
        names = set()
        for name in _names(folder):
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :]
            if owner_hash is None or rest.startswith(("p-", f"o-{owner_hash}", f"r-{owner_hash}")):
                names.add(name)
        removed += _remove_named(folder, names)
    return removed


def _names(folder: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise PersistenceError(f"could not list {folder}: {exc.strerror}") from exc


def _remove_named(folder: Path, names: set[str]) -> int:
    """Unlink those of ``names`` present in ``folder``, then fsync it if any went."""
    if not names:
        return 0
    present = names.intersection(_names(folder))
    for name in sorted(present):
        _unlink(folder / name)
    if present:
        fs.fsync_directory(folder)
    return len(present)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise PersistenceError(f"could not remove {path}: {exc.strerror}") from exc
