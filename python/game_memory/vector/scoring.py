"""Vector recall over partitions: join index entries to the snapshot, then score.

A :class:`PartitionJoin` matches one owner partition's index entries to the authoritative
view of the same partition by ``sha256(memory_id)`` and checks each content digest. Only
ready entries of the active identity whose digest matches become scoring rows; orphans
(no such memory), mismatches (another content), stale (another identity) and pending
entries are counted and left out. Views and index partitions are immutable versions, so
a join is computed once per pair and cached; a warm search is then one matrix-vector
product plus a gather of the visible rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory, ordinal_key
from game_memory.store.partitions import identity_hash
from game_memory.store.view import PartitionView
from game_memory.vector.entries import EntryState, MemoryDigests
from game_memory.vector.index import IndexPartition

__all__ = ["JoinCache", "PartitionJoin", "top_vector_hits"]

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class PartitionJoin:
    """Index entries of one partition matched against its authoritative view.

    ``rows`` and ``positions`` are parallel: the row (in the active identity's matrix) and
    the view position of every scorable memory. ``pending`` counts the view's memories that
    have no ready vector of any identity for their current content (no entry, a pending or
    failed entry, or an entry computed from other content, which is also ``mismatched``).
    """

    view: PartitionView | None
    partition: IndexPartition | None
    active: int | None
    rows: IntArray
    positions: IntArray
    ready: int
    stale: int
    pending: int
    orphans: int
    mismatched: int


def _join(
    view: PartitionView | None,
    partition: IndexPartition | None,
    active: int | None,
    digests: MemoryDigests,
) -> PartitionJoin:
    memories = view.memories if view is not None else ()
    slots: dict[bytes, int] = {}
    expected: list[bytes] = []
    for index, memory in enumerate(memories):
        hashed, digest = digests.get(memory)
        slots[hashed] = index
        expected.append(digest)
    rows: list[int] = []
    positions: list[int] = []
    stale = orphans = mismatched = 0
    if partition is not None:
        states = partition.states.tolist()
        identities = partition.identities.tolist()
        stored_rows = partition.rows.tolist()
        stored = partition.digests
        ready_state = int(EntryState.READY)
        for hashed, slot in partition.position.items():
            position = slots.get(hashed)
            if position is None:
                orphans += 1
            elif stored[slot * 32 : slot * 32 + 32] != expected[position]:
                mismatched += 1
            elif states[slot] == ready_state:
                if active is not None and identities[slot] == active:
                    rows.append(stored_rows[slot])
                    positions.append(position)
                else:
                    stale += 1
    ready = len(rows)
    return PartitionJoin(
        view,
        partition,
        active,
        np.asarray(rows, dtype=np.int64),
        np.asarray(positions, dtype=np.int64),
        ready,
        stale,
        len(memories) - ready - stale,
        orphans,
        mismatched,
    )


class JoinCache:
    """The latest join per partition (session and owner), reused while nothing changed.

    Views and index partitions are immutable versions: a join is valid exactly as long as
    both are the current ones. One join is kept per partition (at most ``maximum``), so
    superseded versions and their matrices are released instead of piling up.
    """

    def __init__(self, digests: MemoryDigests, maximum: int = 4_096) -> None:
        self._digests = digests
        self._maximum = maximum
        self._joins: OrderedDict[tuple[str, str], PartitionJoin] = OrderedDict()
        self._lock = threading.Lock()

    def join(
        self, view: PartitionView | None, partition: IndexPartition | None, active: int | None
    ) -> PartitionJoin:
        """Return the (cached) join of ``view`` and ``partition`` under identity ``active``."""
        if view is not None:
            key = (identity_hash(view.session_id), identity_hash(view.owner_id))
        elif partition is not None:
            key = (partition.session_hash, partition.owner_hash)
        else:
            return _join(None, None, active, self._digests)
        with self._lock:
            cached = self._joins.get(key)
            if (
                cached is not None
                and cached.view is view
                and cached.partition is partition
                and cached.active == active
            ):
                self._joins.move_to_end(key)
                return cached
        joined = _join(view, partition, active, self._digests)
        with self._lock:
            self._joins[key] = joined
            self._joins.move_to_end(key)
            while len(self._joins) > self._maximum:
                self._joins.popitem(last=False)
        return joined


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
