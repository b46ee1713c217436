"""A cross-process, cross-thread exclusive lock on one file, with a bounded wait.

Processes are excluded by ``flock`` where there is ``fcntl`` (POSIX), and by locking the
file's first byte with ``msvcrt.locking`` on Windows; either way the operating system
drops the lock when its holder dies, even killed. Where neither exists the lock orders
this process's threads only, and says so once in the log.

A file system that has no locks at all (``ENOLCK``: NFS without its lock daemon; some
FUSE and SMB mounts answer ``EOPNOTSUPP``) cannot guard a save against a second writer:
taking the lock there raises ``PersistenceError`` naming the lock file and where to put
the save instead, never a bare ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
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


class ProcessLock:
    """Serialize writers across threads of this process and across processes.

    A ``threading.Lock`` orders this process's threads; an ``flock`` on the lock file (on
    Windows, a lock of its first byte) orders processes (the kernel releases it if the
    holder dies, even by ``kill -9``). Waiting is
    bounded by ``timeout`` seconds, then ``StoreBusyError`` names the lock file.

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
        return StoreBusyError(
            f"the store is locked by another writer ({self._path}) for more than "
            f"{self._timeout:g} s; retry, or check for a stuck process using this save"
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
