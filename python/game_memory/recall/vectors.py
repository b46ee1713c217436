"""Vector candidates of a recall: one matrix-vector product per joined partition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from game_memory.index.join import PartitionJoin
from game_memory.model import GameMemory, ordinal_key
from game_memory.store.view import PartitionView

__all__ = ["top_vector_candidates", "top_vector_hits"]

IntArray = npt.NDArray[np.int64]


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
    One matrix-vector product per partition; everything after it is vectorized except the
    final sort, which only sees the ``limit`` best scores (and any ties with the last).
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
        scores = (matrix @ query)[rows]
        np.clip(scores, -1.0, 1.0, out=scores)
        scored.append((joined.view, positions, scores, rows, matrix))
    total = sum(entry[2].size for entry in scored)
    if total == 0:
        return [], []
    if total > limit:
        everything = np.concatenate([entry[2] for entry in scored])
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
        importance, ticks = columns.importance, columns.ticks
        ranked.extend(
            (-v, -float(importance[p]), -int(ticks[p]), owner, ordinal_key(ids[p]), number, p, r)
            for p, v, r in zip(positions.tolist(), scores.tolist(), rows.tolist(), strict=True)
        )
    ranked.sort()
    chosen = ranked[:limit]
    return (
        [(scored[row[5]][0].memories[row[6]], -row[0]) for row in chosen],
        [scored[row[5]][4][row[7]] for row in chosen],
    )
