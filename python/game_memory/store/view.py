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
import itertools
import operator
import threading
import weakref
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory, GameMemoryQuery, GameMoment, ordinal_key
from game_memory.store.columns import BoolArray, PredicateColumns
from game_memory.store.lazy import LazyMemories, LazyPositions, Reordered
from game_memory.store.packed_ids import PackedIds
from game_memory.store.postings import LexicalIndex, document_text
from game_memory.store.tokenizer import tokenize

__all__ = [
    "IdList",
    "IdPositions",
    "LexicalIndex",
    "PartitionView",
    "PredicateColumns",
    "ReadPrefix",
    "document_text",
]

#: A view's scan of its memories: any ``belief_key``; the summaries' retraction rows
#: ``(position, timeline, tick)``; the sources named but not (yet) held, with their moments.
_Scan = tuple[bool, tuple[tuple[int, str, int], ...], dict[str, tuple[tuple[str, int], ...]]]

IntArray = npt.NDArray[np.int64]


class IdPositions(Mapping[str, int]):
    """``memory_id`` -> position in a view, in append order; immutable.

    A grown view's map shares its base view's dictionary and holds only the ids added
    since in a small one of its own (copied from the base's, then extended), so an append
    costs the ids added since the last merge, not the partition's size. Once the small
    dictionary reaches :attr:`MERGE` ids it is merged (never into a dictionary older views
    still read) into a middle one of the ids added since the large one: the shared part is
    then that pair, looked up middle first. Only once the middle one is as large as the
    large one are the two merged into one. Amortized, a few ids are copied per append, and
    no append copies the partition's ids while the session added fewer: merging them every
    :attr:`MERGE` ids cost 0.4–3 ms at 100k memories, and a second dictionary of them
    (3.8 MB) beside the read file's.
    """

    __slots__ = ("_added", "_shared")

    #: How many ids a map keeps beside the shared dictionary before merging them.
    MERGE = 1_024

    def __init__(self, shared: Mapping[str, int], added: dict[str, int] | None = None) -> None:
        self._shared = shared
        self._added = added if added is not None else {}

    @classmethod
    def extending(cls, base: Mapping[str, int] | None) -> tuple[Mapping[str, int], dict[str, int]]:
        """``(shared, added)`` to extend ``base`` with: new ids go into ``added`` (the
        caller's own), looked up there first; ``added is shared`` when nothing is shared
        (a first build, or a merge): wrap them with :meth:`of` once extended. A lazy view's
        ``LazyPositions`` is shared as it is (it builds its dict only when lookups are
        many), and its dict is what a merge copies."""
        if isinstance(base, IdPositions):
            if len(base._added) < cls.MERGE:
                return base._shared, dict(base._added)
            pair = base._shared
            large: Mapping[str, int] = pair
            earlier: dict[str, int] = {}
            if isinstance(pair, IdPositions):  # a (large, middle) pair of an earlier merge
                large, earlier = pair._shared, pair._added
            middle = {**earlier, **base._added}
            if len(middle) < len(large):
                return cls(large, middle), {}
            whole = large.positions() if isinstance(large, LazyPositions) else large
            merged = {**whole, **middle}
            return merged, merged
        if isinstance(base, LazyPositions):
            return base, {}
        built = dict(base) if base is not None else {}
        return built, built

    @classmethod
    def of(cls, shared: Mapping[str, int], added: dict[str, int]) -> IdPositions:
        """The map of :meth:`extending`'s pair, once extended."""
        return cls(shared, None if added is shared else added)

    def get(self, key: str, default: int | None = None) -> int | None:  # type: ignore[override]
        found = self._added.get(key)
        return found if found is not None else self._shared.get(key, default)

    def __getitem__(self, key: str) -> int:
        found = self._added.get(key)
        return found if found is not None else self._shared[key]

    def __contains__(self, key: object) -> bool:
        return key in self._added or key in self._shared

    def __iter__(self) -> Iterator[str]:
        return itertools.chain(self._shared, self._added)

    def __len__(self) -> int:
        return len(self._shared) + len(self._added)


class IdList(Sequence[str]):
    """The first ``length`` ids of ``base`` followed by a list shared by the versions of a
    view; immutable.

    ``base`` is the ids a view was restored with (a read file's, kept packed: see
    ``packed_ids.py``), never written. A grown view's ids extend its base view's list in
    place when the base is its newest version (nobody extended that list past it yet), so
    the first recall after an append no longer copies every id (0.3-1.5 ms at 100k);
    otherwise the list's prefix is copied. Items before ``length`` are never written
    again, so every version reads its own ids only.
    """

    __slots__ = ("_base", "_items", "_length")

    _extending = threading.Lock()

    def __init__(
        self, items: list[str], length: int | None = None, base: Sequence[str] = ()
    ) -> None:
        self._base = base
        self._items = items
        self._length = len(base) + len(items) if length is None else length

    def extended(self, more: Sequence[str]) -> IdList:
        """These ids followed by ``more``."""
        base = self._base
        kept = self._length - len(base)
        with IdList._extending:
            if len(self._items) == kept:
                self._items.extend(more)
                return IdList(self._items, len(base) + len(self._items), base)
        return IdList([*self._items[:kept], *more], None, base)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step == 1 and not self._base:
                return self._items[start:stop]
            if step == 1 and stop <= len(self._base):
                return list(self._base[start:stop])
            return [self[position] for position in range(start, stop, step)]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("memory id index out of range")
        restored = len(self._base)
        return self._base[index] if index < restored else self._items[index - restored]

    def __len__(self) -> int:
        return self._length

    def picked(self, indexes: Sequence[int]) -> list[str]:
        """The ids at ``indexes`` (each in ``0 .. len − 1``), in that order: one bounds
        check for all of them instead of one :meth:`__getitem__` call each (a recall reads
        a few dozen ids this way, by the positions numpy chose)."""
        if not indexes:
            return []
        lowest, highest = min(indexes), max(indexes)
        if lowest < 0 or highest >= self._length:
            raise IndexError("memory id index out of range")
        base = self._base
        if not base:
            return list(map(self._items.__getitem__, indexes))
        if highest < len(base):  # all restored (the usual case)
            if isinstance(base, PackedIds):
                return base.picked(indexes)
            return list(map(base.__getitem__, indexes))
        return list(map(self.__getitem__, indexes))

    def __iter__(self) -> Iterator[str]:
        kept = self._length - len(self._base)
        return itertools.chain(self._base, itertools.islice(self._items, kept))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdList | list | tuple):
            return len(other) == self._length and all(
                a == b for a, b in zip(self, other, strict=False)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IdList({list(self)!r})"


@dataclass(frozen=True, slots=True)
class ReadPrefix:
    """What a view's first ``count`` memories give visibility, BM25 and joins, restored from
    the partition's read file (``read_files.py``) instead of computed from the memories.

    ``hashes`` and ``digests`` are 32 bytes per memory: ``sha256(memory_id)`` and the content
    digest the derived vector index compares (``index/entries.py``); read-only views of the
    read file's map when restored from one part (nothing copied at open).
    """

    count: int
    columns: PredicateColumns
    lexical: LexicalIndex
    scan: _Scan
    hashes: bytes | memoryview
    digests: bytes | memoryview


class _Lineage:
    """Views that each extend the one before (see :meth:`PartitionView.extends`): ``tip``
    is the length of the newest; a view joins only when its base is that newest one."""

    __slots__ = ("tip",)

    joining = threading.Lock()

    def __init__(self, tip: int) -> None:
        self.tip = tip


class PartitionView:
    """One owner's memories at one version of the partition, in append order.

    Args:
        session_id: The partition's session.
        owner_id: The partition's owner.
        memories: Every memory of the partition, in append order, ids unique.
        base: The view of an earlier version of the same partition whose memories are a
            prefix of ``memories``; its built indexes are extended instead of rebuilt.
    """

    _base_columns: PredicateColumns | None
    _base_lexical: LexicalIndex | None
    _base_sorted: tuple[list[str], list[int]] | None
    _base_order_keys: tuple[tuple[int, str, str], ...] | None
    _base_ids: IdList | None
    _base_scan: tuple[int, _Scan] | None
    prefix: ReadPrefix | None

    def __init__(
        self,
        session_id: str,
        owner_id: str,
        memories: Sequence[GameMemory],
        positions: Mapping[str, int],
        base: PartitionView | None = None,
        retractions: tuple[tuple[str, GameMoment], ...] = (),
        prefix: ReadPrefix | None = None,
    ) -> None:
        self.session_id = session_id
        self.owner_id = owner_id
        self.memories = memories
        self.positions = positions
        self.retractions = retractions
        self._lock = threading.Lock()
        self._last_mask: tuple[tuple[object, ...], BoolArray] | None = None
        self._lineage = _Lineage(len(memories))
        if base is not None:
            with _Lineage.joining:
                if base._lineage.tip == len(base) <= len(memories):
                    self._lineage = base._lineage
                    self._lineage.tip = len(memories)
            # The base's built structures, or those it had not used yet (never the base).
            built = base.__dict__
            prefix = base.prefix
            self._base_columns = built.get("columns", base._base_columns)
            self._base_lexical = built.get("lexical", base._base_lexical)
            self._base_sorted = built.get("_sorted", base._base_sorted)
            self._base_order_keys = built.get("order_keys", base._base_order_keys)
            self._base_ids = built.get("memory_ids", base._base_ids)
            # What the base found in its memories (a prefix of these): extended.
            self._base_scan = (
                (len(base), built["_memory_scan"]) if "_memory_scan" in built else base._base_scan
            )
        elif prefix is not None:
            self._base_columns, self._base_lexical = prefix.columns, prefix.lexical
            self._base_sorted, self._base_order_keys = None, None
            self._base_ids = None
            self._base_scan = (prefix.count, prefix.scan)
        else:
            self._base_columns, self._base_lexical = None, None
            self._base_sorted, self._base_order_keys = None, None
            self._base_ids = None
            self._base_scan = None
        #: Restored facts of the first ``prefix.count`` memories (their digests for joins).
        self.prefix = prefix
        #: ``(count, hashes, digests)`` of the first ``count`` memories as the last read file
        #: written from this view's lineage computed them (``read_path.persist``), so the
        #: next one computes only the memories added since: a bulk ingest rewrites the read
        #: file after each batch, and computing every memory's digest again each time made
        #: the ingest quadratic. 64 bytes per memory, inherited by grown views.
        self.digested: tuple[int, bytes, bytes] | None = base.digested if base is not None else None

    def __len__(self) -> int:
        return len(self.memories)

    def extends(self, other: PartitionView) -> bool:
        """Whether ``other``'s memories are known to be a prefix of these, without comparing
        them (``False`` means unknown): both were built in one chain of views, each
        extending the newest before it, so a join or cache can be extended instead of
        recomputed. Comparing the memories cost the partition's size after each append.
        """
        return other._lineage is self._lineage and len(other) <= len(self)

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

    @property
    def memory_scan(self) -> _Scan:
        """:attr:`_memory_scan`, for the read file that persists it (``read_files.py``)."""
        return self._memory_scan

    @cached_property
    def has_beliefs(self) -> bool:
        """Whether visibility needs more than the per-memory predicate: belief versions or
        retractions (then every path uses :meth:`mask`)."""
        return bool(self.retractions) or bool(self._memory_scan[1]) or self._memory_scan[0]

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
        summarized = self._memory_scan[1]
        if summarized:
            # A summary stands for what came before it: a memory of a named id that is
            # later than the summary on its timeline is not one of its sources but a new
            # memory under an id erased since (``consolidate`` refuses later sources), and
            # a retraction as of the summary's moment would hide it at every moment.
            columns = self.columns
            ticks, timelines = columns.ticks, columns.timeline_codes
            for position, timeline, tick in summarized:
                if (
                    timelines[position] != columns.timeline_code(timeline)
                    or ticks[position] <= tick
                ):
                    rows.append((position, timeline, tick))
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
        """Which memories the query may see: the predicate, retractions and belief versions.

        Read-only, and the last one is kept: a hybrid recall asks once for its lexical and
        once for its vector channel (and a game asks one NPC again as of the same moment),
        so the second costs a tuple comparison instead of a pass over every column.
        """
        at = query.at_or_before
        key = (
            query.scopes,
            query.kinds,
            query.tags,
            query.minimum_importance,
            None if at is None else (at.timeline_id, at.tick),
        )
        last = self._last_mask
        if last is not None and last[0] == key:
            return last[1]
        retracted = self.retracted(query) if self._retraction_rows else None
        mask = self.columns.mask(query, retracted)
        mask.flags.writeable = False
        self._last_mask = (key, mask)  # one assignment: readers see the old pair or this
        return mask

    @cached_property
    def columns(self) -> PredicateColumns:
        """Predicate columns, built (or extended from the previous version) on first use."""
        with self._lock:
            base, self._base_columns = self._base_columns, None
            if base is not None and base.count == len(self.memories):
                # Nothing to add (a partition loaded from its read file): the base's
                # columns are this version's, as they are; a room to grow in is made by
                # the first version that adds memories (4.3 MB copied at 100k otherwise).
                return base
            return PredicateColumns(self.memories, base)

    @cached_property
    def lexical(self) -> LexicalIndex:
        """The lexical index, built (or extended from the previous version) on first use."""
        with self._lock:
            base, self._base_lexical = self._base_lexical, None
            if base is not None and len(base.lengths) == len(self.memories):
                return base  # nothing to add, as for the columns above
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
        if not isinstance(self.memories, LazyMemories):
            new = self.memories[len(base) :]
            return base + tuple((-m.moment.tick, ordinal_key(m.memory_id), owner) for m in new)
        ticks = self.columns.ticks[len(base) :].tolist()
        ids = self._ids()[len(base) :]
        return base + tuple(
            (-tick, ordinal_key(memory_id), owner)
            for tick, memory_id in zip(ticks, ids, strict=True)
        )

    def _ids(self) -> IdList:
        """The memory ids in append order (of a lazy view: its positions, nothing decoded)."""
        return self.memory_ids

    @cached_property
    def memory_ids(self) -> IdList:
        """The memory ids in append order (of a lazy view: its positions, nothing decoded).

        A grown view extends its base view's ids (:class:`IdList`: in place, only the new
        memories' ids): every append makes a new view, and the first recall after it reads
        the ids.
        """
        with self._lock:
            base, self._base_ids = self._base_ids, None
        if base is not None:
            return base.extended([memory.memory_id for memory in self.memories[len(base) :]])
        if isinstance(self.positions, LazyPositions):  # restored: the read file's ids
            return IdList([], None, self.positions.ids)
        if isinstance(self.memories, LazyMemories):
            return IdList(list(self.positions))  # built in append order (partitions.py)
        return IdList([memory.memory_id for memory in self.memories])

    def order_key(self, position: int) -> tuple[int, str, str]:
        """:attr:`order_keys` of one memory, computed without building all of them."""
        if "order_keys" in self.__dict__:
            return self.order_keys[position]
        tick = int(self.columns.ticks[position])
        return (-tick, ordinal_key(self.memory_ids[position]), ordinal_key(self.owner_id))

    def order_keys_at(self, positions: IntArray) -> list[tuple[int, str, str]]:
        """``[self.order_key(p) for p in positions]``, read from the columns at once (a
        recall orders a few dozen candidates this way)."""
        if "order_keys" in self.__dict__:
            return list(map(self.order_keys.__getitem__, positions.tolist()))
        ticks = map(operator.neg, self.columns.ticks[positions].tolist())
        ids = self.memory_ids.picked(positions.tolist())
        # ordinal_key returns ASCII text as it is: the same keys without the calls.
        keys = ids if all(map(str.isascii, ids)) else list(map(ordinal_key, ids))
        owner = ordinal_key(self.owner_id)
        return list(zip(ticks, keys, itertools.repeat(owner), strict=False))

    def memories_at(self, positions: Sequence[int]) -> list[GameMemory]:
        """``[self.memories[p] for p in positions]``; of a lazy view, with one bounds check
        (only these memories are decoded)."""
        memories = self.memories
        if isinstance(memories, LazyMemories):
            return memories.picked(positions)
        return [memories[position] for position in positions]

    @cached_property
    def _sorted(self) -> tuple[list[str], list[int]]:
        """Ordinal id keys and positions in id order; extended by insertion from the base."""
        with self._lock:
            base, self._base_sorted = self._base_sorted, None
        ids = self._ids()
        if base is None:
            return _in_id_order(ids)
        keys, order = list(base[0]), list(base[1])
        for at in range(len(keys), len(ids)):
            key = ordinal_key(ids[at])
            where = bisect.bisect_right(keys, key)
            keys.insert(where, key)
            order.insert(where, at)
        return keys, order

    @cached_property
    def ordered(self) -> Sequence[GameMemory]:
        """The memories sorted by ``memory_id`` (ordinal), the order snapshots report.

        A lazy sequence (it compares equal to the tuple of the same memories): every recall
        hands out its snapshot's memories, and few callers read them, so nothing is sorted
        or copied until one does. A view read from its read file decodes a memory only when
        it is read; a grown view's order extends its base view's (:attr:`_sorted`), so the
        first recall after an append no longer copies the whole partition into a tuple
        (0.5 ms at 10k memories).

        The sequence reaches this view only through a weak reference: a view and its
        order must not hold each other, or every view of a partition (one per append,
        with its columns and indexes) waits for the garbage collector's full pass to be
        freed, and that pass took 20–36 ms at 100k memories. An order read after the view
        is gone is sorted from the memories themselves (the same order).
        """
        view = weakref.ref(self)
        memories = self.memories

        def order() -> Sequence[int]:
            alive = view()
            if alive is not None:
                return alive._sorted[1]
            return _in_id_order(memory.memory_id for memory in memories)[1]

        return Reordered(memories, order)


def _in_id_order(ids: Iterable[str]) -> tuple[list[str], list[int]]:
    """The ordinal keys of ``ids`` sorted, and the positions of the ids in that order."""
    pairs = sorted((ordinal_key(memory_id), at) for at, memory_id in enumerate(ids))
    return [key for key, _ in pairs], [at for _, at in pairs]
