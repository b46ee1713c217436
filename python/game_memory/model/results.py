"""What a hybrid recall returns: the snapshot, plus why each memory ranked where it did."""

from __future__ import annotations

from dataclasses import dataclass

from game_memory.model.memory import GameMemory
from game_memory.model.search import GameMemorySearchSnapshot

__all__ = ["RecallHit", "RecallResult"]


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
