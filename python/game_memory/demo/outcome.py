"""What playing the scenario produces, step by step, as immutable records with a JSON form.

The terminal demo renders these records with ``rich`` and prints their JSON with
``--json``; the Godot demo's engine test compares its own lines with that JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from game_memory.demo.actions import ConsolidateStep, ForgetStep
from game_memory.demo.clock import format_tick
from game_memory.demo.scenario import DemoEvent, DemoQuestion, Scenario
from game_memory.model import GameMemorySearchStage, RecallHit, RecallResult, VectorMemoryStatus

__all__ = [
    "ConsolidateStep",
    "EventStep",
    "ForgetStep",
    "ModelChangeStep",
    "PhaseStep",
    "QuestionStep",
    "RebuildStep",
    "RecalledMemory",
    "StageTiming",
    "Step",
    "is_correct",
    "status_json",
]


@dataclass(frozen=True)
class RecalledMemory:
    """One recalled memory and why it ranked where it did.

    Attributes:
        memory_id: The event id.
        text: What the NPC remembers.
        tick: When it happened.
        channels: ``"both"``, ``"lexical"`` or ``"vector"``: which search found it.
        lexical_rank: 1-based rank in the lexical candidates, or ``None``.
        vector_rank: 1-based rank in the vector candidates, or ``None``.
        vector_score: Cosine similarity with the question, or ``None``.
        fused_score: The fused score before the game-time rerank.
        age_ticks: Game minutes between the memory and the question.
        belief_key: The belief it is a version of, or ``None``.
    """

    memory_id: str
    text: str
    tick: int
    kind: str
    importance: float
    channels: str
    lexical_rank: int | None
    vector_rank: int | None
    vector_score: float | None
    fused_score: float
    age_ticks: int | None
    belief_key: str | None = None

    @classmethod
    def from_hit(cls, hit: RecallHit) -> RecalledMemory:
        """Describe one hit of a recall."""
        memory = hit.memory
        return cls(
            memory_id=memory.memory_id,
            text=memory.searchable_text or "",
            tick=memory.moment.tick,
            kind=memory.kind.value,
            importance=memory.importance,
            channels=hit.channels,
            lexical_rank=hit.lexical_rank,
            vector_rank=hit.vector_rank,
            vector_score=None if hit.vector_score is None else round(hit.vector_score, 4),
            fused_score=round(hit.fused_score, 4),
            age_ticks=hit.age_ticks,
            belief_key=memory.belief_key,
        )

    def to_json(self) -> dict[str, Any]:
        """The memory as JSON-ready data."""
        return {
            "memory_id": self.memory_id,
            "text": self.text,
            "tick": self.tick,
            "clock": format_tick(self.tick),
            "kind": self.kind,
            "importance": self.importance,
            "belief_key": self.belief_key,
            "why": {
                "channels": self.channels,
                "lexical_rank": self.lexical_rank,
                "vector_rank": self.vector_rank,
                "vector_score": self.vector_score,
                "fused_score": self.fused_score,
                "age_ticks": self.age_ticks,
            },
        }


@dataclass(frozen=True)
class StageTiming:
    """One stage of a search: its name, duration and how much it touched."""

    stage: str
    duration_ms: float
    scanned_count: int
    candidate_count: int
    reused: bool

    @classmethod
    def from_stage(cls, stage: GameMemorySearchStage) -> StageTiming:
        """Describe one measured stage."""
        return cls(
            stage=stage.stage.name.lower(),
            duration_ms=round(stage.duration_ms, 3),
            scanned_count=stage.scanned_count,
            candidate_count=stage.candidate_count,
            reused=stage.reused,
        )

    def to_json(self) -> dict[str, Any]:
        """The stage as JSON-ready data (the bridge's stage shape)."""
        return {
            "stage": self.stage,
            "duration_ms": self.duration_ms,
            "scanned_count": self.scanned_count,
            "candidate_count": self.candidate_count,
            "reused": self.reused,
        }


def is_correct(
    scenario: Scenario, question: DemoQuestion, memory_ids: Sequence[str], ticks: Sequence[int]
) -> tuple[bool, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Judge an answer: ``(correct, ids from the future, ids expired at the question, ids
    forgotten or consolidated by then)``.

    Correct means nothing from after the question's moment, nothing expired or retracted
    then, and (when the question has expected ids) one of them among the first
    ``scenario.top_k``.
    """
    future = tuple(
        memory_id for memory_id, tick in zip(memory_ids, ticks, strict=True) if tick > question.tick
    )
    expired = tuple(
        memory_id for memory_id in memory_ids if _expired(scenario, memory_id, question.tick)
    )
    retracted = tuple(
        memory_id
        for memory_id in memory_ids
        if scenario.retracted(question.npc, memory_id, question.tick)
    )
    found = not question.expected or any(
        memory_id in question.expected for memory_id in memory_ids[: scenario.top_k]
    )
    return (found and not future and not expired and not retracted), future, expired, retracted


def _expired(scenario: Scenario, memory_id: str, tick: int) -> bool:
    try:
        event = scenario.event(memory_id)
    except KeyError:
        return False
    return event.expires_at is not None and event.expires_at <= tick


def status_json(status: VectorMemoryStatus) -> dict[str, Any]:
    """A status as JSON-ready data (the bridge's ``memory.status`` shape)."""
    identity = status.active_identity
    return {
        "mode": status.mode,
        "state": status.state.value,
        "active_identity": None if identity is None else str(identity),
        "total_entries": status.total_entries,
        "ready_entries": status.ready_entries,
        "pending_entries": status.pending_entries,
        "stale_entries": status.stale_entries,
        "orphan_entries": status.orphan_entries,
        "requires_rebuild": status.requires_rebuild,
    }


@dataclass(frozen=True)
class EventStep:
    """An event happened and its witnesses remembered it (``created``: new memories)."""

    event: DemoEvent
    created: int

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        event = self.event
        return {
            "step": "event",
            "id": event.id,
            "tick": event.tick,
            "clock": format_tick(event.tick),
            "text": event.text,
            "witnesses": list(event.witnesses),
            "kind": event.kind,
            "scope": event.scope,
            "importance": event.importance,
            "tags": list(event.tags),
            "expires_at": event.expires_at,
            "created": self.created,
        }


@dataclass(frozen=True)
class PhaseStep:
    """The story moves to another phase (the player loads a save, the model changes)."""

    phase: str
    tick: int
    title: str

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        return {
            "step": "phase",
            "phase": self.phase,
            "tick": self.tick,
            "clock": format_tick(self.tick),
            "title": self.title,
        }


@dataclass(frozen=True)
class QuestionStep:
    """A question, whom it was asked and when, what was recalled, and the verdict.

    Attributes:
        question: The scenario's question.
        stage: ``play``, ``rewind``, ``after_model_change`` or ``after_rebuild``.
        memories: What the NPC recalled, best first.
        fallback: Semantic recall was unavailable and lexical recall answered alone.
        stages: The search stages with their timings.
        correct: See :func:`is_correct`.
        future_ids: Recalled memories from after the question (always empty: the store
            hides them; reported so a regression would show).
        expired_ids: Recalled memories expired at the question (likewise always empty).
        retracted_ids: Recalled memories forgotten or consolidated by the question's moment
            (likewise always empty).
        lexical_ids: What lexical recall alone answers (hybrid mode only), best first.
        lexical_correct: Whether that answer is correct (``None`` in lexical mode).
    """

    question: DemoQuestion
    stage: str
    memories: tuple[RecalledMemory, ...]
    fallback: bool
    stages: tuple[StageTiming, ...]
    correct: bool
    future_ids: tuple[str, ...]
    expired_ids: tuple[str, ...]
    lexical_ids: tuple[str, ...] | None
    lexical_correct: bool | None
    retracted_ids: tuple[str, ...] = ()

    @classmethod
    def judge(
        cls,
        scenario: Scenario,
        question: DemoQuestion,
        stage: str,
        result: RecallResult,
        lexical: RecallResult | None,
    ) -> QuestionStep:
        """Build the step from the recall (and the lexical-only recall, if any)."""
        memories = tuple(RecalledMemory.from_hit(hit) for hit in result.hits)
        correct, future, expired, retracted = is_correct(
            scenario,
            question,
            [memory.memory_id for memory in memories],
            [memory.tick for memory in memories],
        )
        lexical_ids: tuple[str, ...] | None = None
        lexical_correct: bool | None = None
        if lexical is not None:
            lexical_ids = tuple(hit.memory.memory_id for hit in lexical.hits)
            lexical_correct = is_correct(
                scenario,
                question,
                lexical_ids,
                [hit.memory.moment.tick for hit in lexical.hits],
            )[0]
        return cls(
            question=question,
            stage=stage,
            memories=memories,
            fallback=result.fallback,
            stages=tuple(StageTiming.from_stage(stage) for stage in result.snapshot.stages),
            correct=correct,
            future_ids=future,
            expired_ids=expired,
            lexical_ids=lexical_ids,
            lexical_correct=lexical_correct,
            retracted_ids=retracted,
        )

    @property
    def memory_ids(self) -> tuple[str, ...]:
        """The recalled memory ids, best first."""
        return tuple(memory.memory_id for memory in self.memories)

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        question = self.question
        return {
            "step": "question",
            "id": question.id,
            "phase": question.phase,
            "stage": self.stage,
            "npc": question.npc,
            "tick": question.tick,
            "clock": format_tick(question.tick),
            "text": question.text,
            "expected": list(question.expected),
            "paraphrase": question.paraphrase,
            "memory_ids": list(self.memory_ids),
            "memories": [memory.to_json() for memory in self.memories],
            "fallback": self.fallback,
            "stages": [stage.to_json() for stage in self.stages],
            "correct": self.correct,
            "future_ids": list(self.future_ids),
            "expired_ids": list(self.expired_ids),
            "retracted_ids": list(self.retracted_ids),
            "lexical_only": None
            if self.lexical_ids is None
            else {"memory_ids": list(self.lexical_ids), "correct": self.lexical_correct},
        }


@dataclass(frozen=True)
class ModelChangeStep:
    """The save was re-opened with another embedding model; its status before a rebuild."""

    previous_identity: str | None
    identity: str | None
    status: VectorMemoryStatus

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        return {
            "step": "model_change",
            "previous_identity": self.previous_identity,
            "identity": self.identity,
            "status": status_json(self.status),
        }


@dataclass(frozen=True)
class RebuildStep:
    """The derived index was rebuilt from the save; ``progress`` is every ``(done, total)``."""

    reason: str
    progress: tuple[tuple[int, int], ...]
    status: VectorMemoryStatus

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        return {
            "step": "rebuild",
            "reason": self.reason,
            "progress": [list(pair) for pair in self.progress],
            "status": status_json(self.status),
        }


Step = (
    EventStep
    | PhaseStep
    | QuestionStep
    | ModelChangeStep
    | RebuildStep
    | ForgetStep
    | ConsolidateStep
)
