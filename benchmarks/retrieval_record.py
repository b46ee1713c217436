"""Record each query's two candidate lists through the real front door, then replay fusions.

Cross-validation scores a hundred configurations on thousands of queries; asking the
front door once per configuration and query would take hours. It does not need to: a
recall is *snapshot → lexical list, vector list → fuse → rerank → limit*, and only the last
three steps depend on the configuration. So, per development set:

1. Every memory is appended through :meth:`VectorMemoryStore.append` to a real
   :class:`FileGameMemoryStore` and :class:`FileVectorMemoryIndex` (one session per set).
2. Each query is asked through :meth:`VectorMemoryStore.recall` twice, once keeping only
   the lexical channel and once only the vector channel (weighted RRF with the other weight
   0, the candidate pool asked for in full): the hits carry each channel's raw scores and
   ranks, i.e. exactly the two lists the pipeline fuses.
3. A configuration is *replayed* with the library's own :func:`fuse` and
   :class:`GameAwareMemoryReranker` over those lists, as ``recall`` would call them.
4. The replay is checked against the front door: for the library's default fusion, with
   and without the default reranker (and with supersession on, when the reranker has it:
   that compares memory vectors, which the replay takes from the embedding cache exactly
   as the library normalizes and stores them), every query is asked through ``recall``
   again and the hit ids must equal the replay's (``front_door_check``; a mismatch stops
   the run).

Embeddings are cached (:class:`CachedEmbeddings`): each text is embedded alone, once, by
the real model, and kept on disk per model identity, so vectors do not depend on batch
neighbours or on the order sets are built, and a second run does not embed again.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from retrieval_sets import Dataset, MemoryRow, QueryRow

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    FusionMode,
    FusionOptions,
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
    MemoryEmbeddingIdentity,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.embedding.projector import MemoryTextProjector
from game_memory.embedding.provider import EmbeddingProvider, EmbeddingVector
from game_memory.recall.fusion import fuse

__all__ = [
    "LIMIT",
    "TIMELINE",
    "CachedEmbeddings",
    "Recorded",
    "RecordedSet",
    "first_relevant",
    "record_dataset",
    "replay",
    "replay_both",
    "to_memory",
]

LIMIT = 10
TIMELINE = "main"
_LEXICAL_ONLY = FusionOptions(mode=FusionMode.WEIGHTED_RRF, vector_weight=0.0, lexical_weight=1.0)
_VECTOR_ONLY = FusionOptions(mode=FusionMode.WEIGHTED_RRF, vector_weight=1.0, lexical_weight=0.0)

Candidates = tuple[tuple[GameMemory, float], ...]

# The library's fuse takes the vector candidates' unit vectors (the reranker compares
# memories with them) since issue 11; pass them whenever it does, as recall does.
_FUSE_TAKES_VECTORS = "vectors" in inspect.signature(fuse).parameters
_SUPERSESSION = "supersession_penalty" in GameAwareMemoryRerankerOptions.model_fields


@dataclass(frozen=True, slots=True)
class Recorded:
    """One query as asked, its relevant ids, and the two lists recall would fuse for it."""

    row: QueryRow
    question: GameMemoryQuery
    lexical: Candidates
    vector: Candidates
    vectors: tuple[np.ndarray, ...]  # the unit vector of each vector candidate, in order


@dataclass(frozen=True, slots=True)
class RecordedSet:
    """A development set's recorded queries and the front-door check of the replay."""

    dataset: Dataset
    queries: tuple[Recorded, ...]
    pool: int
    front_door_check: dict[str, int]


class CachedEmbeddings:
    """The real provider, each text embedded alone once, kept on disk per model identity."""

    def __init__(self, provider: EmbeddingProvider, folder: Path | None) -> None:
        self._provider = provider
        self._vectors: dict[str, np.ndarray] = {}
        self._new = 0
        self.embedded = 0
        self._file = None
        if folder is not None:
            digest = hashlib.sha256(str(provider.identity).encode()).hexdigest()[:16]
            self._file = folder / f"embeddings-{digest}.npz"
            if self._file.exists():
                with np.load(self._file) as stored:
                    self._vectors = {key: stored[key] for key in stored.files}

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        return self._provider.identity

    async def _one(self, kind: str, text: str) -> np.ndarray:
        key = hashlib.sha256(f"{kind}\0{text}".encode()).hexdigest()
        vector = self._vectors.get(key)
        if vector is None:
            if kind == "q":
                raw = await self._provider.embed_query(text)
            else:
                (raw,) = await self._provider.embed_documents([text])
            vector = self._vectors[key] = np.asarray(raw, dtype=np.float32)
            self._new += 1
            self.embedded += 1
        return vector

    async def unit_document_vector(self, text: str) -> np.ndarray:
        """The document vector of ``text`` as the library stores it (L2-normalized float32)."""
        array = np.asarray(await self._one("d", text), dtype=np.float64)
        return (array / math.sqrt(float(array @ array))).astype(np.float32)

    async def embed_query(self, text: str) -> EmbeddingVector:
        return await self._one("q", text)

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[EmbeddingVector]:
        return [await self._one("d", text) for text in texts]

    def save(self) -> None:
        """Write the cache atomically if anything new was embedded."""
        if self._file is None or not self._new:
            return
        self._file.parent.mkdir(parents=True, exist_ok=True)
        partial = self._file.with_suffix(".partial.npz")
        np.savez(partial, **self._vectors)  # type: ignore[arg-type]
        os.replace(partial, self._file)
        self._new = 0

    async def aclose(self) -> None:
        """The benchmark closes the real provider itself."""


def to_memory(dataset: Dataset, row: MemoryRow) -> GameMemory:
    """The memory a row becomes: one session per set, the text as searchable text."""
    return GameMemory(
        memory_id=row.memory_id,
        session_id=dataset.name,
        owner_id=row.owner_id,
        scope=row.scope,
        kind=GameMemoryKind.parse(row.kind),
        payload_json="{}",
        searchable_text=row.text,
        moment=GameMoment(timeline_id=TIMELINE, tick=row.tick),
        importance=row.importance,
        tags=row.tags,
        belief_key=row.belief_key,
    )


def question(dataset: Dataset, row: QueryRow, limit: int) -> GameMemoryQuery:
    """The query asked: of its owner, at its moment (or the set's, or none)."""
    tick = row.asked_at_tick if row.asked_at_tick is not None else dataset.asked_at_tick
    return GameMemoryQuery(
        session_id=dataset.name,
        owner_id=row.owner_id,
        text=row.text,
        limit=limit,
        at_or_before=None if tick is None else GameMoment(timeline_id=TIMELINE, tick=tick),
    )


def replay(
    recorded: Recorded,
    fusion: FusionOptions,
    reranker: GameAwareMemoryReranker | None,
    pool: int,
) -> list[GameMemory]:
    """The hits ``recall`` returns for this query under ``fusion`` and ``reranker``."""
    return replay_both(recorded, fusion, reranker, pool)[1]


def replay_both(
    recorded: Recorded,
    fusion: FusionOptions,
    reranker: GameAwareMemoryReranker | None,
    pool: int,
) -> tuple[list[GameMemory], list[GameMemory]]:
    """The hits without any reranker and with ``reranker``, from one fusion."""
    if _FUSE_TAKES_VECTORS and recorded.vector:
        fused = fuse(
            list(recorded.lexical), list(recorded.vector), fusion, pool, list(recorded.vectors)
        )
    else:
        fused = fuse(list(recorded.lexical), list(recorded.vector), fusion, pool)
    limit = recorded.question.limit
    plain = [candidate.memory for candidate in fused[:limit]]
    if reranker is None or not fused:
        return plain, plain
    ranked = reranker.rank(recorded.question, fused)
    return plain, [candidate.memory for candidate in ranked[:limit]]


def first_relevant(memories: Iterable[GameMemory], relevant: frozenset[str]) -> int | None:
    """The 1-based rank of the first relevant memory, or ``None``."""
    return next((i + 1 for i, m in enumerate(memories) if m.memory_id in relevant), None)


async def record_dataset(
    dataset: Dataset, provider: CachedEmbeddings, folder: Path, limit: int = LIMIT
) -> RecordedSet:
    """Build the set's save and index, record every query's lists, check the replay.

    Raises:
        RuntimeError: a memory has no vector, a recall fell back to lexical, or the replay
            disagrees with the front door.
    """
    options = VectorMemoryStoreOptions(dispose_embedding_provider=False)
    pool = options.candidate_limit(limit)
    authoritative = FileGameMemoryStore(folder / "save")
    index = FileVectorMemoryIndex(folder / "index")
    loader = VectorMemoryStore(authoritative, index, provider, options=options)
    # The whole pool comes back as hits: limit = pool and a multiplier of 1.
    whole = options.model_copy(update={"candidate_multiplier": 1})
    channels = {
        name: VectorMemoryStore(
            authoritative, index, provider, options=whole.model_copy(update={"fusion": fusion})
        )
        for name, fusion in (("lexical", _LEXICAL_ONLY), ("vector", _VECTOR_ONLY))
    }
    default_reranker = GameAwareMemoryReranker(GameAwareMemoryRerankerOptions())
    rerankers: dict[str, GameAwareMemoryReranker | None] = {
        "default_fusion": None,
        "default_fusion+default_reranker": default_reranker,
    }
    if _SUPERSESSION:  # checks that the replay hands fusion the same vectors recall does
        rerankers["default_fusion+supersession_0.2"] = GameAwareMemoryReranker(
            GameAwareMemoryRerankerOptions(supersession_penalty=0.2)
        )
    checked = {
        name: VectorMemoryStore(authoritative, index, provider, reranker=r, options=options)
        for name, r in rerankers.items()
    }
    stores = [loader, *channels.values(), *checked.values()]
    try:
        for memory in dataset.memories:
            await loader.append(to_memory(dataset, memory))
        status = await loader.get_status(dataset.name)
        if status.ready_entries != len(dataset.memories):
            raise RuntimeError(f"{dataset.name}: only {status.ready_entries} memories have vectors")
        projector = MemoryTextProjector()
        unit = {
            (row.owner_id, row.memory_id): await provider.unit_document_vector(
                projector.project_document(to_memory(dataset, row))
            )
            for row in dataset.memories
        }
        recorded: list[Recorded] = []
        mismatches = dict.fromkeys(checked, 0)
        for count, row in enumerate(dataset.queries, 1):
            asked = question(dataset, row, limit)
            lists: dict[str, Candidates] = {}
            for name, store in channels.items():
                result = await store.recall(asked.model_copy(update={"limit": pool}))
                if result.fallback:
                    raise RuntimeError(f"{dataset.name}: vector recall fell back to lexical")
                rank = "lexical_rank" if name == "lexical" else "vector_rank"
                hits = sorted(
                    (h for h in result.hits if getattr(h, rank) is not None),
                    key=lambda h: int(getattr(h, rank)),
                )
                score = "lexical_score" if name == "lexical" else "vector_score"
                lists[name] = tuple((h.memory, float(getattr(h, score))) for h in hits)
            vectors = tuple(unit[(m.owner_id, m.memory_id)] for m, _ in lists["vector"])
            entry = Recorded(row, asked, lists["lexical"], lists["vector"], vectors)
            recorded.append(entry)
            for name, store in checked.items():
                reranker = rerankers[name]
                expected = [m.memory_id for m in replay(entry, FusionOptions(), reranker, pool)]
                actual = [h.memory.memory_id for h in (await store.recall(asked)).hits]
                mismatches[name] += expected != actual
            if count % 500 == 0:
                print(f"  {dataset.name}: {count}/{len(dataset.queries)} recorded", file=sys.stderr)
        if any(mismatches.values()):
            raise RuntimeError(f"{dataset.name}: the replay disagrees with recall: {mismatches}")
        check = {"queries": len(recorded), **{f"{k}_mismatches": v for k, v in mismatches.items()}}
        return RecordedSet(dataset, tuple(recorded), pool, check)
    finally:
        for store in stores:
            await store.aclose()
