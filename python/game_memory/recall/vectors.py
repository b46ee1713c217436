"""Vector candidates of a recall: one matrix-vector product per joined partition, and the
few rows it finds rescored exactly."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

from game_memory.index.join import PartitionJoin
from game_memory.index.quantized import first_pass
from game_memory.model import GameMemory, ordinal_key
from game_memory.recall.product import product
from game_memory.store.view import PartitionView

__all__ = [
    "SCORING_BLOCK_ROWS",
    "exact_scores",
    "score_rows",
    "score_span",
    "selection_margin",
    "top_vector_candidates",
    "top_vector_hits",
]

IntArray = npt.NDArray[np.int64]
FloatVector = npt.NDArray[np.float32]
FloatMatrix = npt.NDArray[np.float32]

#: Rows of a matrix are scored in aligned blocks of this many: a block none of whose rows
#: the query may see is skipped (a query as of an earlier moment sees a prefix of an NPC's
#: rows). A multiple of every row grouping of a BLAS matrix-vector kernel, so a row scores
#: bit for bit as in the product over the whole matrix (see :func:`score_rows`).
SCORING_BLOCK_ROWS = 256


def score_rows(
    matrix: npt.NDArray[np.float32],
    query: FloatVector,
    rows: IntArray,
    helper: Executor | None = None,
) -> FloatVector:
    """``(matrix @ query)[rows]``, multiplying only the blocks of rows that hold a wanted row.

    The blocks are aligned to :data:`SCORING_BLOCK_ROWS` from row 0, consecutive wanted
    blocks are multiplied in one product, and the last run always ends at the matrix's last
    row, so each row sits at the same offset within the kernel's row groups and the same
    tail as in one product over the whole matrix: with a single-threaded BLAS the scores are
    bit-identical to ``(matrix @ query)[rows]`` (``tests/recall/test_vector_scoring.py``
    pins it). A one-row product takes numpy's dot path rather than BLAS's, so a run of
    one row is widened by a block. A multi-threaded BLAS splits a product among its threads
    by the product's size, so there (as for any product over a grown matrix) a score may
    differ from the whole-matrix product in its last float32 bit.

    A large run is shared with ``helper`` (:func:`game_memory.recall.product.product`:
    cut at a block boundary, so the same scores).
    """
    count = matrix.shape[0]
    if rows.size == 0:
        return np.empty(0, dtype=np.float32)
    if rows.size >= count or not matrix.flags.c_contiguous:
        return product(matrix, query, 0, count, SCORING_BLOCK_ROWS, helper)[rows]
    blocks = -(-count // SCORING_BLOCK_ROWS)
    wanted = np.zeros(blocks + 2, dtype=np.bool_)
    wanted[rows // SCORING_BLOCK_ROWS + 1] = True
    if wanted[1:-1].all():
        return product(matrix, query, 0, count, SCORING_BLOCK_ROWS, helper)[rows]
    edges = np.flatnonzero(wanted[1:] != wanted[:-1])  # run starts and ends, in blocks
    scores = np.empty(count, dtype=np.float32)
    for start_block, end_block in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        start, end = _run(start_block, end_block, count)
        scores[start:end] = product(matrix, query, start, end, SCORING_BLOCK_ROWS, helper)
    return scores[rows]


def score_span(
    matrix: npt.NDArray[np.float32],
    query: FloatVector,
    start: int,
    stop: int,
    helper: Executor | None = None,
) -> FloatVector:
    """:func:`score_rows` of the rows ``start .. stop − 1``, bit for bit, without a gather.

    Those rows' blocks are one run, multiplied as :func:`score_rows` multiplies it (the
    same product, so the same scores); the result is a view of that product. A query as
    of a moment usually sees such a run (a prefix of an NPC's rows), and then neither a
    row index per visible row nor a gather of the scores through it is built. A large
    run is shared with ``helper``, as in :func:`score_rows`.
    """
    count = matrix.shape[0]
    if stop <= start:
        return np.empty(0, dtype=np.float32)
    first, last = start // SCORING_BLOCK_ROWS, (stop - 1) // SCORING_BLOCK_ROWS
    whole = stop - start >= count or (first == 0 and last == -(-count // SCORING_BLOCK_ROWS) - 1)
    if whole or not matrix.flags.c_contiguous:
        return product(matrix, query, 0, count, SCORING_BLOCK_ROWS, helper)[start:stop]
    begin, end = _run(first, last + 1, count)
    scores = product(matrix, query, begin, end, SCORING_BLOCK_ROWS, helper)
    return scores[start - begin : stop - begin]


def _run(start_block: int, end_block: int, count: int) -> tuple[int, int]:
    """The rows ``(start, end)`` multiplied for the run of blocks ``start_block ..
    end_block − 1`` of a matrix of ``count`` rows (see :func:`score_rows`)."""
    start = start_block * SCORING_BLOCK_ROWS
    end = min(end_block * SCORING_BLOCK_ROWS, count)
    if end - start == 1 and start > 0:
        start -= SCORING_BLOCK_ROWS  # not numpy's one-row dot path (see score_rows)
    return start, end


def top_vector_hits(
    parts: Sequence[tuple[PartitionJoin, npt.NDArray[np.float32], npt.NDArray[np.bool_]]],
    query: npt.NDArray[np.float32],
    limit: int,
    helper: Executor | None = None,
) -> list[tuple[GameMemory, float]]:
    """Score every visible joined row and return the best ``limit`` memories.

    Args:
        parts: ``(join, matrix, visible)`` per partition: the matrix of the active identity
            and the view's visibility mask for the query.
        query: The L2-normalized query vector.
        limit: How many candidates to keep.
        helper: A pool a large product is shared with (see
            :func:`game_memory.recall.product.product`); the same results without it.

    Order: cosine (clamped to [-1, 1]) desc, importance desc, tick desc, owner, memory id.
    One matrix-vector product per partition (over the blocks of rows the query may see)
    finds the rows that may reach the best ``limit`` (those within
    :func:`selection_margin` of its ``limit``-th best score); they alone are rescored by
    :func:`exact_scores`, which order and are returned: a memory's score depends on its
    vector and the query only, not on which row or backend holds it. Everything after the
    product is vectorized except the final sort, which only sees those few rows.
    """
    return top_vector_candidates(parts, query, limit, helper)[0]


def top_vector_candidates(
    parts: Sequence[tuple[PartitionJoin, npt.NDArray[np.float32], npt.NDArray[np.bool_]]],
    query: npt.NDArray[np.float32],
    limit: int,
    helper: Executor | None = None,
    copies: bool = False,
) -> tuple[list[tuple[GameMemory, float]], list[npt.NDArray[np.float32]]]:
    """:func:`top_vector_hits`, and each hit's unit vector (a read-only row), in order.

    ``copies``: whether large matrices may be copied to int8 for later first passes
    (:mod:`game_memory.index.quantized`; a front door's recall); the same results either
    way.

    A dense join (``PartitionJoin.dense``: row ``i`` is view position ``i``, the usual case)
    whose visible rows form one run (a query as of a moment sees a prefix) is scored by
    :func:`score_span` and carried as that run alone; any other as the rows it may see.
    Either way only the few rows that may reach the best ``limit`` get positions, rows,
    exact scores and sort keys.
    """
    if limit <= 0:
        return [], []
    scored: list[_Scored] = []
    for joined, matrix, visible in parts:
        if joined.ready == 0 or joined.view is None:
            continue
        scored.append(_score(joined, joined.view, matrix, visible, query, helper, copies))
    total = sum(part[1].size for part in scored)
    if total == 0:
        return [], []
    floors = _floors(scored, total, limit)
    if len(scored) > _MANY_PARTS and floors.count(floors[0]) == len(floors):
        chosen = _chosen_among_many(scored, floors[0])
    else:
        chosen = [_chosen(part, floor) for part, floor in zip(scored, floors, strict=True)]
    if any(part[5] > selection_margin(query.size) for part in scored):
        chosen = _narrowed(chosen, query, limit)  # a first pass kept a wider window
    query64 = query.astype(np.float64)
    if len(chosen) > _MANY_PARTS:
        picks = _exact_among_many(chosen, query64)
    else:
        picks = [(rows, gathered, exact_scores(gathered, query64)) for rows, gathered in chosen]
    if len(scored) == 1:
        distinct = _distinct_top(scored[0], picks[0], limit)
        if distinct is not None:
            return distinct
    # Order on the views' columns, then read only the chosen memories (a view opened from
    # its read file decodes a memory when it is read).
    ranked: list[tuple[float, float, int, str, str, int, int, int]] = []
    for number, ((view, _, places, first, _, _), (taken, _, exact)) in enumerate(
        zip(scored, picks, strict=True)
    ):
        if taken.size == 0:
            continue
        if places is None:  # a dense run: the position is the row, from ``first`` on
            at = taken + first
            picked = picked_rows = at.tolist()
        else:
            at = places[0][taken]
            picked, picked_rows = at.tolist(), places[1][taken].tolist()
        columns = view.columns
        ids = view.memory_ids.picked(picked)
        # ordinal_key returns ASCII text as it is: the same keys without the calls.
        keys = ids if all(map(str.isascii, ids)) else list(map(ordinal_key, ids))
        ranked.extend(
            zip(
                map(operator.neg, exact.tolist()),
                map(operator.neg, columns.importance[at].tolist()),
                map(operator.neg, columns.ticks[at].tolist()),
                itertools.repeat(ordinal_key(view.owner_id)),
                keys,
                itertools.repeat(number),
                picked,
                picked_rows,
                strict=False,  # the repeats have no end
            )
        )
    ranked.sort()
    kept = ranked[:limit]
    if len(scored) == 1:  # one partition (one NPC's recall): its memories and rows at once
        view, matrix = scored[0][0], scored[0][4]
        memories = view.memories_at(list(map(_position, kept)))
        rows = matrix[list(map(_row, kept))]
        rows.flags.writeable = False
        vectors: list[npt.NDArray[np.float32]] = list(rows)
    else:
        memories = [scored[row[5]][0].memories[row[6]] for row in kept]
        vectors = [scored[row[5]][4][row[7]] for row in kept]
    return list(zip(memories, map(operator.neg, map(_first, kept)), strict=True)), vectors


def selection_margin(dimensions: int) -> float:
    """How far below the ``limit``-th best product score a row is still rescored.

    A float32 dot product of ``n`` terms differs from the exact one by at most
    ``γ(n) · Σ|aᵢbᵢ|`` (γ(n) = n·u / (1 − n·u), u = 2⁻²⁴), and ``Σ|aᵢbᵢ| ≤ 1`` for unit
    vectors: two rows whose exact scores are in one order may come out of the product in the
    other, by at most twice that. Every row whose exact score can reach the ``limit`` best
    lies within ``2·γ(n)`` of the product's ``limit``-th best score; the margin doubles that
    again for vectors a little off unit length. ``n · 2⁻²¹``: 1.8e-4 at 384 dimensions,
    far below the gap between two distinct memories' cosines, so it rarely adds a row.
    """
    return max(dimensions, 1) * 2.0**-21


def exact_scores(rows: npt.NDArray[np.float32], query64: npt.NDArray[np.float64]) -> FloatVector:
    """Each row's dot product with the query, the same wherever the row sits, clipped to
    [-1, 1].

    BLAS's matrix-vector kernels sum a row's terms in an order that depends on where the
    row sits in the product (a group of rows or the tail): the same memory scored by two
    backends whose matrices hold it at other rows, or after the matrix grew, may differ in
    its last bit, and so may two memories with one vector, which then tie or not by where
    they were saved. Here each product of two float32 values is exact in float64, each row
    is summed alone (numpy's pairwise sum along the row), and the sum is rounded once to
    float32: a function of the row and the query only, and the correctly rounded cosine
    but for float64's rounding. About 12 µs for 32 rows of 384.
    """
    products = rows.astype(np.float64)
    products *= query64
    scores: FloatVector = products.sum(axis=1).astype(np.float32)
    np.clip(scores, -1.0, 1.0, out=scores)
    return scores


def _floors(scored: Sequence[_Scored], total: int, limit: int) -> list[float | None]:
    """Each part's floor: its rows scoring at least that may reach the best ``limit``
    (``None``: all of them, when there are no more than ``limit`` rows).

    A part's scores lie within half its window of the exact ones, so the ``limit``-th best
    of the rows' lowest possible exact scores (score − half the window) is a score the best
    ``limit`` reach, and a row whose highest possible score is below it cannot be among
    them. One window (one partition, or all scored alike): the ``limit``-th best score
    less the window, as before the first pass existed.
    """
    if total <= limit:
        return [None] * len(scored)
    windows = [part[5] for part in scored]
    if windows.count(windows[0]) == len(windows):
        everything = (
            scored[0][1] if len(scored) == 1 else np.concatenate([part[1] for part in scored])
        )
        threshold = float(np.partition(everything, total - limit)[total - limit])
        return [threshold - windows[0]] * len(scored)
    lowest = np.concatenate([part[1] - part[5] / 2 for part in scored])
    threshold = float(np.partition(lowest, total - limit)[total - limit])
    return [threshold - window / 2 for window in windows]


def _chosen(scored: _Scored, floor: float | None) -> tuple[IntArray, FloatMatrix]:
    """The indices (into the part's scores) of the rows at or above ``floor`` (all when
    ``None``) and those rows gathered."""
    _, scores, places, first, matrix, _ = scored
    chosen = np.arange(scores.size) if floor is None else np.flatnonzero(scores >= floor)
    rows = chosen + first if places is None else places[1][chosen]
    return chosen, matrix[rows]


#: Parts (NPCs) from which a recall's selection runs once over all of them rather than part
#: by part: a session-wide recall over 5,000 NPCs made some ten numpy calls per NPC there,
#: nearly all for NPCs none of whose rows could reach the best.
_MANY_PARTS = 64


def _chosen_among_many(
    scored: Sequence[_Scored], floor: float | None
) -> list[tuple[IntArray, FloatMatrix]]:
    """:func:`_chosen` of every part with one ``floor``: one comparison over all the
    scores, and rows gathered only for the parts that hold a chosen one."""
    if floor is None:
        return [_chosen(part, None) for part in scored]
    sizes = [part[1].size for part in scored]
    starts = np.cumsum([0, *sizes])
    everything = np.concatenate([part[1] for part in scored])
    found = np.flatnonzero(everything >= floor)
    owners = np.searchsorted(starts, found, side="right") - 1
    none = np.empty(0, dtype=np.int64)
    chosen: list[tuple[IntArray, FloatMatrix]] = [(none, part[4][:0]) for part in scored]
    for number in np.unique(owners).tolist():
        _, _, places, first, matrix, _ = scored[number]
        indices = found[owners == number] - starts[number]
        rows = indices + first if places is None else places[1][indices]
        chosen[number] = (indices, matrix[rows])
    return chosen


def _exact_among_many(
    chosen: Sequence[tuple[IntArray, FloatMatrix]], query64: npt.NDArray[np.float64]
) -> list[tuple[IntArray, FloatMatrix, FloatVector]]:
    """:func:`exact_scores` of every part's chosen rows in one call (a row's exact score
    does not depend on the rows beside it), split back by part."""
    sizes = [gathered.shape[0] for _, gathered in chosen]
    held = [gathered for _, gathered in chosen if gathered.shape[0]]
    if not held:
        return [(rows, gathered, np.empty(0, dtype=np.float32)) for rows, gathered in chosen]
    exact = exact_scores(np.concatenate(held), query64)
    parts = np.split(exact, np.cumsum(sizes)[:-1])
    return [(rows, gathered, part) for (rows, gathered), part in zip(chosen, parts, strict=True)]


def _narrowed(
    chosen: list[tuple[IntArray, FloatMatrix]], query: FloatVector, limit: int
) -> list[tuple[IntArray, FloatMatrix]]:
    """The rows a first pass kept (:mod:`game_memory.index.quantized`: its window is
    about 0.04 wide, so some 100–250 rows of 10k), narrowed by the float32 product of those
    rows alone to the float32 window (:func:`selection_margin`), as if the whole matrix had
    been multiplied: a row's product error is bounded alike wherever the row sits."""
    total = sum(rows.size for rows, _ in chosen)
    if total <= limit:
        return chosen
    products = [gathered @ query for _, gathered in chosen]
    everything = products[0] if len(products) == 1 else np.concatenate(products)
    floor = float(np.partition(everything, total - limit)[total - limit])
    floor -= selection_margin(query.size)
    narrowed: list[tuple[IntArray, FloatMatrix]] = []
    for (rows, gathered), scores in zip(chosen, products, strict=True):
        keep = np.flatnonzero(scores >= floor)
        narrowed.append((rows[keep], gathered[keep]))
    return narrowed


def _distinct_top(
    scored: _Scored,
    pick: tuple[IntArray, npt.NDArray[np.float32], FloatVector],
    limit: int,
) -> tuple[list[tuple[GameMemory, float]], list[npt.NDArray[np.float32]]] | None:
    """:func:`top_vector_candidates` of one partition when no two of its best ``limit`` + 1
    exact scores tie (nor is one NaN), else ``None``.

    The full order (score, then importance, tick, owner and memory id) is then the order of
    the scores alone, so the tie-break keys (ids, importance and tick columns, a tuple per
    candidate) are never built: the usual case, as cosines of distinct memories rarely tie.
    """
    view, _, places, first, _, _ = scored
    chosen, gathered, values = pick
    order = np.argsort(-values, kind="stable")
    best = values[order[: limit + 1]]
    if best.size > 1 and not bool((best[1:] < best[:-1]).all()):
        return None  # a tie or a NaN among them: the tie-breaks decide
    if best.size == 1 and np.isnan(best[0]):
        return None
    kept = order[:limit]
    at = chosen[kept]
    positions = (at + first).tolist() if places is None else places[0][at].tolist()
    picked = gathered[kept]
    picked.flags.writeable = False
    return list(zip(view.memories_at(positions), best[:limit].tolist(), strict=True)), list(picked)


_first = operator.itemgetter(0)
_position = operator.itemgetter(6)
_row = operator.itemgetter(7)


#: A partition's visible rows scored: its view, the scores (float32 from the product,
#: float64 from a first pass), the view position and row of each score (``None`` for a
#: dense run: both are ``first`` + the score's index), ``first``, the matrix, and the
#: window: how far below the ``limit``-th best score a row may still reach the best
#: (twice the most a score differs from the exact one).
_Scored = tuple[
    PartitionView,
    npt.NDArray[np.floating],
    tuple[IntArray, IntArray] | None,
    int,
    npt.NDArray[np.float32],
    float,
]


def _score(
    joined: PartitionJoin,
    view: PartitionView,
    matrix: npt.NDArray[np.float32],
    visible: npt.NDArray[np.bool_],
    query: FloatVector,
    helper: Executor | None,
    copies: bool,
) -> _Scored:
    """Score the rows of ``joined`` that ``visible`` shows, clipped to [-1, 1]: by the
    first pass over the matrix's int8 copy when it has one
    (:func:`game_memory.index.quantized.first_pass`), else by the float32 product."""
    margin = selection_margin(query.size)
    if joined.dense:
        shown = visible[: joined.positions.size]  # position i is row i
        count = int(np.count_nonzero(shown))
        first = int(shown.argmax()) if count else 0
        if bool(shown[first : first + count].all()):  # one run (count 0 included)
            quick = first_pass(matrix, query, first, first + count, copies)
            if quick is not None:
                np.clip(quick.scores, -1.0, 1.0, out=quick.scores)
                return view, quick.scores, None, first, matrix, 2.0 * quick.slack
            spanned = score_span(matrix, query, first, first + count, helper)
            np.clip(spanned, -1.0, 1.0, out=spanned)
            return view, spanned, None, first, matrix, margin
        positions = rows = np.flatnonzero(shown)
    else:
        keep = visible[joined.positions]
        positions = joined.positions[keep]
        rows = joined.rows[keep]
    scores: npt.NDArray[np.floating] | None = None
    window = margin
    if rows.size >= SCORING_BLOCK_ROWS:
        low = int(rows.min())
        quick = first_pass(matrix, query, low, int(rows.max()) + 1, copies)
        if quick is not None:
            scores, window = quick.scores[rows - low], 2.0 * quick.slack
    if scores is None:
        scores = score_rows(matrix, query, rows, helper)
    np.clip(scores, -1.0, 1.0, out=scores)
    return view, scores, (positions, rows), 0, matrix, window
