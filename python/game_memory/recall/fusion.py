"""Fusion of the lexical and vector candidate lists into one ranking.

Three modes:

* ``RRF``: the reference's reciprocal-rank fusion, ``Σ 1/(k + rank)`` with k = 60 and
  equal weights. Rank-only, so a weak channel drags the fused list down as much as a strong
  one lifts it.
* ``WEIGHTED_RRF``: the same with per-channel weights, ``Σ w_c/(k + rank_c)``.
* ``CONVEX``: a score-level combination ``w_v · v(m) + w_l · l(m)`` of normalized scores;
  a memory missing from a channel's candidates gets 0 there.

``CONVEX`` normalizes each channel in one of four ways:

* ``"floor"`` (the earlier default): ``(s − floor) / max(spread, minimum_spread)``, where
  ``floor`` and ``spread`` are the lowest score and ``highest − lowest`` of that channel's
  candidates, and cosines are clipped to [0, 1] first. The worst candidate scores 0, like a
  memory the channel did not return at all; a lone candidate (no spread) is measured from 0.
  The minimum spread keeps a channel that barely separates its candidates from being
  stretched to full weight: with ``vector_minimum_spread`` 1.0 (the whole cosine range) a
  flat cosine list, as MiniLM gives for Portuguese text, adds little;
  ``lexical_minimum_spread`` 8.0 (BM25 units) does the same for a query whose words match
  only weakly (common words, small snapshots). With both minimum spreads 0 this is plain
  min–max normalization.
* ``"best_lexical"``: the cosine as is (clipped to [0, 1]) and the lexical score divided by
  the query's best lexical score.
* ``"absolute"``: the cosine as is (clipped to [0, 1]) and the lexical score divided by the
  larger of the query's best lexical score and ``lexical_scale`` (BM25 units). No channel's
  score depends on how many candidates there are: a lone or last candidate keeps a score
  that reflects its own similarity (an NPC with five memories is the common case), and a
  weak lexical match is not stretched to full weight.
* ``"confidence"`` (the default): min–max within each channel, weighted by how sure the
  channel is of its answer in this recall.

  - *The floor.* A channel's floor is its lowest candidate's score, lowered (never below
    the natural zero: cosine 0, BM25 0) until it lies at least ``lexical_minimum_gap`` or
    ``vector_minimum_gap`` below the channel's best, so a candidate scores 0 only when it is
    that far below the best: two nearly equal candidates stay nearly equal. With fewer than
    ``floor_candidates`` candidates the lowest says little about where irrelevance lies, so
    the floor moves toward the natural zero in proportion (``(n − 1)/(floor_candidates −
    1)`` of it): the last of an NPC's five memories keeps a score that reflects its own
    similarity. A lone candidate is scored as under ``"absolute"``.
  - *The confidence.* The channel's weight is scaled by its confidence: lexical
    ``best / (best + lexical_confidence)`` (a query whose words match weakly, as short chat
    questions match other questions' common words, says little), times
    ``min(1, contrast / lexical_contrast)`` where the contrast ``(best − mean) / mean`` of
    the BM25 scores is how far the best match stands above the others (a flat list, every
    candidate matching only "are you a" of "are you a spy", says little however high its
    BM25; with fewer than three candidates, or ``lexical_contrast`` 0, the factor is 1);
    vector, by default
    (``vector_confidence_by="contrast"``), ``min(1, contrast / vector_confidence)`` where
    the contrast ``(best − mean) / mean`` is how far the best cosine stands above the
    candidates' mean cosine, relative to it. A model that finds every text of a language
    alike (MiniLM on Portuguese or CJK: mean 0.6–0.7, best ~0.1 above) has a contrast near
    0.2 and counts a fifth of its weight; on text it knows (mean 0.2–0.3) the best answer
    stands out by as much again, and the channel counts fully. ``"standing"`` (the
    previous default) measures the best in standard deviations above the mean instead,
    ``min(1, z / min(vector_confidence, sqrt(n − 1)))``; it cannot tell a flat list from a
    clear one when the flat list is evenly spread (it cost `chat_en` 1.3 points of R@5).
    With fewer than three candidates there is no spread to measure and the confidence is 1.

  Min–max keeps what works across data sets (a model whose cosines all lie in 0.7–0.9
  still separates its candidates); the confidence keeps a channel that knows nothing from
  outvoting one that does, which is what the fixed minimum spreads of ``"floor"`` did only
  on the sets they were tuned on.

Every candidate also gets a ``relevance`` in [0, 1]: its fused score divided by the highest
score the mode can give with the channels that returned candidates in this recall (the sum
of their weights for ``CONVEX``, ``Σ w/(k + 1)`` for the RRF modes). The reranker weighs
that relevance against recency and importance on one scale, whatever the mode and however
many candidates there are.

The default (``CONVEX``, ``"confidence"`` with the vector contrast, vector weight 0.6 and
lexical 0.4, lexical confidence 24 and lexical contrast 1.0, vector confidence 1.0, minimum
gaps 4.0 and 0.2, floor candidates 16) was chosen by leave-one-set-out cross-validation
over nine development sets (``benchmarks/crossval.py``); ``docs/retrieval.md`` reports
every rotation's held-out figure.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import repeat
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from game_memory.errors import DerivedIndexError
from game_memory.model import GameMemory, ordinal_key
from game_memory.model.fields import StrictFloat, StrictInt

__all__ = ["FusedCandidate", "FusionMode", "FusionNormalization", "FusionOptions", "fuse"]

FusionNormalization = Literal["floor", "best_lexical", "absolute", "confidence"]
"""How ``CONVEX`` puts the two channels on one scale (see the module docstring)."""

_Weight = Annotated[StrictFloat, Field(ge=0.0, le=1_000.0, allow_inf_nan=False)]
_LexicalSpread = Annotated[StrictFloat, Field(ge=0.0, le=1_000_000.0, allow_inf_nan=False)]
_CosineSpread = Annotated[StrictFloat, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
_Confidence = Annotated[StrictFloat, Field(gt=0.0, le=1_000_000.0, allow_inf_nan=False)]


class FusionMode(StrEnum):
    """How two candidate lists are combined."""

    RRF = "rrf"
    WEIGHTED_RRF = "weighted_rrf"
    CONVEX = "convex"


class FusionOptions(BaseModel):
    """Fusion settings (defaults measured; see the module docstring).

    A number refuses a bool, and a count (``rrf_k``, ``floor_candidates``) a float with a
    fraction: pydantic's ``ValidationError`` names the field, as for a value out of range.

    Attributes:
        mode: ``CONVEX`` (default), ``WEIGHTED_RRF`` or ``RRF`` (equal weights, ignores the
            weights below).
        lexical_weight: Weight of the lexical channel, 0..1,000.
        vector_weight: Weight of the vector channel, 0..1,000. Only the ratio of the two
            weights matters.
        rrf_k: The rank offset ``k`` of both RRF modes, 0..10,000.
        normalization: How ``CONVEX`` scales each channel: ``"floor"``,
            ``"best_lexical"``, ``"absolute"`` or ``"confidence"``.
        lexical_minimum_spread: ``"floor"``: the smallest BM25 spread (best − worst
            candidate) stretched to the full lexical weight, 0..1,000,000.
        vector_minimum_spread: ``"floor"``: the same for cosine similarity, 0..1.
        lexical_scale: ``"absolute"``: the BM25 score that counts as full lexical evidence
            (a query's best lexical score above it divides instead), 0..1,000,000.
        lexical_minimum_gap: ``"confidence"``: the least BM25 distance between the best
            lexical candidate and the score that counts as 0, 0..1,000,000.
        vector_minimum_gap: ``"confidence"``: the same for cosine similarity, 0..1.
        lexical_confidence: ``"confidence"``: the best BM25 score at which the lexical
            channel counts half its weight, above 0.
        lexical_contrast: ``"confidence"``: the contrast ``(best − mean) / mean`` of the
            lexical candidates' scores at which the lexical channel counts fully, 0..1,000;
            below it the channel counts in proportion (a flat list, every candidate
            matching only the query's common words, counts little). 0 turns it off.
        vector_confidence: ``"confidence"``: what the vector channel needs to count
            fully, above 0: the contrast ``(best − mean) / mean`` of its cosines under
            ``vector_confidence_by="contrast"``, the standard deviations the best stands
            above the mean (at most sqrt(n − 1) among n candidates) under ``"standing"``.
        vector_confidence_by: ``"contrast"`` (default) or ``"standing"``: how the vector
            channel's confidence is measured (see the module docstring).
        floor_candidates: ``"confidence"``: with fewer candidates than this (1..4,096) a
            channel's floor moves toward the natural zero; 1 turns that off.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: FusionMode = FusionMode.CONVEX
    lexical_weight: _Weight = 0.4
    vector_weight: _Weight = 0.6
    rrf_k: Annotated[StrictInt, Field(ge=0, le=10_000)] = 60
    normalization: FusionNormalization = "confidence"
    lexical_minimum_spread: _LexicalSpread = 8.0
    vector_minimum_spread: _CosineSpread = 1.0
    lexical_scale: Annotated[StrictFloat, Field(gt=0.0, le=1_000_000.0, allow_inf_nan=False)] = 8.0
    lexical_minimum_gap: _LexicalSpread = 4.0
    vector_minimum_gap: _CosineSpread = 0.2
    lexical_confidence: _Confidence = 24.0
    lexical_contrast: Annotated[StrictFloat, Field(ge=0.0, le=1_000.0, allow_inf_nan=False)] = 1.0
    vector_confidence: _Confidence = 1.0
    vector_confidence_by: Literal["contrast", "standing"] = "contrast"
    floor_candidates: Annotated[StrictInt, Field(ge=1, le=4_096)] = 16


@dataclass(frozen=True)
class FusedCandidate:
    """A candidate after fusion, with the evidence from each channel.

    ``relevance`` is ``score`` as a fraction of the best score the fusion could give in this
    recall (see the module docstring); ``vector`` is the memory's unit vector when the
    vector channel returned it (the reranker compares memories with it), else ``None``.

    Its fields live in an instance dictionary (no ``__slots__``) so that :func:`fuse` can
    build its candidates by :func:`_candidate`, a third of the cost of the frozen
    ``__init__`` (which sets each field through ``object.__setattr__``).
    """

    memory: GameMemory
    score: float
    lexical_rank: int | None
    vector_rank: int | None
    lexical_score: float | None
    vector_score: float | None
    relevance: float = 0.0
    vector: npt.NDArray[np.float32] | None = field(default=None, compare=False, repr=False)


def fuse(
    lexical: Sequence[tuple[GameMemory, float]],
    vector: Sequence[tuple[GameMemory, float]],
    options: FusionOptions,
    limit: int,
    vectors: Sequence[npt.NDArray[np.float32]] | None = None,
) -> list[FusedCandidate]:
    """Fuse two ranked ``(memory, score)`` lists (best first) into at most ``limit``.

    ``vectors``, when given, holds the unit vector of each ``vector`` candidate (parallel).
    Ties are broken by importance, then newer tick, then owner and memory id (ordinal).

    On a recall's hot path (32 candidates a channel): each channel's contributions are
    computed in one pass, the candidates are merged into plain lists (:data:`_Row`), ordered
    before they become candidates, and only the ``limit`` kept become ``FusedCandidate``
    (a frozen dataclass, the costliest object to build here).

    Raises:
        DerivedIndexError: one memory key arrives with two different contents.
    """
    rows: dict[tuple[str, str], _Row] = {}
    _merge(rows, lexical, _contributions(options, 0, lexical), 0, None)
    _merge(rows, vector, _contributions(options, 1, vector), 1, vectors)
    best = _best_possible(options, bool(lexical), bool(vector))
    kept = _in_order(list(rows.values()), limit)
    count = len(kept)
    # Each row's relevance, min(max(score / best, 0.0), 1.0) (0.0 when nothing could score),
    # and its candidate built without FusedCandidate.__init__ (which sets each field
    # through object.__setattr__): the same fields in the same instance dictionary
    # (tests/recall/test_fuse_equivalence.py). Both by C-level maps, no step per row.
    if best > 0:
        relevance = map(max, map(operator.truediv, map(_score, kept), repeat(best)), repeat(0.0))
        _consume(map(operator.setitem, kept, repeat(6), map(min, relevance, repeat(1.0))))
    candidates: list[FusedCandidate] = list(map(_new, repeat(FusedCandidate, count)))
    fields = map(dict, map(zip, repeat(_FIELDS), kept))
    _consume(map(_set_attribute, candidates, repeat("__dict__"), fields))
    return candidates


def _consume(calls: Iterable[object]) -> None:
    """Run a lazy ``map`` of calls made for their effect (the itertools ``consume`` recipe)."""
    collections.deque(calls, maxlen=0)


_new = object.__new__
_set_attribute = object.__setattr__

#: A candidate while it is fused, as a plain list (cheaper to build and update than an
#: object), its items in the order of :class:`FusedCandidate`'s fields (:data:`_FIELDS`):
#: ``[memory, score, lexical_rank, vector_rank, lexical_score, vector_score, relevance,
#: vector]``; the score starts at 0.0 and each channel adds its contribution; the relevance
#: is set once the candidates are ordered.
_Row = list[Any]
_FIELDS = (
    "memory",
    "score",
    "lexical_rank",
    "vector_rank",
    "lexical_score",
    "vector_score",
    "relevance",
    "vector",
)

_key = operator.attrgetter("owner_id", "memory_id")
_first = operator.itemgetter(0)
_score = operator.itemgetter(1)


def _merge(
    rows: dict[tuple[str, str], _Row],
    candidates: Sequence[tuple[GameMemory, float]],
    added: Sequence[float],
    channel: int,
    vectors: Sequence[npt.NDArray[np.float32]] | None,
) -> None:
    """Merge one channel's candidates (``channel`` 0 lexical, 1 vector) into ``rows``: each
    gets its row (made when new) and, by its rank (from 0), its contribution ``added``,
    its 1-based rank, its score and (when given) its vector.

    The candidates whose key is new are made rows all at once, in rank order (C-level
    iterators, no Python step per candidate); those already in ``rows`` are updated one
    by one, in rank order. What :func:`_merge_one_by_one` does, which runs instead when a
    key repeats within the channel (then a later candidate overwrites the earlier one's
    rank and score and adds again) or ``vectors`` is shorter than the candidates.
    """
    count = len(candidates)
    memories = list(map(_first, candidates))
    keys = list(map(_key, memories))
    if len(set(keys)) < count or (vectors is not None and len(vectors) < count):
        _merge_one_by_one(rows, candidates, added, channel, vectors)
        return
    found = list(map(rows.get, keys))
    for rank in itertools.compress(range(count), found):  # keys already merged
        memory, row = memories[rank], found[rank]
        assert row is not None
        if row[0] is not memory and row[0] != memory:
            raise _two_contents(memory)
        row[1] += added[rank]
        row[2 + channel] = rank + 1
        row[4 + channel] = candidates[rank][1]
        if vectors is not None:
            row[7] = vectors[rank]
    fresh = list(map(operator.not_, found))
    if any(fresh):
        nothing = repeat(None)
        fields: list[Iterable[Any]] = [
            itertools.compress(memories, fresh),
            itertools.compress(map(operator.add, repeat(0.0), added), fresh),
            nothing,
            nothing,
            nothing,
            nothing,
            repeat(0.0),
            nothing if vectors is None else itertools.compress(vectors, fresh),
        ]
        fields[2 + channel] = itertools.compress(range(1, count + 1), fresh)
        fields[4 + channel] = itertools.compress(map(_score, candidates), fresh)
        # zip(*fields) ends with the new memories (the other fields repeat without end).
        made = map(list, zip(*fields, strict=False))
        rows.update(zip(itertools.compress(keys, fresh), made, strict=True))


def _merge_one_by_one(
    rows: dict[tuple[str, str], _Row],
    candidates: Sequence[tuple[GameMemory, float]],
    added: Sequence[float],
    channel: int,
    vectors: Sequence[npt.NDArray[np.float32]] | None,
) -> None:
    """:func:`_merge` candidate by candidate (any input)."""
    for rank, (memory, score) in enumerate(candidates):
        key = (memory.owner_id, memory.memory_id)
        row = rows.get(key)
        if row is None:
            row = rows[key] = [memory, 0.0, None, None, None, None, 0.0, None]
        elif row[0] is not memory and row[0] != memory:
            raise _two_contents(memory)
        row[1] += added[rank]
        row[2 + channel] = rank + 1
        row[4 + channel] = score
        if vectors is not None:
            row[7] = vectors[rank]


def _two_contents(memory: GameMemory) -> DerivedIndexError:
    return DerivedIndexError(
        f"memory {memory.memory_id!r} reached fusion with two different contents"
    )


def _in_order(rows: list[_Row], limit: int) -> list[_Row]:
    """The first ``limit`` of ``sorted(rows, key=_fusion_order)``, computing that key only
    when some scores tie, and then only for the rows up to the cut.

    Sorted by score alone first (highest first). Where every score differs (and none is
    NaN), that is the order: the score decides every comparison of the full key. Where
    some tie, the rows down to the last one scoring what the ``limit``-th does (whole
    groups of equal scores, the best ones) are sorted by the full key (:func:`_by_key`):
    its first item is the score, and rows of one score differ in their ids, so that is the
    full sort's start. A NaN (a score, or any importance once some scores tie: a sum of
    them that is NaN, which an infinity minus another also gives) would make the order
    depend on which comparisons a sort happens to make, so then the full sort runs over
    ``rows`` as given, as it always did.
    """
    ordered = sorted(rows, key=_score, reverse=True)
    scores = list(map(_score, ordered))
    if all(map(operator.gt, scores, scores[1:])):
        return ordered[:limit]  # all distinct, none NaN
    if not all(map(operator.ge, scores, scores[1:])) or math.isnan(
        sum(map(_importance, map(_first, rows)))
    ):
        return sorted(rows, key=_fusion_order)[:limit]  # a NaN
    end = len(scores[:limit])  # what the cut keeps (a negative limit included)
    if end:
        cut = scores[end - 1]
        while end < len(scores) and scores[end] == cut:
            end += 1
        ordered[:end] = _by_key(ordered[:end])
    return ordered[:limit]


def _by_key(rows: list[_Row]) -> list[_Row]:
    """``sorted(rows, key=_fusion_order)`` for rows without a NaN score or importance:
    the keys built column by column (C-level, no call per row), each with the row's index
    after it (never reached: no two rows share owner and memory id)."""
    memories = list(map(_first, rows))
    owners = list(map(_owner, memories))
    identifiers = list(map(_identifier, memories))
    if not (all(map(str.isascii, owners)) and all(map(str.isascii, identifiers))):
        owners, identifiers = list(map(ordinal_key, owners)), list(map(ordinal_key, identifiers))
    keys = list(
        zip(
            map(operator.neg, map(_score, rows)),
            map(operator.neg, map(_importance, memories)),
            map(operator.neg, map(_tick, memories)),
            owners,
            identifiers,
            range(len(rows)),
            strict=True,
        )
    )
    keys.sort()
    return list(map(rows.__getitem__, map(_last, keys)))


_importance = operator.attrgetter("importance")
_tick = operator.attrgetter("moment.tick")
_owner = operator.attrgetter("owner_id")
_identifier = operator.attrgetter("memory_id")
_last = operator.itemgetter(-1)


def _fusion_order(row: _Row) -> tuple[float, float, int, str, str]:
    """The sort key: higher score, then importance, then newer tick, then owner and memory
    id in ordinal (UTF-16) order. ``ordinal_key`` returns ASCII text as it is, so ASCII
    ids (the usual ones) are used as they are without the call: the same keys."""
    memory = row[0]
    owner, identifier = memory.owner_id, memory.memory_id
    return (
        -row[1],
        -memory.importance,
        -memory.moment.tick,
        owner if owner.isascii() else ordinal_key(owner),
        identifier if identifier.isascii() else ordinal_key(identifier),
    )


def _best_possible(options: FusionOptions, lexical: bool, vector: bool) -> float:
    """The highest fused score the mode can give with the channels that returned anything."""
    weights = (
        (options.lexical_weight if lexical else 0.0),
        (options.vector_weight if vector else 0.0),
    )
    if options.mode is FusionMode.RRF:
        return (int(lexical) + int(vector)) / (options.rrf_k + 1)
    if options.mode is FusionMode.WEIGHTED_RRF:
        return sum(weights) / (options.rrf_k + 1)
    return sum(weights)


def _scale(
    options: FusionOptions, channel: int, candidates: Sequence[tuple[GameMemory, float]]
) -> tuple[float, float, float]:
    """``(floor, divisor, confidence)``: how ``CONVEX`` maps one channel onto [0, 1].

    ``confidence`` multiplies the channel's weight (1 except under ``"confidence"``).
    """
    if options.mode is not FusionMode.CONVEX or not candidates:
        return (0.0, 1.0, 1.0)
    if channel == 1:
        scores = [_clip(score) for _, score in candidates]
        minimum_spread = options.vector_minimum_spread
    else:
        scores = [score for _, score in candidates]
        minimum_spread = options.lexical_minimum_spread
    high = max(scores)
    if options.normalization == "best_lexical":
        return (0.0, high if channel == 0 else 1.0, 1.0)
    if options.normalization == "absolute":
        return (0.0, max(high, options.lexical_scale) if channel == 0 else 1.0, 1.0)
    if options.normalization == "confidence":
        return _confident_scale(options, channel, scores, high)
    low = min(scores)
    if low == high:
        # One candidate (or all equal): no spread to measure, so measure from the score's
        # natural zero (cosine 0, BM25 0) instead of scoring the lone match 0.
        low = 0.0
    return (low, max(high - low, minimum_spread), 1.0)


def _confident_scale(
    options: FusionOptions, channel: int, scores: list[float], high: float
) -> tuple[float, float, float]:
    """``"confidence"``: a floor at least the minimum gap below the best, and the weight."""
    gap = options.lexical_minimum_gap if channel == 0 else options.vector_minimum_gap
    low = min(scores)
    if low == high:
        # A lone candidate (or all equal): nothing to compare with, so it is scored as
        # under "absolute" (the cosine as is; BM25 over max(best, lexical_scale)).
        low, divisor = 0.0, (max(high, options.lexical_scale) if channel == 0 else 1.0)
    else:
        low = max(0.0, min(low, high - gap))
        if len(scores) < options.floor_candidates:
            # Few candidates say little about where irrelevance lies: the floor moves toward
            # the natural zero, so the last of an NPC's five memories keeps a score that
            # reflects its own similarity instead of 0.
            low *= (len(scores) - 1) / (options.floor_candidates - 1)
        divisor = high - low
    if channel == 0:
        confidence = high / (high + options.lexical_confidence) if high > 0.0 else 0.0
        if options.lexical_contrast > 0.0 and len(scores) >= 3:
            # How far the best match stands above the candidates' mean, relative to it: a
            # short chat question whose words are common ("are you a spy", no memory
            # mentions a spy) matches many memories about as well (contrast ~0.1) and says
            # little, however high its BM25; a question naming what it asks about lifts
            # one memory above the rest (contrast ~1 and more).
            mean = math.fsum(scores) / len(scores)
            contrast = (high - mean) / mean if mean > 0.0 else math.inf
            confidence *= min(1.0, max(0.0, contrast / options.lexical_contrast))
    elif len(scores) < 3:
        confidence = 1.0
    else:
        # Exact sums (math.fsum): the confidence must not depend on the order in which a
        # backend returns tied candidates (files and PostgreSQL recall identically).
        mean = math.fsum(scores) / len(scores)
        if options.vector_confidence_by == "contrast":
            # How far the best cosine stands above the candidates' mean, relative to that
            # mean: a model that finds every text of a language alike (MiniLM on
            # Portuguese or CJK: mean ~0.6-0.7, best ~0.1 above) has a small contrast
            # however its deviations are spread; on text it knows (mean ~0.2-0.3) the
            # best answer stands out by as much again.
            contrast = (high - mean) / mean if mean > 0.0 else math.inf
            confidence = min(1.0, max(0.0, contrast / options.vector_confidence))
        else:
            deviation = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / len(scores))
            standing = (high - mean) / deviation if deviation > 0.0 else 0.0
            # Among n candidates the best can stand at most sqrt(n − 1) deviations out: a
            # clear answer among three memories must count fully, as among three hundred.
            needed = min(options.vector_confidence, math.sqrt(len(scores) - 1))
            confidence = min(1.0, max(0.0, standing / needed))
    return (low, divisor, confidence)


def _clip(score: float) -> float:
    return min(max(score, 0.0), 1.0)


@functools.lru_cache(maxsize=64)
def _reciprocal_ranks(offset: int, count: int) -> tuple[float, ...]:
    """``1/(offset + r)`` for ranks ``r`` 0 .. count − 1: what ``RRF`` adds, the same for
    every recall of one ``rrf_k`` and candidate count, so computed once (64 pairs kept)."""
    return tuple(1.0 / (offset + rank) for rank in range(count))


def _contributions(
    options: FusionOptions, channel: int, candidates: Sequence[tuple[GameMemory, float]]
) -> Sequence[float]:
    """What each of a channel's candidates (by rank) adds to its fused score."""
    weight = options.lexical_weight if channel == 0 else options.vector_weight
    # The first rank is 1: rank r (from 0) adds 1/(k + r + 1).
    offset = options.rrf_k + 1
    if options.mode is FusionMode.RRF:
        return _reciprocal_ranks(offset, len(candidates))
    if options.mode is FusionMode.WEIGHTED_RRF:
        return [weight / (offset + rank) for rank in range(len(candidates))]
    low, divisor, confidence = _scale(options, channel, candidates)
    if divisor <= 0.0:
        return [0.0] * len(candidates)  # every candidate of the channel scored 0: no evidence
    weighted = confidence * weight
    if channel == 1:
        return [weighted * (_clip(score) - low) / divisor for _, score in candidates]
    return [weighted * (score - low) / divisor for _, score in candidates]
