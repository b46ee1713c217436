"""Hybrid recall on a ``VectorMemoryStore``: one snapshot, two rankings, fused, reranked.

1. Read **one** bounded authoritative snapshot and rank it lexically (the store's
   ``snapshot_views``).
2. Embed the query, join each partition view of that snapshot to its index partition
   (right memory, same content, active identity) and score the visible, ready vectors.
   Any failure here, or vectors of another model in the session, makes the query lexical
   (``fallback``) with a diagnostic, unless ``fail_when_embedding_unavailable``.
3. Fuse both rankings, rerank on game time, cut to the query's limit. Only memories of
   the snapshot can come back, whatever the index holds.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from game_memory.durable.names import identity_hash
from game_memory.errors import DerivedIndexError, EmbeddingUnavailableError, GameMemoryError
from game_memory.index.join import PartitionJoin, top_vector_hits
from game_memory.index.partition import FloatMatrix, PartitionReplacedError
from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    memory_matches_query,
)
from game_memory.model.diagnostics import DiagnosticSeverity
from game_memory.model.results import RecallHit, RecallResult
from game_memory.recall.fusion import FusedCandidate, fuse
from game_memory.store.view import PartitionView

if TYPE_CHECKING:
    from game_memory.memory import VectorMemoryStore

__all__ = ["hybrid_recall"]

Stage = GameMemorySearchStageKind


class _Unavailable(Exception):
    """Vector recall cannot serve this query; lexical recall answers alone."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _ordered(views: Sequence[PartitionView]) -> tuple[GameMemory, ...]:
    """Every memory of the snapshot, by owner then id (shared, not copied, for one view)."""
    if len(views) == 1:
        return views[0].ordered
    return tuple(itertools.chain.from_iterable(view.ordered for view in views))


async def hybrid_recall(
    store: VectorMemoryStore, query: GameMemoryQuery, maximum_snapshot_entries: int | None
) -> RecallResult:
    """Recall ``query`` on ``store`` (see ``VectorMemoryStore.recall`` and the module)."""
    options = store.options
    bound = options.maximum_index_entries
    if maximum_snapshot_entries is not None:
        bound = min(bound, maximum_snapshot_entries)
    limit = options.candidate_limit(query.limit)
    expanded = query.model_copy(update={"limit": limit})
    lexical, views, stages = await store.snapshot_views(expanded, bound)
    _validate_lexical(lexical, expanded, limit)
    vector: list[tuple[GameMemory, float]] = []
    fallback = False
    if query.limit > 0 and query.text is not None and store.projector.project_query(query).strip():
        try:
            vector = await _vector_recall(store, query, views, limit, stages)
        except asyncio.CancelledError:
            raise
        except _Unavailable as exc:
            fallback = True
            if exc.code == "memory_vector_rebuild_required":
                await store.warn_rebuild_required(query.session_id, str(exc))
                if options.fail_when_embedding_unavailable:
                    raise DerivedIndexError(str(exc)) from None
        except Exception as exc:
            fallback = True
            await store.report(
                "memory_vector_search_failed",
                DiagnosticSeverity.WARNING,
                "Vector recall is unavailable for this query. Lexical recall was used.",
                session_id=query.session_id,
                error=exc,
            )
            if options.fail_when_embedding_unavailable:
                if isinstance(exc, GameMemoryError):
                    raise
                raise EmbeddingUnavailableError(f"vector recall failed: {exc}") from exc
    fused = fuse(lexical, vector, options.fusion, limit)
    if store.reranker is not None and fused:
        started = time.perf_counter()
        ranked = store.reranker.rank(query, fused)
        _validate_reranked(ranked, fused)
        stages.append(
            GameMemorySearchStage.measured(
                Stage.RERANK, time.perf_counter() - started, len(fused), len(ranked)
            )
        )
        fused = ranked
    chosen = fused[: query.limit]
    hits = tuple(_hit(query, candidate) for candidate in chosen)
    snapshot = GameMemorySearchSnapshot.model_construct(
        memories=tuple(hit.memory for hit in hits),
        authoritative_memories=_ordered(views),
        stages=tuple(stages),
    )
    return RecallResult(snapshot, hits, fallback)


def _hit(query: GameMemoryQuery, candidate: FusedCandidate) -> RecallHit:
    at = query.at_or_before
    moment = candidate.memory.moment
    age = at.tick - moment.tick if at is not None and at.timeline_id == moment.timeline_id else None
    return RecallHit(
        candidate.memory,
        candidate.lexical_rank,
        candidate.vector_rank,
        candidate.lexical_score,
        candidate.vector_score,
        candidate.score,
        age,
    )


def _validate_lexical(
    lexical: Sequence[tuple[GameMemory, float]], query: GameMemoryQuery, limit: int
) -> None:
    keys = {(m.owner_id, m.memory_id) for m, _ in lexical}
    if len(lexical) > limit or len(keys) != len(lexical):
        raise DerivedIndexError("the authoritative store returned too many or duplicate results")
    if not all(memory_matches_query(m, query) for m, _ in lexical):
        raise DerivedIndexError(
            "the authoritative store returned a memory outside the query's visibility filters"
        )


def _validate_reranked(ranked: Sequence[FusedCandidate], fused: Sequence[FusedCandidate]) -> None:
    known = {id(c) for c in fused}
    seen: set[int] = set()
    for candidate in ranked:
        if id(candidate) not in known or id(candidate) in seen:
            raise DerivedIndexError("the reranker returned an unknown or repeated candidate")
        seen.add(id(candidate))


def _read_parts(
    store: VectorMemoryStore, query: GameMemoryQuery, views: list[PartitionView]
) -> list[tuple[PartitionJoin, FloatMatrix, npt.NDArray[np.bool_]]]:
    """Join each view to its index partition and load the active matrices (blocking)."""
    engine = store.index.engine
    identity = store.active_identity
    active = engine.identity_code(identity, create=False)
    session_hash = identity_hash(query.session_id)
    dimensions = identity.dimensions
    joins: list[tuple[PartitionView, PartitionJoin]] = []
    entries = 0
    for view in views:
        partition = engine.partition(session_hash, identity_hash(view.owner_id))
        joined = store.join_cache.join(view, partition, active)
        entries += partition.live if partition is not None else 0
        if joined.stale:
            raise _Unavailable(
                "memory_vector_rebuild_required",
                f"Session {query.session_id!r} holds vectors of another embedding model "
                f"than {identity}; recall is lexical until a rebuild.",
            )
        joins.append((view, joined))
    if entries * dimensions > store.options.maximum_vector_comparisons_per_search:
        raise _Unavailable(
            "memory_vector_search_too_large",
            f"{entries:,} vectors exceed maximum_vector_comparisons_per_search",
        )
    parts: list[tuple[PartitionJoin, FloatMatrix, npt.NDArray[np.bool_]]] = []
    for view, joined in joins:
        if joined.ready and joined.partition is not None and active is not None:
            matrix = engine.matrix(joined.partition, active, dimensions)
            parts.append((joined, matrix, view.columns.mask(query)))
    if not parts and views:
        raise _Unavailable(
            "memory_vector_unindexed",
            "No memory of this query has a vector of the active model yet.",
        )
    return parts


async def _vector_recall(
    store: VectorMemoryStore,
    query: GameMemoryQuery,
    views: list[PartitionView],
    limit: int,
    stages: list[GameMemorySearchStage],
) -> list[tuple[GameMemory, float]]:
    started = time.perf_counter()
    vector = await store.embed_query(store.projector.project_query(query))
    embedded_at = time.perf_counter()
    stages.append(GameMemorySearchStage.measured(Stage.EMBEDDING, embedded_at - started, 1, 1))

    def read_and_score() -> tuple[list[tuple[GameMemory, float]], int, float, float]:
        # A compaction racing this read replaces the partition under us; the second
        # attempt reads the new generation (a third race in a row is reported).
        for attempt in range(3):
            try:
                parts = _read_parts(store, query, views)
                break
            except PartitionReplacedError:
                if attempt == 2:
                    raise
        # One executor hop for both stages; each is timed where its work runs.
        read_at = time.perf_counter()
        hits = top_vector_hits(parts, vector, limit)
        ready = sum(joined.ready for joined, _, _ in parts)
        return hits, ready, read_at, time.perf_counter()

    hits, ready, read_at, scored_at = await store.run(read_and_score)
    stages.append(
        GameMemorySearchStage.measured(Stage.VECTOR_INDEX_READ, read_at - embedded_at, ready, ready)
    )
    stages.append(
        GameMemorySearchStage.measured(Stage.VECTOR_SCORING, scored_at - read_at, ready, len(hits))
    )
    return hits
