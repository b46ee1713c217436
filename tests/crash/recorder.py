"""A recording layer over the file operations of the store and the index.

While a :class:`Recorder` is active, every ``os`` call that changes a file or a folder under
its base folder (``open`` with ``O_CREAT``/``O_TRUNC``, ``write``, ``pwrite``, ``ftruncate``,
``fsync``, ``rename``/``replace``, ``unlink``, ``mkdir``, ``rmdir``, ``link``) runs as usual
and is also logged as an :class:`Op` on *logical inodes*: numbers the recorder gives each
file and folder (an inode number reused by the file system after a deletion gets a new
logical number, so the log never confuses two files). ``mark`` adds the workload's own
events (an acknowledged append) to the same log, so a crash point knows what was promised.

Together with :func:`snapshot` (the tree as it was before the workload) the log is enough
to rebuild, offline, what the disk could hold after a power loss at any point (see
``states.py``). Calls the recorder cannot translate (``writev``, ``sendfile``,
``copy_file_range``, ``posix_fallocate``, ``symlink`` under the base) raise
:class:`UnrecordedIOError`, so nothing changes the disk behind the log's back; the guard
test checks the rest with an audit hook.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Op", "Recorder", "Tree", "UnrecordedIOError", "snapshot"]

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class UnrecordedIOError(RuntimeError):
    """The code under test changed a file in a way the recorder cannot log."""


@dataclass(frozen=True, slots=True)
class Op:
    """One logged operation.

    Kinds and their fields:

    * ``create``/``mkdir``/``link``: ``parent``, ``name``, ``inode`` (a new name);
    * ``unlink``/``rmdir``: ``parent``, ``name``, ``inode``;
    * ``rename``: ``parent``/``name`` (source), ``target``/``target_name``, ``inode``;
    * ``write``: ``inode``, ``offset``, ``data``; ``truncate``: ``inode``, ``offset`` (size);
    * ``fsync``: ``inode`` (a file's data and size, or a folder's names);
    * ``mark``: ``name`` (the event) and ``data`` (its argument, UTF-8).
    """

    kind: str
    inode: int = -1
    parent: int = -1
    name: str = ""
    target: int = -1
    target_name: str = ""
    offset: int = 0
    data: bytes = b""


@dataclass
class Tree:
    """A folder tree on logical inodes: folders map names to inodes, files hold bytes."""

    root: int
    folders: dict[int, dict[str, int]] = field(default_factory=dict)
    files: dict[int, bytes] = field(default_factory=dict)


def snapshot(base: str, numbering: dict[tuple[int, int], int] | None = None) -> Tree:
    """Read the tree under ``base`` (no links allowed) and number its inodes.

    ``numbering`` receives ``(st_dev, st_ino) -> logical inode`` for the recorder.
    """
    numbers = numbering if numbering is not None else {}
    tree = Tree(root=0)

    def number(info: os.stat_result) -> int:
        key = (info.st_dev, info.st_ino)
        if key not in numbers:
            numbers[key] = len(numbers)
        return numbers[key]

    def walk(path: str) -> int:
        info = os.lstat(path)
        inode = number(info)
        if stat.S_ISDIR(info.st_mode):
            entries: dict[str, int] = {}
            for name in sorted(os.listdir(path)):
                entries[name] = walk(os.path.join(path, name))
            tree.folders[inode] = entries
        elif stat.S_ISREG(info.st_mode):
            with open(path, "rb") as handle:
                tree.files[inode] = handle.read()
        else:
            raise UnrecordedIOError(f"{path} is neither a file nor a folder")
        return inode

    tree.root = walk(base)
    return tree


class Recorder:
    """Log the file operations under ``base`` while active (a context manager).

    Thread-safe: the logged calls are serialized, so the log's order is the order in which
    they took effect. Calls on paths outside ``base`` pass through unlogged.
    """

    _PATCHED = (
        "open",
        "close",
        "write",
        "pwrite",
        "ftruncate",
        "truncate",
        "fsync",
        "fdatasync",
        "rename",
        "replace",
        "unlink",
        "remove",
        "mkdir",
        "rmdir",
        "link",
        "symlink",
        "writev",
        "pwritev",
        "sendfile",
        "copy_file_range",
        "posix_fallocate",
    )

    def __init__(self, base: str) -> None:
        self.base = os.path.realpath(base)
        self._prefix = os.path.join(self.base, "")
        self.numbers: dict[tuple[int, int], int] = {}
        self.initial = snapshot(self.base, self.numbers)
        self._next = len(self.numbers)
        self.ops: list[Op] = []
        # Every changing call seen under the base, as (kind, absolute path): the guard test
        # compares it with what the interpreter's audit hook saw.
        self.calls: list[tuple[str, str]] = []
        self._fds: dict[int, tuple[int, bool]] = {}  # fd -> (logical inode, appending)
        self._lock = threading.RLock()
        self._saved: dict[str, Any] = {}
        self._real: dict[str, Callable[..., Any]] = {}

    # -- public -----------------------------------------------------------------------

    def mark(self, event: str, argument: str = "") -> None:
        """Log a workload event (``ack`` of a memory id, a phase name) at this point."""
        with self._lock:
            self.ops.append(Op("mark", name=event, data=argument.encode()))

    @contextmanager
    def active(self) -> Iterator[Recorder]:
        """Patch ``os`` for the duration of the block."""
        for name in self._PATCHED:
            self._saved[name] = getattr(os, name)
            self._real[name] = getattr(os, name)
        replacements = {name: getattr(self, f"_{name}") for name in self._PATCHED}
        for name, function in replacements.items():
            setattr(os, name, function)
        try:
            yield self
        finally:
            for name, function in self._saved.items():
                setattr(os, name, function)

    # -- resolution ---------------------------------------------------------------------

    def _inside(self, path: str) -> bool:
        return path == self.base or path.startswith(self._prefix)

    def _absolute(self, path: Any, dir_fd: int | None) -> str | None:
        """The absolute path of ``path`` (relative to ``dir_fd`` if given), or None outside."""
        if isinstance(path, int):
            return None
        text = os.fsdecode(os.fspath(path))
        if dir_fd is not None and not os.path.isabs(text):
            folder = self._fd_path(dir_fd)
            if folder is None:
                return None
            text = os.path.join(folder, text)
        text = os.path.normpath(os.path.abspath(text))
        return text if self._inside(text) else None

    def _fd_path(self, fd: int) -> str | None:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None

    def _inode_of(self, info: os.stat_result) -> int:
        key = (info.st_dev, info.st_ino)
        number = self.numbers.get(key)
        if number is None:
            raise UnrecordedIOError(
                f"inode {info.st_ino} appeared under {self.base} without a logged creation"
            )
        return number

    def _new_inode(self, info: os.stat_result) -> int:
        # A new file may reuse the inode number of a deleted one: it is another file.
        number = self._next
        self._next += 1
        self.numbers[(info.st_dev, info.st_ino)] = number
        return number

    def _parent(self, path: str) -> tuple[int, str]:
        folder, name = os.path.split(path)
        return self._inode_of(os.lstat(folder)), name

    # -- patched calls ------------------------------------------------------------------

    def _open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        real = self._real["open"]
        absolute = self._absolute(path, dir_fd)
        if absolute is None:
            return int(real(path, flags, mode, dir_fd=dir_fd))
        with self._lock:
            existed = os.path.lexists(absolute)
            if flags & _WRITE_FLAGS:
                self.calls.append(("open", absolute))
            fd = int(real(path, flags, mode, dir_fd=dir_fd))
            info = os.fstat(fd)
            if existed:
                inode = self._inode_of(info)
                if flags & os.O_TRUNC and stat.S_ISREG(info.st_mode) and flags & _WRITE_FLAGS:
                    self.ops.append(Op("truncate", inode=inode, offset=0))
            else:
                parent, name = self._parent(absolute)
                inode = self._new_inode(info)
                self.ops.append(Op("create", inode=inode, parent=parent, name=name))
            self._fds[fd] = (inode, bool(flags & os.O_APPEND))
            return fd

    def _close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            self._real["close"](fd)

    def _write(self, fd: int, data: Any) -> int:
        tracked = self._fds.get(fd)
        if tracked is None:
            return int(self._real["write"](fd, data))
        with self._lock:
            inode, appending = tracked
            offset = os.fstat(fd).st_size if appending else os.lseek(fd, 0, os.SEEK_CUR)
            written = int(self._real["write"](fd, data))
            self.ops.append(Op("write", inode=inode, offset=offset, data=bytes(data[:written])))
            return written

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        tracked = self._fds.get(fd)
        if tracked is None:
            return int(self._real["pwrite"](fd, data, offset))
        with self._lock:
            written = int(self._real["pwrite"](fd, data, offset))
            self.ops.append(
                Op("write", inode=tracked[0], offset=offset, data=bytes(data[:written]))
            )
            return written

    def _ftruncate(self, fd: int, length: int) -> None:
        tracked = self._fds.get(fd)
        with self._lock:
            path = self._fd_path(fd)
            if path is not None and self._inside(path):
                self.calls.append(("truncate", path))
            self._real["ftruncate"](fd, length)
            if tracked is not None:
                self.ops.append(Op("truncate", inode=tracked[0], offset=length))

    def _truncate(self, path: Any, length: int) -> None:
        if isinstance(path, int):
            self._ftruncate(path, length)
            return
        absolute = self._absolute(path, None)
        with self._lock:
            if absolute is not None:
                self.calls.append(("truncate", absolute))
            self._real["truncate"](path, length)
            if absolute is not None:
                inode = self._inode_of(os.lstat(absolute))
                self.ops.append(Op("truncate", inode=inode, offset=length))

    def _sync(self, name: str, fd: int) -> None:
        tracked = self._fds.get(fd)
        with self._lock:
            self._real[name](fd)
            if tracked is not None:
                self.ops.append(Op("fsync", inode=tracked[0]))

    def _fsync(self, fd: Any) -> None:
        self._sync("fsync", fd if isinstance(fd, int) else fd.fileno())

    def _fdatasync(self, fd: Any) -> None:
        self._sync("fdatasync", fd if isinstance(fd, int) else fd.fileno())

    def _move(self, name: str, src: Any, dst: Any, src_dir_fd: Any, dst_dir_fd: Any) -> None:
        real = self._real[name]
        source = self._absolute(src, src_dir_fd)
        target = self._absolute(dst, dst_dir_fd)
        if source is None and target is None:
            real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            return
        if source is None or target is None:
            raise UnrecordedIOError(f"a {name} across the edge of {self.base}: {src} -> {dst}")
        with self._lock:
            self.calls.append(("rename", source))
            inode = self._inode_of(os.lstat(source))
            parent, source_name = self._parent(source)
            folder, target_name = self._parent(target)
            real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            self.ops.append(
                Op(
                    "rename",
                    inode=inode,
                    parent=parent,
                    name=source_name,
                    target=folder,
                    target_name=target_name,
                )
            )

    def _rename(
        self, src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None
    ) -> None:
        self._move("rename", src, dst, src_dir_fd, dst_dir_fd)

    def _replace(
        self, src: Any, dst: Any, *, src_dir_fd: Any = None, dst_dir_fd: Any = None
    ) -> None:
        self._move("replace", src, dst, src_dir_fd, dst_dir_fd)

    def _remove_name(self, name: str, kind: str, path: Any, dir_fd: Any) -> None:
        real = self._real[name]
        absolute = self._absolute(path, dir_fd)
        if absolute is None:
            real(path, dir_fd=dir_fd)
            return
        with self._lock:
            self.calls.append(("rmdir" if kind == "rmdir" else "remove", absolute))
            inode = self._inode_of(os.lstat(absolute))
            parent, leaf = self._parent(absolute)
            real(path, dir_fd=dir_fd)
            self.ops.append(Op(kind, inode=inode, parent=parent, name=leaf))

    def _unlink(self, path: Any, *, dir_fd: Any = None) -> None:
        self._remove_name("unlink", "unlink", path, dir_fd)

    def _remove(self, path: Any, *, dir_fd: Any = None) -> None:
        self._remove_name("remove", "unlink", path, dir_fd)

    def _rmdir(self, path: Any, *, dir_fd: Any = None) -> None:
        self._remove_name("rmdir", "rmdir", path, dir_fd)

    def _mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: Any = None) -> None:
        real = self._real["mkdir"]
        absolute = self._absolute(path, dir_fd)
        if absolute is None:
            real(path, mode, dir_fd=dir_fd)
            return
        with self._lock:
            self.calls.append(("mkdir", absolute))
            real(path, mode, dir_fd=dir_fd)
            parent, name = self._parent(absolute)
            inode = self._new_inode(os.lstat(absolute))
            self.ops.append(Op("mkdir", inode=inode, parent=parent, name=name))

    def _link(
        self,
        src: Any,
        dst: Any,
        *,
        src_dir_fd: Any = None,
        dst_dir_fd: Any = None,
        follow_symlinks: bool = True,
    ) -> None:
        real = self._real["link"]
        source = self._absolute(src, src_dir_fd)
        target = self._absolute(dst, dst_dir_fd)
        if target is None:
            real(
                src,
                dst,
                src_dir_fd=src_dir_fd,
                dst_dir_fd=dst_dir_fd,
                follow_symlinks=follow_symlinks,
            )
            return
        if source is None:
            raise UnrecordedIOError(f"a link into {self.base} from outside: {src}")
        with self._lock:
            self.calls.append(("link", target))
            inode = self._inode_of(os.lstat(source))
            real(
                src,
                dst,
                src_dir_fd=src_dir_fd,
                dst_dir_fd=dst_dir_fd,
                follow_symlinks=follow_symlinks,
            )
            parent, name = self._parent(target)
            self.ops.append(Op("link", inode=inode, parent=parent, name=name))

    def _symlink(self, src: Any, dst: Any, target_is_directory: bool = False, **kw: Any) -> None:
        if self._absolute(dst, kw.get("dir_fd")) is not None:
            raise UnrecordedIOError(f"the code under test made a symbolic link {dst}")
        self._real["symlink"](src, dst, target_is_directory, **kw)

    def _refuse(self, name: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            fd = args[0] if args and isinstance(args[0], int) else None
            if name in ("sendfile", "copy_file_range"):
                fd = args[1] if name == "copy_file_range" else args[0]
            if fd is not None and fd in self._fds:
                raise UnrecordedIOError(f"os.{name} on a recorded file cannot be logged")
            return self._real[name](*args, **kwargs)

        return refused

    def __getattr__(self, name: str) -> Any:
        # _writev, _pwritev, _sendfile, _copy_file_range, _posix_fallocate
        if name.startswith("_") and name[1:] in (
            "writev",
            "pwritev",
            "sendfile",
            "copy_file_range",
            "posix_fallocate",
        ):
            return self._refuse(name[1:])
        raise AttributeError(name)
