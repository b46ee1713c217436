"""Open a save as one ready-to-use memory: the store, the index and the model, composed.

:func:`open_memory` is what ``game-memory serve``, the other CLI commands and the terminal
demo call. It picks the mode from the ``model`` option:

* ``"lexical"``: the authoritative :class:`FileGameMemoryStore` alone (lexical recall).
* ``"hashing"``: hybrid recall with the deterministic :class:`HashingEmbeddingProvider`.
* ``"default"``: hybrid recall with the prepared all-MiniLM-L6-v2 model; when it is not
  prepared (or cannot load), lexical mode with a :attr:`OpenedMemory.notice` saying why and
  what to do (``game-memory models prepare``).
* any other value: a model folder for :func:`game_memory.onnx.load_provider_from_directory`;
  failing to load it is an error, because the user asked for it explicitly.

Hybrid mode composes ``VectorMemoryStore(FileGameMemoryStore(save_dir),
FileVectorMemoryIndex(index_dir), provider, reranker=GameAwareMemoryReranker())``. The
index folder defaults to the sibling ``<save-dir parent>/<save-dir name>.index``: derived
data never lives inside the save.

:class:`OpenedMemory` answers the same calls in both modes (remember, recall, status,
rebuild, migrate), so callers never branch on the mode.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.errors import DerivedIndexError, EmbeddingUnavailableError
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMemory, GameMemoryQuery, GameMemorySearchSnapshot
from game_memory.model.diagnostics import DiagnosticSeverity, MemoryVectorDiagnostic
from game_memory.model.results import RecallHit, RecallResult
from game_memory.model.status import VectorMemoryState, VectorMemoryStatus
from game_memory.recall.fusion import FusionOptions, fuse
from game_memory.recall.reranker import GameAwareMemoryReranker
from game_memory.store.file_store import FileGameMemoryStore

__all__ = [
    "DEFAULT_MODEL_UNAVAILABLE",
    "MemoryMode",
    "MemoryStatus",
    "MigrationReport",
    "OpenedMemory",
    "default_index_dir",
    "open_memory",
]

#: The diagnostic code of the lexical fallback when the default model is missing.
DEFAULT_MODEL_UNAVAILABLE = "embedding_model_unavailable"

MemoryMode = Literal["hybrid", "lexical"]


@dataclass(frozen=True)
class MemoryStatus:
    """A session's index status in either mode (``state`` is ``"lexical"`` without a model).

    In hybrid mode it mirrors :class:`VectorMemoryStatus` (``active_identity`` as its
    string). In lexical mode the counts come from the save: total = ready = the session's
    memories, the other counts are 0 and no rebuild is required.
    """

    mode: MemoryMode
    state: str
    active_identity: str | None
    total_entries: int
    ready_entries: int
    pending_entries: int
    stale_entries: int
    orphan_entries: int
    requires_rebuild: bool

    @classmethod
    def from_vector(cls, status: VectorMemoryStatus) -> MemoryStatus:
        """Describe a hybrid store's status."""
        return cls(
            mode="hybrid",
            state=status.state.value,
            active_identity=str(status.active_identity),
            total_entries=status.total_entries,
            ready_entries=status.ready_entries,
            pending_entries=status.pending_entries,
            stale_entries=status.stale_entries,
            orphan_entries=status.orphan_entries,
            requires_rebuild=status.requires_rebuild,
        )


@dataclass(frozen=True)
class MigrationReport:
    """What :meth:`OpenedMemory.migrate` moved.

    Attributes:
        migrated_entries: Legacy memories moved into the current layout.
        partitioned_entries: Memories in the save afterwards.
        vector_entries: Legacy index entries moved (0 in lexical mode).
    """

    migrated_entries: int
    partitioned_entries: int
    vector_entries: int


def default_index_dir(save_dir: str | os.PathLike[str]) -> Path:
    """Return the default index folder of a save: ``<parent>/<name>.index``."""
    save = Path(os.path.abspath(os.fspath(save_dir)))
    return save.with_name(save.name + ".index")


_NO_MODEL = (
    "no embedding model is loaded, so the memory runs in lexical mode; to get semantic recall, "
    "run 'game-memory models prepare' and restart with --model default (or --model PATH)"
)


@dataclass(eq=False)
class OpenedMemory:
    """A save opened by :func:`open_memory`: one object for the bridge, the CLI and the demo.

    Attributes:
        store: The :class:`VectorMemoryStore` (hybrid) or the :class:`FileGameMemoryStore`
            (lexical) itself, for callers that need more than the helpers below.
        mode: ``"hybrid"`` or ``"lexical"``.
        identity: The embedding model's identity string, or ``None``.
        notice: Why the mode is reduced (the default model is missing), or ``None``.
        authoritative: The save's file store (also reachable through ``store``).

    Safe to use from many tasks of one event loop. Close it with :meth:`aclose` (or
    ``async with``); closing is idempotent and closes the store, the index and the model.
    """

    store: VectorMemoryStore | FileGameMemoryStore
    mode: MemoryMode
    identity: str | None
    notice: MemoryVectorDiagnostic | None
    authoritative: FileGameMemoryStore
    _closed: bool = field(default=False, repr=False)

    async def __aenter__(self) -> OpenedMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def vector_store(self) -> VectorMemoryStore | None:
        """The hybrid store, or ``None`` in lexical mode."""
        return self.store if isinstance(self.store, VectorMemoryStore) else None

    async def remember(self, memory: GameMemory) -> bool:
        """Append a memory durably (and embed it in hybrid mode).

        Returns:
            ``False`` when an identical memory was already there (nothing changed).

        Raises:
            MemoryConflictError: The id already holds different content.
            CapacityExceededError, PersistenceError, StoreBusyError, StoreClosedError.
        """
        return await self.store.append(memory)

    async def recall(
        self, query: GameMemoryQuery, *, require_semantic: bool = False
    ) -> RecallResult:
        """Recall as ``query`` says, in either mode.

        ``query.at_or_before`` is the game moment of the question: later memories (and
        those of other timelines, or expired then) are never returned. Hybrid mode fuses
        lexical and vector ranks and reranks on game time; ``fallback`` is ``True`` when
        vectors could not help. Lexical mode ranks lexically and scores the hits as the
        hybrid fusion would without vectors; ``fallback`` is ``False``.

        Args:
            query: What to recall.
            require_semantic: Fail instead of answering lexically alone when vector recall
                is unavailable for a query with text.

        Raises:
            EmbeddingUnavailableError: ``require_semantic`` without a model, or the model
                failed.
            DerivedIndexError: ``require_semantic`` while the session's index needs a
                rebuild (vectors of another model).
        """
        vector_store = self.vector_store
        if vector_store is None:
            if require_semantic:
                raise EmbeddingUnavailableError(_NO_MODEL)
            return await self._recall_lexically(query)
        result = await vector_store.recall(query)
        if require_semantic and result.fallback:
            status = await vector_store.get_status(query.session_id)
            if status.state is VectorMemoryState.REBUILD_REQUIRED:
                raise DerivedIndexError(
                    f"the vector index of session {query.session_id!r} holds vectors of "
                    "another model, so semantic recall is off until memory.rebuild (or "
                    "'game-memory rebuild') re-embeds it"
                )
            raise EmbeddingUnavailableError(
                "semantic recall failed for this query (the server log has the diagnostic); "
                "retry, or recall without require_semantic"
            )
        return result

    async def _recall_lexically(self, query: GameMemoryQuery) -> RecallResult:
        found = await self.authoritative.search_lexical(query)
        lexical = [(hit.memory, hit.score) for hit in found.hits]
        fused = fuse(lexical, [], FusionOptions(), query.limit)
        hits = tuple(
            RecallHit(
                memory=candidate.memory,
                lexical_rank=candidate.lexical_rank,
                vector_rank=None,
                lexical_score=candidate.lexical_score,
                vector_score=None,
                fused_score=candidate.score,
                age_ticks=_age(candidate.memory, query),
            )
            for candidate in fused
        )
        snapshot = GameMemorySearchSnapshot.model_construct(
            memories=tuple(hit.memory for hit in hits),
            authoritative_memories=found.authoritative_memories,
            stages=tuple(found.stages),
        )
        return RecallResult(snapshot, hits, False)

    async def status(self, session_id: str) -> MemoryStatus:
        """Report a session's index status (in lexical mode: counts from the save)."""
        vector_store = self.vector_store
        if vector_store is not None:
            return MemoryStatus.from_vector(await vector_store.get_status(session_id))
        count = len(await self.authoritative.enumerate(session_id))
        return MemoryStatus(
            mode="lexical",
            state="lexical",
            active_identity=None,
            total_entries=count,
            ready_entries=count,
            pending_entries=0,
            stale_entries=0,
            orphan_entries=0,
            requires_rebuild=False,
        )

    async def rebuild(
        self,
        session_id: str,
        *,
        force: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> MemoryStatus:
        """Re-embed a session's memories that lack a current vector (all with ``force``).

        ``progress(done, total)`` is called on the event loop before the first batch and
        after each. Resumable: run it again after a crash or cancellation.

        Raises:
            EmbeddingUnavailableError: In lexical mode (no embedding model is loaded).
            StoreBusyError: A rebuild of this session is already running.
        """
        vector_store = self.vector_store
        if vector_store is None:
            raise EmbeddingUnavailableError(_NO_MODEL)
        status = await vector_store.rebuild(session_id, force=force, progress=progress)
        return MemoryStatus.from_vector(status)

    async def migrate(self) -> MigrationReport:
        """Migrate a legacy save (and, in hybrid mode, a legacy index); idempotent."""
        saved = await self.authoritative.migrate_legacy_layout()
        vector_store = self.vector_store
        vectors = 0 if vector_store is None else await vector_store.index.migrate_legacy_index()
        return MigrationReport(
            migrated_entries=saved.migrated_entries,
            partitioned_entries=saved.partitioned_entries,
            vector_entries=vectors,
        )

    async def aclose(self) -> None:
        """Close the store, the index and the model; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.store.aclose()  # a vector store closes its index, save and provider


def _age(memory: GameMemory, query: GameMemoryQuery) -> int | None:
    at = query.at_or_before
    if at is None or at.timeline_id != memory.moment.timeline_id:
        return None
    return at.tick - memory.moment.tick


async def _load_provider(
    model: str, home: str | os.PathLike[str] | None
) -> tuple[EmbeddingProvider | None, MemoryVectorDiagnostic | None]:
    """Return the provider the ``model`` option names (``None``: lexical) and any notice."""
    if model == "lexical":
        return None, None
    if model == "hashing":
        return HashingEmbeddingProvider(), None
    if model != "default":
        from game_memory import onnx

        return await onnx.load_provider_from_directory(model), None
    try:
        from game_memory import onnx
    except ImportError as exc:  # a broken install: keep the game working, say why
        return None, _fallback_notice(f"the embedding runtime cannot be imported ({exc})", None)
    try:
        provider = await onnx.load_default_provider(None if home is None else Path(home))
    except EmbeddingUnavailableError as exc:
        return None, _fallback_notice(str(exc), getattr(exc, "kind", None))
    return provider, None


def _fallback_notice(reason: str, kind: Any) -> MemoryVectorDiagnostic:
    missing = getattr(kind, "value", None) == "missing_model_file"
    if "models prepare" in reason:
        advice = "restart"
    else:
        advice = "run 'game-memory models prepare', then restart"
    message = (
        "recall is lexical only because the default embedding model is unavailable: "
        f"{reason.rstrip('.')}; {advice} the server to enable semantic recall"
    )
    return MemoryVectorDiagnostic(
        code=DEFAULT_MODEL_UNAVAILABLE,
        severity=DiagnosticSeverity.WARNING if missing else DiagnosticSeverity.ERROR,
        message=message[:4_096],
        details=None if kind is None else {"kind": str(getattr(kind, "value", kind))},
    )


async def open_memory(
    save_dir: str | os.PathLike[str],
    index_dir: str | os.PathLike[str] | None = None,
    model: str = "default",
    *,
    diagnostics: Callable[[MemoryVectorDiagnostic], object] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> OpenedMemory:
    """Open a save with the chosen model; see the module docstring for the modes.

    Nothing is read from the save yet: the stores open their files on first use.

    Args:
        save_dir: The authoritative save folder (created if missing).
        index_dir: The derived index folder; default :func:`default_index_dir`. It must
            not be inside the save.
        model: ``"default"``, ``"lexical"``, ``"hashing"`` or a model folder.
        diagnostics: Receives every :class:`MemoryVectorDiagnostic` the vector store
            reports (sync or async callable). The start-up :attr:`OpenedMemory.notice` is
            not sent to it.
        home: The model cache folder for ``"default"`` (default ``$GAME_MEMORY_HOME``).

    Returns:
        The opened memory; close it with ``aclose()``.

    Raises:
        PersistenceError: The save folder is unsafe (a symbolic link).
        InvalidArgumentError: The index folder is inside the save folder.
        EmbeddingUnavailableError: A model folder given as ``model`` cannot be loaded.
    """
    provider, notice = await _load_provider(model, home)
    try:
        authoritative = FileGameMemoryStore(save_dir)
    except BaseException:
        if provider is not None:
            await provider.aclose()
        raise
    if provider is None:
        return OpenedMemory(authoritative, "lexical", None, notice, authoritative)
    try:
        index = FileVectorMemoryIndex(
            index_dir if index_dir is not None else default_index_dir(save_dir)
        )
        store = VectorMemoryStore(
            authoritative,
            index,
            provider,
            reranker=GameAwareMemoryReranker(),
            diagnostics=diagnostics,
        )
    except BaseException:
        await authoritative.aclose()
        await provider.aclose()
        raise
    return OpenedMemory(store, "hybrid", str(provider.identity), None, authoritative)
