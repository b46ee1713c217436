"""Safe file primitives: no symbolic links, durable writes, and translated OS errors.

Every path the store touches goes through here. Files are opened with ``O_NOFOLLOW`` and
checked to be regular files; directories are checked with ``lstat``; a symbolic link
anywhere (the root, its ancestors, or anything enumerated) raises ``PersistenceError``.
The one exception is :func:`resolve_ancestors`, which ``open_memory`` calls once on the
folder path it was given: the links above the folder that the system or the user made
(macOS's ``/tmp`` and ``/var``) are followed to the real folders, which the checks then
see.
Durability follows the classic recipe: write, ``fsync`` the file, ``rename`` over the target
when replacing, then ``fsync`` the directory so the new name itself survives a power loss.
A write the disk has no room for (``ENOSPC``, or ``EDQUOT``: the user's quota) raises
:class:`DiskFullError`, whose message says so and to free space: not damage, so the
corrupt-save advice (check, restore) does not apply; :func:`disk_full` finds that cause
again below any error that wraps it.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final, TypeAlias

from game_memory.durable import portable
from game_memory.errors import PersistenceError

__all__ = [
    "DiskFullError",
    "append_bytes",
    "atomic_write",
    "check_no_symlinks",
    "disk_full",
    "ensure_directory",
    "fsync_directory",
    "list_directory",
    "lstat_regular",
    "make_folders",
    "mapped_file",
    "open_append",
    "open_folder",
    "read_at",
    "read_file",
    "read_range",
    "refused_access",
    "refused_link",
    "rename_all",
    "resolve_ancestors",
    "sync_all",
]

StrPath: TypeAlias = str | os.PathLike[str]

#: Every open: no link followed, not inherited, binary (``portable.py``).
_OPEN_FLAGS = portable.OPEN_FLAGS


#: What a file system that will not let this process write (or read) says: a read-only
#: mount, no permission, or ``EPERM`` (an immutable file or folder).
_REFUSED = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


#: What a file system says when a write does not fit: no free blocks (or inodes) left on
#: the disk, or the user's disk quota used up (``EDQUOT``, where the system has it).
_FULL = frozenset(
    {errno.ENOSPC, *((errno.EDQUOT,) if hasattr(errno, "EDQUOT") else ())}  # not on Windows
)


class DiskFullError(PersistenceError):
    """A write did not fit on the disk (or in the user's quota): nothing is damaged, and the
    write was not stored (a failed write is cut back, now or by the next write). Free space
    and try again. ``reason`` is what the bridge sends as ``data.reason``."""

    reason: Final = "disk_full"


def _cause(exc: BaseException, numbers: frozenset[int]) -> OSError | None:
    """The first ``OSError`` in ``exc``'s chain of causes (itself first) whose ``errno`` is
    one of ``numbers``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in numbers:
            return seen
        seen = seen.__cause__
    return None


def refused_access(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` (itself or a cause, however deep) when the file system
    refused this process access (read-only, or no permission), else ``None``: not damage,
    so neither a repair nor a rebuild helps, and messages say what does."""
    return _cause(exc, _REFUSED)


def disk_full(exc: BaseException) -> OSError | None:
    """The ``OSError`` behind ``exc`` (itself or a cause, however deep) when a write did not
    fit on the disk or in the user's quota, else ``None``: not damage, so neither a repair
    nor a restore helps; freeing space does."""
    return _cause(exc, _FULL)


def _translate(exc: OSError, path: StrPath, action: str) -> PersistenceError:
    if exc.errno == errno.ELOOP:
        return PersistenceError(
            f"refusing to {action} {path}: it is a symbolic link. A save folder must contain "
            "only real files and folders; replace the link with the real folder."
        )
    if exc.errno in _FULL:
        return DiskFullError(_full_message(exc, path, action))
    return PersistenceError(f"could not {action} {path}: {exc.strerror or exc}")


def _full_message(exc: OSError, path: StrPath, action: str) -> str:
    """Say that the disk (or the quota) is full, that nothing is damaged or stored, and what
    to do: a full disk is not a corrupt save."""
    if exc.errno == errno.ENOSPC:
        why, what = "the disk is full", "free space on that disk"
    else:
        why, what = "the user's disk quota is used up", "free space or raise the quota"
    return (
        f"could not {action} {path}: {why} ({exc.strerror or exc}). Nothing is damaged and "
        f"this write was not stored; {what}, then try again"
    )


def check_no_symlinks(path: Path) -> None:
    """Raise ``PersistenceError`` if ``path`` or any existing ancestor is a symbolic link."""
    current = path
    while True:
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise _translate(exc, current, "inspect") from exc
        if info is not None and stat.S_ISLNK(info.st_mode):
            raise PersistenceError(
                f"refusing to use {path}: {current} is a symbolic link. Point the store at "
                "the real folder instead."
            )
        parent = current.parent
        if parent == current:
            return
        current = parent


#: The most links :func:`resolve_ancestors` follows for one path (Linux's own limit).
_MAXIMUM_LINKS = 40


def resolve_ancestors(path: Path) -> Path:
    """``path`` with the symbolic links above it resolved: the real folder its last name
    is (or will be created) in, joined with that name.

    Why: the store refuses every link on a save's path (:func:`check_no_symlinks`) so that
    nothing is read or written through a link that leads elsewhere than the folders it
    opened: one planted in a shared folder, or put in place of a folder while the store
    has it open. But a user's own path may pass through links the system or the user
    made: on every Mac ``/tmp`` and ``/var`` (the temporary folder) are links into
    ``/private``, and a home folder may be a link to another disk. Resolving them once,
    when a save or index folder is opened, follows what the path asks for, and the store
    then checks and guards the real path as before: no link on it, none put on it later.

    Contract: ``path`` is absolute. Its last name is not resolved, so a save or index
    folder that is itself a link stays refused, as does any link below it. A link is
    followed only when the superuser or this process's user owns it (on systems with
    owners; Windows has none here): one another user made, such as in ``/tmp``, is refused
    as before. Names from the first one missing on are kept as given; a root is returned
    as is. Nothing is created.

    Raises:
        PersistenceError: a link above ``path`` is owned by another user, links loop, or a
            folder on the way cannot be inspected.
    """
    parent = path.parent
    if parent == path:
        return path
    return _real_folder(parent, path) / path.name


def _real_folder(folder: Path, given: Path) -> Path:
    """``folder`` (absolute) with every link on it followed, checking each link's owner
    (``given`` is the path the caller asked for, named in errors)."""
    pending = list(reversed(folder.parts[1:]))  # the names still to walk, next one last
    current = Path(folder.anchor)
    followed = 0
    while pending:
        name = pending.pop()
        if name == "..":  # from a link's target; ``current`` is real, so its parent is
            current = current.parent
            continue
        candidate = current / name
        try:
            info = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            return candidate.joinpath(*reversed(pending))  # the store says what is wrong
        except OSError as exc:
            raise _translate(exc, candidate, "inspect") from exc
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        followed += 1
        if followed > _MAXIMUM_LINKS:
            raise PersistenceError(
                f"refusing to use {given}: more than {_MAXIMUM_LINKS} symbolic links on its "
                "path (a loop?). Give the real folder's path instead."
            )
        _check_link_owner(candidate, info, given)
        try:
            target = current / os.readlink(candidate)  # an absolute target replaces it
        except OSError as exc:
            raise _translate(exc, candidate, "read the link") from exc
        current = Path(target.anchor)
        pending.extend(reversed(target.parts[1:]))
    return current


def _check_link_owner(link: Path, info: os.stat_result, given: Path) -> None:
    """Refuse a link above a save that neither the superuser nor this user owns."""
    user = getattr(os, "getuid", None)
    if user is None or info.st_uid in (0, user()):
        return
    raise PersistenceError(
        f"refusing to use {given}: {link} is a symbolic link owned by another user "
        f"(uid {info.st_uid}), so it could lead the save anywhere. Give the real folder's "
        "path instead."
    )


def ensure_directory(path: Path, *, create: bool = True, durable: bool = True) -> bool:
    """Make sure ``path`` is a real directory (not a link); return whether it was created.

    A newly created directory's parent is fsynced so the new entry is durable, unless
    ``durable=False`` (a batch that flushes everything it wrote with one barrier).
    """
    created = False
    if create:
        try:
            os.mkdir(path, 0o755)
            created = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise _translate(exc, path, "create the folder") from exc
    try:
        info = os.lstat(path)
    except FileNotFoundError as exc:
        raise PersistenceError(f"the folder {path} is missing") from exc
    except OSError as exc:
        raise _translate(exc, path, "inspect") from exc
    if stat.S_ISLNK(info.st_mode):
        raise PersistenceError(
            f"refusing to use {path}: it is a symbolic link, not a folder of the save"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise PersistenceError(f"{path} should be a folder but is a file")
    if created and durable:
        fsync_directory(path.parent)
    return created


def make_folders(path: Path) -> None:
    """Create the folder ``path`` and its missing parents, each durably.

    Every folder created has its parent fsynced before the next one is made, so a power
    loss never keeps a folder whose own entry was lost (and with it everything inside).

    Raises:
        PersistenceError: a part of the path is a file or a link, or cannot be created.
    """
    missing: list[Path] = []
    current = path
    while True:
        try:
            os.lstat(current)
            break
        except FileNotFoundError:
            missing.append(current)
        except NotADirectoryError as exc:
            raise PersistenceError(f"cannot create {path}: a part of its path is a file") from exc
        except OSError as exc:
            raise _translate(exc, current, "inspect") from exc
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        ensure_directory(folder)


def fsync_directory(path: Path) -> None:
    """Flush a directory's entries (new, renamed or removed names) to disk.

    Nothing where a folder cannot be opened (Windows: no ``O_DIRECTORY``, and ``os.open``
    refuses folders); NTFS journals its folder entries itself, and ``docs/shipping.md``
    says what that leaves to the platform."""
    if not portable.FOLDERS_OPEN:
        return
    try:
        fd = os.open(path, os.O_RDONLY | portable.DIRECTORY | _OPEN_FLAGS)
    except OSError as exc:
        raise _translate(exc, path, "open the folder") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise _translate(exc, path, "flush the folder") from exc
    finally:
        os.close(fd)


def _open_regular(path: StrPath, flags: int, action: str, mode: int = 0o644) -> int:
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, mode)
    except OSError as exc:
        raise _translate(exc, path, action) from exc
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise _translate(exc, path, action) from exc
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise PersistenceError(f"{path} should be a regular file")
    return fd


def read_file(
    path: StrPath, maximum_bytes: int, *, offset: int = 0
) -> tuple[bytes, os.stat_result] | None:
    """Read a regular file from ``offset``; ``None`` if it does not exist.

    Reads up to the size ``fstat`` reported when the file was opened (bytes appended later
    are left for the next read), and returns that ``fstat`` with the data.

    Raises ``PersistenceError`` if it is a link, not a regular file, or larger than
    ``maximum_bytes``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _translate(exc, path, "read") from exc
    try:
        return _read_descriptor(fd, maximum_bytes, offset, lambda: os.fspath(path))
    finally:
        os.close(fd)


def _read_descriptor(
    fd: int, maximum_bytes: int, offset: int, where: Callable[[], str]
) -> tuple[bytes, os.stat_result]:
    """Read an open regular file from ``offset`` to its size at ``fstat`` (``where`` names it)."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PersistenceError(f"{where()} should be a regular file")
        if info.st_size > maximum_bytes:
            raise PersistenceError(
                f"{where()} is {info.st_size:,} bytes, more than the limit of "
                f"{maximum_bytes:,}; it is not a file this store wrote"
            )
        chunks: list[bytes] = []
        position = offset
        while position < info.st_size:
            chunk = portable.pread(fd, min(info.st_size - position, 1 << 24), position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
    except OSError as exc:
        raise _translate(exc, where(), "read") from exc
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), info


@contextlib.contextmanager
def mapped_file(
    path: StrPath, maximum_bytes: int
) -> Iterator[tuple[bytes | memoryview, os.stat_result] | None]:
    """A regular file's bytes for the duration of the block (``None`` if it does not exist),
    as :func:`read_file` gives them, but mapped read-only instead of copied: for a large file
    read once and decoded into other arrays, the copy and the fresh memory it faults in
    cost more than the decoding (an index partition's entries: 1.3 MB per 10k memories).

    The map is closed when the block ends; nothing may keep a view of it past that (a view
    still held leaves the map to the garbage collector instead). A file that shrinks while
    mapped would fault on the pages cut off, so map only files whose writers never cut
    whole bytes others may read (they append, repair a torn tail, or replace the file).
    Where a file cannot be mapped (a file system without ``mmap``), it is read instead.

    Raises ``PersistenceError`` as :func:`read_file` does.
    """
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        yield None
        return
    except OSError as exc:
        raise _translate(exc, path, "read") from exc
    mapped: mmap.mmap | None = None
    found: tuple[bytes | memoryview, os.stat_result]
    try:
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and 0 < info.st_size <= maximum_bytes:
                mapped = mmap.mmap(fd, info.st_size, access=mmap.ACCESS_READ)
        except OSError:
            mapped = None  # not mappable here: read below (which names any real error)
        if mapped is None:
            found = _read_descriptor(fd, maximum_bytes, 0, lambda: os.fspath(path))
        else:
            found = (memoryview(mapped), info)
    finally:
        os.close(fd)
    try:
        yield found
    finally:
        if mapped is not None:
            data = found[0]
            if isinstance(data, memoryview):
                with contextlib.suppress(BufferError):
                    data.release()
            with contextlib.suppress(BufferError):  # a view kept: the collector unmaps
                mapped.close()


def read_range(path: StrPath, offset: int, length: int) -> bytes:
    """Read exactly ``length`` bytes at ``offset`` of a regular file (no links followed).

    Raises:
        PersistenceError: the file is missing, a link, or shorter than the range.
    """
    fd = _open_regular(path, os.O_RDONLY, "read")
    try:
        chunks: list[bytes] = []
        position, remaining = offset, length
        while remaining > 0:
            chunk = portable.pread(fd, min(remaining, 1 << 20), position)
            if not chunk:
                raise PersistenceError(f"{path} is shorter than expected; it may be truncated")
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise _translate(exc, path, "read") from exc
    finally:
        os.close(fd)


@contextlib.contextmanager
def open_append(path: StrPath, *, durable: bool = True) -> Iterator[tuple[int, bool]]:
    """Open ``path`` for appending, creating it if needed; yield ``(fd, created)``.

    When the file was created (and ``durable``), its directory is fsynced before the context
    exits, so a durable record inside a new file is also reachable by name after a power
    loss.
    """
    created = False
    # The usual case first: the file exists (every append after the first). Only when it
    # does not is it created exclusively, and a writer that created it meanwhile (another
    # process) makes the exclusive create fail: then it exists, and is opened.
    try:
        fd = _open_regular(path, os.O_WRONLY | os.O_APPEND, "append to")
    except PersistenceError as exc:
        if not isinstance(exc.__cause__, FileNotFoundError):
            raise
        try:
            fd = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, "create")
            created = True
        except PersistenceError as again:
            if not isinstance(again.__cause__, FileExistsError):
                raise
            fd = _open_regular(path, os.O_WRONLY | os.O_APPEND, "append to")
    try:
        yield fd, created
    finally:
        os.close(fd)
    if created and durable:
        fsync_directory(Path(os.path.dirname(os.path.abspath(path))))


def append_bytes(fd: int, data: bytes, path: Path, *, durable: bool = True) -> None:
    """Append ``data`` in one ``write`` call (retrying short writes); fsync if ``durable``."""
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except OSError as exc:
        raise _translate(exc, path, "write") from exc


def atomic_write(
    path: Path, data: bytes | bytearray | memoryview | Sequence[bytes | memoryview]
) -> None:
    """Replace ``path`` with ``data`` (bytes, or pieces written one after the other, so a
    large file is not joined into one copy first) atomically and durably.

    Writes ``<path>.<uuid>.tmp`` beside the target, fsyncs it, renames it over the target and
    fsyncs the folder. A crash leaves either the old file or the new one, never a mix; a
    leftover temporary file is harmless and ignored by readers.
    """
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    fd = _open_regular(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, "create")
    try:
        try:
            pieces = (data,) if isinstance(data, bytes | bytearray | memoryview) else data
            for piece in pieces:
                view = memoryview(piece).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise PersistenceError(f"refusing to replace {path}: it is not a regular file")
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise _translate(exc, path, "write") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_directory(path.parent)


def open_folder(path: StrPath) -> int:
    """Open a real folder (not a link) for ``*_at`` calls; the caller closes the descriptor.

    ``-1`` where folders cannot be opened (``portable.FOLDERS_OPEN``): :func:`read_at`
    then opens its files by path, once the folder is checked to be a real one."""
    if not portable.FOLDERS_OPEN:
        try:
            info = os.lstat(path)
        except OSError as exc:
            raise _translate(exc, path, "open the folder") from exc
        if stat.S_ISLNK(info.st_mode):
            raise _translate(OSError(errno.ELOOP, "a link"), path, "open the folder")
        if not stat.S_ISDIR(info.st_mode):
            raise PersistenceError(f"{path} should be a folder but is a file")
        return -1
    try:
        return os.open(path, os.O_RDONLY | portable.DIRECTORY | _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise PersistenceError(f"{path} should be a folder but is a file") from exc
        raise _translate(exc, path, "open the folder") from exc


def read_at(folder_fd: int, name: str, maximum_bytes: int, folder: StrPath) -> bytes | None:
    """Read the regular file ``name`` of an open folder whole; ``None`` if it does not exist.

    Bulk reads (a migration) use this: one open, fstat, read and close per file, with no
    path walk. ``folder`` (the folder's path) only names the file in errors.

    Raises:
        PersistenceError: the file is a link, not a regular file, or larger than
            ``maximum_bytes``.
    """
    try:
        if folder_fd < 0:  # no folder descriptor here (``open_folder``): by its path
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | _OPEN_FLAGS)
        else:
            fd = os.open(name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=folder_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _translate(exc, os.path.join(folder, name), "read") from exc
    try:
        return _read_descriptor(fd, maximum_bytes, 0, lambda: os.path.join(folder, name))[0]
    finally:
        os.close(fd)


def rename_all(source: Path, target: Path, names: list[str]) -> None:
    """Move each of ``names`` from folder ``source`` to folder ``target`` (same file system).

    Renames relative to open folder descriptors: no path walk per file. A name already in
    ``target`` is replaced; one already gone from ``source`` is skipped. Not durable by
    itself: fsync both folders afterwards.
    """
    source_fd = open_folder(source)
    try:
        target_fd = open_folder(target)
        try:
            for name in names:
                try:
                    os.replace(name, name, src_dir_fd=source_fd, dst_dir_fd=target_fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise _translate(exc, source / name, "move") from exc
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)


def list_directory(path: Path, *, links: list[str] | None = None) -> list[os.DirEntry[str]]:
    """List a real directory's entries (sorted by name); links inside are refused.

    Returns an empty list when the directory does not exist. With ``links`` (the checker,
    which reports what it cannot read instead of stopping at it), a link is left out of
    the listing and its path added to ``links`` instead of raising.
    """
    try:
        with os.scandir(path) as entries:
            listed = sorted(entries, key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    except NotADirectoryError as exc:
        raise PersistenceError(f"{path} should be a folder but is a file") from exc
    except OSError as exc:
        raise _translate(exc, path, "list") from exc
    if links is not None:
        links.extend(entry.path for entry in listed if entry.is_symlink())
        return [entry for entry in listed if not entry.is_symlink()]
    for entry in listed:
        if entry.is_symlink():
            raise PersistenceError(refused_link(entry.path))
    return listed


def refused_link(path: str) -> str:
    """Why a link found in a save folder is not read (the message every reader gives)."""
    return (
        f"refusing to read {path}: it is a symbolic link. A save folder must contain only "
        "real files and folders."
    )


_BARRIER_THREADS = 16


def sync_all(files: list[Path], folders: list[Path]) -> None:
    """Make ``files`` (data and metadata) and ``folders`` (their entries) durable.

    One barrier for a batch: every file and folder is fsynced from a small thread pool, so
    the file system's journal commits many of them together, and the wait is bounded by
    this batch's own data (unlike ``syncfs``, which also flushes every other process's
    writes to the file system). Returns when all are durable.

    Raises:
        PersistenceError: a file or folder could not be flushed (or is a link).
    """

    def flush_file(path: Path) -> None:
        fd = _open_regular(path, portable.SYNCED_READ, "flush")
        try:
            os.fsync(fd)
        except OSError as exc:
            raise _translate(exc, path, "flush") from exc
        finally:
            os.close(fd)

    jobs = [(flush_file, path) for path in files] + [(fsync_directory, path) for path in folders]
    if not jobs:
        return
    if len(jobs) == 1:  # one fsync: no pool (a single append's commit)
        jobs[0][0](jobs[0][1])
        return
    with ThreadPoolExecutor(min(_BARRIER_THREADS, len(jobs))) as pool:
        for future in [pool.submit(job, path) for job, path in jobs]:
            future.result()


def lstat_regular(path: str) -> os.stat_result | None:
    """``lstat`` a path that must be a regular file if it exists (``None`` if it does not).

    Raises:
        PersistenceError: it is a link, a folder or anything but a regular file.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise PersistenceError(f"{path} should be a regular file, not a link or folder")
    return info
