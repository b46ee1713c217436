"""A cross-process, cross-thread exclusive lock on one file, with a bounded wait."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from game_memory.errors import PersistenceError, StoreBusyError

__all__ = ["ProcessLock"]

_POLL_SECONDS = 0.02


class ProcessLock:
    """Serialize writers across threads of this process and across processes.

    A ``threading.Lock`` orders this process's threads; an ``flock`` on the lock file orders
    processes (the kernel releases it if the holder dies, even by ``kill -9``). Waiting is
    bounded by ``timeout`` seconds, then ``StoreBusyError`` names the lock file.

    Not reentrant. Lock files on network file systems may not exclude other machines.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``StoreBusyError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + self._timeout
        if not self._thread_lock.acquire(timeout=self._timeout):
            raise self._busy()
        fd = self._open()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise self._busy() from None
                    time.sleep(_POLL_SECONDS)
        except BaseException:
            os.close(fd)
            self._thread_lock.release()
            raise
        self._fd = fd

    def try_acquire(self) -> bool:
        """Take the lock if no thread or process holds it, without waiting; whether taken.

        Raises:
            PersistenceError: the lock file cannot be opened (as :meth:`acquire`).
        """
        if not self._thread_lock.acquire(blocking=False):
            return False
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another process (or refused: acquire() names why)
            os.close(fd)
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
                os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC,
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
        if fd is not None:
            os.close(fd)
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
