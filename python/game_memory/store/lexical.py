"""Lexical recall: BM25 plus importance and tag bonus over one snapshot, reference-exact.

For the visible memories of a snapshot (the visibility predicate applied), with
``terms`` = the distinct tokens of the query text:

* queries and memories are tokenized alike (``tokenizer.py``: text that is not ASCII is
  brought to NFKC first, so a query typed decomposed, full-width or half-width finds a
  memory written composed, and the other way round);
* ``score = importance + 0.1 × (query tags on the memory) + Σ_t idf(t) · tf·(k1+1) /
  (tf + k1·(1 − b + b·len/avgdl))`` with ``k1 = 1.2``, ``b = 0.75``,
  ``idf(t) = ln(1 + (N − df + 0.5)/(df + 0.5))``; ``N``, ``df`` and ``avgdl`` (mean of
  ``max(1, len)``) are taken over all visible memories of the snapshot;
* only memories containing at least one term are candidates;
* text that yields no tokens (punctuation, an emoji) keeps memories containing it as a
  case-insensitive substring of the text the tokens come from: the searchable text and the
  payload's keys and values (escapes decoded, JSON's syntax no text: ``"`` or ``{`` does
  not match every payload), both sides folded as the tokenizer folds text (NFKC: ``!``
  finds ``！``); no text, or only white space (or only what folding removes), keeps every
  visible memory (score = base);
* order: score, then tick (newest first), then ``memory_id`` (ordinal), then owner.

Statistics are summed across owner partitions, so a session-wide search ranks exactly as
if the session were one document collection.

Snapshots of at most 64 memories are scored by a plain Python loop (numpy's per-call
overhead dominates there); larger ones by numpy columns. Both evaluate the same formula in
the same order, so they give bit-identical scores.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
from collections.abc import Sequence
from typing import NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory, GameMemoryQuery, memory_matches_query
from game_memory.store.tokenizer import folded, tokenize
from game_memory.store.view import PartitionView
from game_memory.strict_json import readable_json

__all__ = ["BM25_B", "BM25_K1", "LexicalHit", "lexical_search", "sorted_unique"]

BM25_K1 = 1.2
BM25_B = 0.75
TAG_BONUS = 0.1
#: Up to this many candidates more than the limit are ordered without the threshold cut
#: (below it, numpy's partition costs more than ordering the few extra rows).
_CUT_MARGIN = 16
#: A view whose postings for the query's terms are under 1/8 of its memories is scored
#: over those documents only (else over the whole column, cheaper when most match).
_SPARSE_FACTOR = 8
_Item = TypeVar("_Item", bound=np.generic)


def sorted_unique(arrays: Sequence[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    """The distinct values of ``arrays``, sorted: ``np.unique(np.concatenate(arrays))``.

    Not ``np.unique`` itself: its first call imports ``numpy.ma`` (to ask whether the array
    is masked), about 28 ms of the first recall after an open.
    """
    merged = np.concatenate(arrays)
    merged.sort()
    if merged.size < 2:
        return merged
    changes = np.empty(merged.size, np.bool_)
    changes[0] = True
    np.not_equal(merged[1:], merged[:-1], out=changes[1:])
    return merged[changes]


SMALL_SNAPSHOT = 64


class LexicalHit(NamedTuple):
    """One lexical result: the memory and its score (a named tuple: cheap to build)."""

    memory: GameMemory
    score: float


def _distinct_terms(text: str) -> list[str]:
    """The query's distinct tokens, in order."""
    return list(dict.fromkeys(tokenize(text)))


def _needle(text: str | None) -> str | None:
    """What a query without tokens keeps memories by (a substring), or ``None``: keep all.

    White space alone is no text (until 7 December 2026 it was a needle: one space kept
    nearly every memory, two spaces nearly none). The needle is folded as the tokenizer
    folds text (``tokenizer.folded``: NFKC) and lower-cased, as :func:`_contains` reads
    the memories; one that folding empties (a lone joiner) is no text either."""
    return None if text is None or text.isspace() else folded(text).lower()


def lexical_search(
    views: Sequence[PartitionView], query: GameMemoryQuery, limit: int
) -> tuple[list[LexicalHit], int]:
    """Rank the visible memories of ``views`` for ``query``; return the top ``limit``.

    Returns:
        The hits in rank order and the number of visible memories (for stage metrics).
    """
    if sum(len(view) for view in views) <= SMALL_SNAPSHOT:
        return _search_small(views, query, limit)
    return _search_columns(views, query, limit)


def _filters(query: GameMemoryQuery) -> bool:
    """Whether ``query`` filters beyond its session and owner (which a view already is)."""
    return bool(
        query.scopes
        or query.kinds
        or query.tags
        or query.minimum_importance > 0.0
        or query.at_or_before is not None
    )


def _search_small(
    views: Sequence[PartitionView], query: GameMemoryQuery, limit: int
) -> tuple[list[LexicalHit], int]:
    """The lexical search over a small snapshot, memory by memory (same formula as numpy)."""
    visible: list[tuple[GameMemory, tuple[dict[str, int], int], tuple[int, str, str]]] = []
    filtered = _filters(query)
    for view in views:
        rows = zip(view.memories, view.term_counts, view.order_keys, strict=True)
        if view.has_beliefs:
            # Older versions of a belief are hidden as of the query's moment (view.py).
            shown = view.mask(query).tolist()
            visible.extend(row for row, keep in zip(rows, shown, strict=True) if keep)
        elif filtered:
            visible.extend(row for row in rows if memory_matches_query(row[0], query))
        else:
            visible.extend(rows)
    if limit <= 0 or not visible:
        return [], len(visible)
    base_bonus = TAG_BONUS * len(query.tags)
    text = query.text
    terms = _distinct_terms(text) if text is not None else []
    ranked: list[tuple[float, tuple[int, str, str], GameMemory]] = []
    if not terms:
        needle = _needle(text)
        for memory, _, key in visible:
            if not needle or _contains(memory, needle):
                ranked.append((-(memory.importance + base_bonus), key, memory))
    else:
        total = len(visible)
        average_length = float(sum(max(counted[1], 1) for _, counted, _ in visible)) / total
        idf: dict[str, float] = {}
        for term in terms:
            df = sum(1 for _, counted, _ in visible if term in counted[0])
            idf[term] = math.log(1.0 + (total - df + 0.5) / (df + 0.5))
        for memory, (counts, length), key in visible:
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * length / average_length)
            partial = 0.0
            matched = False
            for term in terms:
                frequency = counts.get(term)
                if frequency is None:
                    continue
                tf = float(frequency)
                partial += idf[term] * tf * (BM25_K1 + 1.0) / (tf + norm)
                matched = True
            if matched:
                ranked.append((-(memory.importance + base_bonus + partial), key, memory))
    return _ordered(ranked, limit), len(visible)


def _search_columns(
    views: Sequence[PartitionView], query: GameMemoryQuery, limit: int
) -> tuple[list[LexicalHit], int]:
    """The lexical search over numpy columns (large snapshots)."""
    masks = [view.mask(query) for view in views]
    visible = sum(int(np.count_nonzero(mask)) for mask in masks)
    if limit <= 0 or visible == 0:
        return [], visible
    base_bonus = TAG_BONUS * len(query.tags)
    text = query.text
    terms = _distinct_terms(text) if text is not None else []
    scores: list[npt.NDArray[np.float64]] = []
    candidates: list[npt.NDArray[np.int64]] = []
    if not terms:
        needle = _needle(text)
        for view, mask in zip(views, masks, strict=True):
            indices = np.flatnonzero(mask)
            if needle:
                indices = np.asarray(
                    [i for i in indices.tolist() if _contains(view.memories[i], needle)], np.int64
                )
            candidates.append(indices)
            scores.append(view.columns.importance[indices] + base_bonus)
    else:
        total_length = 0.0
        frequencies = dict.fromkeys(terms, 0)
        # Each term's postings are read once per view (a restored index copies them out).
        postings = [[view.lexical.postings(term) for term in terms] for view in views]
        for view, mask, found in zip(views, masks, postings, strict=True):
            # Integer sums and counts: exact in any order.
            total_length += float(view.lexical.counted_lengths.sum(where=mask))
            for term, (documents, _) in zip(terms, found, strict=True):
                frequencies[term] += int(np.count_nonzero(mask[documents]))
        average_length = total_length / visible
        idf = {
            term: math.log(1.0 + (visible - df + 0.5) / (df + 0.5))
            for term, df in frequencies.items()
        }
        for view, mask, found in zip(views, masks, postings, strict=True):
            held = [
                (term, documents, tf)
                for term, (documents, tf) in zip(terms, found, strict=True)
                if documents.size
            ]
            documents = _joined([documents for _, documents, _ in held])
            if documents.size * _SPARSE_FACTOR < len(view):
                # Few documents hold a term: accumulate over those only (sorted, unique).
                slots = sorted_unique([documents])
            else:
                slots = None  # accumulate over the whole column
            partial = np.zeros(len(view) if slots is None else slots.size, dtype=np.float64)
            if held:
                # Every term's postings at once, in term order: each posting's value is the
                # same elementwise expression as term by term (the idf repeated per posting),
                # and ``add.at`` adds them in that order, so each document gets the same
                # additions in the same (term) order.
                tf = _joined([counts for _, _, counts in held])
                sizes = [postings.size for _, postings, _ in held]
                weights = np.repeat([idf[term] for term, _, _ in held], sizes)
                # The length norm of the documents holding a term only (elementwise, so the
                # same value as over the whole column).
                lengths = view.lexical.lengths[documents]
                norms = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / average_length)
                at = documents if slots is None else np.searchsorted(slots, documents)
                np.add.at(partial, at, weights * tf * (BM25_K1 + 1.0) / (tf + norms))
            if slots is None:
                matched = np.zeros(len(view), dtype=np.bool_)
                matched[documents] = True
                indices = np.flatnonzero(matched & mask)
                partial = partial[indices]
            else:
                kept = mask[slots]
                indices, partial = slots[kept], partial[kept]
            candidates.append(indices)
            # Per document the same additions in the same (term) order on either path.
            scores.append(view.columns.importance[indices] + base_bonus + partial)
    return _top(views, candidates, scores, limit), visible


def _joined(arrays: list[npt.NDArray[_Item]]) -> npt.NDArray[_Item]:
    """``arrays`` end to end (the one array itself when there is one)."""
    if len(arrays) == 1:
        return arrays[0]
    return np.concatenate(arrays) if arrays else np.empty(0, np.int64)


#: A JSON string (group 1: its content, escapes as written) or a run of anything but JSON's
#: syntax and white space (group 2: a number, ``true``, ``false``, ``null``).
_JSON_VALUE = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"|([^\s{}\[\],:"]+)', re.DOTALL)
#: What a needle must not hold to be looked for in the payload's JSON as it is written:
#: JSON's syntax, a backslash and white space (none of which a key or value ends at).
_NOT_PLAIN = re.compile(r'[\s{}\[\],:"\\]')


def _contains(memory: GameMemory, needle: str) -> bool:
    """Whether ``needle`` (:func:`_needle`'s) is in the text ``memory``'s tokens come from:
    its searchable text, or its payload's keys and values (:func:`_payload_text`), each
    folded as the tokenizer folds it and lower-cased."""
    if needle in folded(memory.searchable_text or "").lower():
        return True
    payload = memory.payload_json
    if payload.isascii() and "\\" not in payload and _NOT_PLAIN.search(needle) is None:
        # The usual payload and needle (punctuation, an emoji): a needle with none of JSON's
        # syntax or white space is in the JSON where it is in one key or value, and ASCII
        # without an escape is its own folded form.
        return needle in payload.lower()
    return needle in folded(_payload_text(payload)).lower()


def _payload_text(payload_json: str) -> str:
    """The payload's keys and values, one a line, as lexical search reads them: strings with
    their escapes decoded (``strict_json.readable_json``, as the tokens are), numbers and
    literals as written, and none of JSON's syntax (a query ``"`` or ``:`` matched every
    memory with a payload, and one with an escaped character never matched it)."""
    return "\n".join(
        readable_json(string) if string else literal
        for string, literal in _JSON_VALUE.findall(payload_json)
    )


def _top(
    views: Sequence[PartitionView],
    candidates: list[npt.NDArray[np.int64]],
    scores: list[npt.NDArray[np.float64]],
    limit: int,
) -> list[LexicalHit]:
    total = sum(indices.size for indices in candidates)
    if total == 0:
        return []
    if total > limit + _CUT_MARGIN:
        # Keep only candidates scoring at least the limit-th best (ties included), then
        # order those exactly: the tie-break keys (Python tuples) are built for those only.
        everything = scores[0] if len(scores) == 1 else np.concatenate(scores)
        threshold = np.partition(everything, total - limit)[total - limit]
        kept = [score >= threshold for score in scores]
        candidates = [indices[keep] for indices, keep in zip(candidates, kept, strict=True)]
        scores = [score[keep] for score, keep in zip(scores, kept, strict=True)]
    rows: list[tuple[float, tuple[int, str, str], int, int]] = []
    for number, (view, indices, score) in enumerate(zip(views, candidates, scores, strict=True)):
        rows.extend(
            zip(
                map(operator.neg, score.tolist()),
                view.order_keys_at(indices),
                itertools.repeat(number),
                indices.tolist(),
            )
        )
    # Order first, then read only the memories that are handed out (a view opened from its
    # read file decodes a memory when it is read).
    rows.sort()
    kept = rows[:limit]
    if len(views) == 1:
        memories = views[0].memories_at(list(map(_last, kept)))
    else:
        memories = [views[number].memories[index] for _, _, number, index in kept]
    pairs = zip(memories, map(operator.neg, map(_first, kept)), strict=True)
    return list(map(_lexical_hit, pairs))


_first = operator.itemgetter(0)
_last = operator.itemgetter(-1)
#: ``LexicalHit`` of a ``(memory, score)`` pair, made by ``tuple.__new__`` (what the named
#: tuple's own constructor calls) without a Python call per hit.
_lexical_hit = functools.partial(tuple.__new__, LexicalHit)


def _ordered(
    ranked: list[tuple[float, tuple[int, str, str], GameMemory]], limit: int
) -> list[LexicalHit]:
    """Sort by score, then tick (newest first), then id and owner (ordinal); keep ``limit``.

    Rows are ``(-score, view.order_keys[i], memory)``: plain tuple order is the ranking, and
    no two rows tie on the key (one owner never holds an id twice).
    """
    ranked.sort()
    return [LexicalHit(memory, -negated) for negated, _, memory in ranked[:limit]]
