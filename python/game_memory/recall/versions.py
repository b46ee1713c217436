"""Implicit versions among a recall's best candidates: the reranker's supersession detector.

Two memories are versions of one belief when neither carries a ``belief_key`` (the game
names those versions itself), they share owner and timeline, the newer has a later tick,
and they are alike: their cosine is at least ``similarity`` and stands ``standing``
deviations above the mean cosine of the candidates' pairs (when there are pairs enough to
stand that far), or, when either has no vector, the overlap of their words (shared / all
distinct words of the two) is at least ``similarity``. See
``GameAwareMemoryRerankerOptions`` for why.

At 32 candidates the fixed cost of each numpy call (1-3 µs), not the arithmetic, is what a
recall pays, so work that cannot change the answer is skipped, and what is decided by a
few Python comparisons is not asked of numpy:

* one owner and timeline and no ``belief_key`` (an NPC's own recall, the common case): which
  pairs are ordered follows from the ticks alone, read as Python ints;
* the cosines' mean and deviation are computed only when some pair's cosine reaches
  ``similarity`` (the standing can only raise the threshold);
* the word overlaps are computed only for memories a bound lets reach ``similarity``
  (:func:`_alike_words`), usually none or two;
* whether a boolean array holds a ``True`` is asked of ``np.count_nonzero`` (C), not of
  ``ndarray.any`` (a Python-level wrapper, twice the cost at this size).

Every pair found, and its order, is that of the detector before these shortcuts: the
equivalence tests keep its earlier forms verbatim (``tests/recall/reranker_040bcd1.py``,
``tests/recall/test_versions_equivalence.py``) and compare on random candidates.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import sys
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from game_memory.store.tokenizer import tokenize

__all__ = ["WORD_CACHED_TEXT_BYTES", "WORD_CACHE_ENTRIES", "Fields", "implicit_versions"]

#: A pydantic model's fields, as its instance dictionary holds them (``vars(model)``): a
#: recall reads several fields of each candidate's memory and moment, and an attribute
#: read of a model passes through the hook of ``BaseModel.__getattr__`` (about 600
#: instructions), so the dictionary is read once and each field by key (about 150). Every
#: field is in it (``assemble_validated`` relies on the same layout; a test checks it).
Fields = Mapping[str, Any]

_owner_and_belief = operator.itemgetter("owner_id", "belief_key")

Pairs = list[tuple[int, int]]
Vectors = Sequence[npt.NDArray[np.float32] | None]


def implicit_versions(
    fields: Sequence[Fields],
    ticks: Sequence[int],
    timelines: Sequence[str],
    vectors: Vectors,
    similarity: float,
    standing: float,
) -> Pairs:
    """``(older, newer)`` index pairs of the memories given that are versions of one belief.

    ``fields[i]`` are memory ``i``'s fields, ``ticks[i]`` and ``timelines[i]`` its moment's,
    ``vectors[i]`` its unit vector or ``None``. Sorted by the older one's tick, then its
    index, then the newer one's index, so that a chain of versions hands its relevance on
    to the newest. ``similarity`` is in [0, 1], ``standing`` in [0, 100]
    (``GameAwareMemoryRerankerOptions`` bounds both).
    """
    n = len(fields)
    if n < 2:
        return []
    owned = list(map(_owner_and_belief, fields))
    if owned.count(owned[0]) == n and owned[0][1] is None and timelines.count(timelines[0]) == n:
        if min(ticks) == max(ticks):
            return []  # one group, one tick: no pair is ordered
        found = _one_group(fields, ticks, vectors, similarity, standing)
    else:
        keys: list[tuple[str, str] | int] = [
            (owner, timeline) if belief is None else index
            for index, ((owner, belief), timeline) in enumerate(zip(owned, timelines, strict=True))
        ]
        found = _groups(fields, ticks, keys, vectors, similarity, standing)
    if len(found) > 1:
        found.sort(key=lambda pair: (ticks[pair[0]], pair[0], pair[1]))
    return found


def _one_group(
    fields: Sequence[Fields],
    ticks: Sequence[int],
    vectors: Vectors,
    similarity: float,
    standing: float,
) -> Pairs:
    """The pairs when every memory has one owner and timeline and none a ``belief_key``, and
    the ticks are not all equal: ``(i, j)`` is ordered exactly when ``ticks[j] > ticks[i]``.

    Which memories take part in a pair compared by words (not both with a vector, when more
    than one has one) follows from the ticks: a memory without a vector pairs with any
    memory of another tick, and there is one (the ticks are not all equal); one with a
    vector, with a memory without one of another tick.
    """
    n = len(fields)
    vectored = list(itertools.compress(range(n), map(operator.is_not, vectors, repeat(None))))
    found: Pairs = []
    involved = list(range(n))
    if len(vectored) > 1:
        times = [ticks[index] for index in vectored]
        if min(times) < max(times):
            alike = _alike_vectors(
                [vectors[index] for index in vectored], _ordered(times), standing, similarity
            )
            if alike is not None:
                found += _indexed_pairs(alike, vectored)
        if len(vectored) == n:
            return found
        plain = list(itertools.compress(range(n), map(operator.is_, vectors, repeat(None))))
        times = [ticks[index] for index in plain]
        low, high = min(times), max(times)
        if low == high:  # a vector's memory pairs by words only with another tick than low
            involved = [
                index for index in range(n) if vectors[index] is None or ticks[index] != low
            ]
    flags = [vector is not None for vector in vectors] if len(vectored) > 1 else None
    if similarity <= 0.0:
        # Every overlap, even of two memories without words (0), is at least 0.
        return found + _indexed_pairs(_pending(involved, ticks, flags), involved)
    by_words = _alike_words(_texts(fields, involved), similarity)
    if by_words is None:
        return found
    members = [involved[place] for place in by_words[0]]
    alike = _pending(members, ticks, flags)
    alike &= by_words[1]
    return found + _indexed_pairs(alike, members)


def _groups(
    fields: Sequence[Fields],
    ticks: Sequence[int],
    keys: list[tuple[str, str] | int],
    vectors: Vectors,
    similarity: float,
    standing: float,
) -> Pairs:
    """The pairs in general (several owners or timelines, or a ``belief_key``): the
    ``[older, newer]`` matrix of ordered pairs from numpy, as the detector always built it.
    ``keys`` are the memories' groups: owner and timeline, or the memory's own index when
    it has a ``belief_key`` (the game names those versions itself: such a memory is never
    taken for a version of anything else, nor anything else for a version of it).
    """
    n = len(fields)
    code = {key: index for index, key in enumerate(keys)}
    group = np.array([code[key] for key in keys], np.int64)
    ordered = _ordered(ticks)
    ordered &= group[None, :] == group[:, None]
    if not np.count_nonzero(ordered):
        return []
    found: Pairs = []
    # Pairs of two candidates with a vector compare their cosines (a candidate only the
    # lexical channel returned has none: its pairs fall back to the overlap of words).
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
        if np.count_nonzero(paired):
            alike = _alike_vectors(
                [vectors[index] for index in vectored], paired, standing, similarity
            )
            if alike is not None:
                found += _indexed_pairs(alike, vectored)
    if pending is None or not np.count_nonzero(pending):
        return found
    if similarity <= 0.0:
        return found + _indexed_pairs(pending, range(n))
    involved: list[int] = np.flatnonzero((pending | pending.T).any(axis=0)).tolist()
    by_words = _alike_words(_texts(fields, involved), similarity)
    if by_words is None:
        return found
    members = [involved[place] for place in by_words[0]]
    rows = np.array(members, np.intp)
    block = pending[rows[:, None], rows]
    block &= by_words[1]
    return found + _indexed_pairs(block, members)


def _texts(fields: Sequence[Fields], involved: list[int]) -> list[str]:
    """The texts whose words the ``involved`` memories are compared by: each one's
    searchable text, else its payload."""
    chosen = fields if len(involved) == len(fields) else [fields[index] for index in involved]
    return [field["searchable_text"] or field["payload_json"] for field in chosen]


def _ordered(times: Sequence[int]) -> npt.NDArray[np.bool_]:
    """``[older, newer]``: whether ``times[newer] > times[older]``."""
    moments = np.array(times, np.int64)
    ordered: npt.NDArray[np.bool_] = moments[None, :] > moments[:, None]
    return ordered


def _pending(
    members: list[int], ticks: Sequence[int], vectored: list[bool] | None
) -> npt.NDArray[np.bool_]:
    """``[older, newer]`` among ``members`` of one group: ordered pairs compared by words,
    so not both with a vector when ``vectored`` (flags by index) is given."""
    pending = _ordered([ticks[index] for index in members])
    if vectored is not None:
        flags = np.array([vectored[index] for index in members], np.bool_)
        pending &= ~(flags[:, None] & flags[None, :])
    return pending


def _indexed_pairs(alike: npt.NDArray[np.bool_], indexes: Sequence[int]) -> Pairs:
    """The ``True`` places of ``alike`` as pairs of ``indexes`` (row, column)."""
    older, newer = np.nonzero(alike)
    return [(indexes[a], indexes[b]) for a, b in zip(older.tolist(), newer.tolist(), strict=True)]


@functools.lru_cache(maxsize=512)
def _upper_indices(size: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``np.triu_indices(size, 1)``, cached: at most 512 sizes (the candidates compared)."""
    return np.triu_indices(size, 1)


def _alike_vectors(
    vectors: list[npt.NDArray[np.float32] | None],
    paired: npt.NDArray[np.bool_],
    standing: float,
    similarity: float,
) -> npt.NDArray[np.bool_] | None:
    """Which ``paired`` pairs of ``vectors`` (all given) are alike, or ``None`` if none.

    The threshold is ``similarity``, raised to the mean of the upper-triangle cosines plus
    ``standing`` deviations when there are pairs enough to stand that far. It is never
    below ``similarity``, so when no paired cosine reaches that, none reaches the threshold
    and the mean and deviation are not computed; when one does, they are computed as always
    (the same reductions of the same values).
    """
    stacked = np.array(vectors, np.float32)
    gram = (stacked @ stacked.T).astype(np.float64)
    needed = similarity
    alike = paired & (gram >= needed)
    if not np.count_nonzero(alike):
        return None
    # Among p pairs the most alike stands at most sqrt(p − 1) deviations out: with too
    # few pairs to reach the standing asked for, the absolute similarity alone decides.
    count = len(vectors) * (len(vectors) - 1) // 2
    if 0.0 < standing <= math.sqrt(count - 1):
        upper = gram[_upper_indices(len(vectors))]
        needed = max(needed, float(upper.mean() + standing * upper.std()))
        alike = paired & (gram >= needed)
    return alike


#: Word sets of recently compared texts (see :func:`_text_words`).
WORD_CACHE_ENTRIES = 4_096
#: Most bytes of characters a text may hold in memory (``sys.getsizeof`` beyond an empty
#: string's) for its words to be remembered. The cache holds its keys alive, after their
#: memories are dropped, erased or their store closed: texts of up to 1,000,000 characters
#: (payloads up to 10,000,000) would keep up to 4,096 of them, gigabytes, in the process.
#: 4 KiB covers the usual memory (a sentence or a paragraph in any script) and bounds the
#: keys at 16 MiB; a longer text is tokenized each time it is compared (at most 100,000
#: UTF-16 units are read, a few milliseconds).
WORD_CACHED_TEXT_BYTES = 4_096
_WORD_CACHED_SIZE = sys.getsizeof("") + WORD_CACHED_TEXT_BYTES


def _text_words(text: str) -> bytes:
    """The distinct tokens of ``text`` as the bytes of a sorted int64 array of their 64-bit
    string hashes (8 bytes a word).

    Cached for texts of at most :data:`WORD_CACHED_TEXT_BYTES` (:func:`_cached_words`);
    a longer text's words are computed each time, the same bytes.
    """
    if sys.getsizeof(text) <= _WORD_CACHED_SIZE:
        return _cached_words(text)
    return _words(text)


def _words(text: str) -> bytes:
    """:func:`_text_words` without the cache."""
    return np.array(sorted({hash(token) for token in tokenize(text)}), np.int64).tobytes()


@functools.lru_cache(maxsize=WORD_CACHE_ENTRIES)
def _cached_words(text: str) -> bytes:
    """:func:`_words`, cached: the same memories are compared recall after recall (an NPC's
    recent candidates), and tokenizing 32 of them per recall cost more than the rest of the
    reranker. Bounded by :data:`WORD_CACHE_ENTRIES` texts of at most
    :data:`WORD_CACHED_TEXT_BYTES` each (:func:`_text_words` checks); keyed by the text
    itself, so a memory is never given another's words. Two distinct words share a hash
    with a probability of about 2⁻⁶⁴ per pair (it would count them as one shared word in
    one overlap). Bytes, so that the words of all the memories compared become one array
    by a ``bytes.join`` and one ``np.frombuffer`` (a sixth of the cost of concatenating 32
    arrays).
    """
    return _words(text)


def _alike_words(
    texts: list[str], similarity: float
) -> tuple[list[int], npt.NDArray[np.bool_]] | None:
    """Which two ``texts`` share words enough: overlap (shared / all distinct words of
    the two, a float64 division of the two counts) at least ``similarity`` (above 0).

    Returns the places (in ``texts``) of those that may reach it and, among them, which
    pairs do (the diagonal is not meaningful); every pair with a memory not among them has
    an overlap below ``similarity``. ``None`` when fewer than two may reach it.

    The bound: a memory with ``L`` words of which ``r`` are held by another memory shares
    at most ``r`` with any other, whose union with it has at least ``L`` words, so each of
    its overlaps is at most ``r / L``; rounding is monotone, so no computed overlap exceeds
    the computed ``r / L`` either. A memory without words shares none (its overlaps are 0)
    and is left out. ``r`` comes from one sort of all the words: a word held by another
    memory is one that occurs twice among them (each memory's words are distinct).

    The overlaps of those that may reach it come from one product of their word-incidence
    matrix, set only for words more than one memory holds (a word of one memory adds to no
    pair). Counts and sums are small integers, exact in float64, so each overlap is the
    same float as from a full incidence matrix of every word.
    """
    held = list(map(_text_words, texts))
    lengths = list(map(operator.rshift, map(len, held), repeat(3)))  # words: 8 bytes each
    places = list(range(len(held)))
    if 0 in lengths:
        places = [place for place in places if lengths[place]]
        held = [held[place] for place in places]
        lengths = [lengths[place] for place in places]
    if len(held) < 2:
        return None
    words = np.frombuffer(b"".join(held), np.int64)
    # A word held by another memory occurs twice among all the words (each memory's are
    # distinct): equal to a neighbour once they are sorted.
    order = words.argsort()
    ranked = words[order]
    same = ranked[1:] == ranked[:-1]
    if not np.count_nonzero(same):
        return None  # no word in two memories: every overlap is 0
    repeated = np.zeros(len(words), np.bool_)
    repeated[1:] = same
    repeated[:-1] |= same
    many = np.empty(len(words), np.bool_)  # by occurrence, in the memories' order
    many[order] = repeated
    starts = list(itertools.accumulate(lengths[:-1], initial=0))
    reach = np.add.reduceat(many, starts, dtype=np.int64).tolist()
    rows = [
        row
        for row, (shared, length) in enumerate(zip(reach, lengths, strict=True))
        if shared / length >= similarity
    ]
    if len(rows) < 2:
        return None
    # The incidence of the memories kept over the repeated words they hold: one column a
    # word (its place among those words), as many columns as such words at most.
    line = np.full(len(held), -1, np.intp)  # each memory's line in the incidence, or -1
    line[rows] = np.arange(len(rows))
    holder = np.repeat(line, lengths)
    counted = many & (holder >= 0)
    columns, column = np.unique(words[counted], return_inverse=True)
    incidence = np.zeros((len(rows), len(columns)), np.float64)
    incidence[holder[counted], column] = 1.0
    shared_words = incidence @ incidence.T
    sizes = np.array([lengths[row] for row in rows], np.float64)
    union = sizes[:, None] + sizes[None, :] - shared_words
    alike: npt.NDArray[np.bool_] = shared_words / union >= similarity
    return [places[row] for row in rows], alike
