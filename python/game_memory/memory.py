"""``VectorMemoryStore``: hybrid recall over an authoritative store and a derived vector index.

The authoritative store stays the truth; this wrapper adds semantic recall:

* ``append`` writes the authoritative memory **first**; only then embeds it and writes its
  vector. An embedding or index failure reports ``memory_embedding_append_failed`` and
  leaves the memory saved and lexically recallable (unless
  ``fail_when_embedding_unavailable``).
* ``recall`` reads **one** bounded authoritative snapshot, ranks it lexically, embeds the
  query, scores the index entries that join that same snapshot (right memory, same
  content, active identity, visible to the query), fuses, reranks on game time, and
  returns only memories of the snapshot. Any vector failure falls back to lexical recall.
* Vectors of another identity are stale: a partition holding any is recalled lexically
  until ``rebuild``, which never mixes models.
"""

from __future__ import annotations

import asyncio
import enum
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from game_memory.durable.names import identity_hash
from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.projector import MemoryTextProjector
from game_memory.embedding.provider import EmbeddingProvider, EmbeddingVector
from game_memory.errors import (
    DerivedIndexError,
    EmbeddingUnavailableError,
    GameMemoryError,
    InvalidArgumentError,
    StoreBusyError,
    StoreClosedError,
)
from game_memory.index.entries import EntryRecord, EntryState, MemoryDigests
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    ordinal_key,
)
from game_memory.model.diagnostics import (
    DiagnosticSeverity,
    DiagnosticSink,
    MemoryVectorDiagnostic,
)
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.model.results import RecallResult
from game_memory.model.status import VectorMemoryStatus
from game_memory.recall.diagnostics import DiagnosticDispatcher
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import hybrid_recall
from game_memory.recall.reranker import GameAwareMemoryReranker
from game_memory.store.file_store import FileGameMemoryStore
from game_memory.store.protocol import GameMemoryStore
from game_memory.store.view import PartitionView

__all__ = ["VectorMemoryStore"]

_T = TypeVar("_T")
Stage = GameMemorySearchStageKind


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class VectorMemoryStore:
    """Hybrid lexical + vector recall with a game-time reranker; usable as a GameMemoryStore.

    Args:
        authoritative: The save (a :class:`FileGameMemoryStore` gives single-read snapshots;
            any :class:`GameMemoryStore` works).
        index: The derived vector index; keep its folder outside the save.
        provider: The embedding model. Its identity at construction is the active one.
        reranker: Reorders fused candidates (default: none).
        diagnostics: Receives :class:`MemoryVectorDiagnostic` events (sync or async).
        options: Bounds and switches.
        projector: What text of a memory or query is embedded.

    The store owns what it is given: ``aclose`` closes the index, the authoritative store
    and (with ``dispose_embedding_provider``) the provider.

    Raises:
        InvalidArgumentError: the options bound the vectors below the index size, or the
            index folder is inside the save folder.
    """

    def __init__(
        self,
        authoritative: GameMemoryStore,
        index: FileVectorMemoryIndex,
        provider: EmbeddingProvider,
        *,
        reranker: GameAwareMemoryReranker | None = None,
        diagnostics: DiagnosticSink | None = None,
        options: VectorMemoryStoreOptions | None = None,
        projector: MemoryTextProjector | None = None,
    ) -> None:
        self.options = options or VectorMemoryStoreOptions()
        self.active_identity: MemoryEmbeddingIdentity = provider.identity
        dimensions = self.active_identity.dimensions
        if (
            self.options.maximum_index_entries * dimensions
            > self.options.maximum_stored_vector_values
        ):
            raise InvalidArgumentError(
                "options: maximum_index_entries × dimensions "
                f"({self.options.maximum_index_entries:,} × {dimensions:,}) exceeds "
                f"maximum_stored_vector_values ({self.options.maximum_stored_vector_values:,})"
            )
        if isinstance(authoritative, FileGameMemoryStore):
            save = authoritative.directory
            if index.directory == save or Path(index.directory).is_relative_to(save):
                raise InvalidArgumentError(
                    f"the vector index folder {index.directory} is inside the save folder "
                    f"{save}; keep derived data outside the save"
                )
        self.authoritative = authoritative
        self.index = index
        self.provider = provider
        self.reranker = reranker
        self.projector = projector or MemoryTextProjector()
        self._diagnostics = DiagnosticDispatcher(diagnostics, self.options.diagnostic_timeout)
        self._gate = EmbeddingGate(
            self.options.maximum_concurrent_embedding_calls, self.options.embedding_timeout
        )
        self._executor = ThreadPoolExecutor(2, thread_name_prefix="game-memory-vectors")
        self._digests = MemoryDigests(max(self.options.maximum_index_entries, 1_000) * 2)
        self._joins = JoinCache(self._digests)
        self._rebuilding: set[str] = set()
        self._warned_stale: set[str] = set()
        self._state = _State.OPEN

    def __repr__(self) -> str:
        return f"VectorMemoryStore(identity={self.active_identity}, state={self._state.value})"

    async def __aenter__(self) -> VectorMemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._state is _State.CLOSED:
            raise StoreClosedError("the vector memory store is closed; open a new one")

    async def _run(self, function: Callable[[], _T]) -> _T:
        self._check_open()
        return await asyncio.get_running_loop().run_in_executor(self._executor, function)

    async def _report(
        self,
        code: str,
        severity: DiagnosticSeverity,
        message: str,
        *,
        session_id: str | None = None,
        owner_id: str | None = None,
        memory_id: str | None = None,
        error: BaseException | None = None,
    ) -> None:
        details = {"exception": type(error).__name__} if error is not None else None
        await self._diagnostics.report(
            MemoryVectorDiagnostic(
                code=code,
                severity=severity,
                message=message,
                session_id=session_id,
                owner_id=owner_id,
                memory_id=memory_id,
                details=details,
            )
        )

    def _normalize(self, vector: EmbeddingVector) -> npt.NDArray[np.float32]:
        array = np.asarray(vector, dtype=np.float64)
        dimensions = self.active_identity.dimensions
        if array.shape != (dimensions,):
            raise EmbeddingUnavailableError(
                f"the provider returned a vector of shape {array.shape}; its identity "
                f"{self.active_identity} promises {dimensions} dimensions"
            )
        if not np.isfinite(array).all():
            raise EmbeddingUnavailableError("the provider returned a vector with NaN or infinity")
        norm = math.sqrt(float(array @ array))
        if norm == 0.0:
            raise EmbeddingUnavailableError("the provider returned an all-zero vector")
        return (array / norm).astype(np.float32)

    async def embed_documents(
        self, memories: Sequence[GameMemory], what: str
    ) -> npt.NDArray[np.float32]:
        """Embed memories through the gate; one normalized row per memory."""
        texts = [self.projector.project_document(memory) for memory in memories]
        vectors = await self._gate.call(lambda: self.provider.embed_documents(texts), what)
        if vectors is None or len(vectors) != len(texts):
            raise EmbeddingUnavailableError(
                f"{what}: the provider returned an invalid batch size "
                f"({'none' if vectors is None else len(vectors)} vectors for {len(texts)} texts)"
            )
        return np.stack([self._normalize(vector) for vector in vectors])

    # -- writes -------------------------------------------------------------------------

    async def append(self, memory: GameMemory) -> bool:
        """Save ``memory`` in the authoritative store, then index its vector.

        Returns:
            ``True`` if the memory was new, ``False`` if an equivalent one was there.

        Raises:
            Everything the authoritative ``append`` raises (nothing else happens then);
            ``EmbeddingUnavailableError`` only with ``fail_when_embedding_unavailable``.
        """
        self._check_open()
        created = await self.authoritative.append(memory)
        try:
            if not created and await self._run(lambda: self._has_ready_vector(memory)):
                return created
            vectors = await self.embed_documents([memory], f"memory {memory.memory_id!r}")
            await self._run(lambda: self.write_vectors([memory], vectors))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._report(
                "memory_embedding_append_failed",
                DiagnosticSeverity.WARNING,
                "The memory was saved, but its derived vector is unavailable. Lexical recall "
                "remains available.",
                session_id=memory.session_id,
                owner_id=memory.owner_id,
                memory_id=memory.memory_id,
                error=exc,
            )
            if self.options.fail_when_embedding_unavailable:
                if isinstance(exc, GameMemoryError):
                    raise
                raise EmbeddingUnavailableError(f"embedding failed: {exc}") from exc
        return created

    def _has_ready_vector(self, memory: GameMemory) -> bool:
        engine = self.index.engine
        partition = engine.partition(
            identity_hash(memory.session_id), identity_hash(memory.owner_id)
        )
        if partition is None:
            return False
        hashed, digest = self._digests.get(memory)
        record = partition.record(hashed)
        active = engine.identity_code(self.active_identity, create=False)
        return (
            record is not None
            and record.state is EntryState.READY
            and record.identity == active
            and record.digest == digest
        )

    def write_vectors(
        self,
        memories: Sequence[GameMemory],
        vectors: npt.NDArray[np.float32],
        *,
        durable: bool = True,
    ) -> None:
        """Write ready entries for ``memories`` (blocking; under the index lock)."""
        engine = self.index.engine
        with engine.locked():
            code = engine.identity_code(self.active_identity, create=True)
            assert code is not None
            groups: dict[tuple[str, str], list[int]] = {}
            for position, memory in enumerate(memories):
                key = (identity_hash(memory.session_id), identity_hash(memory.owner_id))
                groups.setdefault(key, []).append(position)
            for (session_hash, owner_hash), positions in groups.items():
                records = [
                    EntryRecord(EntryState.READY, code, offset, *self._digests.get(memories[p]), "")
                    for offset, p in enumerate(positions)
                ]
                self.index.check_capacity(session_hash, owner_hash, records)
                engine.append(
                    session_hash, owner_hash, records, {code: vectors[positions]}, durable=durable
                )

    def write_markers(self, memories: Sequence[GameMemory], state: EntryState, code: str) -> None:
        """Record that ``memories`` have no usable vector (blocking; under the index lock)."""
        engine = self.index.engine
        with engine.locked():
            groups: dict[tuple[str, str], list[EntryRecord]] = {}
            for memory in memories:
                key = (identity_hash(memory.session_id), identity_hash(memory.owner_id))
                record = EntryRecord(
                    state, 0xFFFFFFFF, 0xFFFFFFFF, *self._digests.get(memory), code
                )
                groups.setdefault(key, []).append(record)
            for (session_hash, owner_hash), records in groups.items():
                engine.append(session_hash, owner_hash, records)

    # -- reads --------------------------------------------------------------------------

    async def search(self, query: GameMemoryQuery) -> list[GameMemory]:
        """Recall up to ``query.limit`` memories (see :meth:`recall`)."""
        if query.limit == 0:
            return []
        return list((await self.recall(query)).memories)

    async def search_snapshot(
        self, query: GameMemoryQuery, maximum_snapshot_entries: int | None = None
    ) -> GameMemorySearchSnapshot:
        """Recall with the authoritative snapshot and every stage's metrics."""
        return (await self.recall(query, maximum_snapshot_entries)).snapshot

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or owner), from the authoritative store."""
        self._check_open()
        return await self.authoritative.enumerate(session_id, owner_id)

    async def snapshot_views(
        self, query: GameMemoryQuery, bound: int
    ) -> tuple[list[tuple[GameMemory, float]], list[PartitionView], list[GameMemorySearchStage]]:
        """One bounded authoritative read: lexical hits with scores, partition views, stages."""
        authoritative = self.authoritative
        if isinstance(authoritative, FileGameMemoryStore):
            result = await authoritative.search_lexical(query, bound)
            stages = [
                s.model_copy(update={"reused": True})
                if s.stage is Stage.AUTHORITATIVE_SNAPSHOT
                else s
                for s in result.stages
            ]
            return [(h.memory, h.score) for h in result.hits], result.views, stages
        started = time.perf_counter()
        snapshot = await authoritative.search_snapshot(query, bound)
        lexical = [(m, 1.0 / (rank + 1)) for rank, m in enumerate(snapshot.memories)]
        owners: dict[str, list[GameMemory]] = {}
        for memory in snapshot.authoritative_memories:
            if memory.session_id != query.session_id or (
                query.owner_id is not None and memory.owner_id != query.owner_id
            ):
                raise DerivedIndexError("the authoritative snapshot escaped the query's partition")
            owners.setdefault(memory.owner_id, []).append(memory)
        views = [
            PartitionView(
                query.session_id, owner, tuple(ms), {m.memory_id: i for i, m in enumerate(ms)}
            )
            for owner, ms in sorted(owners.items(), key=lambda item: ordinal_key(item[0]))
        ]
        size = len(snapshot.authoritative_memories)
        stages = [s for s in snapshot.stages if s.stage is not Stage.AUTHORITATIVE_SNAPSHOT]
        stages.insert(
            0,
            GameMemorySearchStage.measured(
                Stage.AUTHORITATIVE_SNAPSHOT, time.perf_counter() - started, size, size, True
            ),
        )
        return lexical, views, stages

    async def recall(
        self, query: GameMemoryQuery, maximum_snapshot_entries: int | None = None
    ) -> RecallResult:
        """Hybrid recall as of ``query.at_or_before`` (game time), with the evidence per hit.

        Stages: STORAGE_MIGRATION, AUTHORITATIVE_SNAPSHOT (reused by the vector path),
        LEXICAL_SEARCH, EMBEDDING, VECTOR_INDEX_READ, VECTOR_SCORING, RERANK. The steps are
        in :mod:`game_memory.recall.pipeline`.

        Raises:
            CapacityExceededError: the snapshot exceeds the bound.
            EmbeddingUnavailableError, DerivedIndexError: only with
                ``fail_when_embedding_unavailable``; otherwise ``fallback`` is set.
        """
        self._check_open()
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError("recall takes a GameMemoryQuery")
        return await hybrid_recall(self, query, maximum_snapshot_entries)

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed a query text through the gate; one normalized vector."""
        embedded = await self._gate.call(lambda: self.provider.embed_query(text), "the query")
        return self._normalize(embedded)

    @property
    def join_cache(self) -> JoinCache:
        """The joins of snapshot views to index partitions, reused while both are unchanged."""
        return self._joins

    async def warn_rebuild_required(self, session_id: str, message: str) -> None:
        """Report ``memory_vector_rebuild_required`` once per session until it is rebuilt."""
        if session_id not in self._warned_stale:
            self._warned_stale.add(session_id)
            await self._report(
                "memory_vector_rebuild_required",
                DiagnosticSeverity.WARNING,
                message,
                session_id=session_id,
            )

    # -- status and rebuild -------------------------------------------------------------

    async def session_views(self, session_id: str) -> list[PartitionView]:
        """Every partition view of a session (one bounded authoritative read)."""
        query = GameMemoryQuery(session_id=session_id, limit=0)
        _, views, _ = await self.snapshot_views(query, self.options.maximum_index_entries)
        return views

    def joins(self, session_id: str, views: list[PartitionView]) -> list[PartitionJoin]:
        """Join every index partition of a session (authoritative or orphaned) (blocking)."""
        engine = self.index.engine
        active = engine.identity_code(self.active_identity, create=False)
        session_hash = identity_hash(session_id)
        by_owner = {identity_hash(view.owner_id): view for view in views}
        owners = sorted(set(by_owner) | set(engine.owner_hashes(session_hash)))
        return [
            self._joins.join(by_owner.get(owner), engine.partition(session_hash, owner), active)
            for owner in owners
        ]

    async def get_status(self, session_id: str) -> VectorMemoryStatus:
        """Count ready, pending, stale and orphan vectors of a session; derive its state.

        Reads the session's snapshot and its index entries (not the vectors themselves: a
        damaged vector file shows in recall, which falls back, and is repaired by
        ``rebuild``).

        Raises:
            DerivedIndexError: the session's index entries are damaged; run ``rebuild``
                (or, for a damaged index folder, delete it).
            CapacityExceededError: the session holds more than ``maximum_index_entries``.
        """
        self._check_open()
        views = await self.session_views(session_id)
        joins = await self._run(lambda: self.joins(session_id, views))
        return VectorMemoryStatus.from_counts(
            self.active_identity,
            ready=sum(j.ready for j in joins),
            pending=sum(j.pending for j in joins),
            stale=sum(j.stale for j in joins),
            orphans=sum(j.orphans for j in joins),
        )

    async def rebuild(
        self,
        session_id: str,
        *,
        force: bool = False,
        progress: Callable[[int, int], object] | None = None,
    ) -> VectorMemoryStatus:
        """Embed every memory of a session that lacks a ready vector (all with ``force``).

        Bounded (batches of ``rebuild_batch_size``), resumable by running it again, and
        safe beside concurrent appends: the orphan sweep re-reads the save and never
        deletes the vector of a memory that exists then. It first verifies the session's
        index partitions (entries, vector files, row checksums) and deletes damaged ones,
        whose memories it then embeds again. Vectors of another model are replaced; the
        sweep compacts the partitions. ``progress(done, total)`` is called on the event
        loop before the first batch and after each; an exception it raises ends the rebuild
        (batches already written stay). A failed batch stops the rebuild with a
        ``memory_embedding_rebuild_failed`` diagnostic; the returned status then still
        requires a rebuild.

        Raises:
            StoreBusyError: a rebuild of this session is already running here.
            DerivedIndexError: a failed batch could not even be recorded in the index, or
                the index folder itself is damaged (delete it).
        """
        from game_memory.rebuild import rebuild_session

        self._check_open()
        if session_id in self._rebuilding:
            raise StoreBusyError(
                f"a rebuild of session {session_id!r} is already running; wait for it to finish"
            )
        self._rebuilding.add(session_id)
        try:
            status = await rebuild_session(self, session_id, force=force, progress=progress)
        finally:
            self._rebuilding.discard(session_id)
        self._warned_stale.discard(session_id)
        return status

    async def report(
        self, code: str, severity: DiagnosticSeverity, message: str, **ids: Any
    ) -> None:
        """Deliver a diagnostic to the configured sink (used by the rebuild)."""
        await self._report(code, severity, message, **ids)

    async def run(self, function: Callable[[], _T]) -> _T:
        """Run blocking index work in the store's executor (used by the rebuild)."""
        return await self._run(function)

    async def aclose(self) -> None:
        """Close the store, its index, its authoritative store and (optionally) provider."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        try:
            if self.options.dispose_embedding_provider:
                await self.provider.aclose()
        finally:
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
            await self.index.aclose()
            await self.authoritative.aclose()
