"""The game-aware reranker: relevance, importance and recency in *game* time, with diversity.

For fused candidates ``c_0 .. c_{n-1}`` (best first) and a query asked at ``at_or_before``::

    base(c) = w_rel · fused(c) / fused(c_0)            relevance, 1 for the best candidate
                                                       ("relative"; "absolute" reads the
                                                       fusion's own relevance instead)
            + w_imp · importance(c)                    0..1, set by the game
            + w_rec · 0.5 ** (age(c) / half_life)      age in ticks before at_or_before

Recency counts only when the query has ``at_or_before`` on the memory's timeline (and the
memory is not from its future); it never reads the wall clock. A greedy pass then picks,
round by round, the candidate maximizing ``base − w_div · overlap`` where ``overlap`` is the
most the candidate shares with any memory already picked (shared tags, same scope, same
kind), so that five near-identical memories do not crowd out a different one.

Default weights, and why (measured with ``benchmarks/retrieval.py``; see
``docs/retrieval.md``):

* relevance 1.0 leads: the question asked matters most. ``"relative"`` was chosen over
  ``"absolute"`` by ``benchmarks/crossval.py`` (equal worst and mean R@5 margins, better
  MRR: the NPC set's R@1 is 0.829 with it and 0.671 with ``"absolute"``), and it keeps the
  real model's promises (``benchmarks/reranker_promises.py``) where ``"absolute"`` lets a
  fresh but unrelated memory beat a clear lexical answer.
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
* supersession (penalty 0.1, similarity 0.40 standing 3 deviations above the candidates'
  pairs, the newer version inheriting the older one's relevance): an NPC asked about a
  belief it has updated answers with the update even without a ``belief_key``. On the
  belief-update set (``benchmarks/belief_updates.py``) the newer version comes first in
  88% of the questions asked after the update (115 of 130; 82% of 136 on a held-out set),
  against 35% without supersession; it costs the NPC set's R@1 0.87 → 0.83
  (memories taken for newer versions of others, three of 70 top answers) and no R@5 on
  any set. Looser tests reach more and cost more top answers elsewhere
  (``docs/retrieval.md``, "What a detector without a key can reach"); an explicit
  ``belief_key`` is exact. Only memories of the kinds in ``supersession_kinds`` (all but
  ``event``) can be outdated this way: a later memory on the same subject is not a new
  version of something that happened. The similarity went from 0.45 to 0.40 once events
  were spared: it gains 8 of 130 updates on the development set, nothing held out, and
  costs no R@1 or R@5 on any cross-validation set.

On sets without game time, with uniform importance, no tags and one scope and kind (the
FAQ and news sets) every term but relevance is the same for all candidates, so the
reranker returns the fusion's order exactly; the benchmark confirms it.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Sequence
from itertools import repeat
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_serializer

from game_memory.errors import InvalidArgumentError
from game_memory.model import GameMemoryKind, GameMemoryQuery
from game_memory.model.fields import StrictFloat, StrictInt
from game_memory.model.memory import Kind
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.versions import implicit_versions

__all__ = [
    "OUTDATABLE_KINDS",
    "GameAwareMemoryReranker",
    "GameAwareMemoryRerankerOptions",
    "greedy_order",
]

#: The kinds of memory a newer memory can implicitly outdate: every kind but ``event``.
#: What happened stays true ("Orla carved a figurehead for the Silver Eel" is not undone by
#: "Orla hurt her back"); what the NPC holds to be so can change ("the bridge is open").
OUTDATABLE_KINDS: frozenset[GameMemoryKind] = frozenset(GameMemoryKind) - {GameMemoryKind.EVENT}

_Weight = Annotated[StrictFloat, Field(ge=0.0, le=1_000.0, allow_inf_nan=False)]
_Unit = Annotated[StrictFloat, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class GameAwareMemoryRerankerOptions(BaseModel):
    """Weights of the game-aware reranker (see the module docstring).

    A number refuses a bool, and a count a float with a fraction: pydantic's
    ``ValidationError`` names the field, as for a value out of range.

    Attributes:
        relevance_weight, importance_weight, recency_weight: The three terms' weights.
        recency_half_life_ticks: Game ticks after which recency has halved.
        diversity_penalty: Subtracted per trait shared with a memory already picked.
        maximum_greedy_selections: Candidates ordered by the greedy pass (the rest follow).
        relevance: ``"relative"`` (default, chosen by cross-validation): its fused score
            divided by the best candidate's (the best is always 1; under the default
            ``"confidence"`` fusion two nearly equal candidates stay nearly equal, so
            recency and importance can reorder them); ``"absolute"``: its fusion
            relevance, a fraction of the best score the fusion could give, so a recall
            whose channels are unsure lets recency and importance weigh more.
        supersession_penalty: Subtracted from a memory when a newer memory of the same
            owner on the same timeline among the first ``supersession_candidates`` says
            nearly the same (similarity at least ``supersession_similarity``): the newer
            of two versions of one belief comes first even without a ``belief_key``.
        supersession_similarity: How alike two memories must be (cosine of their vectors,
            or the overlap of their words when either has no vector) to count as versions.
        supersession_candidates: How many of the best candidates are compared pairwise.
        supersession_standing: How far (in standard deviations) a pair's cosine must also
            stand above the mean cosine of all pairs among those candidates, 0..100 (0:
            the absolute similarity alone). A model that finds every text of a language
            alike (MiniLM on CJK: mean pairwise cosine ~0.48 there, ~0.2 in English) then
            does not make every memory a version of every other. Among p pairs a cosine
            can stand at most sqrt(p − 1) deviations out, so with fewer pairs than that
            needs (for 3.0: six candidates with vectors) the absolute similarity alone
            decides.
        supersession_inherits: The newer of two versions takes the older one's relevance
            when that is higher (a belief's update answers what the belief answered,
            though it shares few words with the question).
        supersession_kinds: The kinds whose memories a newer one can outdate this way
            (default :data:`OUTDATABLE_KINDS`: all but ``event``). An event is never taken
            for an older version of anything: a later memory on the same subject (the
            blacksmith's apprentice burned his hand) does not undo what happened (the
            blacksmith forged a sword for the captain), and without this the version
            test answered with the later memory in 5 of 6 such questions
            (``benchmarks/belief_updates.py``, sequels). Empty: no implicit versions.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    relevance_weight: _Weight = 1.0
    importance_weight: _Weight = 0.1
    recency_weight: _Weight = 0.2
    recency_half_life_ticks: Annotated[StrictFloat, Field(gt=0.0, le=1e15, allow_inf_nan=False)] = (
        1_440.0
    )
    diversity_penalty: _Weight = 0.05
    maximum_greedy_selections: Annotated[StrictInt, Field(ge=1, le=4_096)] = 512
    relevance: Literal["absolute", "relative"] = "relative"
    supersession_penalty: _Weight = 0.1
    supersession_similarity: _Unit = 0.40
    supersession_candidates: Annotated[StrictInt, Field(ge=2, le=512)] = 32
    supersession_standing: Annotated[StrictFloat, Field(ge=0.0, le=100.0, allow_inf_nan=False)] = (
        3.0
    )
    supersession_inherits: bool = True
    supersession_kinds: frozenset[Kind] = OUTDATABLE_KINDS

    @field_serializer("supersession_kinds")
    def _kinds_in_order(self, kinds: frozenset[GameMemoryKind]) -> list[str]:
        """The kinds in their declaration order (a set's order would vary by process)."""
        return [kind.value for kind in GameMemoryKind if kind in kinds]


class GameAwareMemoryReranker:
    """Rerank fused candidates on game time, importance and diversity.

    Deterministic; never reads the wall clock. Returns a permutation of its input.
    """

    def __init__(self, options: GameAwareMemoryRerankerOptions | None = None) -> None:
        """Raises: InvalidArgumentError: ``options`` is not a ``GameAwareMemoryRerankerOptions``."""
        if options is not None and not isinstance(options, GameAwareMemoryRerankerOptions):
            raise InvalidArgumentError(
                "the reranker takes GameAwareMemoryRerankerOptions (its weights) or None, "
                f"not {type(options).__name__}"
            )
        self.options = options or GameAwareMemoryRerankerOptions()

    def recency(self, query: GameMemoryQuery, candidate: FusedCandidate) -> float:
        """``0.5 ** (age / half_life)`` in game ticks, or 0 when game time does not apply."""
        at = query.at_or_before
        moment = candidate.memory.moment
        if at is None or at.timeline_id != moment.timeline_id or moment.tick > at.tick:
            return 0.0
        return math.pow(0.5, (at.tick - moment.tick) / self.options.recency_half_life_ticks)

    def relevance(self, candidate: FusedCandidate, best: float) -> float:
        """The relevance term's input in [0, 1] (see ``GameAwareMemoryRerankerOptions``)."""
        if self.options.relevance == "absolute":
            return candidate.relevance
        return candidate.score / best if best > 0 else 0.0

    def rank(
        self, query: GameMemoryQuery, candidates: Sequence[FusedCandidate]
    ) -> list[FusedCandidate]:
        """Order ``candidates`` (given best first by fusion) for ``query``.

        Each memory's fields (and its moment's) are read once, from its instance dictionary
        (see :data:`game_memory.recall.versions.Fields`), for every term and the search for
        versions. The terms are :meth:`relevance` and :meth:`recency`, computed here in one
        pass each unless a subclass or the instance replaces either method (then it is
        called per candidate, as the pass would).
        """
        if not candidates:
            return []
        options = self.options
        count = len(candidates)
        best = candidates[0].score
        fields = list(map(_fields, map(_memory, candidates)))
        moments = list(map(_fields, map(_moment, fields)))
        ticks = list(map(_tick, moments))
        timelines = list(map(_timeline, moments))
        relevance = self._relevance_column(candidates, best)
        lowered = [0.0] * count
        first = options.supersession_candidates
        if (options.supersession_penalty > 0 or options.supersession_inherits) and _may_be_outdated(
            fields[:first], options.supersession_kinds
        ):
            versions = implicit_versions(
                fields[:first],
                ticks[:first],
                timelines[:first],
                list(map(_vector, candidates[:first])),
                options.supersession_similarity,
                options.supersession_standing,
            )
            if versions:
                versions = _outdatable(versions, fields, options.supersession_kinds)
            for older, newer in versions:
                # The newer version answers whatever the older one answered: it takes the
                # older one's relevance ("Who owns the inn?" finds "Mira owns the inn" by
                # its words; "Mira sold her tavern to Bertram", its newer version, answers).
                if options.supersession_inherits:
                    relevance[newer] = max(relevance[newer], relevance[older])
                lowered[older] = options.supersession_penalty
        recency = self._recency_column(query, candidates, ticks, timelines)
        # Every base value is the float of the per-candidate expression, its IEEE operations
        # in this order (as the float64 columns computed it before):
        #   w_rel · relevance + w_imp · importance + w_rec · recency − penalty (or − 0.0).
        relevance_weight = options.relevance_weight
        importance_weight = options.importance_weight
        recency_weight = options.recency_weight
        base = [
            relevance_weight * term
            + importance_weight * importance
            + recency_weight * recent
            - down
            for term, importance, recent, down in zip(
                relevance, map(_importance, fields), recency, lowered, strict=True
            )
        ]
        rounds = min(count, options.maximum_greedy_selections)
        marks = list(map(_traits, fields))  # (scope, kind, tags as given)
        if marks.count(marks[0]) == count:
            # One trait set (an NPC's memories of one scope and kind): equal tag tuples are
            # equal tag sets, so greedy_order would find one group.
            scope, kind, tags = marks[0]
            trait = (scope, kind, frozenset(tags))
            lowest = options.diversity_penalty * _shared(trait, trait)
            chosen = _one_group_order(base, lowest, rounds)
        else:
            traits = [(scope, kind, frozenset(tags)) for scope, kind, tags in marks]
            chosen = greedy_order(traits, base, options.diversity_penalty, rounds)
        return [candidates[i] for i in chosen]

    def _relevance_column(self, candidates: Sequence[FusedCandidate], best: float) -> list[float]:
        """:meth:`relevance` of every candidate, as floats (as a float64 column held them)."""
        if getattr(self.relevance, "__func__", None) is not _RELEVANCE:
            return list(map(float, map(self.relevance, candidates, repeat(best))))
        if self.options.relevance == "absolute":
            return list(map(float, map(_relevance, candidates)))
        if best > 0:
            return list(map(float, map(operator.truediv, map(_score, candidates), repeat(best))))
        return [0.0] * len(candidates)

    def _recency_column(
        self,
        query: GameMemoryQuery,
        candidates: Sequence[FusedCandidate],
        ticks: list[int],
        timelines: list[str],
    ) -> list[float]:
        """:meth:`recency` of every candidate (whose moments are ``ticks`` on ``timelines``)."""
        if getattr(self.recency, "__func__", None) is not _RECENCY:
            return list(map(float, map(self.recency, repeat(query), candidates)))
        at = query.at_or_before
        if at is None:
            return [0.0] * len(candidates)
        at_timeline, at_tick = at.timeline_id, at.tick
        half_life = self.options.recency_half_life_ticks
        return [
            0.0
            if at_timeline != timeline or tick > at_tick
            else math.pow(0.5, (at_tick - tick) / half_life)
            for tick, timeline in zip(ticks, timelines, strict=True)
        ]


_RELEVANCE = GameAwareMemoryReranker.relevance
_RECENCY = GameAwareMemoryReranker.recency

Traits = tuple[str, object, frozenset[str]]

_memory = operator.attrgetter("memory")
_vector = operator.attrgetter("vector")
_score = operator.attrgetter("score")
_relevance = operator.attrgetter("relevance")
_fields = operator.attrgetter("__dict__")
_moment = operator.itemgetter("moment")
_importance = operator.itemgetter("importance")
_tick = operator.itemgetter("tick")
_timeline = operator.itemgetter("timeline_id")
_traits = operator.itemgetter("scope", "kind", "tags")
_second = operator.itemgetter(1)


#: At most this many distinct trait sets: the grouped pass; more: the lazy one.
_FEW_GROUPS = 8


def greedy_order(
    traits: Sequence[Traits], base: Sequence[float], penalty: float, rounds: int
) -> list[int]:
    """The diversity pass: indexes in pick order (``rounds`` greedy picks, then the rest).

    Each round picks the index maximizing ``(base[i] − penalty · overlap[i], −i)``, where
    ``overlap[i]`` is the most traits (shared tags, same scope, same kind) that ``i``
    shares with an index already picked; the unpicked follow in index order. ``base``
    holds finite values (bounded weights times terms in [0, 1]) and ``penalty ≥ 0``.

    Exact ways by how many distinct trait sets the candidates have: one (the common case:
    one scope and kind, the same tags), :func:`_one_group_order`; few, :func:`_grouped_order`;
    more, :func:`_lazy_order`.
    """
    if traits and traits.count(traits[0]) == len(traits):
        # One trait set (the common case).
        return _one_group_order(base, penalty * _shared(traits[0], traits[0]), rounds)
    grouped: dict[Traits, list[int]] = {}
    for index, trait in enumerate(traits):
        grouped.setdefault(trait, []).append(index)
    if len(grouped) <= _FEW_GROUPS:
        return _grouped_order(grouped, base, penalty, rounds)
    return _lazy_order(traits, base, penalty, rounds)


def _shared(a: Traits, b: Traits) -> int:
    """How many traits two candidates share: tags, plus one for the scope, one for the kind."""
    return len(a[2] & b[2]) + (a[0] == b[0]) + (a[1] == b[1])


def _one_group_order(base: Sequence[float], lowered: float, rounds: int) -> list[int]:
    """The picks of :func:`_grouped_order` when every candidate has the same traits, and
    ``lowered`` is ``penalty`` times what each shares with itself.

    The first round picks the highest ``base`` (the lowest index among equal values:
    ``max`` keeps the first of equal values and ``index`` finds it), as that pass does from
    its group ordered by ``(−base, index)``; from then on every candidate's overlap is
    final, ``lowered``, so the rounds left pick in the order of
    ``(−(base − lowered), index)`` (:func:`_finish_group`) and the unpicked follow in index
    order. One sort instead of two, and no groups built.
    """
    count = len(base)
    if count == 0 or rounds < 1:
        return list(range(count))
    first = base.index(max(base))
    rest = [*range(first), *range(first + 1, count)]
    if rounds == 1:
        return [first, *rest]
    # A stable sort of ascending indexes by −(base − lowered) alone keeps equal values in
    # index order: the order of (−(base − lowered), index), with float keys compared
    # directly instead of tuples.
    keys = list(map(operator.neg, map(operator.sub, base, repeat(lowered))))
    rest.sort(key=keys.__getitem__)
    picked = rounds - 1
    return [first, *rest[:picked], *sorted(rest[picked:])]


def _grouped_order(
    grouped: dict[Traits, list[int]], base: Sequence[float], penalty: float, rounds: int
) -> list[int]:
    """Candidates with equal traits always have equal overlaps, so they are kept in groups
    ordered by ``(−base, index)`` and a round compares only each group's best: the same
    picks (ties included: within a group the best is the lowest index among those whose
    ``base − penalty · overlap`` equals the top one, as float subtraction may merge
    values) in O(rounds × groups).

    A group's overlap changes only when a group is picked from for the first time, so it is
    updated then only; and once the one group left with candidates has been picked from,
    its overlap is final and so is every value in it: the rounds left pick its candidates
    in the order of ``(−(base − lowered), index)``, one sort (with one group, the common
    case, every round after the first).
    """
    kinds = list(grouped)
    members = [_by_value(grouped[trait], base, 0.0) for trait in kinds]
    overlap = [0] * len(kinds)
    lowered = [penalty * 0] * len(kinds)
    picked = [False] * len(kinds)
    shared = [[_shared(a, b) for b in kinds] for a in kinds]
    left = sum(1 for indexes in members if indexes)
    chosen: list[int] = []
    while len(chosen) < rounds:
        if left == 1:
            group = next(number for number, indexes in enumerate(members) if indexes)
            if picked[group]:
                _finish_group(members[group], base, lowered[group], rounds - len(chosen), chosen)
                break
        best: tuple[float, int] | None = None
        best_group = best_at = 0
        for group, indexes in enumerate(members):
            if not indexes:
                continue
            down = lowered[group]
            top = base[indexes[0]] - down
            pick, at = indexes[0], 0
            for position in range(1, len(indexes)):
                if base[indexes[position]] - down != top:
                    break
                if indexes[position] < pick:
                    pick, at = indexes[position], position
            if best is None or (top, -pick) > best:
                best, best_group, best_at = (top, -pick), group, at
        if best is None:
            break
        indexes = members[best_group]
        chosen.append(indexes.pop(best_at))
        left -= not indexes
        if not picked[best_group]:
            picked[best_group] = True
            overlap = [
                max(known, count) for known, count in zip(overlap, shared[best_group], strict=True)
            ]
            lowered = [penalty * known for known in overlap]
    chosen.extend(sorted(index for indexes in members for index in indexes))
    return chosen


def _finish_group(
    indexes: list[int], base: Sequence[float], lowered: float, rounds: int, chosen: list[int]
) -> None:
    """Pick ``rounds`` of one group's ``indexes`` (removed from it) whose values are final:
    highest ``base − lowered`` first, the lowest index among equal values, as the rounds of
    :func:`_grouped_order` would pick them one by one."""
    indexes[:] = _by_value(indexes, base, lowered)
    chosen.extend(indexes[:rounds])
    del indexes[:rounds]


def _by_value(indexes: list[int], base: Sequence[float], lowered: float) -> list[int]:
    """``sorted(indexes, key=lambda i: (-(base[i] - lowered), i))``, the keys built by
    C-level maps. With ``lowered`` 0.0 that is the order of ``(−base[i], i)``: ``x − 0.0``
    is ``x`` (and ``−0.0 − 0.0`` is ``−0.0``)."""
    values = map(operator.sub, map(base.__getitem__, indexes), repeat(lowered))
    return list(map(_second, sorted(zip(map(operator.neg, values), indexes, strict=True))))


def _lazy_order(
    traits: Sequence[Traits], base: Sequence[float], penalty: float, rounds: int
) -> list[int]:
    """Lazily, instead of every candidate against every pick: overlaps only grow, so a
    candidate's value only falls, and the value it had when it was last computed is an
    upper bound. A heap holds ``(−value, index)`` as last computed; the top is recomputed
    and taken if it still ranks first, else pushed back with its current value: the picks
    of the plain loop (the same float operations on the same values, the same tie rule),
    mostly in O(log n) per round."""
    count = len(traits)
    shared = _shared_traits(traits)
    overlap = np.zeros(count, np.int64)
    heap = [(-value, index) for index, value in enumerate(base)]
    heapq.heapify(heap)
    chosen: list[int] = []
    while len(chosen) < rounds and heap:
        _, index = heapq.heappop(heap)
        current = (-(base[index] - penalty * int(overlap[index])), index)
        if heap and current > heap[0]:
            heapq.heappush(heap, current)  # fell behind since it was last computed
            continue
        chosen.append(index)
        np.maximum(overlap, shared[index], out=overlap)
    chosen.extend(sorted(index for _, index in heap))
    return chosen


def _shared_traits(traits: Sequence[Traits]) -> npt.NDArray[np.int64]:
    """For every pair: shared tags (as sets) + same scope + same kind, in one numpy pass."""
    count = len(traits)
    scopes: dict[str, int] = {}
    kinds: dict[object, int] = {}
    tags: dict[str, int] = {}
    scope_codes = np.array([scopes.setdefault(t[0], len(scopes)) for t in traits], np.int64)
    kind_codes = np.array([kinds.setdefault(t[1], len(kinds)) for t in traits], np.int64)
    shared: npt.NDArray[np.int64] = (scope_codes[:, None] == scope_codes[None, :]).astype(np.int64)
    shared += kind_codes[:, None] == kind_codes[None, :]
    holders = [(i, tags.setdefault(tag, len(tags))) for i, t in enumerate(traits) for tag in t[2]]
    if holders:
        incidence = np.zeros((count, len(tags)), np.int64)
        for index, tag in holders:
            incidence[index, tag] = 1
        shared += incidence @ incidence.T
    return shared


def _versions(
    candidates: Sequence[FusedCandidate], options: GameAwareMemoryRerankerOptions
) -> list[tuple[int, int]]:
    """``(older, newer)`` index pairs among the first ``supersession_candidates`` that are
    versions of one belief (:func:`game_memory.recall.versions.implicit_versions`), as
    :meth:`GameAwareMemoryReranker.rank` finds them, from the candidates alone (``rank``
    reads the same columns once for all its terms). The equivalence tests call it."""
    first = candidates[: options.supersession_candidates]
    fields = list(map(_fields, map(_memory, first)))
    if not _may_be_outdated(fields, options.supersession_kinds):
        return []
    moments = list(map(_fields, map(_moment, fields)))
    found = implicit_versions(
        fields,
        list(map(_tick, moments)),
        list(map(_timeline, moments)),
        list(map(_vector, first)),
        options.supersession_similarity,
        options.supersession_standing,
    )
    return _outdatable(found, fields, options.supersession_kinds) if found else found


def _may_be_outdated(fields: Sequence[dict[str, object]], kinds: frozenset[GameMemoryKind]) -> bool:
    """Whether any of these memories is of a kind a newer version can outdate: the older
    memory of every pair :func:`_outdatable` keeps is. When none is (an NPC's memories of
    what happened, ``event``, the bridge's default kind), no pair the search for versions
    could find would be kept, so the search is skipped: the same ranking, without the
    pairwise similarities of 32 candidates (a warm 10k recall of the NPC workload, whose
    memories are events: 1.52 → 1.28 ms, its RERANK stage 0.28 → 0.06 ms)."""
    return not kinds.isdisjoint(map(_kind, fields))


_kind = operator.itemgetter("kind")


def _outdatable(
    versions: list[tuple[int, int]],
    fields: Sequence[dict[str, object]],
    kinds: frozenset[GameMemoryKind],
) -> list[tuple[int, int]]:
    """The pairs of ``versions`` whose older memory is of one of ``kinds`` (order kept)."""
    if len(kinds) == len(GameMemoryKind):
        return versions
    return [pair for pair in versions if fields[pair[0]]["kind"] in kinds]
