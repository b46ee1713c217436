"""The descriptors cached partitions hold, kept under a bound whatever the save's size.

Why: a large partition read through its read file (``read_chain.py``) kept two
descriptors for as long as the cache kept it: its read file, through the map of it
(Python's ``mmap`` keeps a duplicate of the descriptor it maps until it is unmapped), and
each record file its lazy memories are read from (:class:`RecordFile`, for ``lazy.py``: a
log segment, a pack). The cache is bounded in memories (200,000 at most), not files, so a
game of many NPCs of a few hundred memories each held thousands: under the usual soft
limit of 1,024 open files, the 507th NPC of 130 memories recalled made every later open
fail, the lock file's and the ledger's included, for as long as the process ran.

How, two ways:

* A read file (and an intent file) is mapped without keeping a descriptor
  (:func:`map_untracked`): a map stays valid after the descriptor it was made from is
  closed, and only Python's ``mmap`` object keeps one. The file is mapped with the C
  library's ``mmap`` over a reservation made by a Python ``mmap`` of no file (as
  ``index/row_map.py`` does), so the Python object still owns the range and unmaps it
  when the last view of it goes. Where the C library's ``mmap`` cannot be called (not
  Linux or macOS, a 32-bit process) the file is mapped plainly and its map keeps a
  descriptor, as before.
* Record files register in one process-wide list, :data:`RECORD_FILES`, least recently
  read first. Past :data:`MAXIMUM_OPEN_RECORD_FILES` files the least recently read one
  closes its descriptor, and opens its file again when a record of it is next read
  (:class:`RecordFile`), checking that it is the very file it had open (same device and
  inode, at least as long): an open costs about 10 µs, against a recall's milliseconds.

A process that runs out of descriptors anyway (other code holds them, or its limit is
tiny) gets an error that says so and how to raise the limit (:func:`descriptors_exhausted`),
a ``PersistenceError`` chained from the ``OSError`` (``EMFILE``/``ENFILE``): nothing about
the save is damaged, and :func:`out_of_descriptors` finds that cause again.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Final, Protocol

import numpy as np

from game_memory.durable import portable
from game_memory.durable.checksum import crc32
from game_memory.durable.fixed_maps import LIBC_MMAP as _MMAP
from game_memory.durable.fixed_maps import MAP_FIXED as _MAP_FIXED
from game_memory.durable.fixed_maps import NO_ACCESS as _NO_ACCESS
from game_memory.durable.fixed_maps import RESERVE_FLAGS as _RESERVE_FLAGS
from game_memory.errors import PersistenceError
from game_memory.store.records import HEADER_BYTES, MAGIC

__all__ = [
    "MAXIMUM_OPEN_RECORD_FILES",
    "RECORD_FILES",
    "HeldFile",
    "OpenRecordFiles",
    "RecordFile",
    "TooManyOpenFilesError",
    "descriptors_exhausted",
    "map_untracked",
    "naming_exhaustion",
    "out_of_descriptors",
]

#: At most this many record files (log segments, packs) that cached partitions read
#: lazily keep a descriptor open in one process, whatever the number of partitions, stores
#: and memories: a quarter of the usual soft limit of 1,024. A file past it is opened again
#: when next read. Read at each open (tests lower it).
MAXIMUM_OPEN_RECORD_FILES = 256

#: What ``open`` answers when the process (``EMFILE``) or the system (``ENFILE``) has no
#: descriptor left.
_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})


def out_of_descriptors(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause of it, however deep) is the system refusing a descriptor
    because the process or the system has none left: not damage, and no repair helps."""
    return _exhausted_cause(exc) is not None


def _exhausted_cause(exc: BaseException) -> OSError | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _EXHAUSTED:
            return seen
        seen = seen.__cause__
    return None


@contextlib.contextmanager
def naming_exhaustion() -> Iterator[None]:
    """Let a ``PersistenceError`` raised in the block for want of descriptors say so
    (:func:`descriptors_exhausted`, naming the file the system refused), whichever layer
    opened the file; any other error passes as it is."""
    try:
        yield
    except PersistenceError as exc:
        cause = _exhausted_cause(exc)
        if cause is None:
            raise
        raise descriptors_exhausted(cause.filename or "a file of the save", cause) from exc


class TooManyOpenFilesError(PersistenceError):
    """A file of the save could not be opened for want of descriptors: nothing is
    damaged. ``reason`` is what the bridge sends as ``data.reason``."""

    reason: Final = "too_many_open_files"


def descriptors_exhausted(path: object, exc: OSError) -> PersistenceError:
    """The error for a file of the store that could not be opened for want of descriptors
    (``exc``: ``EMFILE`` or ``ENFILE``); the caller raises it ``from exc``."""
    if exc.errno == errno.ENFILE:
        why = "the system's table of open files is full"
        what = "close other programs or raise the system's limit (fs.file-max on Linux)"
    else:
        why = f"this process has the most open files its limit allows{_limit()}"
        what = (
            "raise the limit (ulimit -n, or LimitNOFILE for a service) before starting the "
            "game or the sidecar, or open fewer stores at once"
        )
    return TooManyOpenFilesError(
        f"could not open {path}: too many open files ({why}). The save is not damaged and "
        f"was not changed; {what}, then try again"
    )


def _limit() -> str:
    """`` (N)``: the process's soft limit of open files, where it can be read."""
    try:
        import resource  # POSIX only
    except ImportError:
        return ""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return "" if soft == resource.RLIM_INFINITY else f" ({soft:,})"


# -- maps that hold no descriptor ------------------------------------------------------


def map_untracked(fd: int, size: int) -> memoryview:
    """A read-only map of the first ``size`` bytes (more than 0) of the file open as ``fd``
    that keeps no descriptor of its own: the caller may close ``fd`` at once. The range is
    unmapped when the last view of the returned memoryview goes.

    Where the C library's ``mmap`` cannot be called, a plain ``mmap.mmap``: that one keeps
    a duplicate descriptor until it is unmapped (module docstring).

    Raises:
        OSError: the file could not be mapped.
    """
    if _MMAP is not None:
        # A reservation of no file (no descriptor, no memory committed) that owns the range
        # and unmaps it on release; the file is then mapped over it in place.
        region = mmap.mmap(-1, size, flags=_RESERVE_FLAGS, prot=_NO_ACCESS)
        address = int(np.frombuffer(region, dtype=np.uint8, count=1).ctypes.data)
        placed = _MMAP(address, size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
        if placed == address:
            return memoryview(region).toreadonly()  # its pages may not be written
        number = ctypes.get_errno()
        region.close()
        raise OSError(number, os.strerror(number))
    return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))


# -- record files kept open up to a bound ----------------------------------------------


class HeldFile(Protocol):
    """What :class:`OpenRecordFiles` needs of a file it bounds (:class:`RecordFile`)."""

    def release(self) -> None:
        """Close the file's descriptor; the next read opens the file again. Idempotent."""


class OpenRecordFiles:
    """The record files holding an open descriptor, least recently read first (bounded by
    :data:`MAXIMUM_OPEN_RECORD_FILES`; see the module docstring). Thread-safe.

    Holds its files weakly: a file nobody reads any more closes its descriptor as it goes
    and leaves the list (:meth:`closed`). A file's own lock guards its descriptor; this
    list's lock is never held while a file's is taken, so a file may call in here under
    its own lock. The lock is reentrant: a file collected by the garbage collector while
    this thread holds it leaves the list from its finalizer.
    """

    def __init__(self) -> None:
        self._files: OrderedDict[int, weakref.ref[HeldFile]] = OrderedDict()
        self._lock = threading.RLock()
        self._tokens = itertools.count()

    def token(self) -> int:
        """A new file's key in the list (never reused)."""
        return next(self._tokens)

    def opened(self, token: int, file: HeldFile) -> None:
        """Record that ``file`` (keyed ``token``) has just opened its descriptor; release
        the least recently read files past the bound. Call it without ``file``'s lock."""
        victims: list[HeldFile] = []
        with self._lock:
            self._files[token] = weakref.ref(file)
            self._files.move_to_end(token)
            while len(self._files) > max(1, MAXIMUM_OPEN_RECORD_FILES):
                _, held = self._files.popitem(last=False)
                victim = held()
                if victim is not None:
                    victims.append(victim)
        for victim in victims:  # outside this lock: each takes its own
            victim.release()

    def read(self, token: int) -> None:
        """Record that the file keyed ``token`` was just read (it is now the most recent)."""
        with self._lock:
            if token in self._files:
                self._files.move_to_end(token)

    def closed(self, token: int) -> None:
        """Forget the file keyed ``token`` (it closed its descriptor itself)."""
        with self._lock:
            self._files.pop(token, None)

    def __len__(self) -> int:
        """How many files the list holds (those with a descriptor open, and any gone
        since that were not yet dropped)."""
        with self._lock:
            return len(self._files)


#: The process's list: one, as the limit of open files is the process's.
RECORD_FILES = OpenRecordFiles()


class RecordFile:
    """One store file read by offset for a partition's lazy memories.

    Its descriptor stays open while it is among the :data:`MAXIMUM_OPEN_RECORD_FILES`
    most recently read files of the process (:data:`RECORD_FILES`), and is closed with
    the object. An open descriptor keeps the file's inode alive, so a rewrite that
    replaces or removes the file (an erase, a compaction) does not change what this reads.
    Past the bound the descriptor is closed and the file opened again at its next read,
    which then checks it is still the very file (same device and inode, at least as long
    as it was): one a rewrite replaced or removed meanwhile is refused, named, never read
    (the partition's next read from the cache reads the new files). A new file that got
    the freed inode number passes that check, but not the record's own (its frame, its
    checksum, and the memory id the read file expects there: ``lazy._Records``), so it
    still fails closed. Thread-safe: the descriptor is used and closed under the object's
    lock.
    """

    def __init__(self, path: str, fd: int) -> None:
        """Take over ``fd``, open on ``path`` (closed here on failure).

        Raises:
            PersistenceError: the file could not be inspected.
        """
        self.path = path
        self._lock = threading.Lock()
        self._fd = fd
        #: ``(device, inode, size)`` as opened first; ``None``: opened for each read.
        self._identity: tuple[int, int, int] | None = None
        self._token = RECORD_FILES.token()
        if not portable.HELD_FILES_REPLACEABLE:
            # Windows: a file kept open could not be replaced by an erase or compaction;
            # opened for each read instead. A record read after such a rewrite then reads
            # the new file, whose bytes at that offset fail the record's checks (named,
            # never taken for the record).
            self._fd = -1
            os.close(fd)
            return
        try:
            info = os.fstat(fd)
        except OSError as exc:
            self._fd = -1
            os.close(fd)
            raise PersistenceError(f"could not read {path}: {exc.strerror}") from exc
        self._identity = (info.st_dev, info.st_ino, info.st_size)
        RECORD_FILES.opened(self._token, self)

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(Exception):  # at interpreter exit, the list may be gone
                RECORD_FILES.closed(self._token)

    @property
    def holds_descriptor(self) -> bool:
        """Whether the file is open now (for tests and bounds)."""
        return self._fd >= 0

    def release(self) -> None:
        """Close the descriptor (:data:`RECORD_FILES` does, for the least recently read
        past the bound); the next read opens the file again. Idempotent."""
        with self._lock:
            fd, self._fd = self._fd, -1
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def advise(self, offset: int, length: int, hint: Callable[[int, int, int], None]) -> None:
        """Call ``hint(fd, offset, length)`` on the open descriptor (``lazy.py`` asks the
        kernel to read records ahead so); nothing while the file is closed (a hint is never
        worth an open), and an ``OSError`` is ignored (a hint only)."""
        with self._lock:
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    hint(self._fd, offset, length)

    def record(self, offset: int, length: int) -> bytes:
        """The payload of the record at ``offset`` (``length`` includes the header), checked.

        Raises:
            PersistenceError: the record is missing, or its frame or checksum is wrong; the
                file was replaced or removed since it was closed (see the class), or could
                not be opened again (too many open files: said so).
        """
        frame = self._frame(offset, length)
        payload = frame[HEADER_BYTES:]
        length_field = frame[4:8]
        length_check = crc32(length_field)
        if (
            len(frame) != length
            or frame[:4] != MAGIC
            or int.from_bytes(length_field, "little") != len(payload)
            or int.from_bytes(frame[8:12], "little") != length_check
            or int.from_bytes(frame[12:16], "little") != crc32(payload, length_check)
        ):
            raise PersistenceError(
                f"{self.path} is corrupt at byte {offset} (a record differs from what was "
                "read before: cut, replaced in place or damaged); restore the save from a "
                "backup or run game-memory check"
            )
        return payload

    def _frame(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes at ``offset``, through the descriptor (opened again if the
        bound closed it) or, without an identity (Windows), a descriptor of their own."""
        if self._identity is None:
            fd = self._open()
            try:
                return self._pread(fd, length, offset)
            finally:
                os.close(fd)
        with self._lock:
            opened = self._fd < 0
            if opened:
                self._fd = self._reopen(self._identity)
            frame = self._pread(self._fd, length, offset)
        # Outside the lock: the list may release other files, each under its own lock.
        if opened:
            RECORD_FILES.opened(self._token, self)
        else:
            RECORD_FILES.read(self._token)
        return frame

    def _pread(self, fd: int, length: int, offset: int) -> bytes:
        try:
            return portable.pread(fd, length, offset)
        except OSError as exc:
            raise PersistenceError(f"could not read {self.path}: {exc.strerror}") from exc

    def _open(self) -> int:
        """A new descriptor of the file; named errors (too many open files said so)."""
        try:
            return os.open(self.path, os.O_RDONLY | portable.OPEN_FLAGS)
        except FileNotFoundError as exc:
            raise self._replaced() from exc
        except OSError as exc:
            if out_of_descriptors(exc):
                raise descriptors_exhausted(self.path, exc) from exc
            raise PersistenceError(f"could not read {self.path}: {exc.strerror}") from exc

    def _reopen(self, identity: tuple[int, int, int]) -> int:
        """The file opened again, if it is still the one first opened (``identity``)."""
        fd = self._open()
        try:
            info = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise PersistenceError(f"could not read {self.path}: {exc.strerror}") from exc
        device, inode, size = identity
        if (info.st_dev, info.st_ino) != (device, inode) or info.st_size < size:
            os.close(fd)
            raise self._replaced()
        return fd

    def _replaced(self) -> PersistenceError:
        return PersistenceError(
            f"{self.path} was replaced or removed (an erase or a compaction) after this "
            "partition was read; the save is not damaged: read or recall again (the next "
            "read reads the new files)"
        )
