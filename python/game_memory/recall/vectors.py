"""Vector candidates of a recall: one matrix-vector product per joined partition."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from game_memory.index.join import PartitionJoin
from game_memory.model import GameMemory, ordinal_key
from game_memory.store.view import PartitionView

__all__ = ["top_vector_hits"]

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
    if limit <= 0:
        return []
    scored: list[tuple[PartitionView, IntArray, npt.NDArray[np.float32]]] = []
    for joined, matrix, visible in parts:
        if joined.ready == 0 or joined.view is None:
            continue
        keep = visible[joined.positions]
        positions = joined.positions[keep]
        scores = (matrix @ query)[joined.rows[keep]]
        np.clip(scores, -1.0, 1.0, out=scores)
        scored.append((joined.view, positions, scores))
    total = sum(scores.size for _, _, scores in scored)
    if total == 0:
        return []
    if total > limit:
        everything = np.concatenate([scores for _, _, scores in scored])
        threshold = np.partition(everything, total - limit)[total - limit]
        scored = [
            (view, positions[chosen], scores[chosen])
            for view, positions, scores in scored
            if (chosen := scores >= threshold).any()
        ]
    hits: list[tuple[GameMemory, float]] = []
    for view, positions, scores in scored:
        memories = view.memories
        hits.extend(
            (memories[p], v) for p, v in zip(positions.tolist(), scores.tolist(), strict=True)
        )
    hits.sort(
        key=lambda hit: (
            -hit[1],
            -hit[0].importance,
            -hit[0].moment.tick,
            ordinal_key(hit[0].owner_id),
            ordinal_key(hit[0].memory_id),
        )
    )
    return hits[:limit]
