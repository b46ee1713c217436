"""The file calls that differ between POSIX systems and Windows, in one place.

Why: a game ships to players on Windows too (``docs/shipping.md``), and CPython's ``os``
there lacks what the store used directly: ``os.pread``, ``os.pwrite``, ``os.preadv``,
``O_NOFOLLOW``, ``O_CLOEXEC``, ``O_DIRECTORY``, ``dir_fd``, folders opened as files, and
``fcntl`` (``durable/lock.py``). Worse, ``os.open`` opens a file in **text mode** there
unless told ``O_BINARY``: every ``\\n`` byte written becomes ``\\r\\n`` and a read stops at
the first ``0x1A`` byte, which would damage every binary file of a save silently. Every
``os.open`` of the library therefore passes :data:`OPEN_FLAGS` (or its parts), and every
positioned read or write goes through this module.

Contract: on POSIX systems these are the ``os`` calls themselves (nothing is added to the
hot paths). Where ``os.pread`` and friends are missing, the descriptor's offset is moved
and read or written under one process-wide lock, so that no two positioned calls of this
module interleave; a descriptor used here must not be read or written at its own offset by
other code at the same time (the library never does: its appends open their own
descriptors, with ``O_APPEND``).

``tests/support/windows_like.py`` makes this CPython look like Windows' for the library
(these names missing, text mode unless ``O_BINARY``, folders that cannot be opened, no C
``mmap``, no ``fcntl``) and ``tests/test_windows_like_platform.py`` runs the store end to
end so; what it cannot show (a file that is open or mapped cannot be renamed over or
removed on Windows) is said in ``docs/shipping.md``.

Windows also limits a path to 260 characters (``MAX_PATH``) unless it is in the
extended-length form (``\\\\?\\C:\\...``) or the machine opted in to long paths. A
save in a Godot game's user folder (``...\\AppData\\Roaming\\Godot\\app_userdata\\
<project>\\game_memory\\save``) leaves too few characters for the store's own names
(64 hex digits and more). :func:`extended_length` gives that form; the front door turns
the save and index folders into it once (``opening.resolve_folder``), so every path
derived from them is exempt.
"""

from __future__ import annotations

import ntpath
import os
import threading

__all__ = [
    "BINARY",
    "CLOEXEC",
    "DIRECTORY",
    "FOLDERS_OPEN",
    "HELD_FILES_REPLACEABLE",
    "NOFOLLOW",
    "OPEN_FLAGS",
    "SYNCED_READ",
    "extended_length",
    "pread",
    "pread_into",
    "pwrite",
]

#: Open a link as an error, not its target (where the platform can; elsewhere the store's
#: ``lstat`` checks, ``fs.check_no_symlinks``, are what refuses links).
NOFOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
#: Not inherited by child processes (``O_NOINHERIT`` is Windows' name for it).
CLOEXEC: int = getattr(os, "O_CLOEXEC", 0) or getattr(os, "O_NOINHERIT", 0)
#: Bytes as they are (Windows only: its default is text mode).
BINARY: int = getattr(os, "O_BINARY", 0)
#: Fail unless the path is a folder; 0 where folders cannot be opened at all.
DIRECTORY: int = getattr(os, "O_DIRECTORY", 0)
#: Whether a folder can be opened as a descriptor (to ``fsync`` its entries, or for
#: ``dir_fd`` calls): not on Windows, which has no ``O_DIRECTORY``.
FOLDERS_OPEN: bool = DIRECTORY != 0 and os.open in os.supports_dir_fd
#: What every file the library opens is opened with, besides its access mode.
OPEN_FLAGS: int = NOFOLLOW | CLOEXEC | BINARY
#: Whether a file this process holds open or mapped can still be replaced or removed: on
#: POSIX (the old inode lives on for its holders); not on Windows, where an open handle or
#: a map holds its file. There, derived files that a close or an erase replaces (read
#: files, row files) are read into memory instead of mapped, and a partition's record
#: files are opened for each lazy read instead of kept open (``store/lazy.py``).
HELD_FILES_REPLACEABLE: bool = not BINARY
#: The access mode of a descriptor opened to read a file and then ``fsync`` it: read-only
#: on POSIX; read-write where the C library has text and binary files (Windows), whose
#: ``fsync`` is ``FlushFileBuffers`` and refuses a handle without write access (``EBADF``).
SYNCED_READ: int = os.O_RDWR if BINARY else os.O_RDONLY

_POSITIONED = threading.Lock()

#: The prefix of Windows' extended-length paths (``\\\\?\\``), and of its device paths.
_EXTENDED = "\\\\?\\"
_DEVICE = "\\\\.\\"


def extended_length(path: str) -> str:
    """A Windows path in its extended-length form, which Windows exempts from ``MAX_PATH``:
    ``C:\\x`` becomes ``\\\\?\\C:\\x``, ``\\\\server\\share\\x`` becomes
    ``\\\\?\\UNC\\server\\share\\x``.

    Windows does not normalize such a path (``/`` and ``..`` would be names in it), so
    this normalizes first, as Windows itself would: ``ntpath.normpath``, and trailing
    dots and spaces dropped from each name. Pure (``ntpath`` rules on any system), so it
    is tested everywhere; the caller applies it on Windows only.

    Contract: only an absolute path with a drive letter, or a UNC path, is changed. A path
    already in extended-length or device form (``\\\\.\\``) is returned normalized,
    and a relative one (``x\\y``, ``C:x``, ``\\x`` without a drive) as given: only an
    absolute path can take the prefix.
    """
    normalized = ntpath.normpath(path)
    if normalized.startswith((_EXTENDED, _DEVICE)):
        return normalized
    drive, rest = ntpath.splitdrive(normalized)
    if not drive or (len(drive) == 2 and not rest.startswith("\\")):
        return path  # relative, drive-relative (``C:x``) or rooted without a drive
    rest = "\\".join(_win32_name(name) for name in rest.split("\\")) or "\\"
    if len(drive) == 2:  # ``C:``
        return f"{_EXTENDED}{drive}{rest}"
    return f"{_EXTENDED}UNC{drive[1:]}{rest}"  # ``\\server\\share``


def _win32_name(name: str) -> str:
    """A path name as Windows reads it outside the extended form: trailing dots and
    spaces dropped (a name of dots only is left to ``normpath``)."""
    trimmed = name.rstrip(". ")
    return trimmed if trimmed else name


def pread(fd: int, length: int, offset: int) -> bytes:
    """At most ``length`` bytes at ``offset`` of the file open as ``fd`` (fewer at its end)."""
    if _PREAD:
        return os.pread(fd, length, offset)
    with _POSITIONED:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, length)


def pread_into(fd: int, buffer: memoryview, offset: int) -> int:
    """Fill ``buffer`` from ``offset`` of the file open as ``fd`` as far as one read goes;
    the bytes read (0 at its end). The caller loops, as with ``os.preadv``."""
    if _PREADV:
        return os.preadv(fd, [buffer], offset)
    data = pread(fd, len(buffer), offset)
    buffer[: len(data)] = data
    return len(data)


def pwrite(fd: int, data: bytes, offset: int) -> int:
    """Write ``data`` at ``offset`` of the file open as ``fd``; the bytes written."""
    if _PWRITE:
        return os.pwrite(fd, data, offset)
    with _POSITIONED:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.write(fd, data)


# Looked up on ``os`` at each call, not kept: the crash tests' recorder replaces
# ``os.pwrite`` while it logs (``tests/crash/recorder.py``).
_PREAD = hasattr(os, "pread")
_PREADV = hasattr(os, "preadv")
_PWRITE = hasattr(os, "pwrite")
