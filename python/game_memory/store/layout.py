"""The save folder itself: where it is, creating it durably, its format file, its identity.

``<save>/.game-memory/format.json`` says which format the folder holds. A store object
remembers the identity (device and inode) of the save folder and of its data folder when
it opens them; :meth:`SaveLayout.guard` re-checks before every operation that neither
became a symbolic link, that no ancestor did, and that neither was swapped for another
folder, so a store never reads or writes through a link planted after it was opened.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import stat
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError

__all__ = [
    "DATA_FOLDER",
    "STORE_FORMAT_VERSION",
    "SaveLayout",
    "damage_advice",
    "salvage_advice",
    "save_root",
]

DATA_FOLDER = ".game-memory"
#: The format new saves get. Older formats are read and written as they are, and upgraded
#: by the first write that needs the newer one (format.json is replaced atomically before
#: that write), so older releases then refuse the save instead of misreading it:
#: 1 (before ``belief_key``) -> 2 with the first memory carrying a ``belief_key``;
#: 2 -> 3 with the first retraction, consolidation summary or erase/compaction journal.
STORE_FORMAT_VERSION = 3
_READABLE_FORMATS = (1, 2, 3)
_FORMAT_NAME = "game-memory-store"
_LEGACY_SUFFIX = ".memory.json"
_CSHARP_FOLDER = ".memory-v2"


def save_root(path: str | os.PathLike[str]) -> Path | None:
    """The save folder a file of a data folder lies in (the parent of its ``.game-memory``
    folder); ``None`` for a file outside any data folder."""
    for parent in Path(path).parents:
        if parent.name == DATA_FOLDER:
            return parent.parent
    return None


def damage_advice(root: Path | None) -> str:
    """What a user can do about damage to the save at ``root`` (``None``: not known), as
    commands to run as written: each names the save folder.

    For damage ``check --fix --accept-loss`` salvages (a damaged log, pack or ledger): it
    keeps every intact record, so it is the repair to name, with a backup as the other.
    """
    save = "DIR" if root is None else shlex.quote(str(root))
    return (
        f"Run 'game-memory check --save-dir {save}' to see the damage, then "
        f"'game-memory check --fix --accept-loss --save-dir {save}' to keep every intact "
        "memory and give up the lost ones, or restore the save from a backup"
    )


def salvage_advice(path: str | os.PathLike[str]) -> str:
    """:func:`damage_advice` for the save that holds the damaged file ``path``."""
    return damage_advice(save_root(path))


class SaveLayout:
    """The save folder ``root`` and its data folder ``root/.game-memory``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / DATA_FOLDER
        self._identity: tuple[tuple[int, int], tuple[int, int]] | None = None
        # The save folder and its data folder, as strings (guard's hot path).
        self._chain = (os.fspath(root), os.fspath(self.data))

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` succeeded."""
        return self._identity is not None

    def open_folders(self, *, create: bool) -> bool:
        """Check the save and data folders, creating what is missing if allowed.

        Args:
            create: Make the save folder (and its missing parents) and the data folder when
                they do not exist, durably (each new folder's parent is fsynced). Without
                it a missing folder, or a folder without a save, is refused (a legacy save
                may still be migrated into it).

        Returns:
            Whether a new save was created.

        Raises:
            PersistenceError: a link, a file where a folder should be, an unreadable
                folder, or (with ``create=False``) no save there.
        """
        fs.check_no_symlinks(self.root)
        created = False
        root = _kind(self.root)
        if root is None:
            if not create:
                raise PersistenceError(
                    f"there is no save at {self.root}: the folder does not exist. Check the "
                    "path; only commands that write (serve, migrate, appends) create a save"
                )
            fs.make_folders(self.root)
            created = True
        elif root != "folder":
            raise PersistenceError(
                f"{self.root} is a {root}, not a folder; give the folder that holds the save"
            )
        _check_readable(self.root)
        data = _kind(self.data)
        if data is None and not create and not _has_legacy(self.root):
            raise PersistenceError(
                f"{self.root} holds no game-memory save (no {DATA_FOLDER} folder and no legacy "
                "documents). Check the path; only commands that write create a save"
            )
        if data is None:
            created = fs.ensure_directory(self.data) or created
        else:
            fs.ensure_directory(self.data, create=False)
        _check_readable(self.data)
        return created

    def remember(self) -> None:
        """Record the identity of the folders, which :meth:`guard` checks from now on."""
        self._identity = (_identity(self.root), _identity(self.data))  # as in _chain

    def write_format(self) -> None:
        """Write the format file of a new store (call under the store lock)."""
        document = {"format": _FORMAT_NAME, "format_version": STORE_FORMAT_VERSION}
        fs.atomic_write(self.data / "format.json", json.dumps(document).encode())

    def guard(self) -> None:
        """Refuse to go on if the save folder changed since :meth:`remember`.

        Two ``lstat`` calls. The data folder and the save folder must still be the folders
        that were opened: a link put in the place of either, or another folder, is refused.
        (An ancestor swapped for a link is noticed too, unless it leads back to the very
        same folders, which then reads exactly what was opened.)

        Raises:
            PersistenceError: a link anywhere on the path, or the save or data folder is
                another folder now (moved, replaced, deleted).
        """
        identity = self._identity
        if identity is None:
            return
        for path, expected in zip(self._chain, identity, strict=True):
            try:
                info = os.lstat(path)
            except OSError as exc:
                raise PersistenceError(
                    f"the save folder {self.root} was moved, deleted or replaced since the store "
                    f"opened it ({path}: {exc.strerror or exc}); the store refuses to go on. "
                    "Put the save back, or open it again (a new store object)."
                ) from exc
            if stat.S_ISLNK(info.st_mode):
                raise PersistenceError(
                    f"refusing to use {self.root}: {path} became a symbolic link after the "
                    "store opened it. Point the store at the real folder instead."
                )
            if (info.st_dev, info.st_ino) != expected:
                raise PersistenceError(
                    f"the save folder {self.root} was replaced by another folder since the store "
                    "opened it; the store refuses to read or write through the new one. Put "
                    "the save back, or open it again (a new store object) if the change was "
                    "meant."
                )

    def read_format(self) -> int | None:
        """The format version in ``format.json``; ``None`` when the file does not exist.

        Raises:
            PersistenceError: the file is damaged (the message says what is wrong with it and
                the content that restores it), or names a format this release cannot read.
        """
        path = self.data / "format.json"
        read = fs.read_file(path, 65_536)
        if read is None:
            return None
        version, problem = _parse_format(read[0])
        if version is None:
            raise PersistenceError(_damaged_format_message(path, problem))
        if version not in _READABLE_FORMATS:
            raise PersistenceError(
                f"{self.root} was written in store format {version}; this game-memory reads "
                f"formats 1 to {STORE_FORMAT_VERSION}. Upgrade game-memory to open it."
            )
        return version

    def require_format(self, version: int) -> None:
        """Upgrade format.json to ``version`` if it is older (under the writer lock)."""
        current = self.read_format()
        if current is not None and current < version:
            document = {"format": _FORMAT_NAME, "format_version": version}
            fs.atomic_write(self.data / "format.json", json.dumps(document).encode())


def _parse_format(data: bytes) -> tuple[int | None, str]:
    """The version a ``format.json`` names, or ``None`` and what is wrong with the file (in
    words a person can check against it, never a parser's internals)."""
    try:
        document = json.loads(data)
    except ValueError:  # UnicodeDecodeError included
        return None, "it is not valid JSON"
    if not isinstance(document, dict):
        return None, "it is not a JSON object"
    if document.get("format") != _FORMAT_NAME:
        return None, f'its "format" field is not "{_FORMAT_NAME}"'
    version = document.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return None, 'its "format_version" field is not a whole number'
    return version, ""


def _damaged_format_message(path: Path, problem: str) -> str:
    """What to say of a damaged ``format.json``: what is wrong and the content that repairs it.

    The format cannot be told from the rest of the folder without reading every record, so
    nothing rewrites the file on its own. The content of the newest format this release
    writes is always safe to put back for this release, which reads every older format the
    same way; the version only tells older releases to refuse the save, so writing it can
    lock an older release out but never makes one misread the save.
    """
    content = json.dumps({"format": _FORMAT_NAME, "format_version": STORE_FORMAT_VERSION})
    return (
        f"{path} is damaged ({problem}), so the store cannot tell which format the save "
        "holds and reads none of it. Restore that file (or the whole save) from a backup. "
        "Without a backup, and unless a game-memory release newer than this one wrote the "
        "save, replace the file's whole content with the JSON at the end of this message (this "
        "release then reads the save as before; releases that predate store format "
        f"{STORE_FORMAT_VERSION} will refuse it rather than misread it): {content}"
    )


def _kind(path: Path) -> str | None:
    """``"folder"``, ``"file"``, ``"link"`` or another kind of ``path``; ``None`` if absent."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError as exc:
        raise PersistenceError(
            f"{path} cannot be a save: a part of its path is a file, not a folder"
        ) from exc
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(info.st_mode):
        return "folder"
    if stat.S_ISLNK(info.st_mode):
        return "symbolic link"
    return "file" if stat.S_ISREG(info.st_mode) else "special file"


def _check_readable(path: Path) -> None:
    if not os.access(path, os.R_OK | os.X_OK):
        raise PersistenceError(
            f"{path} cannot be read (permission denied); give this user access to the save "
            "folder, or run as its owner"
        )


def _identity(path: Path) -> tuple[int, int]:
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise PersistenceError(f"{path} is not a folder any more")
    return info.st_dev, info.st_ino


def _has_legacy(root: Path) -> bool:
    try:
        with os.scandir(root) as entries:
            return any(
                entry.name.endswith(_LEGACY_SUFFIX) or entry.name == _CSHARP_FOLDER
                for entry in entries
            )
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise PersistenceError(f"{root} cannot be read (permission denied)") from exc
        raise PersistenceError(f"could not list {root}: {exc.strerror or exc}") from exc
