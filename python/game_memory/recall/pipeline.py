"""Recall: one snapshot, two rankings, fused, reranked on game time.

1. Read **one** bounded authoritative snapshot, ranked lexically by the store
   (:meth:`GameMemoryStore.snapshot`: the BM25 scores come from the store, never invented).
2. With an embedder and an index, embed the query (begun before step 1, so the model
   and the store work at once: :func:`_early_embedding`), join each partition view of that
   snapshot to its index partition (right memory, same content, active identity) and score
   the visible, ready vectors. Any failure here, or vectors of another model in the session,
   makes the query lexical (``fallback``) with a diagnostic, unless
   ``fail_when_embedding_unavailable``. Without an embedder (lexical mode) this step is
   skipped and nothing falls back. An owner whose join finds memories without a vector
   (none of another model) is named to ``RecallParts.missing``, whose owner (the front
   door) may embed them later; this recall answers with the vectors there are.
3. Fuse both rankings, rerank on game time, cut to the query's limit. Only memories of
   the snapshot can come back, whatever the index holds.

The pipeline is a function over explicit collaborators (:class:`RecallParts`); it never asks
which backend it holds.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from game_memory.embedding.embedder import Embedder
from game_memory.errors import (
    CapacityExceededError,
    DerivedIndexError,
    EmbeddingUnavailableError,
    GameMemoryError,
)
from game_memory.index.join import PartitionJoin
from game_memory.index.partition import FloatMatrix, PartitionReplacedError
from game_memory.index.protocol import VectorIndex
from game_memory.index.quantized import recalling
from game_memory.model import (
    DiagnosticSeverity,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    MemoryVectorDiagnostic,
    RecallHit,
    RecallResult,
    memories_match_query,
)
from game_memory.recall.fusion import FusedCandidate, fuse
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.reranker import GameAwareMemoryReranker
from game_memory.recall.vectors import top_vector_candidates
from game_memory.store.protocol import GameMemoryStore, StoreSnapshot
from game_memory.store.view import PartitionView

__all__ = [
    "REBUILD_REQUIRED",
    "Missing",
    "RecallParts",
    "Report",
    "Runner",
    "recall",
    "report_failure",
]

logger = logging.getLogger("game_memory.recall")

_T = TypeVar("_T")
Stage = GameMemorySearchStageKind

#: The diagnostic code of a session whose vectors are of another model.
REBUILD_REQUIRED = "memory_vector_rebuild_required"
_ATTEMPTS = 3


class Runner(Protocol):
    """Runs blocking work (index reads, numpy) off the event loop and awaits it."""

    def __call__(self, function: Callable[[], _T]) -> Awaitable[_T]: ...


#: Delivers one diagnostic (never raises).
Report = Callable[[MemoryVectorDiagnostic], Awaitable[None]]

#: Told ``(session_id, owner_id)`` of an owner some of whose memories have no vector of the
#: active model (and none has a vector of another): called on the event loop, after the
#: recall scored what there is; it must return at once and never raise.
Missing = Callable[[str, str], None]


@dataclass(frozen=True, slots=True)
class RecallParts:
    """What recall works with; ``embedder`` and ``index`` are ``None`` in lexical mode."""

    store: GameMemoryStore
    index: VectorIndex | None
    embedder: Embedder | None
    reranker: GameAwareMemoryReranker | None
    options: VectorMemoryStoreOptions
    run: Runner
    report: Report
    #: A pool a large matrix-vector product is shared with (``recall/product.py``).
    helper: Executor | None = None
    #: Told of owners whose memories lack vectors (:data:`Missing`); ``None``: nobody asks.
    missing: Missing | None = None


class _Unavailable(Exception):
    """Vector recall cannot serve this query; lexical recall answers alone.

    ``lacking`` names the owners whose memories have no vector yet (:data:`Missing`).
    """

    def __init__(self, code: str, message: str, lacking: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.lacking = lacking


#: No index at all: a store opened without one recalls lexically by design, not as a fallback
#: to report.
_NO_INDEX = "memory_vector_index_missing"
_UNINDEXED = "memory_vector_unindexed"
_TOO_LARGE = "memory_vector_search_too_large"


def _unavailable_error(exc: _Unavailable) -> GameMemoryError:
    """What ``fail_when_embedding_unavailable`` raises for a reason vectors cannot serve."""
    if exc.code == _TOO_LARGE:
        return CapacityExceededError(str(exc), bound="maximum_vector_comparisons_per_search")
    advice = " Rebuild the session's vectors (game-memory rebuild, or memory.rebuild)."
    return DerivedIndexError(str(exc) + ("" if exc.code == REBUILD_REQUIRED else advice))


async def report_failure(
    report: Report,
    code: str,
    severity: DiagnosticSeverity,
    message: str,
    *,
    error: BaseException | None = None,
    session_id: str | None = None,
    owner_id: str | None = None,
    memory_id: str | None = None,
) -> None:
    """Build a diagnostic (the exception's class name in its details) and deliver it.

    The exception's own message (which memory, what the model refused) goes to the
    ``game_memory`` log as a warning, not into the diagnostic a game receives: it is what
    a developer needs to fix the cause, and the CLI and the sidecar's log print it.
    """
    if error is not None:
        logger.warning("%s (%s: %s)", message, type(error).__name__, error)
    await report(
        MemoryVectorDiagnostic(
            code=code,
            severity=severity,
            message=message,
            session_id=session_id,
            owner_id=owner_id,
            memory_id=memory_id,
            details={"exception": type(error).__name__} if error is not None else None,
        )
    )


async def recall(
    query: GameMemoryQuery, parts: RecallParts, *, maximum_snapshot_entries: int | None = None
) -> RecallResult:
    """Recall ``query`` as of ``query.at_or_before`` (game time), with evidence per hit.

    While it runs, copies of index rows being made give way (``quantized.recalling``).

    Raises:
        CapacityExceededError: the snapshot exceeds the bound; ``bound`` names the one that
            applied (the options' ``maximum_index_entries``, or the call's tighter
            ``maximum_snapshot_entries``).
        EmbeddingUnavailableError, DerivedIndexError: only with
            ``fail_when_embedding_unavailable``; otherwise ``fallback`` is set.
    """
    with recalling:
        return await _recall(query, parts, maximum_snapshot_entries)


#: The recall argument that bounds one snapshot (it can only tighten the options' bound).
_CALL_BOUND = "maximum_snapshot_entries"
#: The options' bound on one snapshot (and on what a status or a rebuild reads).
_OPTIONS_BOUND = "maximum_index_entries"


def _snapshot_bound(
    options: VectorMemoryStoreOptions, maximum_snapshot_entries: int | None
) -> tuple[int, str]:
    """The most memories the recall's snapshot may hold, and the name of what set it: the
    options' ``maximum_index_entries``, or the call's tighter ``maximum_snapshot_entries``."""
    bound = options.maximum_index_entries
    if maximum_snapshot_entries is not None and maximum_snapshot_entries < bound:
        return maximum_snapshot_entries, _CALL_BOUND
    return bound, _OPTIONS_BOUND


async def _read_snapshot(
    parts: RecallParts, expanded: GameMemoryQuery, bound: int, named: str
) -> StoreSnapshot:
    """The store's snapshot of ``expanded``, at most ``bound`` memories (set by ``named``).

    Raises:
        CapacityExceededError: more memories than ``bound``. The store names its snapshot
            bound ``maximum_snapshot_entries`` whoever set it; the error names ``named``
            instead, the bound that applied, with what raises it (a store's own tighter
            bound, named by the store, is left as the store raised it).
    """
    try:
        return await parts.store.snapshot(expanded, maximum_entries=bound)
    except CapacityExceededError as exc:
        if exc.bound != _CALL_BOUND:
            raise  # the store's own bound (its maximum_entries), named so by the store
        own = getattr(parts.store, "maximum_snapshot_entries", None)
        if isinstance(own, int) and own < bound:
            raise  # a database store's own snapshot bound applied: the store named it
        raise _snapshot_too_large(expanded, bound, named) from exc


def _snapshot_too_large(query: GameMemoryQuery, bound: int, named: str) -> CapacityExceededError:
    """The recall's snapshot exceeds ``bound``, set by ``named``: say what helps."""
    if query.owner_id is None:
        where, narrower = f"session {query.session_id!r}", "query one owner, or "
    else:
        where, narrower = f"owner {query.owner_id!r} of session {query.session_id!r}", ""
    if named == _CALL_BOUND:
        what = "the maximum_snapshot_entries this recall was given"
        advice = "recall with a larger maximum_snapshot_entries, or without one"
    else:
        what = "the most one recall reads (VectorMemoryStoreOptions.maximum_index_entries)"
        advice = (
            "open the front door with a larger maximum_index_entries, or erase what the game "
            "no longer needs"
        )
    return CapacityExceededError(
        f"{where} holds more than {bound:,} memories, {what}; {narrower}{advice}",
        bound=named,
    )


async def _recall(
    query: GameMemoryQuery, parts: RecallParts, maximum_snapshot_entries: int | None
) -> RecallResult:
    options = parts.options
    bound, named = _snapshot_bound(options, maximum_snapshot_entries)
    limit = options.candidate_limit(query.limit)
    expanded = query.model_copy(update={"limit": limit})
    # The query is embedded while the save is read (both wait on other threads: the
    # model's and the store's), not after: a recall costs the longer of the two, not both.
    early = _early_embedding(parts, query)
    try:
        return await _recall_with(query, parts, expanded, (bound, named), limit, early)
    finally:
        if early is not None and not early.done():
            early.cancel()  # the snapshot failed, or the recall was cancelled


async def _recall_with(
    query: GameMemoryQuery,
    parts: RecallParts,
    expanded: GameMemoryQuery,
    bound: tuple[int, str],
    limit: int,
    early: asyncio.Task[_Embedded] | None,
) -> RecallResult:
    options = parts.options
    if early is not None:
        # Let the embedding reach the model's thread before the store reads: a small
        # cached owner's snapshot is answered on the event loop without waiting, and
        # would otherwise run before the embedding even starts. Two turns of the loop:
        # the gate's (``embedding/gate.py``), then the provider's, which for the ONNX
        # models hands the text to their thread; a provider needing more turns simply
        # overlaps less.
        for _ in range(_TURNS_TO_THE_MODEL):
            await asyncio.sleep(0)
    snapshot = await _read_snapshot(parts, expanded, *bound)
    lexical = snapshot.lexical  # (memory, score) named tuples
    _validate_snapshot(snapshot, lexical, expanded, limit)
    stages = [
        s.as_reused() if s.stage is Stage.AUTHORITATIVE_SNAPSHOT else s for s in snapshot.stages
    ]
    vector: list[tuple[GameMemory, float]] = []
    vectors: list[np.ndarray] = []
    fallback = False
    embedder = parts.embedder
    if query.limit > 0 and embedder is not None and embedder.query_text(query).strip():
        try:
            vector, vectors = await _vector_recall(
                parts, embedder, query, snapshot.views, limit, stages, early
            )
        except asyncio.CancelledError:
            raise
        except _Unavailable as exc:
            fallback = True
            _tell_missing(parts, query.session_id, exc.lacking)
            if exc.code != _NO_INDEX:
                # Every other reason is one a game should hear of (the docs promise a
                # diagnostic for each): a folder deleted or never built, another model's
                # vectors, or more comparisons than the bound allows.
                await report_failure(
                    parts.report,
                    exc.code,
                    DiagnosticSeverity.WARNING,
                    f"{exc} Lexical recall was used.",
                    session_id=query.session_id,
                )
                if options.fail_when_embedding_unavailable:
                    raise _unavailable_error(exc) from None
        except Exception as exc:
            fallback = True
            await report_failure(
                parts.report,
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
    fused = fuse(lexical, vector, options.fusion, limit, vectors if vector else None)
    if parts.reranker is not None and fused:
        started = time.perf_counter()
        ranked = parts.reranker.rank(query, fused)
        _validate_reranked(ranked, fused)
        stages.append(
            GameMemorySearchStage.measured(
                Stage.RERANK, time.perf_counter() - started, len(fused), len(ranked)
            )
        )
        fused = ranked
    hits = tuple(_hit(query, candidate) for candidate in fused[: query.limit])
    result = GameMemorySearchSnapshot.assembled(
        tuple(hit.memory for hit in hits), snapshot.authoritative_memories, tuple(stages)
    )
    return RecallResult(result, hits, fallback)


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


def _validate_snapshot(
    snapshot: StoreSnapshot,
    lexical: Sequence[tuple[GameMemory, float]],
    query: GameMemoryQuery,
    limit: int,
) -> None:
    """Trust no backend blindly: the hits and views must belong to the query."""
    for view in snapshot.views:
        if view.session_id != query.session_id or (
            query.owner_id is not None and view.owner_id != query.owner_id
        ):
            raise DerivedIndexError("the authoritative snapshot escaped the query's partition")
    memories = [memory for memory, _ in lexical]
    if len(lexical) > limit or len(set(map(_memory_key, memories))) != len(lexical):
        raise DerivedIndexError("the authoritative store returned too many or duplicate results")
    if not memories_match_query(memories, query):
        raise DerivedIndexError(
            "the authoritative store returned a memory outside the query's visibility filters"
        )


_memory_key = operator.attrgetter("owner_id", "memory_id")


def _validate_reranked(ranked: Sequence[FusedCandidate], fused: Sequence[FusedCandidate]) -> None:
    """The reranker must return each of its candidates at most once, and nothing else."""
    seen = set(map(id, ranked))
    if len(seen) != len(ranked) or not seen.issubset(map(id, fused)):
        raise DerivedIndexError("the reranker returned an unknown or repeated candidate")


#: The scoring parts of a recall (join, active rows, visibility mask per partition) and
#: the owners whose memories lack a vector (:data:`Missing`).
_Parts = tuple[list[tuple[PartitionJoin, FloatMatrix, np.ndarray]], list[str]]


def _tell_missing(parts: RecallParts, session_id: str, lacking: Sequence[str]) -> None:
    """Name each owner of ``lacking`` to ``parts.missing`` (nothing to do when none)."""
    if lacking and parts.missing is not None:
        for owner_id in lacking:
            parts.missing(session_id, owner_id)


def _read_parts(
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    query: GameMemoryQuery,
    views: Sequence[PartitionView],
) -> _Parts:
    """Join each view to its index partition and load the active matrices (blocking); with
    the owners whose memories lack a vector (none when a partition holds stale ones)."""
    identity = embedder.identity
    joins: list[tuple[PartitionView, PartitionJoin]] = []
    entries = 0
    for view in views:
        joined = index.join(view, identity)
        entries += joined.entries
        if joined.stale:
            raise _Unavailable(
                REBUILD_REQUIRED,
                f"Session {query.session_id!r} holds vectors of another embedding model "
                f"than {identity}; recall is lexical until a rebuild.",
            )
        joins.append((view, joined))
    if entries * identity.dimensions > options.maximum_vector_comparisons_per_search:
        raise _Unavailable(
            _TOO_LARGE,
            f"{entries:,} vectors of {identity.dimensions} values exceed "
            "maximum_vector_comparisons_per_search "
            f"({options.maximum_vector_comparisons_per_search:,} values a search).",
        )
    parts: list[tuple[PartitionJoin, FloatMatrix, np.ndarray]] = []
    for view, joined in joins:
        if joined.ready:
            parts.append((joined, index.vectors(joined, identity), view.mask(query)))
    lacking = [view.owner_id for view, joined in joins if joined.pending]
    if not parts and views:
        raise _Unavailable(
            _UNINDEXED,
            "No memory of this query has a vector of the active model yet.",
            lacking,
        )
    return parts, lacking


#: Most rows a recall scores on the event loop, when the index answers from memory
#: (:meth:`VectorIndex.cached_vectors`): a product over 16,384 rows of 384 values takes
#: about 0.6 ms, no more than the hop to a worker thread and back costs a recall of 10k.
INLINE_ROWS = 16_384


def _cached_parts(
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    query: GameMemoryQuery,
    views: Sequence[PartitionView],
) -> _Parts | None:
    """What :func:`_read_parts` would return, when the index holds every view's join and
    rows in memory and they are few (:data:`INLINE_ROWS`); ``None`` when the blocking path
    must run (anything to read, check or report, or more rows)."""
    if sum(map(len, views)) > INLINE_ROWS:
        # More memories than that: the rows are (nearly always) more too, and asking the
        # index about each view first cost a session-wide recall over 5,000 NPCs 110 ms of
        # lookups whose answer was then dropped. ``None`` is always a correct answer.
        return None
    identity = embedder.identity
    held: list[tuple[PartitionJoin, FloatMatrix, PartitionView]] = []
    entries = rows = 0
    for view in views:
        cached = index.cached_vectors(view, identity)
        if cached is None:
            return None
        joined, matrix = cached
        if joined.stale or not joined.ready:
            return None
        entries += joined.entries
        rows += matrix.shape[0]
        if rows > INLINE_ROWS:
            return None
        held.append((joined, matrix, view))
    too_many = entries * identity.dimensions > options.maximum_vector_comparisons_per_search
    if not held or too_many:
        return None
    lacking = [view.owner_id for joined, _, view in held if joined.pending]
    return [(joined, matrix, view.mask(query)) for joined, matrix, view in held], lacking


#: Turns of the event loop an early embedding is given before the snapshot (see
#: :func:`_recall_with`): measured with the default model over a cached 5k NPC, a warm
#: recall of a new question went 6.8–7.1 → 5.3–6.1 ms with two; with one, no faster.
_TURNS_TO_THE_MODEL = 2

#: A query's vector, with when its embedding began and ended (``time.perf_counter``).
_Embedded = tuple[np.ndarray, float, float]


def _early_embedding(parts: RecallParts, query: GameMemoryQuery) -> asyncio.Task[_Embedded] | None:
    """Start embedding ``query`` now, as a task, when its recall will want the vector and
    the query cache does not hold it; else ``None`` (the vector path embeds, or finds it
    cached, as before).

    The model embeds on its own threads while the store reads and ranks the snapshot:
    in the store's pool (an owner's first recall after an open, a large or a session-wide
    one) or on the event loop (a small cached owner, after the turns the embedding is
    given to start: :data:`_TURNS_TO_THE_MODEL`). A failure is the vector path's to
    report when it awaits the task (the same errors as embedding then); a task nobody
    awaits (the snapshot failed, or the recall was cancelled) is cancelled, its outcome
    dropped.
    """
    embedder = parts.embedder
    if query.limit <= 0 or embedder is None or parts.index is None:
        return None
    text = embedder.query_text(query)
    if not text.strip() or embedder.remembered(text) is not None:
        return None
    task = asyncio.ensure_future(_timed_embedding(embedder, text))
    task.add_done_callback(_retrieved)
    return task


async def _timed_embedding(embedder: Embedder, text: str) -> _Embedded:
    began = time.perf_counter()
    vector = await embedder.embed_query(text)
    return vector, began, time.perf_counter()


def _retrieved(task: asyncio.Task[_Embedded]) -> None:
    """Mark a failed early embedding's error as seen (the vector path re-raises it when it
    awaits the task; when nothing awaits it, it is dropped with the recall's own error)."""
    if not task.cancelled():
        task.exception()


async def _vector_recall(
    parts: RecallParts,
    embedder: Embedder,
    query: GameMemoryQuery,
    views: Sequence[PartitionView],
    limit: int,
    stages: list[GameMemorySearchStage],
    early: asyncio.Task[_Embedded] | None = None,
) -> tuple[list[tuple[GameMemory, float]], list[np.ndarray]]:
    index = parts.index
    if index is None:
        raise _Unavailable(_NO_INDEX, "No vector index is configured.")
    copies = parts.options.int8_copies
    if early is not None:
        # EMBEDDING is the embedding's own time, which ran beside the snapshot; the
        # index read is timed from when both were ready.
        resumed = time.perf_counter()
        vector, started, finished = await early
        embedding, embedded_at = finished - started, max(finished, resumed)
    else:
        started = time.perf_counter()
        vector = await embedder.embed_query(embedder.query_text(query))
        embedded_at = time.perf_counter()
        embedding = embedded_at - started
    stages.append(GameMemorySearchStage.measured(Stage.EMBEDDING, embedding, 1, 1))

    def read_and_score() -> tuple[
        tuple[list[tuple[GameMemory, float]], list[np.ndarray]], int, float, float, list[str]
    ]:
        # A compaction racing this read replaces the partition under us; the second
        # attempt reads the new generation (a third race in a row is reported).
        for attempt in range(_ATTEMPTS):
            try:
                joined, lacking = _read_parts(index, embedder, parts.options, query, views)
                break
            except PartitionReplacedError:
                if attempt == _ATTEMPTS - 1:
                    raise
        # One executor hop for both stages; each is timed where its work runs.
        read_at = time.perf_counter()
        hits = top_vector_candidates(joined, vector, limit, parts.helper, copies)
        ready = sum(j.ready for j, _, _ in joined)
        return hits, ready, read_at, time.perf_counter(), lacking

    cached = _cached_parts(index, embedder, parts.options, query, views)
    if cached is not None:  # held in memory and small: scored here, without a thread hop
        read_at = time.perf_counter()
        held, lacking = cached
        hits = top_vector_candidates(held, vector, limit, parts.helper, copies)
        ready, scored_at = sum(j.ready for j, _, _ in held), time.perf_counter()
    else:
        hits, ready, read_at, scored_at, lacking = await parts.run(read_and_score)
    _tell_missing(parts, query.session_id, lacking)
    stages.append(
        GameMemorySearchStage.measured(Stage.VECTOR_INDEX_READ, read_at - embedded_at, ready, ready)
    )
    stages.append(
        GameMemorySearchStage.measured(
            Stage.VECTOR_SCORING, scored_at - read_at, ready, len(hits[0])
        )
    )
    return hits
