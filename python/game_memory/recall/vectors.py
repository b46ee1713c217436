"""Vector candidates of a recall: one matrix-vector product per joined partition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from game_memory.index.join import PartitionJoin
from game_memory.model import GameMemory, ordinal_key
from game_memory.store.view import PartitionView

__all__ = ["SCORING_BLOCK_ROWS", "score_rows", "top_vector_candidates", "top_vector_hits"]

IntArray = npt.NDArray[np.int64]
FloatVector = npt.NDArray[np.float32]

#: Rows of a matrix are scored in aligned blocks of this many: a block none of whose rows
#: the query may see is skipped (a query as of an earlier moment sees a prefix of an NPC's
#: rows). A multiple of every row grouping of a BLAS matrix-vector kernel, so a row scores
#: bit for bit as in the product over the whole matrix (see :func:`score_rows`).
SCORING_BLOCK_ROWS = 256


def score_rows(matrix: npt.NDArray[np.float32], query: FloatVector, rows: IntArray) -> FloatVector:
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
    """
    count = matrix.shape[0]
    if rows.size == 0:
        return np.empty(0, dtype=np.float32)
    if rows.size >= count or not matrix.flags.c_contiguous:
        return (matrix @ query)[rows]
    blocks = -(-count // SCORING_BLOCK_ROWS)
    wanted = np.zeros(blocks + 2, dtype=np.bool_)
    wanted[rows // SCORING_BLOCK_ROWS + 1] = True
    if wanted[1:-1].all():
        return (matrix @ query)[rows]
    edges = np.flatnonzero(wanted[1:] != wanted[:-1])  # run starts and ends, in blocks
    scores = np.empty(count, dtype=np.float32)
    for start_block, end_block in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
        start = start_block * SCORING_BLOCK_ROWS
        end = min(end_block * SCORING_BLOCK_ROWS, count)
        if end - start == 1 and start > 0:
            start -= SCORING_BLOCK_ROWS  # not numpy's one-row dot path (see above)
        scores[start:end] = matrix[start:end] @ query
    return scores[rows]


def top_vector_hits(
    parts: Sequence[tuple[PartitionJoin, npt.NDArray[np.float32], npt.NDArray[np.bool_]]],
    query: npt.NDArray[np.float32],
    limit: int,
) -> list[tuple[GameMemory, float]]:
    """Score every visible joined row and return the best ``limit`` memories.

    Args:
        parts: ``(join, matrix, visible)`` per partition: the matrix of the active identity
            and the view's visibility mask for the query.
        query: The L2-normalized query vector.
        limit: How many candidates to keep.

    Order: cosine (clamped to [-1, 1]) desc, importance desc, tick desc, owner, memory id.
    One matrix-vector product per partition (over the blocks of rows the query may see);
    everything after it is vectorized except the final sort, which only sees the ``limit``
    best scores (and any ties with the last).
    """
    return top_vector_candidates(parts, query, limit)[0]


def top_vector_candidates(
    parts: Sequence[tuple[PartitionJoin, npt.NDArray[np.float32], npt.NDArray[np.bool_]]],
    query: npt.NDArray[np.float32],
    limit: int,
) -> tuple[list[tuple[GameMemory, float]], list[npt.NDArray[np.float32]]]:
    """:func:`top_vector_hits`, and each hit's unit vector (a read-only row), in order."""
    if limit <= 0:
        return [], []
    scored: list[
        tuple[PartitionView, IntArray, npt.NDArray[np.float32], IntArray, npt.NDArray[np.float32]]
    ] = []
    for joined, matrix, visible in parts:
        if joined.ready == 0 or joined.view is None:
            continue
        keep = visible[joined.positions]
        positions = joined.positions[keep]
        rows = joined.rows[keep]
        scores = score_rows(matrix, query, rows)
        np.clip(scores, -1.0, 1.0, out=scores)
        scored.append((joined.view, positions, scores, rows, matrix))
    total = sum(entry[2].size for entry in scored)
    if total == 0:
        return [], []
    if total > limit:
        everything = (
            scored[0][2] if len(scored) == 1 else np.concatenate([entry[2] for entry in scored])
        )
        threshold = np.partition(everything, total - limit)[total - limit]
        scored = [
            (view, positions[chosen], scores[chosen], rows[chosen], matrix)
            for view, positions, scores, rows, matrix in scored
            if (chosen := scores >= threshold).any()
        ]
    # Order on the views' columns, then read only the chosen memories (a view opened from
    # its read file decodes a memory when it is read).
    ranked: list[tuple[float, float, int, str, str, int, int, int]] = []
    for number, (view, positions, scores, rows, _) in enumerate(scored):
        columns, ids = view.columns, view.memory_ids
        owner = ordinal_key(view.owner_id)
        importance = columns.importance[positions].tolist()
        ticks = columns.ticks[positions].tolist()
        ranked.extend(
            (-v, -i, -t, owner, ordinal_key(ids[p]), number, p, r)
            for p, v, r, i, t in zip(
                positions.tolist(), scores.tolist(), rows.tolist(), importance, ticks, strict=True
            )
        )
    ranked.sort()
    chosen = ranked[:limit]
    return (
        [(scored[row[5]][0].memories[row[6]], -row[0]) for row in chosen],
        [scored[row[5]][4][row[7]] for row in chosen],
    )
