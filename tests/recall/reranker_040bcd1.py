"""The reranker as it stood at commit 040bcd1, verbatim, for the equivalence tests.

``GameAwareMemoryReranker.rank``, the greedy pass and the search for implicit versions
(``_versions`` and its helpers) below are copied unchanged from
``python/game_memory/recall/reranker.py`` at 040bcd1 (the options class is the library's,
unchanged since). ``test_rank_columns_equivalence.py`` compares today's code with them.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import operator
from collections.abc import Sequence
from itertools import repeat

import numpy as np
import numpy.typing as npt

from game_memory import GameAwareMemoryRerankerOptions
from game_memory.model import GameMemory, GameMemoryQuery
from game_memory.recall.fusion import FusedCandidate
from game_memory.store.tokenizer import tokenize


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

    def relevance(self, candidate: FusedCandidate, best: float) -> float:
        """The relevance term's input in [0, 1] (see ``GameAwareMemoryRerankerOptions``)."""
        if self.options.relevance == "absolute":
            return candidate.relevance
        return candidate.score / best if best > 0 else 0.0

    def rank(
        self, query: GameMemoryQuery, candidates: Sequence[FusedCandidate]
    ) -> list[FusedCandidate]:
        """Order ``candidates`` (given best first by fusion) for ``query``."""
        if not candidates:
            return []
        options = self.options
        best = candidates[0].score
        relevance_of, recency_of = self.relevance, self.recency
        relevance = list(map(relevance_of, candidates, repeat(best)))
        superseded: set[int] = set()
        if options.supersession_penalty > 0 or options.supersession_inherits:
            for older, newer in _versions(candidates, options):
                # The newer version answers whatever the older one answered: it takes the
                # older one's relevance ("Who owns the inn?" finds "Mira owns the inn" by
                # its words; "Mira sold her tavern to Bertram", its newer version, answers).
                if options.supersession_inherits:
                    relevance[newer] = max(relevance[newer], relevance[older])
                superseded.add(older)
        memories = list(map(_memory, candidates))
        recency = list(map(recency_of, repeat(query), candidates))
        # The terms as float64 columns: numpy's elementwise multiply, add and subtract are
        # the IEEE operations Python's floats make, in the same order, so every base value
        # is the float of the per-candidate expression
        #   w_rel · relevance + w_imp · importance + w_rec · recency − penalty (or − 0.0).
        base_column = (
            options.relevance_weight * np.array(relevance, np.float64)
            + options.importance_weight * np.array(list(map(_importance, memories)), np.float64)
            + options.recency_weight * np.array(recency, np.float64)
        )
        lowered = np.zeros(len(candidates), np.float64)
        if superseded:
            lowered[list(superseded)] = options.supersession_penalty
        base: list[float] = (base_column - lowered).tolist()
        traits = list(
            zip(
                map(_scope, memories),
                map(_kind, memories),
                map(frozenset, map(_tags, memories)),
                strict=True,
            )
        )
        rounds = min(len(candidates), options.maximum_greedy_selections)
        chosen = greedy_order(traits, base, options.diversity_penalty, rounds)
        return [candidates[i] for i in chosen]


Traits = tuple[str, object, frozenset[str]]

_memory = operator.attrgetter("memory")
_vector = operator.attrgetter("vector")
_importance = operator.attrgetter("importance")
_scope = operator.attrgetter("scope")
_kind = operator.attrgetter("kind")
_tags = operator.attrgetter("tags")
_owner = operator.attrgetter("owner_id")
_timeline = operator.attrgetter("moment.timeline_id")
_tick = operator.attrgetter("moment.tick")
_belief_key = operator.attrgetter("belief_key")
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

    Two exact ways, by how many distinct trait sets the candidates have: few (the common
    case: one scope and kind, no or few tags), :func:`_grouped_order`; more,
    :func:`_lazy_order`.
    """
    grouped: dict[Traits, list[int]] = {}
    if traits and traits.count(traits[0]) == len(traits):
        grouped[traits[0]] = list(range(len(traits)))  # one trait set (the common case)
    else:
        for index, trait in enumerate(traits):
            grouped.setdefault(trait, []).append(index)
    if len(grouped) <= _FEW_GROUPS:
        return _grouped_order(grouped, base, penalty, rounds)
    return _lazy_order(traits, base, penalty, rounds)


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
    shared = [[len(a[2] & b[2]) + (a[0] == b[0]) + (a[1] == b[1]) for b in kinds] for a in kinds]
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


#: Word sets of recently compared texts (see :func:`_text_words`).
WORD_CACHE_ENTRIES = 4_096


@functools.lru_cache(maxsize=WORD_CACHE_ENTRIES)
def _text_words(text: str) -> npt.NDArray[np.int64]:
    """The distinct tokens of ``text`` as a sorted array of their 64-bit string hashes.

    Cached: the same memories are compared recall after recall (an NPC's recent
    candidates), and tokenizing 32 of them per recall cost more than the rest of the
    reranker. Bounded by :data:`WORD_CACHE_ENTRIES` texts (each at most 4,096 tokens);
    keyed by the text itself, so a memory is never given another's words. Two distinct
    words share a hash with a probability of about 2⁻⁶⁴ per pair (it would count them as
    one shared word in one overlap); the arrays let one call compare all pairs' words.
    """
    words = np.array(sorted({hash(token) for token in tokenize(text)}), np.int64)
    words.flags.writeable = False
    return words


@functools.lru_cache(maxsize=512)
def _upper_indices(size: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``np.triu_indices(size, 1)``, cached: at most 512 sizes (the candidates compared)."""
    return np.triu_indices(size, 1)


def _versions(
    candidates: Sequence[FusedCandidate], options: GameAwareMemoryRerankerOptions
) -> list[tuple[int, int]]:
    """``(older, newer)`` index pairs among the first candidates that are versions of one belief.

    Two memories are versions when neither carries a ``belief_key`` (the game names those
    versions itself), they share owner and timeline, the newer has a later tick, and they
    are alike: their cosine is at least ``supersession_similarity`` and
    stands ``supersession_standing`` deviations above the mean cosine of the candidates'
    pairs (when there are pairs enough to stand that far), or, when either has no vector,
    the overlap of their words is at least ``supersession_similarity``. Sorted by the older
    one's tick (then index), so a chain of versions hands its relevance on to the newest.

    At 32 candidates the fixed cost of each numpy call, not the arithmetic, is what a recall
    pays, so work that cannot change the answer is skipped: the cosines' mean and deviation
    when no pair's cosine reaches ``supersession_similarity`` (the standing can only raise
    the threshold); the words when ``supersession_similarity`` is 0 (every overlap
    passes); the word overlaps when a bound shows no pair can reach it (``_alike_words``).
    """
    first = candidates[: options.supersession_candidates]
    n = len(first)
    if n < 2:
        return []
    # A memory the game gave a belief_key has its versions named by the game (the store
    # recalls only the newest): it is never taken for a version of anything else, nor
    # anything else for a version of it, so it gets a group of its own.
    memories = list(map(_memory, first))
    keys: list[tuple[str, str] | int] = list(
        zip(map(_owner, memories), map(_timeline, memories), strict=True)
    )
    beliefs = list(map(_belief_key, memories))
    if beliefs.count(None) < n:
        keys = [key if belief is None else index
                for index, (key, belief) in enumerate(zip(keys, beliefs, strict=True))]  # fmt: skip
    ticks = np.array(list(map(_tick, memories)), np.int64)
    # [older, newer]: same owner and timeline, the newer strictly later. When every key is
    # the first one (one owner and timeline, no belief_key: an NPC's own recall) there is
    # one group and the tick order alone decides.
    ordered = ticks[None, :] > ticks[:, None]
    if keys.count(keys[0]) < n:
        code = {key: index for index, key in enumerate(keys)}
        group = np.array([code[key] for key in keys], np.int64)
        ordered &= group[None, :] == group[:, None]
    if not ordered.any():
        return []
    similarity = options.supersession_similarity
    found: list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]] = []
    # Pairs of two candidates with a vector compare their cosines (a candidate only the
    # lexical channel returned has none: its pairs fall back to the overlap of words).
    vectors = list(map(_vector, first))
    vectored = list(itertools.compress(range(n), map(operator.is_not, vectors, repeat(None))))
    pending: npt.NDArray[np.bool_] | None = ordered
    if len(vectored) > 1:
        rows = np.array(vectored, np.intp)
        square = (rows[:, None], rows)
        paired = ordered[square]
        if len(vectored) == n:
            pending = None
        else:
            pending = ordered.copy()
            pending[square] = False
        if paired.any():
            alike = _alike_vectors([vectors[index] for index in vectored], paired, options)
            if alike is not None:
                older, newer = np.nonzero(alike)
                found.append((rows[older], rows[newer]))
    if pending is not None and pending.any():
        if similarity <= 0.0:
            # Every overlap, even of two memories without words (0), is at least 0.
            older, newer = np.nonzero(pending)
            found.append((older, newer))
        else:
            involved = np.flatnonzero((pending | pending.T).any(axis=0))
            if len(involved) < n:
                pending = pending[involved[:, None], involved]
            alike = _alike_words([memories[index] for index in involved], similarity)
            if alike is not None:
                older, newer = np.nonzero(pending & alike)
                found.append((involved[older], involved[newer]))
    if not found:
        return []
    older = np.concatenate([pair[0] for pair in found])
    newer = np.concatenate([pair[1] for pair in found])
    order = np.lexsort((newer, older, ticks[older]))
    return [(int(older[i]), int(newer[i])) for i in order]


def _alike_vectors(
    vectors: list[npt.NDArray[np.float32] | None],
    paired: npt.NDArray[np.bool_],
    options: GameAwareMemoryRerankerOptions,
) -> npt.NDArray[np.bool_] | None:
    """Which ``paired`` pairs of ``vectors`` (all given) are alike, or ``None`` if none.

    The threshold is ``supersession_similarity``, raised to the mean of the upper-triangle
    cosines plus ``supersession_standing`` deviations when there are pairs enough to stand
    that far. It is never below ``supersession_similarity``, so when no paired cosine
    reaches that, none reaches the threshold and the mean and deviation are not computed;
    when one does, they are computed as always (the same reductions of the same values).
    """
    stacked = np.array(vectors, np.float32)
    gram = (stacked @ stacked.T).astype(np.float64)
    needed = options.supersession_similarity
    alike = paired & (gram >= needed)
    if not alike.any():
        return None
    # Among p pairs the most alike stands at most sqrt(p − 1) deviations out: with too
    # few pairs to reach the standing asked for, the absolute similarity alone decides.
    count = len(vectors) * (len(vectors) - 1) // 2
    if 0.0 < options.supersession_standing <= math.sqrt(count - 1):
        upper = gram[_upper_indices(len(vectors))]
        needed = max(needed, float(upper.mean() + options.supersession_standing * upper.std()))
        alike = paired & (gram >= needed)
    return alike


def _alike_words(memories: list[GameMemory], similarity: float) -> npt.NDArray[np.bool_] | None:
    """Which two ``memories`` share words enough: overlap (shared / all distinct words of
    the two, a float64 division of the two counts) at least ``similarity`` (above 0). The
    diagonal is not meaningful. ``None`` when no two can reach it.

    The shared counts come from one product of a word-incidence matrix whose columns are
    only the words more than one memory holds (a word of one memory adds to no pair): a
    few dozen columns instead of every distinct word, found from one sort of all the
    words. Counts and sums are small integers, exact in float64, so each overlap is the
    same float as from a full incidence matrix.

    Before the product, a bound: a memory with ``L`` words of which ``r`` are held by
    another memory shares at most ``r`` with any other, whose union with it has at least
    ``L`` words, so each of its overlaps is at most ``r / L``; rounding is monotone, so no
    computed overlap exceeds the computed ``r / L`` either. A pair passes only if both of
    its memories' bounds reach ``similarity``: with fewer than two such memories, none does.
    """
    held = [_text_words(memory.searchable_text or memory.payload_json) for memory in memories]
    words = np.concatenate(held)
    in_order = np.sort(words)
    repeated = in_order[1:][in_order[1:] == in_order[:-1]]
    if not len(repeated):
        return None  # no word in two memories: every overlap is 0
    # Each occurrence of a repeated word maps to its first place in ``repeated`` (a word
    # of k memories is repeated k − 1 times there; its later columns stay empty).
    column = np.searchsorted(repeated, words)
    np.minimum(column, len(repeated) - 1, out=column)
    many = repeated[column] == words
    lengths = list(map(len, held))
    holder = np.repeat(np.arange(len(held)), lengths)[many]
    # At least 1: a memory without words shares none (r = 0), and 0 / 1 is 0.
    sizes = np.maximum(np.array(lengths, np.float64), 1.0)
    reach = np.bincount(holder, minlength=len(held)) / sizes
    if np.count_nonzero(reach >= similarity) < 2:
        return None
    incidence = np.zeros((len(held), len(repeated)), np.float64)
    incidence[holder, column[many]] = 1.0
    shared = incidence @ incidence.T
    # Every union is the true one, except with a memory without words (counted as 1
    # word): that shares 0 with every memory, and 0 over any union is 0, as before.
    union = sizes[:, None] + sizes[None, :] - shared
    overlap = shared / union
    alike: npt.NDArray[np.bool_] = overlap >= similarity
    return alike
