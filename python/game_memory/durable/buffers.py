"""Large buffers a load fills, allocated so that their first writes cost what they should.

numpy advises the kernel to back every allocation of 4 MiB or more with transparent huge
pages (``madvise(MADV_HUGEPAGE)``). Where the kernel's huge-page defragmentation policy is
``madvise`` (a common default), a first write into such a region may have to assemble and
zero a 2 MiB page before it returns, and on the benchmark machines (a 2-core VM) that made
filling fresh buffers about ten times slower and its time erratic: copying the columns of
100k index entries into new buffers took 71 ms median (124 ms at worst) with numpy's
allocation against 6.6 ms (9.6 ms) without, and the first recall after opening a 100k save
varied from 48 to 124 ms between runs with the same files. A game wants its loads
predictable, so the buffers a load or an append fills (index entry columns, id positions,
rows held with room to spare) come from :func:`empty_buffer`: plain anonymous memory,
faulted in page by page as it is written, whatever numpy's setting. Nothing else about
them differs from ``np.empty``'s arrays (writable, C-contiguous, freed with the last view).
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["empty_buffer"]

#: From this size on numpy advises huge pages (``NPY_HUGEPAGE_THRESHOLD``, 4 MiB).
_NUMPY_HUGE = 4 << 20
_ANONYMOUS = getattr(mmap, "MAP_ANONYMOUS", None)
_PRIVATE = getattr(mmap, "MAP_PRIVATE", None)


def empty_buffer(shape: tuple[int, ...], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """An uninitialised array like ``np.empty(shape, dtype)``; from 4 MiB on (on POSIX) in
    anonymous memory of its own, without the huge-page advice numpy gives (module docstring).
    """
    kind = np.dtype(dtype)
    count = math.prod(shape)
    size = count * kind.itemsize
    if size < _NUMPY_HUGE or _ANONYMOUS is None or _PRIVATE is None:
        return np.empty(shape, kind)
    region = mmap.mmap(-1, size, flags=_PRIVATE | _ANONYMOUS)
    return np.frombuffer(region, kind, count).reshape(shape)
