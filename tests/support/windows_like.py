"""Make this Linux CPython look like Windows' CPython to the library, so that POSIX-only file
calls are caught here (no Windows machine runs the tests).

Linux only (its open flags, ``fcntl`` locks and ``asyncio`` loop are Linux's). Import this
module first, in a fresh interpreter, before numpy or ``game_memory``: a module imported
before it may already hold the real functions (``from os import pread``) or have computed
flags from them. Importing it installs everything below for the rest of the process; it
cannot be undone. What fails or damages data on Windows is refused as Windows would refuse
it (so the library's error path shows it) and recorded: :func:`violations`.
``tests/support/windows_scenario.py --windows-like`` runs the store so, and
``tests/test_windows_like_platform.py`` compares that run with a plain one.

What Windows' CPython lacks or does differently, and how it is emulated:

- ``os`` has no ``pread``, ``pwrite``, ``preadv``, ``pwritev``, ``fdatasync``,
  ``posix_fadvise`` (nor ``POSIX_FADV_*``), ``posix_fallocate``, ``sched_getaffinity``,
  ``fchmod``, ``fchown``, ``chown``, ``lchown``, ``statvfs``, ``fstatvfs``, ``sync``,
  ``fwalk``, ``SEEK_DATA``, ``SEEK_HOLE``, ``RWF_*``, and none of the open flags
  ``O_NOFOLLOW``, ``O_CLOEXEC``, ``O_DIRECTORY``, ``O_DSYNC`` and the other Linux ones
  (:data:`_MISSING_FROM_OS`): they are deleted from ``os`` (``posix`` keeps them; the
  emulation keeps private references for its own use). ``O_SYNC`` is kept on purpose
  (real Windows lacks it too; the library does not use it).
- ``os.open`` opens in **text mode** unless given ``O_BINARY`` (``\\n`` written becomes
  ``\\r\\n``, a read stops at a ``0x1A`` byte): silent damage to binary files, so an open
  without ``os.O_BINARY`` is recorded (:func:`violations`) and refused with
  ``OSError(EINVAL)``. That holds for ``os.devnull`` too (strict: harmless on Windows, but
  the library should not need to know). ``os.O_BINARY``, ``os.O_NOINHERIT``, ``os.O_TEXT``,
  ``os.O_SEQUENTIAL`` and ``os.O_RANDOM`` exist, as bits no Linux open flag uses, removed
  before the real ``os.open`` runs (``O_TEMPORARY`` and ``O_SHORT_LIVED`` are not defined:
  delete-on-close cannot be emulated).
- A folder cannot be opened with ``os.open`` (``PermissionError``, ``EACCES``), so it can
  neither be ``fsync``-ed nor used as a ``dir_fd``; every ``dir_fd``, ``src_dir_fd`` and
  ``dst_dir_fd`` raises ``NotImplementedError("dir_fd unavailable on this platform")``, and
  ``os.supports_dir_fd`` is empty (``supports_fd`` and ``supports_follow_symlinks`` are
  Windows' too; ``scandir`` and ``listdir`` refuse a descriptor).
- ``os.fsync`` is ``FlushFileBuffers``, which needs write access: on a descriptor open
  read-only it fails with ``EBADF``; recorded and raised.
- ``os.rename`` never replaces: an existing target raises ``FileExistsError`` (recorded);
  ``os.replace`` cannot replace a folder or put a folder in place of anything
  (``PermissionError``, recorded).
- A file name with ``<>:"/\\|?*`` or a control character, ending in a dot or a space, or a
  device name (``CON``, ``NUL``, ``COM1``…, any extension) is refused by ``os.open``,
  ``os.mkdir``, ``os.rename`` and ``os.replace`` (``OSError(EINVAL)``, recorded).
- ``fcntl`` does not exist (``import fcntl`` raises ``ImportError``); ``msvcrt`` does, with
  :func:`_locking` as ``msvcrt.locking``: Windows' ``_locking``, a lock of ``nbytes`` bytes
  from the descriptor's *current position*, exclusive, per handle (another descriptor of
  the same file, in this process or another, is refused), never stacked (a descriptor
  cannot lock a range overlapping one it holds), unlocked only with exactly the range
  locked. ``LK_NBLCK``/``LK_NBRLCK`` on a held range raise ``PermissionError`` (EACCES);
  ``LK_LOCK``/``LK_RLCK`` try 10 times, 1 s apart, then raise ``OSError(EDEADLOCK)``;
  unlocking a range not locked raises ``PermissionError``. Built on Linux open-file-
  description locks (``F_OFD_SETLK``: per descriptor, as Windows' are per handle), or
  ``fcntl.lockf`` where those are missing (then per process: closing *any* descriptor of
  the file drops the process's locks, which Windows does not). A descriptor open
  read-only takes a shared lock (Linux refuses a write lock on it), so two read-only
  descriptors of two processes do not exclude each other (they do on Windows; within this
  process the emulation's own table excludes them). A zero or negative ``nbytes`` is
  refused (``EINVAL``): what Windows does with a zero-byte lock is not worth relying on.
- ``mmap.mmap`` takes ``(fileno, length, tagname=None, access=ACCESS_DEFAULT, offset=0)``:
  ``flags`` and ``prot`` are ``TypeError`` (a third positional argument is a tag name:
  ``TypeError`` unless a string, and a string is ``NotImplementedError``, as named shared
  memory is not emulated); there is no ``madvise``; no ``MAP_*``, ``PROT_*`` or ``MADV_*``
  names; ``ALLOCATIONGRANULARITY`` is 64 KiB and an ``offset`` not a multiple of it is
  ``OSError(EINVAL)``.
- No C ``mmap`` through ``ctypes``: ``ctypes.CDLL(None)`` (the process's own symbols)
  raises ``OSError`` (on Windows it raises ``TypeError``; ``OSError`` is what the library
  catches on its POSIX branch, which it takes here: see below). Other names pass through.
- ``asyncio``: ``add_signal_handler`` and ``remove_signal_handler`` raise
  ``NotImplementedError``, as Windows' loops do.

What it cannot emulate (say it where the library relies on it):

- ``sys.platform`` and ``os.name`` stay Linux's (``pathlib`` and the standard library need
  them): code branching on them takes its POSIX branch here, and its Windows branch runs
  nowhere. Only the POSIX branch's use of the calls above is checked.
- On Windows a file that is open (``os.open`` and ``open`` share no delete access) or
  mapped (an ``mmap`` holds a handle of its own until closed) cannot be renamed, renamed
  over, deleted or (mapped) truncated. Not raised here: :func:`sharing_conflicts`
  records, best effort, such calls on files open through ``os.open`` or mapped while
  this module was installed (files opened by ``open``/``io`` are not seen).
- ``fsync`` semantics (what ``FlushFileBuffers`` makes durable, and that folder entries
  cannot be flushed at all), byte-range locks being *mandatory* on Windows (a locked
  range cannot be read or written through another handle), case-insensitive names (two
  names differing in case are one file), path length limits (``MAX_PATH``), symbolic
  links needing a privilege, and ``select.select`` taking sockets only, the Proactor
  loop's missing ``add_reader``, signals Windows lacks.
"""

from __future__ import annotations

import asyncio
import asyncio.unix_events
import ctypes
import errno
import fcntl as _fcntl
import functools
import mmap
import os
import struct
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "LOCK_RETRIES",
    "LOCK_RETRY_SECONDS",
    "sharing_conflicts",
    "violations",
]

if "game_memory" in sys.modules or "numpy" in sys.modules:
    raise RuntimeError("import windows_like before numpy and game_memory (module docstring)")

#: ``LK_LOCK`` attempts and the pause between them (Windows: 10, 1 s; tests may lower them).
LOCK_RETRIES = 10
LOCK_RETRY_SECONDS = 1.0

_MISSING_FROM_OS = (
    *("pread", "pwrite", "preadv", "pwritev", "fdatasync", "posix_fadvise", "posix_fallocate"),
    *("sched_getaffinity", "sched_setaffinity", "fchmod", "fchown", "chown", "lchown"),
    *("statvfs", "fstatvfs", "sync", "fwalk", "SEEK_DATA", "SEEK_HOLE"),
    *("O_NOFOLLOW", "O_CLOEXEC", "O_DIRECTORY", "O_DSYNC", "O_RSYNC", "O_FSYNC", "O_DIRECT"),
    *("O_NOATIME", "O_PATH", "O_TMPFILE", "O_NONBLOCK", "O_NDELAY", "O_NOCTTY", "O_ASYNC"),
    *("O_LARGEFILE", "O_ACCMODE"),
)
_MISSING_PREFIXES_FROM_OS = ("POSIX_FADV_", "RWF_")
#: Windows-only open flags, as bits no Linux open flag uses; removed before the real call.
_WINDOWS_FLAGS = {
    "O_BINARY": 1 << 30,
    "O_NOINHERIT": 1 << 29,
    "O_TEXT": 1 << 28,
    "O_SEQUENTIAL": 1 << 27,
    "O_RANDOM": 1 << 26,
}
_BINARY = _WINDOWS_FLAGS["O_BINARY"]
_WINDOWS_BITS = functools.reduce(int.__or__, _WINDOWS_FLAGS.values())
_DIR_FD_ARGUMENTS = ("dir_fd", "src_dir_fd", "dst_dir_fd")
#: Other ``os`` functions taking a ``dir_fd`` on Linux (``open``, ``rename``, ``replace``,
#: ``remove``, ``unlink`` and ``mkdir`` are replaced whole).
_TAKING_DIR_FD = (
    *("stat", "lstat", "access", "chmod", "link", "readlink", "rmdir", "symlink", "utime"),
)
_FORBIDDEN_IN_NAMES = frozenset('<>:"/\\|?*') | frozenset(chr(code) for code in range(32))
_DEVICE_NAMES = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"{port}{n}" for port in ("COM", "LPT") for n in range(1, 10)]
)
_ALLOCATION_GRANULARITY = 1 << 16

# The real functions, for the emulation's own use.
_open: Callable[..., int] = os.open
_close = os.close
_fsync = os.fsync
_rename = os.rename
_replace = os.replace
_remove = os.remove
_ftruncate = os.ftruncate
_truncate = os.truncate
_lstat = os.lstat
_fstat = os.fstat
_mkdir = os.mkdir
_sleep = time.sleep
_ACCESS_MODE = os.O_ACCMODE
_REAL_MMAP = mmap.mmap
_REAL_CDLL = ctypes.CDLL
#: The real functions and constants deleted from ``os`` and ``mmap``, by name.
_REMOVED: dict[str, Any] = {}

_lock = threading.Lock()
_violations: list[str] = []
_sharing: list[str] = []
#: Descriptors opened through ``os.open``: descriptor → (path, device, inode).
_open_files: dict[int, tuple[str, int, int]] = {}
#: Live file maps, each with the (path, device, inode) of its file.
_maps: weakref.WeakKeyDictionary[mmap.mmap, tuple[str, int, int]] = weakref.WeakKeyDictionary()
#: Ranges locked through ``msvcrt.locking``: descriptor → [(device, inode, start, length)].
_locked: dict[int, list[tuple[int, int, int, int]]] = {}


def violations() -> list[str]:
    """Every call so far that fails or damages data on Windows (each was also refused)."""
    with _lock:
        return list(_violations)


def sharing_conflicts() -> list[str]:
    """Renames, removals and truncations so far of a file then open through ``os.open`` or
    mapped: they fail on Windows. Recorded only, not raised (best effort; docstring)."""
    with _lock:
        return list(_sharing)


def _record(message: str) -> None:
    with _lock:
        _violations.append(message)


def _refuse(number: int, message: str, path: Any = None) -> NoReturn:
    """Record ``message`` as a violation and raise it as Windows would (an ``OSError``)."""
    _record(message)
    raise OSError(number, message, path)


def _check_name(path: Any, call: str) -> None:
    """Refuse a final path component Windows cannot name (forbidden character, trailing dot
    or space, device name)."""
    name = os.path.basename(os.fsdecode(path))
    if not name or name in (".", ".."):
        return
    stem = name.split(".", 1)[0].rstrip(" ").upper()
    if _FORBIDDEN_IN_NAMES & set(name) or name[-1] in ". " or stem in _DEVICE_NAMES:
        _refuse(errno.EINVAL, f"{call}: {name!r} is not a valid Windows file name", path)


def _no_dir_fd(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` refusing every ``*dir_fd`` argument, as Windows' ``os`` does."""

    @functools.wraps(function)
    def call(*args: Any, **keywords: Any) -> Any:
        if any(keywords.get(name) is not None for name in _DIR_FD_ARGUMENTS):
            raise NotImplementedError("dir_fd unavailable on this platform")
        return function(*args, **keywords)

    return call


def _identity(path: Any) -> tuple[int, int] | None:
    try:
        info = _lstat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _holders(path: Any, *, mapped_only: bool = False) -> list[str]:
    """What holds ``path`` (the file, or a file under the folder) open or mapped now."""
    target = os.path.abspath(os.fsdecode(path))
    key = _identity(path)
    found: list[str] = []
    with _lock:
        if not mapped_only:
            for fd, (name, device, inode) in list(_open_files.items()):
                try:
                    now = _fstat(fd)
                except OSError:
                    del _open_files[fd]  # closed by other means (a file object)
                    continue
                if (now.st_dev, now.st_ino) != (device, inode):
                    del _open_files[fd]  # the number was reused by a file not opened here
                elif key == (device, inode) or name.startswith(target + os.sep):
                    found.append(f"open as descriptor {fd} ({name})")
        for region, (name, device, inode) in list(_maps.items()):
            if not region.closed and (key == (device, inode) or name.startswith(target + os.sep)):
                found.append(f"mapped ({name})")
    return found


def _note_sharing(call: str, *paths: Any, mapped_only: bool = False) -> None:
    for path in paths:
        holders = _holders(path, mapped_only=mapped_only)
        if holders:
            with _lock:
                _sharing.append(f"{call} {os.fsdecode(path)} while {', '.join(holders)}")


# -- os -------------------------------------------------------------------------------


def _windows_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
    """``os.open`` as on Windows: no ``dir_fd``, no folders, text mode unless ``O_BINARY``."""
    if dir_fd is not None:
        raise NotImplementedError("dir_fd unavailable on this platform")
    if os.path.isdir(path):
        raise PermissionError(errno.EACCES, "Permission denied", path)
    _check_name(path, "os.open")
    if not flags & _BINARY:
        _refuse(
            errno.EINVAL,
            f"opened in text mode (no os.O_BINARY): {os.fsdecode(path)} flags={flags:#x}",
            path,
        )
    fd = _open(path, flags & ~_WINDOWS_BITS, mode)
    try:
        info = _fstat(fd)
    except OSError:
        return fd
    with _lock:
        _open_files[fd] = (os.path.abspath(os.fsdecode(path)), info.st_dev, info.st_ino)
    return fd


def _windows_close(fd: int) -> None:
    with _lock:
        _open_files.pop(fd, None)
        _locked.pop(fd, None)  # Windows drops a handle's locks when it closes
    _close(fd)


def _descriptor_name(fd: int) -> str:
    with _lock:
        known = _open_files.get(fd)
    return known[0] if known else f"descriptor {fd}"


def _windows_fsync(fd: Any) -> None:
    """``os.fsync`` as ``FlushFileBuffers``: refused on a descriptor open read-only."""
    number = fd if isinstance(fd, int) else fd.fileno()
    if _fcntl.fcntl(number, _fcntl.F_GETFL) & _ACCESS_MODE == os.O_RDONLY:
        _refuse(
            errno.EBADF,
            f"fsync of a descriptor open read-only (EBADF on Windows): {_descriptor_name(number)}",
        )
    _fsync(number)


@_no_dir_fd
def _windows_rename(source: Any, target: Any, **keywords: Any) -> None:
    """``os.rename`` as on Windows: an existing target is ``FileExistsError``."""
    _check_name(target, "os.rename")
    if os.path.lexists(target):
        _record(f"os.rename over an existing {os.fsdecode(target)} (FileExistsError on Windows)")
        raise FileExistsError(errno.EEXIST, "Cannot create a file when that file already exists")
    _note_sharing("os.rename", source)
    _rename(source, target)


@_no_dir_fd
def _windows_replace(source: Any, target: Any, **keywords: Any) -> None:
    """``os.replace`` as on Windows: no folder replaced, nor put in place of anything."""
    _check_name(target, "os.replace")
    if os.path.lexists(target) and (os.path.isdir(target) or os.path.isdir(source)):
        _refuse(
            errno.EACCES,
            f"os.replace of {os.fsdecode(source)} onto the existing {os.fsdecode(target)}, "
            "a folder on one side (PermissionError on Windows)",
            target,
        )
    _note_sharing("os.replace", source, target)
    _replace(source, target)


@_no_dir_fd
def _windows_remove(path: Any, **keywords: Any) -> None:
    _note_sharing("os.remove", path)
    _remove(path)


@_no_dir_fd
def _windows_mkdir(path: Any, mode: int = 0o777, **keywords: Any) -> None:
    _check_name(path, "os.mkdir")
    _mkdir(path, mode)


def _windows_ftruncate(fd: int, length: int) -> None:
    try:
        info = _fstat(fd)
    except OSError:
        info = None  # the real call says why
    if info is not None:
        with _lock:
            for region, (name, device, inode) in list(_maps.items()):
                if not region.closed and (device, inode) == (info.st_dev, info.st_ino):
                    _sharing.append(f"os.ftruncate of {name} while mapped")
                    break
    _ftruncate(fd, length)


def _windows_truncate(path: Any, length: int) -> None:
    if isinstance(path, int):
        _windows_ftruncate(path, length)
        return
    _note_sharing("os.truncate", path, mapped_only=True)
    _truncate(path, length)


def _no_descriptor(function: Callable[..., Any]) -> Callable[..., Any]:
    """``os.scandir``/``os.listdir`` refusing a descriptor, as on Windows."""

    @functools.wraps(function)
    def call(path: Any = None) -> Any:
        if isinstance(path, int):
            raise TypeError(f"{function.__name__}: path should be string, bytes or os.PathLike")
        return function(path)

    return call


def _install_os() -> None:
    for name in dir(os):
        if name in _MISSING_FROM_OS or name.startswith(_MISSING_PREFIXES_FROM_OS):
            _REMOVED[name] = getattr(os, name)
            delattr(os, name)
    open_flags = [value for name, value in _REMOVED.items() if name.startswith("O_")]
    open_flags += [getattr(os, name) for name in dir(os) if name.startswith("O_")]
    linux_bits = functools.reduce(int.__or__, open_flags)
    assert not linux_bits & _WINDOWS_BITS, "a Windows-only flag collides with a Linux open flag"
    for name, bit in _WINDOWS_FLAGS.items():
        setattr(os, name, bit)
    os.open = _windows_open
    os.close = _windows_close
    os.fsync = _windows_fsync
    os.rename = _windows_rename
    os.replace = _windows_replace
    os.remove = os.unlink = _windows_remove
    os.mkdir = _windows_mkdir
    os.ftruncate = _windows_ftruncate
    os.truncate = _windows_truncate
    for name in _TAKING_DIR_FD:
        setattr(os, name, _no_dir_fd(getattr(os, name)))
    os.scandir = _no_descriptor(os.scandir)
    os.listdir = _no_descriptor(os.listdir)
    os.supports_dir_fd = set()
    os.supports_fd = {os.stat, os.truncate}
    os.supports_follow_symlinks = {os.stat}
    os.supports_effective_ids = set()


# -- msvcrt ---------------------------------------------------------------------------

_OFD_SETLK: int | None = getattr(_fcntl, "F_OFD_SETLK", None)


def _kernel_lock(fd: int, lock: bool, start: int, length: int) -> bool:
    """Take (or drop) the kernel's lock on the range; whether it was taken."""
    writable = _fcntl.fcntl(fd, _fcntl.F_GETFL) & _ACCESS_MODE != os.O_RDONLY
    try:
        if _OFD_SETLK is not None:
            kind = _fcntl.F_UNLCK if not lock else _fcntl.F_WRLCK if writable else _fcntl.F_RDLCK
            request = struct.pack("hhqqi", kind, os.SEEK_SET, start, length, 0)
            _fcntl.fcntl(fd, _OFD_SETLK, request)
        else:
            kind = _fcntl.LOCK_UN if not lock else _fcntl.LOCK_EX if writable else _fcntl.LOCK_SH
            _fcntl.lockf(fd, kind | _fcntl.LOCK_NB, length, start, os.SEEK_SET)
    except (BlockingIOError, PermissionError):
        return False
    return True


def _held_overlapping(key: tuple[int, int], start: int, length: int) -> bool:
    """Whether a descriptor of this process holds a range of the file ``key`` overlapping
    ``start .. start + length`` (ranges of descriptors closed by other means than
    ``os.close``, or whose number now names another file, are forgotten first)."""
    for fd, ranges in list(_locked.items()):
        try:
            now = _fstat(fd)
        except OSError:
            del _locked[fd]
            continue
        ranges[:] = [held for held in ranges if held[:2] == (now.st_dev, now.st_ino)]
        for device, inode, begin, size in ranges:
            if (device, inode) == key and begin < start + length and start < begin + size:
                return True
    return False


def _locking(fd: int, mode: int, nbytes: int) -> None:
    """``msvcrt.locking``: Windows' ``_locking`` (module docstring)."""
    if nbytes <= 0 or mode not in range(5):
        raise OSError(errno.EINVAL, "Invalid argument")
    start = os.lseek(fd, 0, os.SEEK_CUR)
    info = _fstat(fd)
    key = (info.st_dev, info.st_ino)
    entry = (*key, start, nbytes)
    if mode == 0:  # LK_UNLCK
        with _lock:
            if entry not in _locked.get(fd, []):
                raise PermissionError(errno.EACCES, "Permission denied")
            _kernel_lock(fd, False, start, nbytes)
            _locked[fd].remove(entry)
        return
    attempts = LOCK_RETRIES if mode in (1, 3) else 1  # LK_LOCK, LK_RLCK retry
    for attempt in range(attempts):
        with _lock:
            if not _held_overlapping(key, start, nbytes) and _kernel_lock(fd, True, start, nbytes):
                _locked.setdefault(fd, []).append(entry)
                return
        if attempt < attempts - 1:
            _sleep(LOCK_RETRY_SECONDS)
    if attempts > 1:
        raise OSError(errno.EDEADLOCK, "Resource deadlock avoided")
    raise PermissionError(errno.EACCES, "Permission denied")


def _install_msvcrt() -> None:
    module = types.ModuleType("msvcrt", "Windows' msvcrt, as far as windows_like emulates it.")
    module.__dict__.update(
        locking=_locking, LK_UNLCK=0, LK_LOCK=1, LK_NBLCK=2, LK_RLCK=3, LK_NBRLCK=4
    )
    sys.modules["msvcrt"] = module
    sys.modules["fcntl"] = None  # type: ignore[assignment]  # import fcntl: ImportError


# -- mmap, ctypes, asyncio --------------------------------------------------------------


class _Missing:
    """An attribute Windows' type lacks: reading it raises ``AttributeError`` (on the
    class and on instances, so ``hasattr`` says ``False``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> NoReturn:
        raise AttributeError(f"'mmap.mmap' object has no attribute '{self.name}'")


class _WindowsMmap(_REAL_MMAP):
    """``mmap.mmap`` with Windows' signature and methods (module docstring)."""

    madvise = _Missing()

    def __new__(
        cls,
        fileno: int,
        length: int,
        tagname: str | None = None,
        access: int = mmap.ACCESS_DEFAULT,
        offset: int = 0,
        **posix_only: Any,
    ) -> _WindowsMmap:
        if posix_only:
            name = next(iter(posix_only))
            raise TypeError(f"'{name}' is an invalid keyword argument for mmap()")
        if tagname is not None:
            if not isinstance(tagname, str):
                raise TypeError(f"mmap() argument 3 must be str or None, not {type(tagname)}")
            raise NotImplementedError("windows_like: a named mapping (tagname) is not emulated")
        if offset % _ALLOCATION_GRANULARITY:
            raise OSError(errno.EINVAL, "mmap offset is not a multiple of ALLOCATIONGRANULARITY")
        region = super().__new__(cls, fileno, length, access=access, offset=offset)
        if fileno != -1:
            info = _fstat(fileno)
            with _lock:
                name = _open_files.get(fileno, (f"descriptor {fileno}",))[0]
                _maps[region] = (name, info.st_dev, info.st_ino)
        return region


class _WindowsCDLL(_REAL_CDLL):
    """``ctypes.CDLL`` without the process's own symbols (``CDLL(None)``): no C ``mmap``."""

    def __init__(self, name: str | None, *args: Any, **keywords: Any) -> None:
        if name is None:
            raise OSError(errno.ENOENT, "windows_like: no C library symbols (ctypes.CDLL(None))")
        super().__init__(name, *args, **keywords)


def _no_signals(self: asyncio.AbstractEventLoop, *args: Any) -> NoReturn:
    raise NotImplementedError


def _install_mmap_ctypes_asyncio() -> None:
    for name in dir(mmap):
        if name.startswith(("MAP_", "PROT_", "MADV_")):
            _REMOVED[f"mmap.{name}"] = getattr(mmap, name)
            delattr(mmap, name)
    mmap.ALLOCATIONGRANULARITY = _ALLOCATION_GRANULARITY  # type: ignore[misc]
    mmap.mmap = _WindowsMmap  # type: ignore[misc,assignment]
    ctypes.CDLL = _WindowsCDLL  # type: ignore[misc]
    loop = asyncio.unix_events._UnixSelectorEventLoop
    loop.add_signal_handler = _no_signals  # type: ignore[method-assign,assignment]
    loop.remove_signal_handler = _no_signals  # type: ignore[method-assign,assignment]


_install_os()
_install_msvcrt()
_install_mmap_ctypes_asyncio()
