"""What the front door returns: recalls with their evidence, migration and check reports."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from game_memory.model.memory import GameMemory
from game_memory.model.search import GameMemorySearchSnapshot

__all__ = [
    "CompactionReport",
    "MigrationReport",
    "RecallHit",
    "RecallResult",
    "StoreCheckReport",
]


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One recalled memory and its evidence.

    Attributes:
        memory: The authoritative memory.
        lexical_rank: 1-based position in the lexical candidates, or ``None``.
        vector_rank: 1-based position in the vector candidates, or ``None``.
        lexical_score: Its BM25 score (with importance and tag bonus), or ``None``.
        vector_score: Its cosine similarity with the query, or ``None``.
        fused_score: The fusion score that ordered the candidates before reranking.
        age_ticks: Game ticks between the memory and ``at_or_before`` (``None`` without it).
    """

    memory: GameMemory
    lexical_rank: int | None
    vector_rank: int | None
    lexical_score: float | None
    vector_score: float | None
    fused_score: float
    age_ticks: int | None

    @property
    def channels(self) -> str:
        """``"both"``, ``"lexical"`` or ``"vector"``: which channels found the memory."""
        if self.lexical_rank is not None and self.vector_rank is not None:
            return "both"
        return "lexical" if self.lexical_rank is not None else "vector"


@dataclass(frozen=True, slots=True)
class RecallResult:
    """A recall: the snapshot (memories in rank order), one hit per memory, and whether
    semantic recall was unavailable so lexical recall answered alone (``fallback``)."""

    snapshot: GameMemorySearchSnapshot
    hits: tuple[RecallHit, ...]
    fallback: bool

    @property
    def memories(self) -> tuple[GameMemory, ...]:
        """The recalled memories, best first."""
        return self.snapshot.memories


class MigrationReport(BaseModel):
    """What a migration moved into the current layout.

    Attributes:
        migrated_entries: Legacy memories moved into the save's current layout.
        partitioned_entries: Memories in the save afterwards.
        vector_entries: Legacy vector-index entries moved (0 when only the save migrated).
    """

    model_config = ConfigDict(frozen=True)

    migrated_entries: int = Field(ge=0)
    partitioned_entries: int = Field(ge=0)
    vector_entries: int = Field(default=0, ge=0)

    @property
    def performed_work(self) -> bool:
        """Whether any legacy document or index entry was found and migrated."""
        return self.migrated_entries > 0 or self.vector_entries > 0


class CompactionReport(BaseModel):
    """What a compaction of a save did (``compact``).

    Attributes:
        bytes_before: The save's files, in bytes, before (everything under its data
            folder, backups included, but the derived read files of ``read/``, which the
            store rebuilds on demand).
        bytes_after: The same after.
        partitions_rewritten: Owner partitions rewritten (fewer segments, redundant
            retractions dropped, second copies of a record dropped).
        files_removed: Files deleted: leftovers of interrupted writes, empty packs at the
            end of a session's series, empty session folders.
    """

    model_config = ConfigDict(frozen=True)

    bytes_before: int = Field(ge=0)
    bytes_after: int = Field(ge=0)
    partitions_rewritten: int = Field(default=0, ge=0)
    files_removed: int = Field(default=0, ge=0)

    @property
    def bytes_freed(self) -> int:
        """How many bytes the compaction gave back (never negative)."""
        return max(0, self.bytes_before - self.bytes_after)


class StoreCheckReport(BaseModel):
    """The outcome of a store check: problems found (after repairs) and repairs applied."""

    model_config = ConfigDict(frozen=True)

    memories: int
    ledger_entries: int
    problems: tuple[str, ...]
    repairs: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Whether the store is consistent."""
        return not self.problems
