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

The bound. Row ``x`` (float32, taken as exact) is held as ``s·c`` with ``s ≈ max|xᵢ| / 127``
(float32) and ``c = rint(x / s)`` (int8), leaving the residual ``e = x − s·c``; the query
``q`` as ``t·k`` (``t = max|qᵢ| / 127``) with residual ``f``. Then exactly

    x·q = s·t·(c·k) + s·(c·f) + e·q,

where ``c·k`` is the integer the kernel returns, ``|s·(c·f)| ≤ s‖c‖·‖f‖`` and
``|e·q| ≤ ‖e‖·‖q‖`` (Cauchy-Schwarz). With ``U`` the largest ``s‖c‖`` and ``R`` the largest
``‖e‖`` of a matrix's copied rows (each computed in float32 and rounded up to a bound of
the exact value: :func:`_quantized`), every row's
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

Kept in a file: the file index writes a large partition's copy beside its rows at close
and offers it when it first reads them (:func:`offer`; ``index/row_codes.py`` proves it is
theirs); the first first pass that may use copies and finds none has the copier read it
once that recall is answered, so an NPC opened again scores from its copy from about its
second recall on, and no open waits for it.

When made here: never on a recall's way. The :data:`COPY_AFTER`-th front-door recall that scores a
matrix without a copy (or with one :data:`STALE_ROWS` rows or more behind) hands the
copying to the process's copier thread (its own, not the front door's pool, whose second
thread shares large products), in slices of :data:`COPY_SLICE_ROWS` rows (one job each,
so copies of several NPCs interleave), and is answered by the float32 product, as is every
recall until the copy covers all but :data:`STALE_ROWS` of the rows it scores. The copier
gives way to running recalls before each chunk (``recalling``; at most
:data:`_MOST_WAIT` a chunk). A copy costs one core about 1.1 µs a row (384 dimensions):
11 ms at 10k rows, 110 ms at 100k.

Memory: ``d + 4`` bytes a row (+26% over the float32 rows at 384 dimensions; the float32
rows are then read only for the few rows rescored), in buffers of their own with room for
an eighth more rows (anonymous memory, resident only once written: ``empty_buffer``), which
appends fill in place. Bounded by
:data:`COPIES_BYTES` over the process: beyond it the least recently used copies are dropped
(their matrices are scored by the float32 product until copied again).

Without SimSIMD (a platform without its wheel): no copy, the float32 product as before.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from game_memory.durable.buffers import empty_buffer

simsimd: Any
try:  # imported here, not in a function, so that a frozen sidecar's analysis finds it
    import simsimd
except ImportError:  # pragma: no cover - a platform without the wheel
    simsimd = None

__all__ = [
    "COPIES_BYTES",
    "COPY_AFTER",
    "COPY_SLICE_ROWS",
    "QUANTIZED_FROM_ROWS",
    "STALE_ROWS",
    "FirstPass",
    "Int8Rows",
    "appending",
    "available",
    "begun",
    "copy_buffers",
    "copy_now",
    "copy_of",
    "first_pass",
    "forget_all",
    "held_bytes",
    "idle",
    "offer",
    "quantize",
    "recalling",
]

FloatMatrix = npt.NDArray[np.float32]
_LOG = logging.getLogger(__name__)

#: Rows from which a matrix is copied to int8: below, one float32 product over its rows
#: costs about what the first pass's fixed costs do (a 4,096 × 384 product: ~0.2 ms).
QUANTIZED_FROM_ROWS = 4_096
#: A copy this many rows behind its matrix (rows appended since) is extended; until then the
#: rows after it are scored by the float32 product (1,024 × 384: ~50 µs).
STALE_ROWS = 1_024
#: Rows copied per job on the copier thread (about 9 ms at 384 dimensions).
COPY_SLICE_ROWS = 8_192
#: Rows quantized at once within a job: its two float32 scratch arrays (384 KB each at 384
#: dimensions) stay in a core's cache. 100k × 384 copied in 110 ms (256 rows a chunk),
#: 123 ms (512), 135 ms (1,024), 150 ms (2,048).
_CHUNK_ROWS = 256
#: First passes asked of a matrix before it is copied: a copy costs about what 40–100
#: recalls save (11 ms of one core at 10k rows, 110 ms at 100k), so an NPC asked once or
#: twice is not copied.
COPY_AFTER = 4
#: Most bytes all copies hold together (codes and scales), least recently used dropped first:
#: about 690k rows of 384 values.
COPIES_BYTES = 256 << 20
#: Largest dimension count: ``127 · 127 · d`` must stay exact in the kernel's int32 sums.
_MOST_DIMENSIONS = 65_536

_Dot = Callable[[npt.NDArray[np.int8], npt.NDArray[np.int8]], npt.NDArray[np.float64]]


def _threads() -> int:
    """Threads a first pass's kernel runs on: two where the process may use two cores.

    The first pass replaces the float32 product, which a large recall already shares with
    a second thread (``recall/product.py``). Measured on the 2-core machine, 6k × 384 codes
    (a 10k NPC's visible rows), median wall / mean CPU per call: back to back 116 / 119 µs
    on one thread, 46 / 85 µs on two; after a 1 ms pause 124 / 131 → 55 / 85 µs; after
    5 ms (the second thread asleep) 139 / 162 → 113 / 201 µs. 100k × 384: 1.95 → 0.97 ms
    back to back, 3.50 → 1.33 ms after 5 ms, the CPU about the same.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


def _kernel() -> _Dot | None:
    """SimSIMD's int8 dot products of one query row with every row, or ``None``."""
    if simsimd is None:  # pragma: no cover - a platform without the wheel
        return None
    cdist: Any = simsimd.cdist
    threads = _threads()

    def dot(query: npt.NDArray[np.int8], rows: npt.NDArray[np.int8]) -> npt.NDArray[np.float64]:
        result: npt.NDArray[np.float64] = np.asarray(
            cdist(query, rows, metric="dot", threads=threads)
        ).reshape(-1)
        return result

    return dot


_DOT = _kernel()


def available() -> bool:
    """Whether int8 first passes can run here (SimSIMD imports)."""
    return _DOT is not None


@dataclass(frozen=True, slots=True)
class Int8Rows:
    """The int8 copy of a matrix's first ``rows`` rows: never changes once published (an
    extension writes rows after these into the same buffers, then publishes a new one).

    ``spread`` and ``residual`` bound every copied row (module docstring: ``U`` and ``R``);
    a copy kept in a file (``index/row_codes.py``) carries them with its codes."""

    rows: int
    codes: npt.NDArray[np.int8]  # (rows, d): a prefix of the entry's code buffer
    scales: npt.NDArray[np.float32]  # (rows,) s per row
    spread: float  # U: the largest s·‖c‖, rounded up
    residual: float  # R: the largest ‖e‖, rounded up
    #: The buffers ``codes`` and ``scales`` are prefixes of, with room after them for
    #: appended rows (``copy_buffers``), when the copy was read into them; else ``None``.
    buffers: tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]] | None = None

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)


class _Entry:
    """One matrix owner's copy and whether a job is extending it."""

    __slots__ = (
        "__weakref__", "asked", "codes", "copy", "direct", "loader", "lock", "owner",
        "pending", "refused", "scales", "scored", "start",
    )  # fmt: skip

    def __init__(self, owner: weakref.ref[Any], start: int) -> None:
        self.owner = owner
        self.start = start  # the address of the owner's row 0
        self.copy: Int8Rows | None = None
        self.pending = False
        #: A row held a value that is not finite: no bound holds, the product scores it.
        self.refused = False
        #: First passes asked of this matrix (a copy is made from :data:`COPY_AFTER`).
        self.scored = 0
        #: The buffers the copies view, with room after the rows copied (written only by
        #: the one job extending the copy).
        self.codes: npt.NDArray[np.int8] | None = None
        self.scales: npt.NDArray[np.float32] | None = None
        #: Held while the copy is extended (its buffers written): one writer at a time.
        self.lock = threading.Lock()
        #: Copied by :func:`copy_now` (a caller that wants it now): no giving way.
        self.direct = False
        #: Reads a copy kept elsewhere (:func:`offer`), once.
        self.loader: Callable[[], Int8Rows | None] | None = None
        #: Whether recalls had the copier make (or extend) a copy (:func:`begun`).
        self.asked = False


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

    def claim(self, entry: _Entry) -> bool:
        """Mark ``entry`` as being extended; ``False`` if it already is."""
        with self._lock:
            if entry.pending:
                return False
            entry.pending = True
            return True

    def _gone(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        def forget(reference: weakref.ref[Any]) -> None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is not None and entry.owner is reference:
                    self._drop(key)

        return forget

    def publish(self, entry: _Entry, copy: Int8Rows | None) -> None:
        """Make ``copy`` ``entry``'s (``None``: drop its copy), then drop least recently
        used copies over budget."""
        with self._lock:
            if self._entries.get(id(entry.owner())) is not entry:
                return  # dropped meanwhile
            held = copy.nbytes if copy is not None else 0
            self._bytes += held - (entry.copy.nbytes if entry.copy is not None else 0)
            entry.copy = copy
            if copy is None:
                entry.codes = entry.scales = None
                return
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
        entry.codes = entry.scales = None

    def idle(self) -> bool:
        with self._lock:
            return not any(entry.pending for entry in self._entries.values())

    def held_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def clear(self) -> None:
        with self._lock:
            entries, self._entries = self._entries, OrderedDict()
            self._bytes = 0
        entries.clear()  # outside the lock: what this frees may call an entry's ``forget``


_COPIES = _Copies(COPIES_BYTES)


class _Traffic:
    """How many calls of one kind (recalls, or appends) are running in this process, so
    that background work gives way to them.

    A copy job and a recall share two cores and one interpreter lock: measured at 100k, a
    recall running while its NPC's rows were copied took 20–35 ms instead of 7, so copies
    wait for running recalls (:data:`recalling`) before each chunk. An append shares the
    disk with the read of a file of codes: read whole right after a 100k NPC's first
    recall, its 39 MB made the appends that followed wait up to 37 ms for their ``fsync``
    (against about 1.2 ms), so that read waits for running appends (:data:`appending`)
    before each megabyte (``row_codes.py``); not for recalls, which it does not slow and
    which, asked back to back, would leave it no gap (a warm session then scored without
    its copy: 10k 1.3 → 1.8 ms). A wait is at most :data:`_MOST_WAIT` seconds a chunk, so
    a process that is never idle still gets its copy.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._idle = threading.Condition(self._lock)

    def __enter__(self) -> None:
        with self._lock:
            self._running += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._running -= 1
            if not self._running:
                self._idle.notify_all()

    def give_way(self) -> None:
        """Wait while one runs (at most :data:`_MOST_WAIT` seconds)."""
        with self._lock:
            if self._running:
                self._idle.wait_for(lambda: not self._running, timeout=_MOST_WAIT)


#: Longest a copy job waits for running recalls before each chunk (seconds): a process
#: never idle still copies 100k rows, in about 20 s. Shorter waits let chunks run inside
#: recalls, and a chunk's many short numpy calls take and give back the interpreter lock
#: so often that the recall's own threads wait for it (up to the 5 ms switch interval a
#: time): with 5 ms, the 100k recall that scheduled the copy scored in 9.8 ms against 5–6.
_MOST_WAIT = 0.05
#: Enter around a recall (``with recalling:``): copies give way while any runs.
recalling = _Traffic()
#: Enter around an append (``with appending:``): reads of files of codes give way.
appending = _Traffic()


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
    codes: npt.NDArray[np.int8],
    scales: npt.NDArray[np.float32],
    scratch: tuple[FloatMatrix, FloatMatrix],
) -> tuple[float, float] | None:
    """Write ``rows`` as int8 ``codes`` and float32 ``scales``; return their largest
    ``s‖c‖`` and ``‖e‖``, each rounded up to a bound of the exact value (module docstring),
    or ``None`` when a row holds a value that is not finite (no bound holds for it).

    In float32 (a quarter of the float64 work), through ``scratch`` (two float32 arrays of
    at least as many rows: a fresh array per step would page-fault its megabytes in each
    time, which cost more than the arithmetic): ``y = fl(s·c)`` and ``e' = fl(x − y)``
    differ from ``s·c`` and ``e`` by at most 2⁻²⁴ of each element, so ``‖e‖ ≤ ‖e'‖ +
    2⁻²³(‖s·c‖ + ‖e'‖)``; the float32 sums of squares are within ``d``·2⁻²⁴ of theirs
    (each factor taken twice over), and a subnormal's absolute error is covered by 2⁻¹⁰⁰.
    """
    count, dimensions = rows.shape
    values, residual = scratch[0][:count], scratch[1][:count]
    np.abs(rows, out=values)
    peaks = values.max(axis=1)  # NaN or infinity when a row holds one
    if not np.isfinite(peaks).all():
        return None
    np.divide(peaks, np.float32(127.0), out=scales)
    scales[scales == 0.0] = 1.0  # an all-zero row: codes 0, residual 0
    np.divide(rows, scales[:, None], out=values)
    np.rint(values, out=values)
    np.clip(values, -127.0, 127.0, out=values)
    np.multiply(values, scales[:, None], out=residual)
    np.subtract(rows, residual, out=residual)
    grow = 1.0 + (dimensions + 4) * 2.0**-23
    residuals = float(np.sqrt(np.einsum("ij,ij->i", residual, residual).max())) * grow
    lengths = np.sqrt(np.einsum("ij,ij->i", values, values)) * scales
    spread = float(lengths.max()) * grow * (1.0 + 2.0**-22)
    codes[...] = values  # exact: whole numbers in [-127, 127]
    largest = residuals + 2.0**-23 * (spread + residuals) + 2.0**-100
    return spread + 2.0**-100, largest


def copy_buffers(
    rows: int, dimensions: int
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Buffers for a copy of ``rows`` rows and room for an eighth more (at least twice the
    rows that trigger an extension): appends fill it in place, no copy of what was copied.
    The codes' buffer is anonymous memory, resident only once written (``empty_buffer``)."""
    room = rows + max(rows // 8, 2 * STALE_ROWS)
    return empty_buffer((room, dimensions), np.int8), np.empty(room, dtype=np.float32)


def copy_now(matrix: FloatMatrix) -> bool:
    """Copy ``matrix``'s rows (those not copied yet) now, on this thread; whether it has a
    copy after. For tests and benchmarks: recalls copy on the copier (module docstring)."""
    found = _owner(matrix) if _DOT is not None else None
    if found is None:
        return False
    entry = _COPIES.entry(*found)
    entry.direct = True
    try:
        while entry.copy is None or entry.copy.rows < matrix.shape[0]:
            if not _extend(entry, matrix):
                return False
    finally:
        entry.direct = False
    return not entry.refused


def copy_of(matrix: FloatMatrix) -> Int8Rows | None:
    """The copy ``matrix``'s rows have now (of a prefix of them), or ``None``: what a file
    of codes is written from (``index/row_codes.py``)."""
    found = _owner(matrix) if _DOT is not None else None
    if found is None:
        return None
    copy = _COPIES.entry(*found).copy
    return copy if copy is not None and copy.rows <= matrix.shape[0] else None


def begun(matrix: FloatMatrix) -> bool:
    """Whether ``matrix``'s rows have a copy, or recalls asked for one to be made (not
    merely for a file of codes to be read)."""
    found = _owner(matrix) if _DOT is not None else None
    if found is None:
        return False
    entry = _COPIES.entry(*found)
    return entry.copy is not None or entry.asked


def offer(matrix: FloatMatrix, loader: Callable[[], Int8Rows | None]) -> None:
    """Offer a copy of ``matrix``'s first rows kept elsewhere (a file of codes,
    ``index/row_codes.py``): ``loader`` is called once, on the copier once no recall runs,
    after the first first pass that may use copies found none, and what it returns
    (``None``: nothing usable) becomes the copy, as if made here. The caller proves the
    copy is of these very rows; ``loader`` must not hold ``matrix`` (nor what holds it)
    strongly: the copies are keyed weakly on the rows."""
    found = _owner(matrix) if _DOT is not None and matrix.shape[0] >= QUANTIZED_FROM_ROWS else None
    if found is not None:
        entry = _COPIES.entry(*found)
        if entry.copy is None:
            entry.loader = loader


def _load(entry: _Entry, matrix: FloatMatrix) -> Int8Rows | None:
    """Call ``entry``'s loader (once) and take what it returns as its copy, if it fits
    ``matrix`` and no larger copy came meanwhile; the entry's copy after."""
    with entry.lock:
        loader, entry.loader = entry.loader, None
        if loader is None or entry.copy is not None or entry.refused:
            return entry.copy
        try:
            copy = loader()
        except Exception:  # a copy only speeds recalls up: without it, the product
            _LOG.debug("reading int8 codes failed", exc_info=True)
            copy = None
        if (
            copy is not None
            and 0 < copy.rows <= matrix.shape[0]
            and copy.codes.shape == (copy.rows, matrix.shape[1])
            and copy.scales.shape == (copy.rows,)
        ):
            entry.codes, entry.scales = copy.buffers or (copy.codes, copy.scales)
            _COPIES.publish(entry, copy)
        return entry.copy


def quantize(matrix: FloatMatrix) -> Int8Rows | None:
    """A copy of all of ``matrix``'s rows, made now on this thread and held by no one but
    the caller (what a file of codes is written from when no recall made one), or ``None``
    when a row is not finite or SimSIMD is missing."""
    count, dimensions = matrix.shape
    if _DOT is None or count == 0 or not 0 < dimensions <= _MOST_DIMENSIONS:
        return None
    codes = np.empty((count, dimensions), dtype=np.int8)
    scales = np.empty(count, dtype=np.float32)
    bounds = _quantized_rows(matrix, 0, count, codes, scales, (0.0, 0.0), give_way=False)
    return None if bounds is None else Int8Rows(count, codes, scales, *bounds)


def _quantized_rows(
    matrix: FloatMatrix,
    first: int,
    last: int,
    codes: npt.NDArray[np.int8],
    scales: npt.NDArray[np.float32],
    bounds: tuple[float, float],
    *,
    give_way: bool,
) -> tuple[float, float] | None:
    """Write rows ``first .. last − 1`` of ``matrix`` into ``codes`` and ``scales`` (the
    same rows of them), :data:`_CHUNK_ROWS` at a time (after waiting for running recalls
    before each, with ``give_way``); the copy's ``(U, R)`` after, from ``bounds`` before,
    or ``None`` when a row is not finite."""
    spread, residual = bounds
    dimensions = matrix.shape[1]
    chunk = min(_CHUNK_ROWS, last - first)
    scratch = (
        np.empty((chunk, dimensions), dtype=np.float32),
        np.empty((chunk, dimensions), dtype=np.float32),
    )
    for start in range(first, last, _CHUNK_ROWS):
        stop = min(last, start + _CHUNK_ROWS)
        if give_way:
            recalling.give_way()
        found = _quantized(matrix[start:stop], codes[start:stop], scales[start:stop], scratch)
        if found is None:
            return None
        spread, residual = max(spread, found[0]), max(residual, found[1])
    return spread, residual


def _extend(entry: _Entry, matrix: FloatMatrix) -> bool:
    """Copy the next slice of ``matrix``'s rows after ``entry``'s copy, into the entry's
    buffers (grown, with room, when they are full); publish it. Whether it was published.
    Under the entry's lock: a copy published covers rows its buffers hold written."""
    with entry.lock:
        return _extend_locked(entry, matrix)


def _extend_locked(entry: _Entry, matrix: FloatMatrix) -> bool:
    old = entry.copy
    first = 0 if old is None else old.rows
    count, dimensions = matrix.shape
    last = min(count, first + COPY_SLICE_ROWS)
    if entry.refused:
        return False
    if last <= first:
        return True
    codes, scales = entry.codes, entry.scales
    if codes is None or scales is None or codes.shape[0] < last:
        grown, grown_scales = copy_buffers(count, dimensions)
        if codes is not None and scales is not None:
            grown[:first] = codes[:first]
            grown_scales[:first] = scales[:first]
        codes, scales = entry.codes, entry.scales = grown, grown_scales
    before = (0.0, 0.0) if old is None else (old.spread, old.residual)
    bounds = _quantized_rows(matrix, first, last, codes, scales, before, give_way=not entry.direct)
    if bounds is None:  # the indexes hold finite rows; a foreign one may not
        entry.refused = True
        _COPIES.publish(entry, None)
        return False
    copy = Int8Rows(last, codes[:last], scales[:last], *bounds)
    _COPIES.publish(entry, copy)
    return entry.copy is copy


_COPIER_LOCK = threading.Lock()
_COPIER: list[ThreadPoolExecutor] = []


def _copier() -> ThreadPoolExecutor:
    """The process's one thread that makes copies (started at the first copy).

    Not the front door's pool: a job waiting there for recalls to end (``recalling``)
    would hold one of its two threads, and a 100k recall shares its product with the
    other (measured: with the copy on the pool, the recall that scheduled it scored in
    16–18 ms instead of 10, the product on one thread)."""
    with _COPIER_LOCK:
        if not _COPIER:
            _COPIER.append(ThreadPoolExecutor(1, thread_name_prefix="game-memory-int8"))
        return _COPIER[0]


def _schedule_load(entry: _Entry, matrix: FloatMatrix) -> None:
    """Have the copier read ``entry``'s offered copy (:func:`offer`) once no recall runs:
    the recall that asked is answered by the product, as it would have been without the
    file (reading 39 MB at 100k into fresh memory took 20 ms; from a cold disk, longer),
    so an open's first answer waits for no copy."""
    if not _COPIES.claim(entry):
        return

    def job() -> None:
        try:
            recalling.give_way()
            _load(entry, matrix)
        except Exception:  # a copy only speeds recalls up: without it, the product
            _LOG.debug("reading int8 codes failed", exc_info=True)
        finally:
            entry.pending = False

    _submit(entry, job)


def _submit(entry: _Entry, job: Callable[[], None]) -> None:
    """Queue ``job`` (which ends by clearing ``entry.pending``) on the copier."""
    try:
        _copier().submit(job)
    except RuntimeError:  # the interpreter is shutting down
        entry.pending = False


def idle() -> bool:
    """Whether no copy is being made or read (for tests and benchmarks)."""
    return _COPIES.idle()


def _schedule(entry: _Entry, matrix: FloatMatrix) -> None:
    """Have the copier extend ``entry``'s copy to ``matrix``'s rows, one slice a job (at
    most one job queued or running per entry; copies of other matrices interleave)."""
    if not _COPIES.claim(entry):
        return
    entry.asked = True

    def job() -> None:
        try:
            copied = _extend(entry, matrix) and entry.copy is not None
            if copied and entry.copy is not None and entry.copy.rows < matrix.shape[0]:
                _submit(entry, job)  # the next slice, behind whatever else is queued
                return
        except Exception:  # a copy only speeds recalls up: without it, the product
            _LOG.debug("copying rows to int8 failed", exc_info=True)
        entry.pending = False

    _submit(entry, job)


def first_pass(
    matrix: FloatMatrix,
    query: npt.NDArray[np.float32],
    begin: int,
    end: int,
    copies: bool,
) -> FirstPass | None:
    """Approximate scores of rows ``begin .. end − 1`` from ``matrix``'s int8 copy, or
    ``None`` when it has none covering all but :data:`STALE_ROWS` of them (then the caller
    multiplies in float32).

    With ``copies`` (a front door's recall), schedules the copy (or its extension) on the
    copier from the matrix's :data:`COPY_AFTER`-th first pass when it is missing or
    :data:`STALE_ROWS` behind. Rows after the copy are scored by the float32 product.
    """
    if _DOT is None or matrix.shape[0] < QUANTIZED_FROM_ROWS or end <= begin:
        return None
    found = _owner(matrix)
    if found is None:
        return None
    entry = _COPIES.entry(*found)
    copy = entry.copy
    if copy is None and copies and entry.loader is not None:
        _schedule_load(entry, matrix)  # a copy kept in a file: read in the background
    if entry.refused:
        return None
    entry.scored += 1
    behind = copy is None or matrix.shape[0] - copy.rows >= STALE_ROWS
    if copies and behind and entry.scored >= COPY_AFTER:
        _schedule(entry, matrix)
    if copy is None or end - max(begin, min(end, copy.rows)) > STALE_ROWS:
        return None  # none yet, or one being made: the product (shared with the pool)
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
    np.multiply(products, copy.scales[begin:stop], out=head)  # exact: 23 × 24 bits
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
