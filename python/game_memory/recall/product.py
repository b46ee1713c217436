"""A recall's matrix-vector product, shared with a helper thread when it is large.

A warm hybrid recall of an NPC with 10k memories spends about 0.5 ms in one product over
its rows (15 MB at 384 dimensions), bounded by how fast one core reads memory. Two cores
read it faster: the product is cut at an aligned block boundary, a helper thread (the front
door's pool) multiplies the first part while the caller multiplies the second, each into
its slice of one output. Measured on a 2-core machine with a single-threaded BLAS, each
product after 1 ms idle (as a game's recalls come: a helper that slept that long wakes
slowly), median of 60–200: 32k × 384 rows 1.84 → 1.13 ms, 50k 3.45 → 2.09 ms, 100k 9.4 →
5.0 ms; but 24k 1.30 → 1.36 ms, 10k 0.48 → 0.54 ms and 8k 0.38 → 0.43 ms, slower: waking
the helper costs about as much as half of such a product. Back to back (no idle time) the
helper wakes fast and sharing wins from about 8k rows (10k 0.50 → 0.35 ms), but a threshold
tuned to that would slow a game's sporadic recalls; hence :data:`SPLIT_VALUES`.

The helper is never waited for idly: when the caller has finished its part and the helper
has not started (its pool busy with other work), the job is withdrawn and the caller
multiplies that part too, so a recall never takes longer than one thread would, plus the
hand-off. Nothing spins.

Bit for bit: both parts start on a multiple of ``block`` rows from row 0 and the second
ends where the product ended, so every row is multiplied as in one product
(:func:`game_memory.recall.vectors.score_rows` holds the same contract for its runs).

Only when numpy's BLAS runs one thread: a threaded BLAS already splits a product among the
cores (its threads spin while they wait; see ``docs/performance.md``), and splitting on top
of it only adds threads. BLAS reads its thread count from the environment when numpy loads
(``OPENBLAS_NUM_THREADS``, then ``GOTO_NUM_THREADS``, then ``OMP_NUM_THREADS``); the frozen
sidecar a game ships sets ``OPENBLAS_NUM_THREADS=1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

__all__ = ["SPLIT_VALUES", "blas_is_single_threaded", "product"]

#: Values (rows × columns) from which a product is shared with the helper: about 31k rows
#: of 384 (or 11.7k of 1,024), where two threads win even when the helper slept before.
SPLIT_VALUES = 12_000_000

_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def blas_is_single_threaded(environment: Mapping[str, str] | None = None) -> bool:
    """Whether numpy's BLAS runs one thread and this process may use a second core.

    Read from the variables OpenBLAS reads at load (the first one set decides), and from
    the CPUs this process may run on.
    """
    variables: Mapping[str, str] = os.environ if environment is None else environment
    for name in _THREAD_VARIABLES:
        value = variables.get(name, "").strip()
        if value:
            if value != "1":
                return False
            break
    else:
        return False  # unset: OpenBLAS runs a thread per core
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores >= 2


_SINGLE = blas_is_single_threaded()


def product(
    matrix: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    begin: int,
    end: int,
    block: int,
    helper: Executor | None,
) -> npt.NDArray[np.float32]:
    """``matrix[begin:end] @ query``, bit for bit, sharing a large one with ``helper``.

    ``begin`` is a multiple of ``block`` (or the product is not shared). Without a
    helper, below :data:`SPLIT_VALUES`, or with a threaded BLAS, one product.
    """
    rows = matrix[begin:end]
    middle = ((begin + end) // 2) // block * block
    if (
        helper is None
        or not _SINGLE
        or matrix.dtype != np.float32
        or query.dtype != np.float32
        or rows.size < SPLIT_VALUES
        or begin % block
        or not begin < middle < end
        or not matrix.flags.c_contiguous
    ):
        return rows @ query
    scores = np.empty(end - begin, dtype=np.float32)
    cut = middle - begin

    def first() -> None:
        np.matmul(rows[:cut], query, out=scores[:cut])

    try:
        job = helper.submit(first)
    except RuntimeError:  # the pool is shut down (a racing close): one thread does it all
        return rows @ query
    np.matmul(rows[cut:], query, out=scores[cut:])
    if job.cancel():  # the helper has not started: not worth waiting for
        first()
    else:
        job.result()
    return scores
