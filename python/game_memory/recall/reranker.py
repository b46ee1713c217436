"""The game-aware reranker: relevance, importance and recency in *game* time, with diversity.

For fused candidates ``c_0 .. c_{n-1}`` (best first) and a query asked at ``at_or_before``::

    base(c) = w_rel · fused(c) / fused(c_0)            relevance, 1 for the best candidate
            + w_imp · importance(c)                    0..1, set by the game
            + w_rec · 0.5 ** (age(c) / half_life)      age in ticks before at_or_before

Recency counts only when the query has ``at_or_before`` on the memory's timeline (and the
memory is not from its future); it never reads the wall clock. A greedy pass then picks,
round by round, the candidate maximizing ``base − w_div · overlap`` where ``overlap`` is the
most the candidate shares with any memory already picked (shared tags, same scope, same
kind), so that five near-identical memories do not crowd out a different one.

Default weights, and why (measured with ``benchmarks/retrieval.py``; see
``docs/retrieval.md``):

* relevance 1.0 leads: the question asked matters most. Under the default ``"floor"``
  fusion the relative relevance spans most of [0, 1] across the candidates.
* importance 0.1 breaks near-ties toward what the game marked as significant. At 0.2 it
  cost one R@5 answer on the NPC set without game time (importance 0.2–0.9 there) once the
  diversity term was off, and 4 of 70 top-1 answers together with recency 0.3 when asked
  at a game moment; at 0.1 R@1 and R@5 equal those without a reranker on both.
* recency 0.2 with a half-life of 1,440 ticks (one in-game day when ticks are minutes):
  a memory from just now gains 0.2, one from yesterday 0.1, so a fresh memory overtakes a
  slightly more relevant one from days ago, as people remember, without overturning a
  clear answer. The NPC questions do not favour recent events, so there recency can only
  cost; at 0.2 (with importance 0.1) it cost nothing in R@1 or R@5, at 0.3 two of 70
  top-1 answers (four with importance 0.2).
* diversity 0.05 per shared trait only separates near-duplicates (it kept R@5 at 1.0
  where importance 0.2 alone dropped it).

On sets without game time, with uniform importance, no tags and one scope and kind (the
FAQ and news sets) every term but relevance is the same for all candidates, so the
reranker returns the fusion's order exactly; the benchmark confirms it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from game_memory.model import GameMemoryQuery
from game_memory.recall.fusion import FusedCandidate

__all__ = ["GameAwareMemoryReranker", "GameAwareMemoryRerankerOptions"]

_Weight = Annotated[float, Field(ge=0.0, le=1_000.0, allow_inf_nan=False)]


class GameAwareMemoryRerankerOptions(BaseModel):
    """Weights of the game-aware reranker (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    relevance_weight: _Weight = 1.0
    importance_weight: _Weight = 0.1
    recency_weight: _Weight = 0.2
    recency_half_life_ticks: Annotated[float, Field(gt=0.0, le=1e15, allow_inf_nan=False)] = 1_440.0
    diversity_penalty: _Weight = 0.05
    maximum_greedy_selections: Annotated[int, Field(ge=1, le=4_096)] = 512


class GameAwareMemoryReranker:
    """Rerank fused candidates on game time, importance and diversity.

    Deterministic; never reads the wall clock. Returns a permutation of its input.
    """

    def __init__(self, options: GameAwareMemoryRerankerOptions | None = None) -> None:
        self.options = options or GameAwareMemoryRerankerOptions()

    def recency(self, query: GameMemoryQuery, candidate: FusedCandidate) -> float:
        """``0.5 ** (age / half_life)`` in game ticks, or 0 when game time does not apply."""
        at = query.at_or_before
        moment = candidate.memory.moment
        if at is None or at.timeline_id != moment.timeline_id or moment.tick > at.tick:
            return 0.0
        return math.pow(0.5, (at.tick - moment.tick) / self.options.recency_half_life_ticks)

    def rank(
        self, query: GameMemoryQuery, candidates: Sequence[FusedCandidate]
    ) -> list[FusedCandidate]:
        """Order ``candidates`` (given best first by fusion) for ``query``."""
        if not candidates:
            return []
        options = self.options
        best = candidates[0].score
        base = [
            options.relevance_weight * (c.score / best if best > 0 else 0.0)
            + options.importance_weight * c.memory.importance
            + options.recency_weight * self.recency(query, c)
            for c in candidates
        ]
        remaining = list(range(len(candidates)))
        overlap = [0] * len(candidates)
        chosen: list[int] = []
        for _ in range(min(len(candidates), options.maximum_greedy_selections)):
            winner = max(
                remaining,
                key=lambda i: (base[i] - options.diversity_penalty * overlap[i], -i),
            )
            remaining.remove(winner)
            chosen.append(winner)
            picked = candidates[winner].memory
            picked_tags = set(picked.tags)
            for i in remaining:
                memory = candidates[i].memory
                shared = len(picked_tags.intersection(memory.tags))
                shared += (memory.scope == picked.scope) + (memory.kind == picked.kind)
                overlap[i] = max(overlap[i], shared)
        chosen.extend(remaining)
        return [candidates[i] for i in chosen]
