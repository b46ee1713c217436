"""A recall's first pass over int8 copies of the rows: which rows may reach the best.

Why: a warm recall's product over an NPC's rows is bounded by how fast one core reads them
(15 MB of float32 at 10k memories of 384 values; 154 MB at 100k). The same rows as int8,
a quarter of the bytes, multiplied by integer dot products (SimSIMD's VNNI / AVX-512 /
AVX2 / NEON kernels, exact in int32), take a quarter of the time or less: on a 2-core
Sapphire Rapids machine, 10k × 384, single-threaded, 545 µs (BLAS ``sgemv``) → 158 µs.

Selection only: the first pass finds every row whose exact score
(:func:`game_memory.recall.vectors.exact_scores`) may reach the best ``limit``; those few
are scored exactly as before, so a recall returns the same memories, order and scores, bit
for bit, with or without it (``tests/recall/test_quantized.py`` pins that).

The bound. Row ``x`` (float32, taken as exact) is held as ``s·c`` with ``s = max|xᵢ| / 127``
(float64) and ``c = rint(x / s)`` (int8), leaving the residual ``e = x − s·c``; the query
``q`` as ``t·k`` (``t = max|qᵢ| / 127``) with residual ``f``. Then exactly

    x·q = s·t·(c·k) + s·(c·f) + e·q,

where ``c·k`` is the integer the kernel returns, ``|s·(c·f)| ≤ s‖c‖·‖f‖`` and
``|e·q| ≤ ‖e‖·‖q‖`` (Cauchy-Schwarz). With ``U`` the largest ``s‖c‖`` and ``R`` the largest
``‖e‖`` of a matrix's copied rows (each computed in float64 and rounded up), every row's
approximate score ``s·t·(c·k)`` lies within ``B = U·‖f‖ + R·‖q‖`` (plus a margin for
float64's and the exact score's own rounding) of its exact score: rows whose approximate
score is below the ``limit``-th best minus ``2B`` cannot reach the best ``limit``. ``B`` is
about 0.02 for 384-dim unit vectors: a 10k-row first pass keeps some 100–250 rows for
``limit`` 32, which the caller narrows with the float32 product of those rows alone and then
scores exactly (:func:`game_memory.recall.vectors.top_vector_candidates`).

Which matrices: those of at least :data:`QUANTIZED_FROM_ROWS` rows (below, the float32
product is as fast). A copy is keyed, weakly, on the array that owns the matrix's memory
(the last array of its ``base`` chain) and holds its first rows: the vector indexes hand out
rows that never change while that array lives (they only append past the rows handed out,
and a compaction or a reload is a new array: the ``VectorIndex.vectors`` contract), so the
copy of a row stays its copy. Rows gained since the copy was made are scored by the float32
product (their error is far below ``B``).

When: never on a recall's way. The first recall that scores a matrix without a copy (or one
:data:`STALE_ROWS` rows or more behind) hands the copying to the front door's pool, in
slices of :data:`COPY_SLICE_ROWS` rows (each one job, so other work queued on the pool
interleaves), and is answered by the float32 product; the recalls after use the copy. No
pool (``helper`` ``None``): no copy is made.

Memory: ``d + 8`` bytes a row (384 + 8 for 384 dimensions; +25% over the float32 rows, and
the float32 rows are then read only for the few rows rescored). Bounded by
:data:`COPIES_BYTES` over the process: beyond it the least recently used copies are dropped
(their matrices are scored by the float32 product until copied again).

Without SimSIMD (a platform without its wheel): no copy, the float32 product as before.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "COPIES_BYTES",
    "COPY_SLICE_ROWS",
    "QUANTIZED_FROM_ROWS",
    "STALE_ROWS",
    "FirstPass",
    "available",
    "copy_now",
    "first_pass",
    "forget_all",
    "held_bytes",
]

FloatMatrix = npt.NDArray[np.float32]
_LOG = logging.getLogger(__name__)

#: Rows from which a matrix is copied to int8: below, one float32 product over its rows
#: costs about what the first pass's fixed costs do (a 4,096 × 384 product: ~0.2 ms).
QUANTIZED_FROM_ROWS = 4_096
#: A copy this many rows behind its matrix (rows appended since) is extended; until then the
#: rows after it are scored by the float32 product (1,024 × 384: ~50 µs).
STALE_ROWS = 1_024
#: Rows copied per job on the pool (about 8 ms at 384 dimensions).
COPY_SLICE_ROWS = 8_192
#: Most bytes all copies hold together (codes and scales), least recently used dropped first:
#: 640k rows of 384 values.
COPIES_BYTES = 256 << 20
#: Largest dimension count: ``127 · 127 · d`` must stay exact in the kernel's int32 sums.
_MOST_DIMENSIONS = 65_536

_Dot = Callable[[npt.NDArray[np.int8], npt.NDArray[np.int8]], npt.NDArray[np.float64]]


def _kernel() -> _Dot | None:
    """SimSIMD's int8 dot products of one query row with every row, or ``None``."""
    try:
        import simsimd
    except ImportError:  # pragma: no cover - a platform without the wheel
        return None
    cdist: Any = simsimd.cdist

    def dot(query: npt.NDArray[np.int8], rows: npt.NDArray[np.int8]) -> npt.NDArray[np.float64]:
        result: npt.NDArray[np.float64] = np.asarray(
            cdist(query, rows, metric="dot", threads=1)
        ).reshape(-1)
        return result

    return dot


_DOT = _kernel()


def available() -> bool:
    """Whether int8 first passes can run here (SimSIMD imports)."""
    return _DOT is not None


@dataclass(frozen=True, slots=True)
class _Copy:
    """The int8 copy of a matrix's first ``rows`` rows: immutable once made (an extension
    makes a new one)."""

    rows: int
    codes: npt.NDArray[np.int8]  # (rows, d)
    scales: npt.NDArray[np.float64]  # (rows,) s per row
    spread: float  # U: the largest s·‖c‖, rounded up
    residual: float  # R: the largest ‖e‖, rounded up

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)


class _Entry:
    """One matrix owner's copy and whether a job is extending it."""

    __slots__ = ("__weakref__", "copy", "owner", "pending", "start")

    def __init__(self, owner: weakref.ref[Any], start: int) -> None:
        self.owner = owner
        self.start = start  # the address of the owner's row 0
        self.copy: _Copy | None = None
        self.pending = False


class _Copies:
    """Every copy of the process, by owner, least recently used first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._bytes = 0

    def entry(self, owner: Any, start: int) -> _Entry:
        """``owner``'s entry (made when new), marked as the most recently used."""
        key = id(owner)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.owner() is owner and entry.start == start:
                self._entries.move_to_end(key)
                return entry
            if entry is not None:  # the id of an owner gone (or moved): start afresh
                self._drop(key)
            entry = _Entry(weakref.ref(owner, self._gone(key)), start)
            self._entries[key] = entry
            return entry

    def _gone(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        def forget(reference: weakref.ref[Any]) -> None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry.owner is reference:
                    self._drop(key)

        return forget

    def publish(self, entry: _Entry, copy: _Copy) -> None:
        """Make ``copy`` ``entry``'s, then drop least recently used copies over budget."""
        with self._lock:
            if self._entries.get(id(entry.owner())) is not entry:
                return  # dropped meanwhile
            self._bytes += copy.nbytes - (entry.copy.nbytes if entry.copy is not None else 0)
            entry.copy = copy
            for key in list(self._entries):
                if self._bytes <= self.budget:
                    break
                if self._entries[key] is not entry:
                    self._drop(key)
            if self._bytes > self.budget:  # this one alone is over budget
                self._drop(id(entry.owner()))

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        if entry.copy is not None:
            self._bytes -= entry.copy.nbytes
            entry.copy = None

    def held_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


_COPIES = _Copies(COPIES_BYTES)


@dataclass(frozen=True, slots=True)
class FirstPass:
    """Approximate scores of rows ``begin .. end − 1`` (float64) and the ``slack`` within
    which each lies of its exact score."""

    scores: npt.NDArray[np.float64]
    slack: float


def _owner(matrix: FloatMatrix) -> tuple[Any, int] | None:
    """The array owning ``matrix``'s memory and the address of its row 0, when ``matrix``
    is a C-contiguous float32 view starting at that row; else ``None``."""
    if (
        matrix.dtype != np.float32
        or not matrix.flags.c_contiguous
        or matrix.ndim != 2
        or not 0 < matrix.shape[1] <= _MOST_DIMENSIONS
    ):
        return None
    owner: Any = matrix
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    start = int(owner.__array_interface__["data"][0])
    if start != int(matrix.__array_interface__["data"][0]):
        return None
    return owner, start


def _quantized(
    rows: FloatMatrix,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float64], float, float]:
    """``rows`` as int8 codes and float64 scales, with the slice's largest ``s‖c‖`` and
    ``‖e‖`` rounded up (module docstring)."""
    peaks = np.abs(rows).max(axis=1).astype(np.float64)
    scales = peaks / 127.0
    scales[scales == 0.0] = 1.0  # an all-zero row: codes 0, residual 0
    exact = rows.astype(np.float64)
    codes = np.clip(np.rint(exact / scales[:, None]), -127.0, 127.0)
    residual = exact - codes * scales[:, None]
    residuals = np.sqrt(np.einsum("ij,ij->i", residual, residual))
    lengths = scales * np.sqrt(np.einsum("ij,ij->i", codes, codes))
    up = 1.0 + 2.0**-30  # float64 rounding of the sums above, many times over
    spread = float(lengths.max(initial=0.0)) * up + 2.0**-40
    largest = float(residuals.max(initial=0.0)) * up + 2.0**-40
    return codes.astype(np.int8), scales, spread, largest


def copy_now(matrix: FloatMatrix) -> bool:
    """Copy ``matrix``'s rows (those not copied yet) now, on this thread; whether it has a
    copy after. For tests and benchmarks: recalls copy on the pool (module docstring)."""
    found = _owner(matrix) if _DOT is not None else None
    if found is None:
        return False
    entry = _COPIES.entry(*found)
    while entry.copy is None or entry.copy.rows < matrix.shape[0]:
        if not _extend(entry, matrix):
            return False
    return True


def _extend(entry: _Entry, matrix: FloatMatrix) -> bool:
    """Copy the next slice of ``matrix``'s rows after ``entry``'s copy; publish it."""
    old = entry.copy
    first = 0 if old is None else old.rows
    last = min(matrix.shape[0], first + COPY_SLICE_ROWS)
    if last <= first:
        return True
    codes, scales, spread, residual = _quantized(matrix[first:last])
    if old is not None:
        codes = np.concatenate((old.codes, codes))
        scales = np.concatenate((old.scales, scales))
        spread, residual = max(spread, old.spread), max(residual, old.residual)
    copy = _Copy(last, codes, scales, spread, residual)
    _COPIES.publish(entry, copy)
    return entry.copy is copy


def _schedule(entry: _Entry, matrix: FloatMatrix, helper: Executor) -> None:
    """Have ``helper`` extend ``entry``'s copy to ``matrix``'s rows, one slice a job."""
    if entry.pending:
        return
    entry.pending = True

    def job() -> None:
        try:
            copied = _extend(entry, matrix) and entry.copy is not None
            if copied and entry.copy is not None and entry.copy.rows < matrix.shape[0]:
                helper.submit(job)  # the next slice, behind whatever else is queued
                return
        except Exception:  # a copy only speeds recalls up: without it, the product
            _LOG.debug("copying rows to int8 failed", exc_info=True)
        entry.pending = False

    try:
        helper.submit(job)
    except RuntimeError:  # the pool is shut down (a racing close)
        entry.pending = False


def first_pass(
    matrix: FloatMatrix,
    query: npt.NDArray[np.float32],
    begin: int,
    end: int,
    helper: Executor | None,
) -> FirstPass | None:
    """Approximate scores of rows ``begin .. end − 1`` from ``matrix``'s int8 copy, or
    ``None`` when it has none covering ``begin`` (then the caller multiplies in float32).

    Schedules the copy (or its extension) on ``helper`` when it is missing or
    :data:`STALE_ROWS` behind. Rows after the copy are scored by the float32 product.
    """
    if _DOT is None or matrix.shape[0] < QUANTIZED_FROM_ROWS or end <= begin:
        return None
    found = _owner(matrix)
    if found is None:
        return None
    entry = _COPIES.entry(*found)
    copy = entry.copy
    if helper is not None and (copy is None or matrix.shape[0] - copy.rows >= STALE_ROWS):
        _schedule(entry, matrix, helper)
    if copy is None or copy.rows <= begin:
        return None
    query64 = query.astype(np.float64)
    peak = float(np.abs(query64).max())
    if not peak > 0.0 or not np.isfinite(peak):
        return None  # a zero or non-finite query: the product says what it says
    step = peak / 127.0
    codes = np.rint(query64 / step)
    rest = query64 - codes * step
    up = 1.0 + 2.0**-30
    query_length = float(np.sqrt(query64 @ query64)) * up
    slack = copy.spread * float(np.sqrt(rest @ rest)) * up + copy.residual * query_length
    # The approximate scores' own float64 rounding, and the exact score's rounding to
    # float32 (its magnitude is at most about U + R times the query's length).
    slack = slack * up + (copy.spread + copy.residual) * query_length * 2.0**-20 + 2.0**-40
    # Never narrower than the float32 product's own window (the rows after the copy).
    slack = max(slack, matrix.shape[1] * 2.0**-21)
    stop = min(end, copy.rows)
    scores = np.empty(end - begin, dtype=np.float64)
    head = scores[: stop - begin]
    products = _DOT(codes.astype(np.int8)[None, :], copy.codes[begin:stop])
    np.multiply(products, copy.scales[begin:stop], out=head)
    head *= step
    if stop < end:  # rows appended since the copy: their float32 product is far closer
        scores[stop - begin :] = matrix[stop:end] @ query
    return FirstPass(scores, slack)


def held_bytes() -> int:
    """Bytes all copies hold (for tests and ``docs/performance.md``'s bound)."""
    return _COPIES.held_bytes()


def forget_all() -> None:
    """Drop every copy (tests)."""
    _COPIES.clear()
