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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from game_memory.errors import EmbeddingUnavailableError
from game_memory.model import GameMemory, GameMemoryQuery, GameMemorySearchSnapshot
from game_memory.store.file_store import FileGameMemoryStore
from game_memory.vector.hashing import HashingEmbeddingProvider
from game_memory.vector.provider import EmbeddingProvider

__all__ = [
    "DEFAULT_MODEL_UNAVAILABLE",
    "LexicalRecallHit",
    "LexicalRecallResult",
    "MemoryMode",
    "MemoryNotice",
    "MemoryStatus",
    "MigrationReport",
    "OpenedMemory",
    "default_index_dir",
    "open_memory",
]

#: The diagnostic code of the lexical fallback when the default model is missing.
DEFAULT_MODEL_UNAVAILABLE = "embedding_model_unavailable"

MemoryMode = Literal["hybrid", "lexical"]

#: The reciprocal-rank constant giving lexical-only hits a fused score comparable to hybrid.
_RANK_CONSTANT = 60


@dataclass(frozen=True)
class MemoryNotice:
    """Why the memory runs in a reduced mode (shaped like a store diagnostic).

    Attributes:
        code: A stable code, such as ``embedding_model_unavailable``.
        severity: ``"information"``, ``"warning"`` or ``"error"``.
        message: What happened and what to do.
        details: Extra facts (such as the failure ``kind``), or ``None``.
    """

    code: str
    severity: str
    message: str
    session_id: str | None = None
    owner_id: str | None = None
    memory_id: str | None = None
    details: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class LexicalRecallHit:
    """One memory recalled by lexical search alone (no vector channel)."""

    memory: GameMemory
    lexical_rank: int | None
    vector_rank: int | None
    vector_score: float | None
    fused_score: float
    age_ticks: int | None


@dataclass(frozen=True)
class LexicalRecallResult:
    """A lexical-mode recall, shaped like the vector store's ``RecallResult``."""

    snapshot: GameMemorySearchSnapshot
    hits: tuple[LexicalRecallHit, ...]
    fallback: bool = False


@dataclass(frozen=True)
class MemoryStatus:
    """A session's index status in either mode (``state`` is ``"lexical"`` without a model).

    In lexical mode the counts come from the save: total = ready = the session's memories.
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


def _age(memory: GameMemory, query: GameMemoryQuery) -> int | None:
    at = query.at_or_before
    return None if at is None else at.tick - memory.moment.tick


@dataclass(eq=False)
class OpenedMemory:
    """A save opened by :func:`open_memory`: one object for the bridge, the CLI and the demo.

    Attributes:
        store: The vector store (hybrid) or the file store (lexical) itself.
        mode: ``"hybrid"`` or ``"lexical"``.
        identity: The embedding model's identity string, or ``None``.
        notice: Why the mode is reduced (a missing default model), or ``None``.

    Safe to use from many tasks of one event loop. Close it with :meth:`aclose` (or
    ``async with``); closing is idempotent.
    """

    store: Any
    mode: MemoryMode
    identity: str | None
    notice: MemoryNotice | None
    authoritative: FileGameMemoryStore
    index: Any = None
    provider: Any = None
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

    async def remember(self, memory: GameMemory) -> bool:
        """Append a memory durably; ``False`` when an identical one was already there.

        Raises:
            MemoryConflictError: The id already holds different content.
            CapacityExceededError, PersistenceError, StoreBusyError, StoreClosedError.
        """
        return bool(await self.store.append(memory))

    async def recall(self, query: GameMemoryQuery, *, require_semantic: bool = False) -> Any:
        """Recall as ``query`` says, in either mode.

        ``query.at_or_before`` is the game moment of the question: later memories are
        never returned. In lexical mode the hits carry lexical ranks only and ``fallback``
        is ``False`` (nothing better was expected).

        Args:
            query: What to recall.
            require_semantic: Fail instead of answering lexically when vector recall is
                unavailable.

        Raises:
            EmbeddingUnavailableError: ``require_semantic`` without a model (or the model
                failed).
            DerivedIndexError: ``require_semantic`` while the session's index needs a
                rebuild.
        """
        if self.mode == "lexical":
            if require_semantic:
                raise EmbeddingUnavailableError(_NO_MODEL)
            snapshot = await self.authoritative.search_snapshot(query)
            hits = tuple(
                LexicalRecallHit(
                    memory=memory,
                    lexical_rank=rank,
                    vector_rank=None,
                    vector_score=None,
                    fused_score=1.0 / (_RANK_CONSTANT + rank),
                    age_ticks=_age(memory, query),
                )
                for rank, memory in enumerate(snapshot.memories, start=1)
            )
            return LexicalRecallResult(snapshot=snapshot, hits=hits)
        raise EmbeddingUnavailableError("hybrid recall is not available in this build")

    async def status(self, session_id: str) -> MemoryStatus:
        """Report a session's index status (in lexical mode: counts from the save)."""
        if self.mode == "lexical":
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
        raise EmbeddingUnavailableError("hybrid status is not available in this build")

    async def rebuild(
        self,
        session_id: str,
        *,
        force: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> MemoryStatus:
        """Re-embed a session's memories, calling ``progress(done, total)``; return the status.

        Raises:
            EmbeddingUnavailableError: In lexical mode (no embedding model is loaded).
        """
        raise EmbeddingUnavailableError(_NO_MODEL)

    async def migrate(self) -> MigrationReport:
        """Migrate a legacy save (and, in hybrid mode, a legacy index); idempotent."""
        saved = await self.authoritative.migrate_legacy_layout()
        return MigrationReport(
            migrated_entries=saved.migrated_entries,
            partitioned_entries=saved.partitioned_entries,
            vector_entries=0,
        )

    async def aclose(self) -> None:
        """Close the stores and the model; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self.authoritative.aclose()


_NO_MODEL = (
    "no embedding model is loaded, so the memory runs in lexical mode; to get semantic recall, "
    "run 'game-memory models prepare' and restart with --model default (or --model PATH)"
)


async def _load_provider(
    model: str, home: str | os.PathLike[str] | None
) -> tuple[EmbeddingProvider | None, MemoryNotice | None]:
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


def _fallback_notice(reason: str, kind: Any) -> MemoryNotice:
    missing = getattr(kind, "value", None) == "missing_model_file"
    advice = (
        "restart"
        if "models prepare" in reason
        else "run 'game-memory models prepare', then restart"
    )
    return MemoryNotice(
        code=DEFAULT_MODEL_UNAVAILABLE,
        severity="warning" if missing else "error",
        message=(
            f"recall is lexical only because the default embedding model is unavailable: "
            f"{reason.rstrip('.')}; {advice} the server to enable semantic recall"
        ),
        details=None if kind is None else {"kind": str(getattr(kind, "value", kind))},
    )


async def open_memory(
    save_dir: str | os.PathLike[str],
    index_dir: str | os.PathLike[str] | None = None,
    model: str = "default",
    *,
    diagnostics: Callable[[Any], None] | None = None,
    home: str | os.PathLike[str] | None = None,
) -> OpenedMemory:
    """Open a save with the chosen model; see the module docstring for the modes.

    Args:
        save_dir: The authoritative save folder (created if missing).
        index_dir: The derived index folder; default :func:`default_index_dir`.
        model: ``"default"``, ``"lexical"``, ``"hashing"`` or a model folder.
        diagnostics: Receives every diagnostic the vector store reports.
        home: The model cache folder for ``"default"`` (default ``$GAME_MEMORY_HOME``).

    Returns:
        The opened memory; close it with ``aclose()``.

    Raises:
        PersistenceError: The save folder is unsafe (a symbolic link).
        EmbeddingUnavailableError: A model folder given as ``model`` cannot be loaded.
    """
    provider, notice = await _load_provider(model, home)
    authoritative = FileGameMemoryStore(save_dir)
    if provider is None:
        return OpenedMemory(
            store=authoritative,
            mode="lexical",
            identity=None,
            notice=notice,
            authoritative=authoritative,
        )
    await authoritative.aclose()
    await provider.aclose()
    raise EmbeddingUnavailableError(
        f"model {model!r} needs the vector store, which is not available in this build; "
        "use --model lexical"
    )
