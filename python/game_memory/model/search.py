"""Search results and their stage metrics (no text, ids or content in the metrics)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import IntEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
)

from game_memory.model.fields import (
    MAXIMUM_SNAPSHOT_MEMORIES,
    MAXIMUM_STAGE_COUNT,
    MAXIMUM_STAGE_MILLISECONDS,
    MAXIMUM_STAGES,
    assemble_validated,
)
from game_memory.model.memory import GameMemory

__all__ = ["GameMemorySearchSnapshot", "GameMemorySearchStage", "GameMemorySearchStageKind"]


class GameMemorySearchStageKind(IntEnum):
    """The stages of one search, in the reference's ordinal order."""

    STORAGE_MIGRATION = 0
    AUTHORITATIVE_SNAPSHOT = 1
    LEXICAL_SEARCH = 2
    VECTOR_INDEX_READ = 3
    EMBEDDING = 4
    VECTOR_SCORING = 5
    RERANK = 6


class GameMemorySearchStage(BaseModel):
    """How long one stage of a search took and how much it touched: never text or ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: GameMemorySearchStageKind
    duration_ms: Annotated[float, Field(ge=0.0, le=MAXIMUM_STAGE_MILLISECONDS, allow_inf_nan=False)]
    scanned_count: Annotated[int, Field(ge=0, le=MAXIMUM_STAGE_COUNT)] = 0
    candidate_count: Annotated[int, Field(ge=0, le=MAXIMUM_STAGE_COUNT)] = 0
    reused: bool = False

    @classmethod
    def measured(
        cls,
        stage: GameMemorySearchStageKind,
        seconds: float,
        scanned: int = 0,
        candidates: int = 0,
        reused: bool = False,
    ) -> GameMemorySearchStage:
        """Build a stage from a duration in seconds, clamping every value into its bounds.

        Every field is clamped into its bounds here, so the model is built without a second
        validation (a recall builds several stages).
        """
        milliseconds = seconds * 1000.0
        if not math.isfinite(milliseconds):
            milliseconds = MAXIMUM_STAGE_MILLISECONDS if milliseconds > 0 else 0.0
        return assemble_validated(
            cls,
            {
                "stage": GameMemorySearchStageKind(stage),
                "duration_ms": float(min(max(milliseconds, 0.0), MAXIMUM_STAGE_MILLISECONDS)),
                "scanned_count": min(max(int(scanned), 0), MAXIMUM_STAGE_COUNT),
                "candidate_count": min(max(int(candidates), 0), MAXIMUM_STAGE_COUNT),
                "reused": bool(reused),
            },
        )

    def as_reused(self) -> GameMemorySearchStage:
        """This stage marked ``reused`` (a later stage worked on its result): what
        ``model_copy(update={"reused": True})`` gives, without its per-field bookkeeping."""
        return assemble_validated(type(self), {**self.__dict__, "reused": True})


def _as_tuple(value: Any) -> Any:
    """A sequence of memories as a tuple, so a validated snapshot stays hashable: before
    pydantic's check (which cannot rebuild a lazy sequence's type) and after it (which
    gives a list for a list, and for JSON). Anything else goes on to pydantic's check."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes | tuple):
        return tuple(value)
    return value


class GameMemorySearchSnapshot(BaseModel):
    """A search result: the ranked memories, the authoritative snapshot they came from, stages.

    ``authoritative_memories`` is the exact bounded session (or session and owner)
    partition the search read; every returned memory is one of them. It is a read-only
    sequence, not necessarily a tuple: a store hands out a lazy one (``store/lazy.py``:
    sorted, and read from the save, only when read), which equals, hashes as, serializes
    as and pickles to the tuple of its memories; a snapshot built by validation holds a
    tuple. Call ``tuple()`` on it for tuple operations (``+``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memories: Annotated[tuple[GameMemory, ...], Field(max_length=MAXIMUM_SNAPSHOT_MEMORIES)]
    authoritative_memories: Annotated[
        Sequence[GameMemory],
        BeforeValidator(_as_tuple),
        AfterValidator(_as_tuple),
        Field(max_length=MAXIMUM_SNAPSHOT_MEMORIES),
    ]
    stages: Annotated[tuple[GameMemorySearchStage, ...], Field(max_length=MAXIMUM_STAGES)]

    @field_serializer("memories", "authoritative_memories", mode="wrap")
    def _serialize_memories(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        # The store hands out lazy sequences (``store/lazy.py``: decoded or sorted only when
        # read) through ``model_construct``; serialized, they are the tuples they equal.
        return handler(tuple(value))

    @classmethod
    def assembled(
        cls,
        memories: tuple[GameMemory, ...],
        authoritative_memories: Sequence[GameMemory],
        stages: tuple[GameMemorySearchStage, ...],
    ) -> GameMemorySearchSnapshot:
        """Build a result from parts already within their bounds, without validation (as
        ``model_construct`` does): ``authoritative_memories`` may be a lazy sequence of the
        store (``store/lazy.py``), which serializes as the tuple it equals."""
        return assemble_validated(
            cls,
            {
                "memories": memories,
                "authoritative_memories": authoritative_memories,
                "stages": stages,
            },
        )

    def stage(self, kind: GameMemorySearchStageKind) -> GameMemorySearchStage | None:
        """Return the first stage of ``kind``, or ``None`` when the search had none."""
        return next((stage for stage in self.stages if stage.stage == kind), None)
