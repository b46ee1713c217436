"""Fusion of the lexical and vector candidate lists into one ranking.

Three modes:

* ``RRF``: the reference's reciprocal-rank fusion, ``Σ 1/(k + rank)`` with k = 60 and
  equal weights. Rank-only, so a weak channel drags the fused list down as much as a strong
  one lifts it.
* ``WEIGHTED_RRF``: the same with per-channel weights.
* ``CONVEX``: a score-level convex combination ``w_v · vector + w_l · lexical`` of
  normalized scores: cosine similarity clipped to [0, 1], and the lexical score divided by
  the best lexical score of the query. A memory missing from a channel gets 0 there.

The default (``CONVEX``, vector weight 0.7) was chosen by measurement on real
question→answer data; see ``docs/retrieval.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from game_memory.errors import DerivedIndexError
from game_memory.model import GameMemory, ordinal_key

__all__ = ["FusedCandidate", "FusionMode", "FusionOptions", "Normalization", "fuse"]

Normalization = Literal["best_lexical", "best", "min_max"]


class FusionMode(StrEnum):
    """How two candidate lists are combined."""

    RRF = "rrf"
    WEIGHTED_RRF = "weighted_rrf"
    CONVEX = "convex"


class FusionOptions(BaseModel):
    """Fusion settings. Weights need not sum to one; only their ratio matters."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: FusionMode = FusionMode.CONVEX
    lexical_weight: Annotated[float, Field(ge=0.0, le=1_000.0)] = 0.3
    vector_weight: Annotated[float, Field(ge=0.0, le=1_000.0)] = 0.7
    rrf_k: Annotated[int, Field(ge=0, le=10_000)] = 60
    normalization: Normalization = "best_lexical"


@dataclass(frozen=True, slots=True)
class FusedCandidate:
    """A candidate after fusion, with the evidence from each channel."""

    memory: GameMemory
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    lexical_score: float | None
    vector_score: float | None


def fuse(
    lexical: Sequence[tuple[GameMemory, float]],
    vector: Sequence[tuple[GameMemory, float]],
    options: FusionOptions,
    limit: int,
) -> list[FusedCandidate]:
    """Fuse two ranked ``(memory, score)`` lists (best first) into at most ``limit``.

    Ties are broken by importance, then newer tick, then owner and memory id (ordinal).

    Raises:
        DerivedIndexError: one memory key arrives with two different contents.
    """
    rows: dict[tuple[str, str], _Row] = {}
    scales = (_scale(options, 0, lexical), _scale(options, 1, vector))
    for channel, candidates in ((0, lexical), (1, vector)):
        for rank, (memory, score) in enumerate(candidates):
            key = (memory.owner_id, memory.memory_id)
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Row(memory)
            elif row.memory is not memory and row.memory != memory:
                raise DerivedIndexError(
                    f"memory {memory.memory_id!r} reached fusion with two different contents"
                )
            if channel == 0:
                row.lexical_rank, row.lexical_score = rank + 1, score
            else:
                row.vector_rank, row.vector_score = rank + 1, score
            row.score += _contribution(options, channel, rank, score, scales[channel])
    fused = [
        FusedCandidate(
            r.memory, r.score, r.lexical_rank, r.vector_rank, r.lexical_score, r.vector_score
        )
        for r in rows.values()
    ]
    fused.sort(
        key=lambda c: (
            -c.score,
            -c.memory.importance,
            -c.memory.moment.tick,
            ordinal_key(c.memory.owner_id),
            ordinal_key(c.memory.memory_id),
        )
    )
    return fused[:limit]


@dataclass(slots=True)
class _Row:
    memory: GameMemory
    score: float = 0.0
    lexical_rank: int | None = None
    vector_rank: int | None = None
    lexical_score: float | None = None
    vector_score: float | None = None


def _scale(
    options: FusionOptions, channel: int, candidates: Sequence[tuple[GameMemory, float]]
) -> tuple[float, float]:
    """The (low, high) that maps a channel's scores onto [0, 1] for CONVEX."""
    if options.mode is not FusionMode.CONVEX or not candidates:
        return (0.0, 1.0)
    scores = [_clip(score) if channel == 1 else score for _, score in candidates]
    if options.normalization == "min_max":
        return (min(scores), max(scores))
    if options.normalization == "best" or channel == 0:
        return (0.0, max(scores))
    return (0.0, 1.0)


def _clip(score: float) -> float:
    return min(max(score, 0.0), 1.0)


def _contribution(
    options: FusionOptions, channel: int, rank: int, score: float, scale: tuple[float, float]
) -> float:
    weight = options.lexical_weight if channel == 0 else options.vector_weight
    if options.mode is FusionMode.RRF:
        return 1.0 / (options.rrf_k + rank + 1)
    if options.mode is FusionMode.WEIGHTED_RRF:
        return weight / (options.rrf_k + rank + 1)
    low, high = scale
    value = _clip(score) if channel == 1 else score
    if high <= low:
        return weight if high > 0.0 else 0.0
    return weight * (value - low) / (high - low)
