"""An immutable in-memory view of one owner partition, with columns for fast filtering.

A :class:`PartitionView` holds one owner's memories in the order they were appended, as
read at one version of the partition's files. Views are cached and shared by concurrent
searches, so everything derived from them (predicate columns, the lexical index, the id
order) is built once, lazily, and never mutated afterwards.

Partitions only grow, so a view of a grown partition is built from the previous one: the
new view keeps a reference to the previous view's *built* structures (never to the view
itself, so versions do not chain up in memory) and extends them with the new memories
only, instead of re-tokenizing the whole partition.

**Belief versions.** Memories of the partition (one owner) that share a ``belief_key`` are
versions of one belief. As of a query's moment, only the newest *time-visible* version is
recalled: among the versions on the query's timeline, not later than ``at_or_before`` and
not expired then, the one with the highest tick wins, and of two at one tick the later
append. The others are superseded at that moment, whatever the query's other filters say
(a belief is what the NPC holds then; a filter does not bring an older belief back).
Without ``at_or_before`` every version is time-visible and the newest of all wins. Older
versions stay in the save, so an earlier moment still recalls what was believed then.

**Retractions.** A memory forgotten at a moment (``forget``), or consolidated into a summary
(whose ``consolidates`` names it, at the summary's moment), is hidden from queries as of
that moment or later on that timeline, and from queries without ``at_or_before``; earlier
moments and other timelines still see it. A retracted version of a belief does not count
as its newest version (the older version is believed again).

:meth:`PartitionView.mask` applies these rules with the visibility predicate, so every
recall path (lexical, vector, both lexical code paths) sees the same memories.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Sequence
from functools import cached_property

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory, GameMemoryQuery, GameMoment, ordinal_key
from game_memory.store.tokenizer import tokenize

__all__ = ["LexicalIndex", "PartitionView", "PredicateColumns", "document_text"]

#: A view's scan of its memories: any ``belief_key``; the summaries' retraction rows
#: ``(position, timeline, tick)``; the sources named but not (yet) held, with their moments.
_Scan = tuple[bool, tuple[tuple[int, str, int], ...], dict[str, tuple[tuple[str, int], ...]]]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_EMPTY_DOCUMENTS: IntArray = np.empty(0, np.int64)
_EMPTY_FREQUENCIES: FloatArray = np.empty(0, np.float64)


def document_text(memory: GameMemory) -> str:
    """The text lexical search reads: searchable text, a newline, then the payload JSON."""
    return (memory.searchable_text or "") + "\n" + memory.payload_json


class _Codes:
    """An append-only, thread-safe string → small integer table shared by view versions."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._lock = threading.Lock()

    def code(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            with self._lock:
                code = self._codes.setdefault(value, len(self._codes))
        return code

    def get(self, value: str) -> int | None:
        return self._codes.get(value)


class PredicateColumns:
    """The visibility predicate's inputs as numpy columns, for whole-partition masks."""

    count: int
    _timelines: _Codes
    _scopes: _Codes
    _beliefs: _Codes

    def __init__(
        self, memories: Sequence[GameMemory], base: PredicateColumns | None = None
    ) -> None:
        start = base.count if base is not None else 0
        new = memories[start:]
        count = len(new)
        self._timelines = base._timelines if base is not None else _Codes()
        self._scopes = base._scopes if base is not None else _Codes()
        self._beliefs = base._beliefs if base is not None else _Codes()
        ticks = np.fromiter((m.moment.tick for m in new), np.int64, count)
        importance = np.fromiter((m.importance for m in new), np.float64, count)
        timelines = np.fromiter(
            (self._timelines.code(m.moment.timeline_id) for m in new), np.int32, count
        )
        has_expiry = np.fromiter((m.expires_at is not None for m in new), np.bool_, count)
        expiry = np.fromiter(
            (m.expires_at.tick if m.expires_at is not None else 0 for m in new), np.int64, count
        )
        scopes = np.fromiter((self._scopes.code(m.scope) for m in new), np.int32, count)
        kinds = np.fromiter((m.kind.ordinal for m in new), np.int8, count)
        beliefs = np.fromiter(
            (-1 if m.belief_key is None else self._beliefs.code(m.belief_key) for m in new),
            np.int32,
            count,
        )
        tag_lists: dict[str, list[int]] = {}
        for index, memory in enumerate(new, start):
            for tag in memory.tags:
                tag_lists.setdefault(tag, []).append(index)
        if base is None:
            self.ticks, self.importance, self.timeline_codes = ticks, importance, timelines
            self.has_expiry, self.expiry_ticks = has_expiry, expiry
            self.scope_codes, self.kind_codes = scopes, kinds
            self.belief_codes = beliefs
            self._tags = {tag: np.asarray(docs, np.int64) for tag, docs in tag_lists.items()}
        else:
            self.ticks = np.concatenate((base.ticks, ticks))
            self.importance = np.concatenate((base.importance, importance))
            self.timeline_codes = np.concatenate((base.timeline_codes, timelines))
            self.has_expiry = np.concatenate((base.has_expiry, has_expiry))
            self.expiry_ticks = np.concatenate((base.expiry_ticks, expiry))
            self.scope_codes = np.concatenate((base.scope_codes, scopes))
            self.kind_codes = np.concatenate((base.kind_codes, kinds))
            self.belief_codes = np.concatenate((base.belief_codes, beliefs))
            self._tags = dict(base._tags)
            for tag, docs in tag_lists.items():
                previous = self._tags.get(tag, _EMPTY_DOCUMENTS)
                self._tags[tag] = np.concatenate((previous, np.asarray(docs, np.int64)))
        self.count = start + count
        keyed = np.flatnonzero(self.belief_codes >= 0)
        # Versions grouped by belief, oldest first within each: (code, tick, append order).
        self._versions: IntArray = keyed[
            np.lexsort((keyed, self.ticks[keyed], self.belief_codes[keyed]))
        ]

    @property
    def has_beliefs(self) -> bool:
        """Whether any memory of the partition carries a ``belief_key``."""
        return bool(self._versions.size)

    def superseded(self, query: GameMemoryQuery, retracted: BoolArray | None = None) -> BoolArray:
        """Which memories are older versions of a belief as of the query's moment.

        See the module docstring: the newest time-visible, not retracted version wins.
        """
        hidden = np.zeros(self.count, dtype=np.bool_)
        versions = self._versions
        if not versions.size:
            return hidden
        if retracted is not None:
            versions = versions[~retracted[versions]]
        at = query.at_or_before
        if at is not None:
            code = self._timelines.get(at.timeline_id)
            if code is None:
                return hidden
            ticks = self.ticks[versions]
            timely = (self.timeline_codes[versions] == code) & (ticks <= at.tick)
            timely &= ~self.has_expiry[versions] | (at.tick < self.expiry_ticks[versions])
            versions = versions[timely]
        if versions.size < 2:
            return hidden
        beliefs = self.belief_codes[versions]
        older = beliefs[:-1] == beliefs[1:]  # a later version of the same belief follows
        hidden[versions[:-1][older]] = True
        return hidden

    def mask(self, query: GameMemoryQuery, retracted: BoolArray | None = None) -> BoolArray:
        """Which memories of the partition the query may see (session/owner checked by caller).

        The visibility predicate (``memory_matches_query``), the memories ``retracted`` as
        of the query's moment (see :meth:`PartitionView.retracted`) and, for belief
        versions, the rule that only the newest time-visible version is recalled.
        """
        mask = np.ones(self.count, dtype=np.bool_) if retracted is None else ~retracted
        if query.scopes:
            codes = [code for s in query.scopes if (code := self._scopes.get(s)) is not None]
            mask &= np.isin(self.scope_codes, np.asarray(codes, np.int32))
        if query.kinds:
            mask &= np.isin(self.kind_codes, np.asarray([k.ordinal for k in query.kinds], np.int8))
        for tag in query.tags:
            has_tag = np.zeros(self.count, dtype=np.bool_)
            docs = self._tags.get(tag)
            if docs is not None:
                has_tag[docs] = True
            mask &= has_tag
        if query.minimum_importance > 0.0:
            mask &= self.importance >= query.minimum_importance
        at = query.at_or_before
        if at is not None:
            code = self._timelines.get(at.timeline_id)
            if code is None:
                return np.zeros(self.count, dtype=np.bool_)
            mask &= self.timeline_codes == code
            mask &= self.ticks <= at.tick
            mask &= ~self.has_expiry | (at.tick < self.expiry_ticks)
        if self._versions.size:
            mask &= ~self.superseded(query, retracted)
        return mask


class LexicalIndex:
    """Token counts and an inverted index (term → documents, frequencies) of a partition."""

    _postings: dict[str, tuple[IntArray, FloatArray]]
    lengths: IntArray

    def __init__(self, memories: Sequence[GameMemory], base: LexicalIndex | None = None) -> None:
        start = len(base.lengths) if base is not None else 0
        terms: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(len(memories) - start, dtype=np.int64)
        for offset, memory in enumerate(memories[start:]):
            counts = Counter(tokenize(document_text(memory)))
            lengths[offset] = sum(counts.values())
            for term, frequency in counts.items():
                documents, frequencies = terms.setdefault(term, ([], []))
                documents.append(start + offset)
                frequencies.append(frequency)
        postings: dict[str, tuple[IntArray, FloatArray]] = (
            dict(base._postings) if base is not None else {}
        )
        for term, (documents, frequencies) in terms.items():
            new_documents = np.asarray(documents, np.int64)
            new_frequencies = np.asarray(frequencies, np.float64)
            previous = postings.get(term)
            if previous is not None:
                new_documents = np.concatenate((previous[0], new_documents))
                new_frequencies = np.concatenate((previous[1], new_frequencies))
            postings[term] = (new_documents, new_frequencies)
        self._postings = postings
        self.lengths: IntArray = (
            np.concatenate((base.lengths, lengths)) if base is not None else lengths
        )

    def postings(self, term: str) -> tuple[IntArray, FloatArray]:
        """Documents containing ``term`` and the term's frequency in each."""
        return self._postings.get(term, (_EMPTY_DOCUMENTS, _EMPTY_FREQUENCIES))


class PartitionView:
    """One owner's memories at one version of the partition, in append order.

    Args:
        session_id: The partition's session.
        owner_id: The partition's owner.
        memories: Every memory of the partition, in append order, ids unique.
        base: The view of an earlier version of the same partition whose memories are a
            prefix of ``memories``; its built indexes are extended instead of rebuilt.
    """

    def __init__(
        self,
        session_id: str,
        owner_id: str,
        memories: tuple[GameMemory, ...],
        positions: dict[str, int],
        base: PartitionView | None = None,
        retractions: tuple[tuple[str, GameMoment], ...] = (),
    ) -> None:
        self.session_id = session_id
        self.owner_id = owner_id
        self.memories = memories
        self.positions = positions
        self.retractions = retractions
        self._lock = threading.Lock()
        built = base.__dict__ if base is not None else {}
        self._base_columns: PredicateColumns | None = built.get("columns")
        self._base_lexical: LexicalIndex | None = built.get("lexical")
        self._base_sorted: tuple[list[str], list[GameMemory]] | None = built.get("_sorted")
        self._base_order_keys: tuple[tuple[int, str, str], ...] | None = built.get("order_keys")
        # What the base found in its memories (a prefix of these): extended, not recomputed.
        self._base_scan: tuple[int, _Scan] | None = (
            (len(base), built["_memory_scan"])
            if base is not None and "_memory_scan" in built
            else None
        )

    def __len__(self) -> int:
        return len(self.memories)

    def __repr__(self) -> str:
        return f"PartitionView(owner={self.owner_id!r}, memories={len(self.memories)})"

    @cached_property
    def _memory_scan(self) -> _Scan:
        """What the memories need of visibility: whether any carries a ``belief_key``, the
        retraction rows of the consolidation summaries among them (see
        :attr:`_retraction_rows`), and the sources summaries name that the view does not
        hold (yet). Extended from the base's scan: a grown view reads its new memories only."""
        start = 0
        keys = False
        rows: list[tuple[int, str, int]] = []
        waiting: dict[str, list[tuple[str, int]]] = {}
        if self._base_scan is not None:
            start, (keys, found, pending) = self._base_scan
            rows.extend(found)
            waiting = {memory_id: list(moments) for memory_id, moments in pending.items()}
        for position in range(start, len(self.memories)):
            memory = self.memories[position]
            keys = keys or memory.belief_key is not None
            for timeline, tick in waiting.pop(memory.memory_id, ()):
                rows.append((position, timeline, tick))  # a source that came after its summary
            for source in memory.consolidates:
                held = self.positions.get(source)
                moment = (memory.moment.timeline_id, memory.moment.tick)
                if held is not None and held < position:
                    rows.append((held, *moment))
                else:  # not held yet (or later in these memories): added when it comes
                    waiting.setdefault(source, []).append(moment)
        frozen = {memory_id: tuple(moments) for memory_id, moments in waiting.items()}
        return keys, tuple(rows), frozen

    @cached_property
    def has_beliefs(self) -> bool:
        """Whether visibility needs more than the per-memory predicate: belief versions or
        retractions (then every path uses :meth:`mask`)."""
        return bool(self._retraction_rows) or self._memory_scan[0]

    @cached_property
    def _retraction_rows(self) -> tuple[tuple[int, str, int], ...]:
        """``(position, timeline, tick)`` of every retraction of a memory of the view.

        Explicit retractions (``forget``) and those of consolidation summaries (a memory
        whose ``consolidates`` names others, as of its own moment); ids the view does not
        hold are ignored (a summary may name memories of other owners only by mistake).
        """
        rows: list[tuple[int, str, int]] = []
        for memory_id, moment in self.retractions:
            position = self.positions.get(memory_id)
            if position is not None:
                rows.append((position, moment.timeline_id, moment.tick))
        rows.extend(self._memory_scan[1])
        return tuple(rows)

    def retracted(self, query: GameMemoryQuery) -> BoolArray:
        """Which memories are retracted as of the query's moment (see the module docstring)."""
        hidden = np.zeros(len(self.memories), dtype=np.bool_)
        at = query.at_or_before
        for position, timeline, tick in self._retraction_rows:
            if at is None or (timeline == at.timeline_id and tick <= at.tick):
                hidden[position] = True
        return hidden

    def mask(self, query: GameMemoryQuery) -> BoolArray:
        """Which memories the query may see: the predicate, retractions and belief versions."""
        retracted = self.retracted(query) if self._retraction_rows else None
        return self.columns.mask(query, retracted)

    @cached_property
    def columns(self) -> PredicateColumns:
        """Predicate columns, built (or extended from the previous version) on first use."""
        with self._lock:
            base, self._base_columns = self._base_columns, None
            return PredicateColumns(self.memories, base)

    @cached_property
    def lexical(self) -> LexicalIndex:
        """The lexical index, built (or extended from the previous version) on first use."""
        with self._lock:
            base, self._base_lexical = self._base_lexical, None
            return LexicalIndex(self.memories, base)

    @cached_property
    def term_counts(self) -> tuple[tuple[dict[str, int], int], ...]:
        """Per memory: its token counts and token total (the small-partition lexical path)."""
        counted: list[tuple[dict[str, int], int]] = []
        for memory in self.memories:
            tokens = tokenize(document_text(memory))
            counted.append((dict(Counter(tokens)), len(tokens)))
        return tuple(counted)

    @cached_property
    def order_keys(self) -> tuple[tuple[int, str, str], ...]:
        """Per memory, its tie-break key after the score: newest tick, then id, then owner."""
        with self._lock:
            base, self._base_order_keys = self._base_order_keys, None
        base = base or ()
        owner = ordinal_key(self.owner_id)
        new = self.memories[len(base) :]
        return base + tuple((-m.moment.tick, ordinal_key(m.memory_id), owner) for m in new)

    @cached_property
    def _sorted(self) -> tuple[list[str], list[GameMemory]]:
        """Ordinal id keys and memories in id order; extended by insertion from the base."""
        with self._lock:
            base, self._base_sorted = self._base_sorted, None
        if base is None:
            pairs = sorted((ordinal_key(m.memory_id), m) for m in self.memories)
            return [key for key, _ in pairs], [memory for _, memory in pairs]
        keys, memories = list(base[0]), list(base[1])
        for memory in self.memories[len(keys) :]:
            key = ordinal_key(memory.memory_id)
            at = bisect.bisect_right(keys, key)
            keys.insert(at, key)
            memories.insert(at, memory)
        return keys, memories

    @cached_property
    def ordered(self) -> tuple[GameMemory, ...]:
        """The memories sorted by ``memory_id`` (ordinal), the order snapshots report."""
        return tuple(self._sorted[1])
