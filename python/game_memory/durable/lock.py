"""A cross-process, cross-thread exclusive lock on one file, with a bounded wait.

Processes are excluded by ``flock`` where there is ``fcntl`` (POSIX), and by locking the
file's first byte with ``msvcrt.locking`` on Windows; either way the operating system
drops the lock when its holder dies, even killed. Where neither exists the lock orders
this process's threads only, and says so once in the log.

A file system that has no locks at all (``ENOLCK``: NFS without its lock daemon; some
FUSE and SMB mounts answer ``EOPNOTSUPP``) cannot guard a save against a second writer:
taking the lock there raises ``PersistenceError`` naming the lock file and where to put
the save instead, never a bare ``OSError``.

When the wait times out, ``StoreBusyError`` names the process holding the lock where the
system says (Linux's ``/proc/locks``); that lookup runs only then, never on the path of
a write that gets the lock.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Final

from game_memory.durable import portable
from game_memory.errors import InvalidArgumentError, PersistenceError, StoreBusyError

fcntl: ModuleType | None
msvcrt: ModuleType | None
try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None

__all__ = ["ProcessLock", "check_lock_timeout"]

_POLL_SECONDS = 0.02
_LOG = logging.getLogger(__name__)
_WARNED: list[bool] = []


def check_lock_timeout(lock_timeout: object) -> float:
    """``lock_timeout`` (seconds to wait for another writer), checked by type before it is
    compared: a string compared with a number raised ``TypeError``, and ``nan`` or ``inf``
    passed a bare comparison and broke every locked write later (only diagnostics said so).

    Raises:
        InvalidArgumentError: not a number of seconds above 0 and at most 3,600.
    """
    if (
        isinstance(lock_timeout, bool)
        or not isinstance(lock_timeout, (int, float))
        or not 0 < lock_timeout <= 3_600
    ):
        raise InvalidArgumentError(
            f"lock_timeout must be a number of seconds above 0 and at most 3,600, not "
            f"{lock_timeout!r}"
        )
    return float(lock_timeout)


def _lock_file(fd: int) -> bool:
    """Take the lock on the file open as ``fd`` without waiting; whether taken.

    Raises:
        OSError: the lock was refused for another reason than another holder.
    """
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    if msvcrt is not None:
        os.lseek(fd, 0, os.SEEK_SET)  # the byte locked is the one at the offset
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except PermissionError:  # another descriptor holds the byte (EACCES)
            return False
        except OSError as exc:
            if exc.errno in (errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)):
                return False
            raise
        return True
    if not _WARNED:
        _WARNED.append(True)
        _LOG.warning(
            "no file locks on this platform (neither fcntl nor msvcrt): a save is guarded "
            "against this process's other threads only; open it from one process at a time"
        )
    return True


#: What a file system without file locks answers a lock request with.
_NO_LOCKS = frozenset(
    {errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.ENOSYS}
)


class FileLocksUnsupportedError(PersistenceError):
    """The save's file system has no file locks (``ENOLCK``, ``EOPNOTSUPP``): nothing is
    damaged, the save needs another disk. ``reason`` is what the bridge sends as
    ``data.reason``."""

    reason: Final = "no_file_locks"


def _lock_refused(exc: OSError, path: Path) -> PersistenceError:
    """Why the lock on ``path`` could not be taken (not held: refused), and what to do."""
    if exc.errno in _NO_LOCKS:
        return FileLocksUnsupportedError(
            f"could not lock {path}: the file system it is on does not support file locks "
            f"({exc.strerror or exc}), so the save cannot be guarded against a second "
            "writer. Put the save and its index folder on a local disk (or a network file "
            "system with locking enabled, such as NFS with its lock daemon running)"
        )
    return PersistenceError(
        f"could not lock {path}: {exc.strerror or exc}. Check that the folder is on a "
        "local disk this user can write to"
    )


def _close(fd: int) -> None:
    """Close a lock file's descriptor, ignoring what ``close`` reports: the descriptor is
    freed (and its lock dropped) either way, and the lock file holds no data whose loss a
    failed close could mean; raising here would leave the thread lock held for good."""
    with contextlib.suppress(OSError):
        os.close(fd)


def _unlock_file(fd: int) -> None:
    """Release the lock :func:`_lock_file` took on ``fd`` (closing ``fd`` after it drops any
    lock left either way)."""
    if fcntl is None and msvcrt is not None:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:  # closing the descriptor releases it too
            pass


#: Where Linux lists every file lock: ``1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF``
#: (the device's major and minor numbers in hex, the inode in decimal; a waiter has ``->``
#: after the id).
_PROC_LOCKS: Final = Path("/proc/locks")
#: How ``/proc/locks`` calls the lock :func:`_lock_file` takes where there is ``fcntl``:
#: Python's ``fcntl.flock`` is ``flock(2)`` on Linux (``fcntl``'s own locks read ``POSIX``,
#: open file description locks ``OFDLCK``), and ``LOCK_EX`` reads ``WRITE``.
_FLOCK_KIND: Final = "FLOCK"
_FLOCK_ACCESS: Final = "WRITE"
#: Bounds on what a refusal quotes of the holder's command line.
_CMDLINE_BYTES: Final = 4_096
_PROGRAM_CHARS: Final = 80
#: A Python interpreter in front of the script it runs (``python3.12 .../game-memory``).
_PYTHON: Final = re.compile(r"python[0-9.]*")


def _flock_holder(
    lines: Iterable[str], device: tuple[int, int], inode: int, own_pid: int
) -> int | None:
    """The pid holding an exclusive ``flock`` on the file ``(device, inode)`` according to
    ``lines`` of ``/proc/locks``, or ``None``.

    Waiters (``->``), other kinds of lock, lines of other files, our own pid (another
    thread of ours holds it, so there is no one else to name), pids this namespace cannot
    see (``0``, ``-1``) and malformed lines are skipped: never raises for the text.
    """
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":
            continue
        kind, access, pid_text, where = fields[1], fields[3], fields[4], fields[5]
        if kind != _FLOCK_KIND or access != _FLOCK_ACCESS:
            continue
        parts = where.split(":")
        if len(parts) != 3:
            continue
        try:
            pid = int(pid_text)
            found = (int(parts[0], 16), int(parts[1], 16)), int(parts[2])
        except ValueError:
            continue
        if found == (device, inode) and pid > 0 and pid != own_pid:
            return pid
    return None


def _hidden(arg: str) -> bool:
    """Whether a refusal shows ``arg`` of the holder's command line as ``…``: it may hold a
    password (a URL, a ``user@host``) or it is a script (``python -c``, several lines)."""
    return "://" in arg or "@" in arg or "\n" in arg


def _program(cmdline: bytes) -> str:
    """A short, printable name of the program run by ``cmdline`` (``/proc/<pid>/cmdline``:
    arguments ended by NUL), or ``""``: the program's file name and its arguments, without a
    Python interpreter in front of a script, some arguments shown as ``…`` (:func:`_hidden`),
    cut to ``_PROGRAM_CHARS`` characters."""
    args = [arg.decode("utf-8", "replace") for arg in cmdline.split(b"\0") if arg]
    if len(args) > 1 and _PYTHON.fullmatch(os.path.basename(args[0])) and args[1][0] != "-":
        args = args[1:]
    if not args:
        return ""
    shown = [os.path.basename(args[0])]
    shown += ["…" if _hidden(arg) else arg for arg in args[1:]]
    text = "".join(c if c.isprintable() else "?" for c in " ".join(shown)).strip()
    return text if len(text) <= _PROGRAM_CHARS else text[: _PROGRAM_CHARS - 1] + "…"


def _lock_holder(path: Path) -> str | None:
    """Who holds the ``flock`` on ``path``: ``"process 12345 (game-memory serve --stdio)"``
    (or without the program where its command line cannot be read), or ``None`` where the
    system does not say: no ``fcntl`` (the lock is not an ``flock``), no ``/proc/locks``
    (not Linux), no match (the holder just left, another pid namespace), or no permission.

    Runs only once a wait has timed out. Never raises: it only adds to a refusal.
    """
    if fcntl is None:
        return None
    try:
        stat = os.stat(path, follow_symlinks=False)
        device = (os.major(stat.st_dev), os.minor(stat.st_dev))
        with _PROC_LOCKS.open(encoding="ascii", errors="replace") as locks:
            pid = _flock_holder(locks, device, stat.st_ino, os.getpid())
    except (OSError, ValueError):
        return None
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            program = _program(file.read(_CMDLINE_BYTES))
    except (FileNotFoundError, ProcessLookupError):  # the holder just left
        return None
    except OSError:  # no permission: the pid is still worth naming
        program = ""
    return f"process {pid} ({program})" if program else f"process {pid}"


class ProcessLock:
    """Serialize writers across threads of this process and across processes.

    A ``threading.Lock`` orders this process's threads; an ``flock`` on the lock file (on
    Windows, a lock of its first byte) orders processes (the kernel releases it if the
    holder dies, even by ``kill -9``). Waiting is bounded by ``timeout`` seconds, then
    ``StoreBusyError`` names the lock file and, where the system says, the process holding it.

    Not reentrant. Lock files on network file systems may not exclude other machines.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``StoreBusyError`` after ``timeout`` seconds.

        Raises:
            StoreBusyError: another thread or process held it for ``timeout`` seconds.
            PersistenceError: the lock file cannot be opened (a link, no permission), or
                its file system refused the lock (one without file locks): the message
                names the lock file and what to do.
        """
        deadline = time.monotonic() + self._timeout
        if not self._thread_lock.acquire(timeout=self._timeout):
            raise self._busy()
        fd = self._open()
        try:
            while not self._take(fd):
                if time.monotonic() >= deadline:
                    raise self._busy() from None
                time.sleep(_POLL_SECONDS)
        except BaseException:
            _close(fd)
            self._thread_lock.release()
            raise
        self._fd = fd

    def _take(self, fd: int) -> bool:
        """:func:`_lock_file` with a refusal (not another holder) as ``PersistenceError``."""
        try:
            return _lock_file(fd)
        except OSError as exc:
            raise _lock_refused(exc, self._path) from exc

    def try_acquire(self) -> bool:
        """Take the lock if no thread or process holds it, without waiting; whether taken.

        Raises:
            PersistenceError: the lock file cannot be opened (as :meth:`acquire`).
        """
        if not self._thread_lock.acquire(blocking=False):
            return False
        fd = self._open()
        try:
            taken = _lock_file(fd)
        except OSError:  # refused: acquire() names why
            taken = False
        if not taken:  # held by another process
            _close(fd)
            self._thread_lock.release()
            return False
        self._fd = fd
        return True

    def _open(self) -> int:
        """Open the lock file (this thread holds the thread lock); on failure release the
        thread lock and raise ``PersistenceError``."""
        try:
            return os.open(
                self._path,
                os.O_RDWR | os.O_CREAT | portable.OPEN_FLAGS,
                0o644,
            )
        except OSError as exc:
            self._thread_lock.release()
            if exc.errno == errno.ELOOP:
                raise PersistenceError(
                    f"refusing to use the lock file {self._path}: it is a symbolic link"
                ) from exc
            raise PersistenceError(
                f"could not open the lock file {self._path}: {exc.strerror or exc}"
            ) from exc

    def release(self) -> None:
        """Release the lock (closing the descriptor drops the ``flock``)."""
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                _unlock_file(fd)
                _close(fd)
        finally:
            self._thread_lock.release()

    def _busy(self) -> StoreBusyError:
        """The refusal once ``timeout`` has passed: the lock file and, where the system
        says (:func:`_lock_holder`), the process holding it, so a player knows which of the
        game, an editor's sidecar or a forgotten terminal to close."""
        waited = f"the store is locked by another writer ({self._path}) for more than "
        waited += f"{self._timeout:g} s"
        holder = _lock_holder(self._path)
        if holder is None:
            return StoreBusyError(f"{waited}; retry, or check for a stuck process using this save")
        return StoreBusyError(
            f"{waited}, held by {holder}; retry, or check whether that process is stuck or "
            "still using this save"
        )

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
