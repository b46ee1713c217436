"""Write the addon's Asset Library zip: ``addons/game_memory/**`` and nothing else.

The archive is deterministic: the same addon folder always gives the same bytes (entries
sorted by path, one fixed timestamp, fixed permissions, one compression level), so a
release can be rebuilt and compared. Its ``plugin.cfg`` must carry the package's version;
an addon folder that disagrees is refused rather than shipped under the wrong number.
Godot's asset installer keeps an archive whose top folder is ``addons/`` as it is, so the
files land in ``res://addons/game_memory/``, where the addon's scripts expect themselves.
"""

from __future__ import annotations

import configparser
import errno
import importlib.metadata
import os
import secrets
import zipfile
from dataclasses import dataclass
from pathlib import Path

from game_memory.bundle.layout import BundleError

__all__ = ["ADDON_PREFIX", "AddonArchive", "checkout_addon_folder", "write_addon_archive"]

#: Where the addon's files sit inside the archive (and inside a Godot project).
ADDON_PREFIX = "addons/game_memory/"
# 1980-01-01 00:00:00, the earliest moment a zip entry can carry.
_TIMESTAMP = (1980, 1, 1, 0, 0, 0)
_FILE_MODE = 0o100644 << 16


@dataclass(frozen=True)
class AddonArchive:
    """A written addon archive.

    Attributes:
        path: The zip file.
        version: The addon's (and the package's) version.
        files: The archive's entry names, in order.
        bytes: The zip's size.
    """

    path: Path
    version: str
    files: tuple[str, ...]
    bytes: int


def checkout_addon_folder() -> Path:
    """``godot_addon/addons/game_memory`` of the checkout this package runs from."""
    return Path(__file__).resolve().parents[3] / "godot_addon" / "addons" / "game_memory"


def _addon_files(source: Path) -> list[Path]:
    files = []
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
            continue  # editor caches and platform litter (.godot/, .DS_Store) never ship
        if path.is_symlink():
            raise BundleError(f"{path} is a symbolic link; the addon archive holds plain files")
        if path.is_file():
            files.append(path)
    return files


def _plugin_version(source: Path) -> str:
    config = configparser.ConfigParser(interpolation=None)
    try:
        config.read_string((source / "plugin.cfg").read_text(encoding="utf-8"))
        return config["plugin"]["version"].strip().strip('"')
    except (OSError, UnicodeDecodeError, KeyError, configparser.Error) as exc:
        raise BundleError(
            f"{source} has no readable plugin.cfg with a version ({exc}); is it the addon "
            "folder addons/game_memory?"
        ) from exc


def _new_temporary(folder: Path) -> tuple[Path, int]:
    """Create a new, empty ``.addon-*.zip`` in ``folder`` and open it for writing.

    Not ``tempfile.mkstemp``: its file is private (0600) and keeps that mode through the
    rename, so the released zip could be read by its builder only (not by the CI upload,
    web server or colleague that picks it up). Created with 0666 less the umask, like any
    file the user makes; ``O_EXCL`` keeps two builds from sharing one temporary file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _attempt in range(100):
        path = folder / f".addon-{secrets.token_hex(8)}.zip"
        try:
            return path, os.open(path, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(folder))


def write_addon_archive(output: Path, source: Path | None = None) -> AddonArchive:
    """Write ``output/game-memory-addon-<version>.zip`` from the addon folder ``source``.

    Args:
        output: The folder to write into (created if missing).
        source: The addon folder; default :func:`checkout_addon_folder`.

    Returns:
        The archive. It is written to a temporary file and renamed into place, so a reader
        never sees half of it.

    Raises:
        BundleError: The folder is missing or not the addon, its ``plugin.cfg`` version
            differs from the package's, or the archive cannot be written.
    """
    folder = (source if source is not None else checkout_addon_folder()).expanduser().resolve()
    if not (folder / "plugin.cfg").is_file():
        raise BundleError(
            f"{folder} is not the addon folder (it has no plugin.cfg); pass --source "
            "godot_addon/addons/game_memory of a game-memory checkout"
        )
    version = importlib.metadata.version("game-memory")
    declared = _plugin_version(folder)
    if declared != version:
        raise BundleError(
            f"{folder / 'plugin.cfg'} says version {declared}, but this is game-memory "
            f"{version}; the addon and the sidecar must be released together"
        )
    files = _addon_files(folder)
    names = tuple(ADDON_PREFIX + path.relative_to(folder).as_posix() for path in files)
    target = output.expanduser().resolve() / f"game-memory-addon-{version}.zip"
    temporary: Path | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary, handle = _new_temporary(target.parent)
        with os.fdopen(handle, "wb") as stream, zipfile.ZipFile(stream, "w") as archive:
            for path, name in zip(files, names, strict=True):
                entry = zipfile.ZipInfo(name, date_time=_TIMESTAMP)
                entry.create_system = 3  # Unix, so the permission bits below are read
                entry.external_attr = _FILE_MODE
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, path.read_bytes(), compresslevel=9)
        os.replace(temporary, target)
    except OSError as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise BundleError(f"cannot write {target}: {exc.strerror or exc}") from exc
    return AddonArchive(target, version, names, target.stat().st_size)
