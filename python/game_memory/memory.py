"""``VectorMemoryStore``: the one front door to a save, hybrid or lexical.

The authoritative store stays the truth; the front door adds semantic recall when it has an
embedding provider, and is the same object without one (lexical mode, through the same
recall pipeline):

* ``append`` writes the authoritative memory **first**; only then embeds it and writes its
  vector. An embedding or index failure reports ``memory_embedding_append_failed`` and
  leaves the memory saved and lexically recallable (unless
  ``fail_when_embedding_unavailable``).
* ``recall`` reads **one** bounded authoritative snapshot with its lexical ranking, embeds
  the query, scores the index entries that join that same snapshot, fuses, reranks on game
  time, and returns only memories of the snapshot (:mod:`game_memory.recall.pipeline`).
  Any vector failure falls back to lexical recall.
* Vectors of another identity are stale: a partition holding any is recalled lexically
  until ``rebuild`` (:mod:`game_memory.rebuild`), which never mixes models.
* Memories saved without a vector (the process was killed before writing it, or the save
  was written in lexical mode) are embedded in the background, one NPC at a time, once a
  hybrid recall of their NPC finds them (:mod:`game_memory.catch_up`); until then, and if
  that fails, they are recalled lexically and ``rebuild`` embeds them.
* ``forget``, ``erase``, ``consolidate``, ``compact`` and the retention policy (memory over
  a whole game) are :class:`~game_memory.forgetting.MemoryOverTime`'s, a base of this class.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

from game_memory.catch_up import CatchUps, catch_up_owner
from game_memory.embedding.embedder import Embedder
from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.projector import MemoryTextProjector
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.errors import (
    DerivedIndexError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    InvalidArgumentError,
    StoreBusyError,
    StoreClosedError,
)
from game_memory.forgetting import MemoryOverTime, index_memory
from game_memory.index.protocol import VectorIndex
from game_memory.index.quantized import appending
from game_memory.ingest import append_many
from game_memory.model import (
    DiagnosticSink,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    MemoryEmbeddingIdentity,
    MemoryVectorDiagnostic,
    MigrationReport,
    RecallResult,
    StoreCheckReport,
    VectorMemoryStatus,
    check_bounded_id,
)
from game_memory.rebuild import index_status, rebuild_session
from game_memory.recall.diagnostics import DiagnosticDispatcher
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import REBUILD_REQUIRED, RecallParts, recall
from game_memory.recall.reranker import GameAwareMemoryReranker
from game_memory.store.pool import run_in_pool
from game_memory.store.protocol import GameMemoryStore
from game_memory.write_guards import EraseGate, EvictionGuard, OneLoop, WritesInFlight, finished

__all__ = ["VectorMemoryStore", "check_provider"]

_T = TypeVar("_T")

_NO_MODEL = (
    "no embedding model is loaded, so the memory runs in lexical mode; to get semantic recall, "
    "run 'game-memory models prepare' and restart with --model default (or --model PATH)"
)


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # new calls are refused; the writes in flight run to their end
    CLOSED = "closed"


def _closed() -> StoreClosedError:
    return StoreClosedError("the vector memory store is closed; open a new one")


#: Most owners a front door remembers having prefetched (``VectorMemoryStore._prefetch``).
PREFETCHED_OWNERS = 4_096

#: The diagnostic of saved memories left without a vector (``forgetting.py``, ``ingest.py``).
_APPEND_FAILED = "memory_embedding_append_failed"


def _started() -> None:
    """The job that starts a thread of the pool ahead of real work (it does nothing)."""


async def _close_provider(provider: EmbeddingProvider, seconds: float) -> None:
    """Close a provider within ``seconds``: a model's close that hangs or fails must not keep
    the save from being closed (its lock released, its read files written).

    Raises:
        EmbeddingTimeoutError: the close took longer.
        EmbeddingUnavailableError: the close failed (the provider's error as its cause).
    """
    try:
        async with asyncio.timeout(seconds):
            await provider.aclose()
    except TimeoutError as exc:
        raise EmbeddingTimeoutError(
            f"the embedding provider did not close within {seconds:g} s; the save and the "
            "index were closed anyway"
        ) from exc
    except GameMemoryError:
        raise
    except Exception as exc:
        raise EmbeddingUnavailableError(
            f"the embedding provider failed to close ({type(exc).__name__}: {exc}); the save "
            "and the index were closed anyway"
        ) from exc


def check_provider(provider: object, name: str = "provider") -> None:
    """Refuse what is not an embedding provider object, before anything is opened.

    ``isinstance(x, EmbeddingProvider)`` (a runtime protocol) holds for a provider *class*
    too, whose methods then fail deep inside with a raw ``TypeError``; a class is refused
    here with a message that says to pass an instance.

    Raises:
        InvalidArgumentError: ``provider`` is a class, or lacks the protocol's members.
    """
    if isinstance(provider, type) and isinstance(provider, EmbeddingProvider):
        raise InvalidArgumentError(
            f"{name} must be an EmbeddingProvider object, not the class {provider.__name__}: "
            f"pass an instance, such as {provider.__name__}()"
        )
    if not isinstance(provider, EmbeddingProvider):  # a class here is of something else
        shown = f"the class {provider.__name__}" if isinstance(provider, type) else None
        raise InvalidArgumentError(
            f"{name} must be an EmbeddingProvider (identity, embed_query, embed_documents, "
            f"aclose), not {shown or type(provider).__name__}"
        )


def _check_part(value: object, kind: type, name: str, what: str) -> None:
    """Refuse a collaborator of the wrong kind (or a class in place of an object).

    Raises:
        InvalidArgumentError: ``value`` is a class, or not a ``kind``.
    """
    if isinstance(value, type) or not isinstance(value, kind):
        shown = f"the class {value.__name__}" if isinstance(value, type) else type(value).__name__
        raise InvalidArgumentError(f"{name} must be {what}, not {shown}")


def _check_parts(authoritative: object, index: object, projector: object, notice: object) -> None:
    """The front door's collaborators, checked before any is used (see ``__init__``).

    Raises:
        InvalidArgumentError: one is not of its kind.
    """
    _check_part(
        authoritative,
        GameMemoryStore,
        "authoritative",
        "a GameMemoryStore such as FileGameMemoryStore(folder) or InMemoryGameMemoryStore()",
    )
    if index is not None:
        _check_part(
            index,
            VectorIndex,
            "index",
            "a VectorIndex such as FileVectorMemoryIndex(folder) or InMemoryVectorIndex()",
        )
    if projector is not None and not all(
        callable(getattr(projector, name, None)) for name in ("project_document", "project_query")
    ):
        raise InvalidArgumentError(
            "projector must be a MemoryTextProjector (project_document, project_query), "
            f"not {type(projector).__name__}"
        )
    if notice is not None and not isinstance(notice, MemoryVectorDiagnostic):
        raise InvalidArgumentError(
            f"notice must be a MemoryVectorDiagnostic or None, not {type(notice).__name__}"
        )


def _not_semantic(session_id: str, status: VectorMemoryStatus) -> GameMemoryError:
    """What a ``require_semantic`` recall that fell back raises, by the session's status:
    a rebuild (or the catch-up) repairs an index that needs one, a retry does not."""
    if status.stale_entries:
        return DerivedIndexError(
            f"the vector index of session {session_id!r} holds vectors of another model, so "
            "semantic recall is off until memory.rebuild (or 'game-memory rebuild') "
            "re-embeds it"
        )
    if status.requires_rebuild:
        return _unembedded(session_id, f"{status.pending_entries:,} memories")
    return EmbeddingUnavailableError(
        "semantic recall failed for this query (the server log has the diagnostic); "
        "retry, or recall without require_semantic"
    )


def _unembedded(session_id: str, which: str) -> DerivedIndexError:
    """``require_semantic`` refused: ``which`` memories of the session have no vector."""
    return DerivedIndexError(
        f"{which} of session {session_id!r} have no vector of the active model (saved while "
        "no model was loaded, or just before the process stopped), so semantic recall of "
        "them is off: a recall of their NPC starts embedding them in the background, once "
        "per NPC (recall again in a moment; a memory_embedding_catch_up_failed diagnostic "
        "says it failed), or memory.rebuild (or 'game-memory rebuild') embeds them now"
    )


def _check_session(session_id: str) -> None:
    """Raises: InvalidArgumentError: ``session_id`` is not a valid id."""
    try:
        check_bounded_id(session_id, "session_id")
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


class VectorMemoryStore(MemoryOverTime):
    """A save opened for recall: hybrid with a provider, lexical without; a GameMemoryStore user.

    Args:
        authoritative: The save (any :class:`GameMemoryStore`).
        index: The derived vector index; keep its folder outside the save. Required with a
            provider; optional without (then only its legacy migration is used).
        provider: The embedding model, or ``None`` for lexical mode. Its identity at
            construction is the active one.
        reranker: Reorders fused candidates on game time (default: none).
        diagnostics: Receives :class:`MemoryVectorDiagnostic` events (sync or async).
        options: Bounds and switches.
        projector: What text of a memory or query is embedded.
        notice: Why the memory runs with less than was asked (set by :func:`open_memory`
            when the default model is unavailable), or ``None``.

    The store owns what it is given: ``aclose`` closes the index, the authoritative store
    and (with ``dispose_embedding_provider``) the provider. Safe to use from many tasks of
    one event loop at a time: a call from another loop while the one that used it runs (in
    another thread) raises ``InvalidArgumentError``; once that loop has stopped (one
    ``asyncio.run`` after another) the next loop takes it over.

    Raises:
        InvalidArgumentError: a provider without an index, options that bound the vectors
            below the index size, an index folder inside the save folder, a reranker
            without ``rank`` or a diagnostics sink that is not callable; an argument of the
            wrong kind (a class where an object is wanted, such as
            ``HashingEmbeddingProvider`` for ``HashingEmbeddingProvider()``), named.
    """

    def __init__(
        self,
        authoritative: GameMemoryStore,
        index: VectorIndex | None = None,
        provider: EmbeddingProvider | None = None,
        *,
        reranker: GameAwareMemoryReranker | None = None,
        diagnostics: DiagnosticSink | None = None,
        options: VectorMemoryStoreOptions | None = None,
        projector: MemoryTextProjector | None = None,
        notice: MemoryVectorDiagnostic | None = None,
    ) -> None:
        if options is not None and not isinstance(options, VectorMemoryStoreOptions):
            raise InvalidArgumentError(
                f"options must be a VectorMemoryStoreOptions, not {type(options).__name__}"
            )
        _check_parts(authoritative, index, projector, notice)
        if provider is not None:
            check_provider(provider)
        if reranker is not None and not callable(getattr(reranker, "rank", None)):
            raise InvalidArgumentError(
                "reranker must be a reranker object such as GameAwareMemoryReranker(options), "
                f"not {type(reranker).__name__} (open_memory takes the options instead)"
            )
        if diagnostics is not None and not callable(diagnostics):
            raise InvalidArgumentError(
                "diagnostics must be a callable that takes a MemoryVectorDiagnostic (sync or "
                f"async), not {type(diagnostics).__name__}"
            )
        self.options = options or VectorMemoryStoreOptions()
        if provider is not None and index is None:
            raise InvalidArgumentError("hybrid recall needs a vector index beside the provider")
        if provider is not None:
            dimensions = provider.identity.dimensions
            if (
                self.options.maximum_index_entries * dimensions
                > self.options.maximum_stored_vector_values
            ):
                raise InvalidArgumentError(
                    "options: maximum_index_entries × dimensions "
                    f"({self.options.maximum_index_entries:,} × {dimensions:,}) exceeds "
                    f"maximum_stored_vector_values ({self.options.maximum_stored_vector_values:,})"
                )
        save, derived = authoritative.folder, index.folder if index is not None else None
        if save is not None and derived is not None and derived.is_relative_to(save):
            raise InvalidArgumentError(
                f"the vector index folder {derived} is inside the save folder {save}; keep "
                "derived data outside the save"
            )
        self.authoritative = authoritative
        self.index = index
        self.provider = provider
        self.reranker = reranker
        self.notice = notice
        self._embedder = (
            None
            if provider is None
            else Embedder(
                provider,
                EmbeddingGate(
                    self.options.maximum_concurrent_embedding_calls, self.options.embedding_timeout
                ),
                projector or MemoryTextProjector(),
                query_cache=self.options.query_embedding_cache,
            )
        )
        self._diagnostics = DiagnosticDispatcher(diagnostics, self.options.diagnostic_timeout)
        self._executor = ThreadPoolExecutor(2, thread_name_prefix="game-memory-vectors")
        self._pool_started = False
        #: Owners whose first recall prefetched their index partition (``_prefetch``).
        self._prefetched: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._rebuilding: set[str] = set()
        #: The background embedding of memories recalls find without a vector.
        self._catch_ups = CatchUps(self._catch_up, self._rebuilding.__contains__)
        self._parts = RecallParts(
            authoritative,
            index,
            self._embedder,
            reranker,
            self.options,
            self._run,
            self._report,
            self._executor,
            None if self._embedder is None or not self.options.catch_up else self._missing,
        )
        self._warned_stale: set[str] = set()
        self._erase_gate = EraseGate()
        self._eviction_guard = EvictionGuard(self._erase_gate)  # an eviction is an erase
        self._writes = WritesInFlight()
        self._one_loop = OneLoop()
        self._state = _State.OPEN

    def __repr__(self) -> str:
        return f"VectorMemoryStore(mode={self.mode}, state={self._state.value})"

    async def __aenter__(self) -> VectorMemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def mode(self) -> str:
        """``"hybrid"`` (lexical and vector recall) or ``"lexical"`` (no embedding model)."""
        return "lexical" if self._embedder is None else "hybrid"

    @property
    def active_identity(self) -> MemoryEmbeddingIdentity | None:
        """The embedding model's identity, or ``None`` in lexical mode."""
        return None if self._embedder is None else self._embedder.identity

    # -- plumbing -----------------------------------------------------------------------

    def _check_open(self) -> None:
        """At every call's start: refuse a call once ``aclose`` began, or from an event loop
        other than the one the front door serves (:class:`~game_memory.write_guards.OneLoop`).

        Raises:
            StoreClosedError: ``aclose`` was called.
            InvalidArgumentError: another event loop, running, uses the front door.
        """
        if self._state is not _State.OPEN:
            raise _closed()
        self._one_loop.check()

    def _start_pool(self) -> None:
        """Start a thread of the pool ahead of its first job (hybrid mode, once): a thread
        starts while the store reads the save, instead of on the first recall's or
        append's path into the index (about 0.25 ms)."""
        if not self._pool_started and self._embedder is not None:
            self._pool_started = True
            with contextlib.suppress(RuntimeError):  # shut down by a racing close: the
                self._executor.submit(_started)  # work's own hop names that

    def _prefetch(self, query: GameMemoryQuery) -> None:
        """As an owner's first hybrid recall by this object begins, have a pool thread read
        and check its index partition (``VectorIndex.prefetch``) while the store reads the
        save: the work that releases the interpreter (file reads, checking rows against
        their checksums) overlaps that read instead of following it. Later recalls of the
        owner find the partition held; :data:`PREFETCHED_OWNERS` owners are remembered
        (the oldest forgotten: its next recall prefetches again, finding it held)."""
        embedder, index = self._embedder, self.index
        if embedder is None or index is None or query.owner_id is None or query.limit == 0:
            self._start_pool()
            return
        key = (query.session_id, query.owner_id)
        if key in self._prefetched or not embedder.query_text(query).strip():
            self._start_pool()
            return
        self._prefetched[key] = None
        if len(self._prefetched) > PREFETCHED_OWNERS:
            self._prefetched.popitem(last=False)
        self._pool_started = True
        with contextlib.suppress(RuntimeError):  # shut down by a racing close
            self._executor.submit(index.prefetch, *key, embedder.identity)

    async def _run(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` in this object's thread pool and await its result (as the file
        store does, ``store/pool.py``); a recall makes this hop once, an append twice.
        Still open while ``aclose`` waits for the writes in flight (they hop here)."""
        if self._state is _State.CLOSED:
            raise _closed()
        return await run_in_pool(self._executor, function, _closed)

    async def _report(self, diagnostic: MemoryVectorDiagnostic) -> None:
        """Deliver a diagnostic; a session's rebuild-required warning only once until rebuilt.

        An append that saved memories but could not index them lets the catch-up try the
        owners of its session once more (:meth:`CatchUps.rearm`).
        """
        if diagnostic.code == REBUILD_REQUIRED and diagnostic.session_id is not None:
            if diagnostic.session_id in self._warned_stale:
                return
            self._warned_stale.add(diagnostic.session_id)
        elif diagnostic.code == _APPEND_FAILED and diagnostic.session_id is not None:
            self._catch_ups.rearm(diagnostic.session_id)
        await self._diagnostics.report(diagnostic)

    def _noted(self, noted: list[str], session_id: str, owner_id: str) -> None:
        """:meth:`_missing`, with ``owner_id`` added to ``noted`` (a recall's own list)."""
        noted.append(owner_id)
        self._missing(session_id, owner_id)

    def _missing(self, session_id: str, owner_id: str) -> None:
        """The recall's hook (``RecallParts.missing``): an owner's memories lack vectors;
        queue their catch-up unless the front door is closing."""
        if self._state is _State.OPEN:
            self._catch_ups.request(session_id, owner_id)

    async def _catch_up(self, session_id: str, owner_id: str) -> None:
        """Embed the owner's memories that lack a vector (:func:`catch_up_owner`), under the
        erase gate as an append writes; run by :class:`CatchUps`, one owner at a time."""
        if self._embedder is None or self.index is None:
            return
        await catch_up_owner(
            session_id,
            owner_id,
            store=self.authoritative,
            index=self.index,
            embedder=self._embedder,
            options=self.options,
            run=self._run,
            report=self._report,
            gate=self._erase_gate.appending,
            rebuilding=self._rebuilding.__contains__,
        )

    def _hybrid(self) -> tuple[VectorIndex, Embedder]:
        if self._embedder is None or self.index is None:
            raise EmbeddingUnavailableError(_NO_MODEL)
        return self.index, self._embedder

    # -- writes -------------------------------------------------------------------------

    async def append(self, memory: GameMemory) -> bool:
        """Save ``memory`` in the authoritative store, then (hybrid mode) index its vector,
        then apply the retention policy (``maximum_memories_per_owner``).

        A memory whose ``consolidates`` is set is a summary: it is appended as
        :meth:`consolidate` appends one, with the same checks.

        Cancelling the caller does not undo an append: it runs to its end (saved, then
        indexed) and only then is the cancellation raised, so a memory saved gets its
        vector while the process lives (``write_guards.finished``); ``aclose`` waits for it
        too. One left without (the process was killed in between, the embedding failed) is
        embedded by the catch-up once a recall of its NPC finds it (``catch_up.py``).

        Returns:
            ``True`` if the memory was new, ``False`` if an equivalent one was there.

        Raises:
            Everything the authoritative ``append`` raises (nothing else happens then);
            for a summary, what :meth:`consolidate` raises; ``EmbeddingUnavailableError``
            only with ``fail_when_embedding_unavailable``.
        """
        self._check_open()
        self._start_pool()
        if isinstance(memory, GameMemory) and memory.consolidates:
            # A summary: appended as ``consolidate`` appends it, with its checks (a
            # reflection, of sources the owner holds), so a plain append cannot retract
            # another memory, nor an id no memory has yet.
            return await self.consolidate(
                memory.session_id, memory.owner_id, memory.consolidates, memory
            )
        # ``appending``: reads of files of codes give way (``index/quantized.py``).
        with appending, self._writes.writing():
            return await self._saved_then_indexed(memory, lambda: self.authoritative.append(memory))

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Save a batch atomically and durably, then index it in batches (``ingest.py``).

        Cancelled, the batch still runs to its end (saved and indexed) before the
        cancellation is raised, as :meth:`append` does; ``aclose`` waits for it too.

        Raises: what the store's ``append_many`` raises (nothing is saved then).
        """
        self._check_open()
        parts = (self.authoritative, self.index, self._embedder, self.options)
        guards = (self._eviction_guard, self._erase_gate)
        with appending, self._writes.writing():
            return await self._writes.finished(
                append_many(memories, *parts, self._run, self._report, *guards)
            )

    async def _index(self, memory: GameMemory, created: bool) -> None:
        """Embed and index a memory just saved; report (or raise) when that fails."""
        if self._embedder is not None and self.index is not None:
            await index_memory(
                memory, created, self.index, self._embedder, self._run, self._report, self.options
            )

    # -- reads --------------------------------------------------------------------------

    async def search(self, query: GameMemoryQuery) -> list[GameMemory]:
        """Recall up to ``query.limit`` memories, best first (see :meth:`recall`)."""
        self._check_open()
        if isinstance(query, GameMemoryQuery) and query.limit == 0:
            return []
        return list((await self.recall(query)).memories)

    async def search_snapshot(
        self, query: GameMemoryQuery, maximum_snapshot_entries: int | None = None
    ) -> GameMemorySearchSnapshot:
        """Recall with the authoritative snapshot and every stage's metrics."""
        return (
            await self.recall(query, maximum_snapshot_entries=maximum_snapshot_entries)
        ).snapshot

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or owner), from the authoritative store."""
        self._check_open()
        return await self.authoritative.enumerate(session_id, owner_id)

    async def recall(
        self,
        query: GameMemoryQuery,
        *,
        require_semantic: bool = False,
        maximum_snapshot_entries: int | None = None,
    ) -> RecallResult:
        """Recall as of ``query.at_or_before`` (game time), with the evidence for each hit.

        Memories after the moment, of other timelines, or expired then are never returned.
        Hybrid mode fuses lexical and vector ranks and reranks on game time; ``fallback``
        says vectors could not help. Lexical mode ranks lexically (``fallback`` is
        ``False``). Stages: STORAGE_MIGRATION, AUTHORITATIVE_SNAPSHOT (reused by the vector
        path), LEXICAL_SEARCH, EMBEDDING, VECTOR_INDEX_READ, VECTOR_SCORING, RERANK.

        A hybrid recall that finds memories of an NPC saved without a vector answers with
        the vectors there are (those memories lexically) and starts embedding them in the
        background (``catch_up.py``, once per NPC): later recalls of that NPC find them by
        meaning too.

        Args:
            query: What to recall.
            require_semantic: Fail instead of answering lexically alone when vector recall
                is unavailable for a query with text.
            maximum_snapshot_entries: A tighter bound on the snapshot for this call (1 or
                more; above the options' bounds it changes nothing).

        Raises:
            InvalidArgumentError: ``query`` is not a ``GameMemoryQuery``, or
                ``maximum_snapshot_entries`` is not a whole number of 1 or more.
            CapacityExceededError: the snapshot exceeds the bound; ``bound`` names the one
                that applied (``maximum_index_entries``, or ``maximum_snapshot_entries``
                when the call's is tighter).
            EmbeddingUnavailableError: ``require_semantic`` without a model or when the
                model failed; any vector failure with ``fail_when_embedding_unavailable``.
            DerivedIndexError: ``require_semantic`` (or ``fail_when_embedding_unavailable``)
                while the session's index needs a rebuild: vectors of another model, or
                memories without a vector (the message says the catch-up has started).
        """
        self._check_open()
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError("recall takes a GameMemoryQuery")
        if maximum_snapshot_entries is not None and (
            type(maximum_snapshot_entries) is not int or maximum_snapshot_entries < 1
        ):
            raise InvalidArgumentError(
                "maximum_snapshot_entries must be a whole number of memories (1 or more), "
                f"not {maximum_snapshot_entries!r}"
            )
        if require_semantic and self._embedder is None:
            raise EmbeddingUnavailableError(_NO_MODEL)
        # After the store's read was handed to its thread (the recall's first hop): starting
        # the prefetch's thread first would delay the read, the longer of the two.
        asyncio.get_running_loop().call_soon(self._prefetch, query)
        parts, lacking = self._parts, list[str]()
        if require_semantic and parts.missing is not None:
            # The owners this recall finds without vectors, noted as it names them: a
            # status read after it would race with the catch-up it starts.
            parts = dataclasses.replace(parts, missing=functools.partial(self._noted, lacking))
        result = await recall(query, parts, maximum_snapshot_entries=maximum_snapshot_entries)
        if require_semantic and result.fallback:
            if lacking:
                npcs = "1 NPC" if len(lacking) == 1 else f"{len(lacking):,} NPCs"
                raise _unembedded(query.session_id, f"memories of {npcs}")
            raise _not_semantic(query.session_id, await self.get_status(query.session_id))
        return result

    # -- status and rebuild -------------------------------------------------------------

    async def get_status(self, session_id: str) -> VectorMemoryStatus:
        """Count ready, pending, stale and orphan vectors of a session; derive its state.

        Reads the session's snapshot and verifies its index: every entry record, and every
        row read again from disk against its checksum, so damage to rows this process
        already holds is found too (``IndexEngine.verify_partition``; a file index reads
        all of the session's vectors: about 5 ms for 10k memories of 384 values, 36 ms for
        100k, 590 ms for 5,000 NPCs of 10, so a game should not ask every frame). In
        lexical mode the counts come from the save (state ``LEXICAL``).

        A damaged index (entries, vector files, the folder) is derived data gone bad, not
        an error of the call: the state is then ``DEGRADED`` with every memory of the
        session pending, and a warning is logged; ``rebuild`` repairs it.

        Raises:
            InvalidArgumentError: ``session_id`` is not a valid id.
            CapacityExceededError: the session holds more than ``maximum_index_entries``.
        """
        self._check_open()
        _check_session(session_id)
        if self._embedder is None or self.index is None:
            return VectorMemoryStatus.lexical(len(await self.enumerate(session_id)))
        return await index_status(
            self.authoritative,
            self.index,
            self._embedder.identity,
            session_id,
            self.options,
            self._run,
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
        (batches already written stay). A batch is written only for the memories the save
        still holds as they were embedded: one erased meanwhile (here or by another
        process), or replaced under its id, leaves no vector behind. A failed batch stops
        the rebuild with a ``memory_embedding_rebuild_failed`` diagnostic (and no
        ``memory_embedding_rebuild_completed``): the returned status then counts what the
        index holds, so it requires a rebuild unless the run was forced and kept every
        memory's earlier vector.

        Raises:
            InvalidArgumentError: ``session_id`` is blank, or ``progress`` is not callable.
            EmbeddingUnavailableError: in lexical mode (no embedding model is loaded).
            StoreBusyError: a rebuild of this session is already running here.
            DerivedIndexError: a failed batch could not even be recorded in the index (an
                unwritable folder, an unreachable database: fix it and run the rebuild
                again), or the index itself is damaged.
        """
        self._check_open()
        _check_session(session_id)
        if progress is not None and not callable(progress):
            raise InvalidArgumentError(
                f"progress must be a callable progress(done, total), not {type(progress).__name__}"
            )
        index, embedder = self._hybrid()
        if session_id in self._rebuilding:
            raise StoreBusyError(
                f"a rebuild of session {session_id!r} is already running; wait for it to finish"
            )
        self._rebuilding.add(session_id)
        try:
            status = await rebuild_session(
                session_id,
                store=self.authoritative,
                index=index,
                embedder=embedder,
                options=self.options,
                run=self._run,
                report=self._report,
                force=force,
                progress=progress,
                gate=self._erase_gate.appending,
            )
        finally:
            self._rebuilding.discard(session_id)
        self._warned_stale.discard(session_id)
        return status

    async def _quiesced(self) -> None:
        """Stop the catch-ups, then wait for the writes in flight (``aclose``'s wait)."""
        await self._catch_ups.aclose()
        await self._writes.drained()

    # -- maintenance --------------------------------------------------------------------

    async def migrate(self) -> MigrationReport:
        """Migrate a legacy save (and a legacy vector index, if one is open); idempotent."""
        self._check_open()
        saved = await self.authoritative.migrate_legacy_layout()
        vectors = 0 if self.index is None else await self.index.migrate_legacy_index()
        return saved.model_copy(update={"vector_entries": vectors})

    async def check(self, *, fix: bool = False) -> StoreCheckReport:
        """Verify the save (see the store's ``check``); the derived index is not read."""
        self._check_open()
        return await self.authoritative.check(fix=fix)

    async def aclose(self) -> None:
        """Close the store, its index, its authoritative store and (optionally) provider.

        Calls made from here on raise ``StoreClosedError``; the writes already begun
        (``append``, ``append_many``, ``consolidate``, ``forget``, ``erase``) run to their
        end first, so none is cut off between the save and the index (each is bounded by
        the store's commit and its embeddings' deadlines). A running catch-up is cancelled
        and waited for (the batch it is writing is written whole first; what it had not
        embedded yet is embedded by a later front door's catch-up, or a rebuild). Cancelled
        meanwhile, the close still waits for them, closes, and then raises the cancellation.

        The authoritative store is closed even when the index's close fails (its derived
        files are written and its lock released); that failure is raised after. So is it
        when the provider's close fails or takes longer than ``embedding_timeout``: then
        ``EmbeddingUnavailableError`` (or ``EmbeddingTimeoutError``) is raised after.

        Raises:
            InvalidArgumentError: another event loop, running, uses the front door.
        """
        if self._state is not _State.OPEN:
            return
        self._one_loop.check()
        self._state = _State.CLOSING
        try:
            await finished(self._quiesced())
            if self.provider is not None and self.options.dispose_embedding_provider:
                await _close_provider(self.provider, self.options.embedding_timeout)
        finally:
            self._state = _State.CLOSED
            await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
            try:
                if self.index is not None:
                    await self.index.aclose()
            finally:
                await self.authoritative.aclose()
