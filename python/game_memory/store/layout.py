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
import stat
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError

__all__ = ["DATA_FOLDER", "STORE_FORMAT_VERSION", "SaveLayout"]

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
            PersistenceError: the file is not a store format file, or of another version.
        """
        path = self.data / "format.json"
        read = fs.read_file(path, 65_536)
        if read is None:
            return None
        try:
            document = json.loads(read[0])
            version = document["format_version"]
            if document["format"] != _FORMAT_NAME or not isinstance(version, int):
                raise ValueError("not a game-memory store")
        except (ValueError, KeyError, TypeError) as exc:
            raise PersistenceError(f"{path} is not a valid store format file: {exc}") from exc
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
