"""A row file mapped read-only, and extended in place as the file grows.

Why: a vector row file is mapped, not read (the page cache is shared, nothing is copied).
When it grows (the NPC learned something), the rows it gained must join the matrix a
product reads in one piece. Both ways of doing that cost a game dearly at 100k memories of
384 values (154 MB of rows, a 2-core machine):

- copying the mapped rows into memory with room to spare held them twice (a 434 MB peak,
  265 MB before the append), left 154 MB of anonymous memory the kernel can never reclaim
  as it reclaims page cache, and made the first recall after the first append take 85 ms
  against 7 warm;
- mapping the grown file again pages every row back in at the next product: 5 to 15 ms
  more on each first recall after an append, depending on how the page cache holds the
  file.

How: address space for about twice the file is reserved, inaccessible (an anonymous map
with no access, which holds no memory and commits none), and the file is mapped over its
start (``MAP_FIXED``). When the file grew, only its pages after the last one mapped are
mapped, in place after it: the pages mapped before stay mapped, arrays handed out stay
valid, and a shared map's last page already shows bytes the file gained in it (it is the
page cache's page). A file that outgrew its reservation is mapped again into a new one
twice its size (amortized: each row is paged in again at most about once per doubling).

Only rows of the file are ever viewed: an array never reaches past the rows mapped, so the
inaccessible rest of the reservation is never touched. The reservation, and every map in
it, is unmapped at once when the last array viewing it goes (it is one Python ``mmap``
object, whose release unmaps its whole range).

Where this cannot be done (no ``mmap`` through the C library, as on Windows, or a map that
fails), :class:`RowMap` maps the file plainly and :meth:`RowMap.extend` answers ``False``:
the caller grows by copying, as before.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np
import numpy.typing as npt

from game_memory.durable.fixed_maps import LIBC_MMAP as _MMAP
from game_memory.durable.fixed_maps import MAP_FIXED as _MAP_FIXED
from game_memory.durable.fixed_maps import NO_ACCESS as _NO_ACCESS
from game_memory.durable.fixed_maps import RESERVE_FLAGS as _RESERVE_FLAGS

__all__ = ["RowMap"]

FloatMatrix = npt.NDArray[np.float32]

_PAGE = mmap.PAGESIZE
#: Reserved beyond the file at least this much, so that a small file is not mapped again
#: for every few rows it gains.
_MINIMUM_SLACK = 4 << 20


class RowMap:
    """The first rows of one float32 row file, mapped read-only; extended in place where
    the platform allows (module docstring). Use under the caller's lock."""

    __slots__ = ("_address", "_mapped", "_region", "_whole", "dimensions", "rows")

    def __init__(self, fd: int, rows: int, dimensions: int) -> None:
        """Map the first ``rows`` whole rows (at least one) of the file open as ``fd``
        (it holds them). The map outlives ``fd``.

        Raises:
            OSError: the file could not be mapped.
        """
        self.dimensions = dimensions
        self.rows = rows
        size = rows * dimensions * 4
        self._address = 0
        region = _reserved_with(fd, size)
        if region is not None:
            self._address = _address_of(region)
        else:
            region = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        self._region = region
        self._mapped = size  # bytes of the file mapped from the start of the region
        count = len(region) // (dimensions * 4) * dimensions
        whole = np.frombuffer(region, dtype="<f4", count=count).reshape(-1, dimensions)
        whole.flags.writeable = False
        self._whole = whole

    @property
    def extendable(self) -> bool:
        """Whether :meth:`extend` can map more rows in place (a reserved map)."""
        return self._address != 0

    def array(self) -> FloatMatrix:
        """The rows mapped, read-only (views stay valid while the map is extended)."""
        return self._whole[: self.rows]

    def extend(self, fd: int, rows: int) -> bool:
        """Map the file's rows up to ``rows`` (the file open as ``fd``, the same file, now
        holding them) in place after those mapped. ``False`` when they cannot be: not a
        reserved map, past the reservation, or the map failed (then this map is extended
        no more); the rows mapped before are unchanged either way."""
        size = rows * self.dimensions * 4
        if rows <= self.rows:
            return True
        if not self._address or size > len(self._region) or _MMAP is None:
            return False
        start = -(-self._mapped // _PAGE) * _PAGE  # pages after the last one mapped
        if size > start:
            placed = _MMAP(
                self._address + start, size - start, mmap.PROT_READ,
                mmap.MAP_SHARED | _MAP_FIXED, fd, start,
            )  # fmt: skip
            if placed != self._address + start:
                self._give_up(start)
                return False
            self._mapped = size
        self.rows = rows
        return True

    def release(self, begin: int, end: int) -> None:
        """Release the pages of rows ``begin .. end − 1`` from the process
        (``madvise(MADV_DONTNEED)``): they stay in the page cache and come back, the same
        bytes, on the next read, as a file map's pages always hold the file. For a copy of
        the rows out of the map (``partition.py``): without it the process would hold them
        twice."""
        option = getattr(mmap, "MADV_DONTNEED", None)
        row_bytes = self.dimensions * 4
        low = begin * row_bytes
        low -= low % _PAGE
        high = min(end * row_bytes, self._mapped)
        if option is not None and high > low:
            with contextlib.suppress(OSError, ValueError):  # refused: the pages just stay
                self._region.madvise(option, low, high - low)

    def _give_up(self, start: int) -> None:
        """After a failed map: this map grows no more, and the reservation past ``start``
        is made inaccessible again (a failed fixed map may have left a hole there, which
        another map could take and this region's release would then unmap)."""
        if _MMAP is not None:
            _MMAP(
                self._address + start, len(self._region) - start, _NO_ACCESS,
                _RESERVE_FLAGS | _MAP_FIXED, -1, 0,
            )  # fmt: skip
        self._address = 0


def _reserved_with(fd: int, size: int) -> mmap.mmap | None:
    """An inaccessible reservation of about twice ``size`` bytes with the file's first
    ``size`` bytes mapped read-only over its start; ``None`` where that cannot be done."""
    if _MMAP is None or not _RESERVE_FLAGS & getattr(mmap, "MAP_ANONYMOUS", 0):
        return None
    reserved = -(-max(2 * size, size + _MINIMUM_SLACK) // _PAGE) * _PAGE
    try:
        region = mmap.mmap(-1, reserved, flags=_RESERVE_FLAGS, prot=_NO_ACCESS)
    except (OSError, ValueError, OverflowError):
        return None
    address = _address_of(region)
    placed = _MMAP(address, size, mmap.PROT_READ, mmap.MAP_SHARED | _MAP_FIXED, fd, 0)
    if placed != address:
        _MMAP(address, reserved, _NO_ACCESS, _RESERVE_FLAGS | _MAP_FIXED, -1, 0)
        region.close()
        return None
    return region


def _address_of(region: mmap.mmap) -> int:
    """Where ``region`` starts in memory (nothing is read)."""
    return int(np.frombuffer(region, dtype=np.uint8, count=1).ctypes.data)
