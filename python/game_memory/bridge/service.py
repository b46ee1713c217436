"""What the bridge needs from the memory behind it: the smallest async protocol.

:class:`game_memory.VectorMemoryStore` (the front door) implements :class:`BridgeService`;
tests use a fake. The result protocols are structural, so the front door's own records
(``RecallResult``, ``VectorMemoryStatus``, ``MigrationReport``, ``MemoryVectorDiagnostic``)
satisfy them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from game_memory.model import GameMemory, GameMemoryQuery, GameMemorySearchSnapshot, GameMoment

__all__ = [
    "BridgeService",
    "DiagnosticView",
    "MigrationView",
    "ProgressCallback",
    "RecallHitView",
    "RecallResultView",
    "StatusView",
]

#: ``progress(done, total)``, called on the event loop while a rebuild runs.
ProgressCallback = Callable[[int, int], None]


class RecallHitView(Protocol):
    """One recalled memory and why it ranked where it did (ranks are 1-based)."""

    @property
    def memory(self) -> GameMemory: ...
    @property
    def lexical_rank(self) -> int | None: ...
    @property
    def vector_rank(self) -> int | None: ...
    @property
    def vector_score(self) -> float | None: ...
    @property
    def fused_score(self) -> float: ...
    @property
    def age_ticks(self) -> int | None: ...


class RecallResultView(Protocol):
    """A recall: hits in result order, the snapshot's stages, and whether it fell back."""

    @property
    def snapshot(self) -> GameMemorySearchSnapshot: ...
    @property
    def hits(self) -> Sequence[RecallHitView]: ...
    @property
    def fallback(self) -> bool: ...


class StatusView(Protocol):
    """A session's index status (``state`` is ``"lexical"`` without a model)."""

    @property
    def mode(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def active_identity(self) -> object | None:
        """The identity (its ``str`` is sent), or ``None`` without a model."""
        ...

    @property
    def total_entries(self) -> int: ...
    @property
    def ready_entries(self) -> int: ...
    @property
    def pending_entries(self) -> int: ...
    @property
    def stale_entries(self) -> int: ...
    @property
    def orphan_entries(self) -> int: ...
    @property
    def requires_rebuild(self) -> bool: ...


class MigrationView(Protocol):
    """What a migration moved."""

    @property
    def migrated_entries(self) -> int: ...
    @property
    def partitioned_entries(self) -> int: ...
    @property
    def vector_entries(self) -> int: ...


class DiagnosticView(Protocol):
    """A diagnostic the store reported (``severity`` is a str enum or a plain str)."""

    @property
    def code(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def owner_id(self) -> str | None: ...
    @property
    def memory_id(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any] | None: ...


class BridgeService(Protocol):
    """The memory the bridge serves. Every method may raise any ``GameMemoryError``.

    Methods are awaited concurrently from many connections and may be cancelled (server
    deadline, shutdown); implementations must stay consistent when that happens.
    """

    @property
    def mode(self) -> str:
        """``"hybrid"`` (lexical and vector recall) or ``"lexical"``."""
        ...

    async def append(self, memory: GameMemory) -> bool:
        """Append ``memory``; return ``False`` when an identical memory was already there."""
        ...

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Append a batch atomically (all or none); one result per memory, as ``append``."""
        ...

    async def recall(
        self, query: GameMemoryQuery, *, require_semantic: bool = False
    ) -> RecallResultView:
        """Recall as ``query`` says; with ``require_semantic`` never fall back to lexical."""
        ...

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of ``at``; ``False`` when it was already retracted then."""
        ...

    async def erase(
        self, session_id: str, owner_id: str | None = None, memory_ids: Sequence[str] | None = None
    ) -> int:
        """Remove memories for good; return how many."""
        ...

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append a summary retracting ``memory_ids`` as of its moment."""
        ...

    async def get_status(self, session_id: str) -> StatusView:
        """Report a session's index status."""
        ...

    async def rebuild(
        self, session_id: str, *, force: bool = False, progress: ProgressCallback | None = None
    ) -> StatusView:
        """Re-embed a session, reporting progress; return the status afterwards."""
        ...

    async def migrate(self) -> MigrationView:
        """Migrate a legacy save and index to the current layout."""
        ...
