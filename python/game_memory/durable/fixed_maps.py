"""The C library's ``mmap``, for mapping a file at a fixed address inside a reservation.

Python's ``mmap`` cannot place a map, and a map it makes of a file keeps a duplicate of the
file's descriptor until it is unmapped. Two users need more: the vector index extends a
row file's map in place as the file grows (``index/row_map.py``), and the file store maps
read files without holding a descriptor per cached partition (``store/descriptors.py``).
Both reserve address space with a Python ``mmap`` of no file (:data:`RESERVE_FLAGS`,
:data:`NO_ACCESS`: no memory committed, and the Python object unmaps the whole range when
the last view of it goes), then map the file over it with :data:`LIBC_MMAP` and
:data:`MAP_FIXED`.

:data:`LIBC_MMAP` is ``None`` where that cannot be done (not Linux or macOS, a 32-bit
process, no anonymous maps); callers then map plainly, as Python does.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
from collections.abc import Callable

__all__ = ["LIBC_MMAP", "MAP_FIXED", "NO_ACCESS", "RESERVE_FLAGS"]

#: ``MAP_FIXED`` is 0x10 on Linux and on macOS; Python's ``mmap`` module does not name it.
MAP_FIXED = 0x10
#: Pages of a reservation: no access.
NO_ACCESS = getattr(mmap, "PROT_NONE", 0)
#: A reservation's flags: private, anonymous, no swap reserved for it.
RESERVE_FLAGS = (
    getattr(mmap, "MAP_PRIVATE", 0)
    | getattr(mmap, "MAP_ANONYMOUS", 0)
    | getattr(mmap, "MAP_NORESERVE", 0)
)


def _libc_mmap() -> Callable[..., int | None] | None:
    """The C library's ``mmap``, where a file may be mapped at a fixed address."""
    if sys.platform not in ("linux", "darwin") or ctypes.sizeof(ctypes.c_void_p) < 8:
        return None
    if not RESERVE_FLAGS & getattr(mmap, "MAP_ANONYMOUS", 0):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).mmap
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
        ctypes.c_int64,
    ]  # fmt: skip
    return function


#: ``mmap(address, length, prot, flags, fd, offset)`` of the C library, or ``None``.
LIBC_MMAP = _libc_mmap()
