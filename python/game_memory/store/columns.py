"""The visibility predicate's inputs of one partition as numpy columns, for whole-partition masks.

:class:`PredicateColumns` holds, per memory in append order, what
``memory_matches_query`` and the belief rule read (tick, timeline, expiry, importance,
scope, kind, belief key, tags), as numpy columns with small integer codes for strings, so
a mask over a whole partition is a few vector operations. Columns of a grown partition
extend those of the previous version (only the new memories are read), and columns can
be exported and restored whole (``read_files.py`` persists them), so a partition opened
from its read file needs none of its memories decoded.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from game_memory.model import GameMemory, GameMemoryQuery

__all__ = ["BoolArray", "ColumnArrays", "PredicateColumns"]

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_EMPTY_DOCUMENTS: IntArray = np.empty(0, np.int64)

#: Exported columns: arrays by name, and the code tables (timelines, scopes, beliefs, tags).
ColumnArrays = tuple[dict[str, npt.NDArray[np.generic]], dict[str, list[str]]]
_ARRAYS = (
    ("ticks", np.int64),
    ("importance", np.float64),
    ("timeline_codes", np.int32),
    ("has_expiry", np.bool_),
    ("expiry_ticks", np.int64),
    ("scope_codes", np.int32),
    ("kind_codes", np.int8),
    ("belief_codes", np.int32),
)


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

    def values(self) -> list[str]:
        """The strings in code order."""
        with self._lock:
            return list(self._codes)

    @classmethod
    def of(cls, values: list[str]) -> _Codes:
        codes = cls()
        codes._codes = {value: code for code, value in enumerate(values)}
        return codes


@dataclass(frozen=True, slots=True)
class _Shape:
    """What a mask may skip, for one version of the columns: ``timeline`` is the code every
    memory's timeline has (``-1``: several, or no memory), ``expiring`` whether any memory
    has an expiry, ``ascending`` whether the ticks never decrease in append order (a game
    records its memories as its time passes: then "at or before a tick" is a prefix)."""

    timeline: int
    expiring: bool
    ascending: bool
    last_tick: int

    @classmethod
    def of(cls, ticks: IntArray, timelines: npt.NDArray[np.int32], expiry: BoolArray) -> _Shape:
        """The shape of whole columns (a few passes over them)."""
        if not ticks.size:
            return cls(-1, False, True, 0)
        first = int(timelines[0])
        single = bool((timelines == first).all())
        return cls(
            first if single else -1,
            bool(expiry.any()),
            bool((ticks[1:] >= ticks[:-1]).all()),
            int(ticks[-1]),
        )

    def extended(
        self, start: int, ticks: IntArray, timelines: npt.NDArray[np.int32], expiry: BoolArray
    ) -> _Shape:
        """The shape once ``start`` memories of this shape are followed by these columns
        (passes over the new memories only)."""
        if not ticks.size:
            return self
        new = _Shape.of(ticks, timelines, expiry)
        if not start:
            return new
        return _Shape(
            self.timeline if self.timeline == new.timeline else -1,
            self.expiring or new.expiring,
            self.ascending and new.ascending and int(ticks[0]) >= self.last_tick,
            new.last_tick,
        )


class _Room:
    """The columns of a line of partition versions, with room after them to grow in place.

    Each version's arrays are views of the first ``count`` values: the values of a version
    never change, so a version that extends the newest one (``length`` values written, no
    other version grown from it yet) writes its new values after them, in place, instead of
    copying every column (8 arrays: 3.8 MB at 100k memories, about 1.8 ms, which the first
    recall after each append paid). A version grown from an older one, or one that no
    longer fits, copies into a new room with an eighth more (at least 1,024 values):
    amortized, a few values copied per value added. The room is at most 9/8 of the columns
    plus 1,024 values per column.
    """

    __slots__ = ("columns", "length", "lock")

    def __init__(self, columns: list[npt.NDArray[np.generic]], length: int) -> None:
        self.columns = columns
        self.length = length
        self.lock = threading.Lock()

    @classmethod
    def extended(cls, base: PredicateColumns, fresh: tuple[npt.NDArray[np.generic], ...]) -> _Room:
        """The room holding ``base``'s columns followed by ``fresh`` (one array per column)."""
        start, total = base.count, base.count + fresh[0].size
        room = base._room
        if room is not None:
            with room.lock:
                if room.length == start and total <= room.columns[0].size:
                    for column, values in zip(room.columns, fresh, strict=True):
                        column[start:total] = values
                    room.length = total
                    return room
        size = max(total + total // 8, total + 1_024)
        columns: list[npt.NDArray[np.generic]] = []
        for (name, dtype), values in zip(_ARRAYS, fresh, strict=True):
            column = np.empty(size, dtype)
            column[:start] = getattr(base, name)
            column[start:total] = values
            columns.append(column)
        return cls(columns, total)


class PredicateColumns:
    """The visibility predicate's inputs as numpy columns, for whole-partition masks."""

    count: int
    _timelines: _Codes
    _scopes: _Codes
    _beliefs: _Codes
    _shape: _Shape | None
    _room: _Room | None  # the room the columns are views of, when grown (see _Room)

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
        self._shape = (
            base._shape.extended(start, ticks, timelines, has_expiry)
            if base is not None and base._shape is not None
            else None
        )
        fresh = (ticks, importance, timelines, has_expiry, expiry, scopes, kinds, beliefs)
        self._room = None
        if base is None:
            self.ticks, self.importance, self.timeline_codes = ticks, importance, timelines
            self.has_expiry, self.expiry_ticks = has_expiry, expiry
            self.scope_codes, self.kind_codes = scopes, kinds
            self.belief_codes = beliefs
            self._tags = {tag: np.asarray(docs, np.int64) for tag, docs in tag_lists.items()}
        else:
            self._room = room = _Room.extended(base, fresh)
            for (name, _), column in zip(_ARRAYS, room.columns, strict=True):
                setattr(self, name, column[: start + count])
            self._tags = dict(base._tags)
            for tag, docs in tag_lists.items():
                previous = self._tags.get(tag, _EMPTY_DOCUMENTS)
                self._tags[tag] = np.concatenate((previous, np.asarray(docs, np.int64)))
        self.count = start + count
        self._index_versions()

    def _index_versions(self) -> None:
        keyed = np.flatnonzero(self.belief_codes >= 0)
        # Versions grouped by belief, oldest first within each: (code, tick, append order).
        self._versions: IntArray = keyed[
            np.lexsort((keyed, self.ticks[keyed], self.belief_codes[keyed]))
        ]

    def export(self) -> ColumnArrays:
        """The columns and code tables, to be persisted and given to :meth:`restore`."""
        arrays: dict[str, npt.NDArray[np.generic]] = {
            name: getattr(self, name) for name, _ in _ARRAYS
        }
        tags = sorted(self._tags)
        counts = [self._tags[tag].size for tag in tags]
        arrays["tag_offsets"] = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
        arrays["tag_documents"] = (
            np.concatenate([self._tags[tag] for tag in tags]) if tags else _EMPTY_DOCUMENTS
        )
        tables = {
            "timelines": self._timelines.values(),
            "scopes": self._scopes.values(),
            "beliefs": self._beliefs.values(),
            "tags": tags,
        }
        return arrays, tables

    @classmethod
    def restore(cls, exported: ColumnArrays, count: int) -> PredicateColumns:
        """Columns of ``count`` memories from :meth:`export`'s arrays (checked shapes).

        Raises:
            ValueError: an array has the wrong type or length.
        """
        arrays, tables = exported
        columns = cls.__new__(cls)
        for name, dtype in _ARRAYS:
            array = arrays[name]
            if array.dtype != dtype or array.shape != (count,):
                raise ValueError(f"column {name} has the wrong type or length")
            setattr(columns, name, array)
        columns._timelines = _Codes.of(tables["timelines"])
        columns._scopes = _Codes.of(tables["scopes"])
        columns._beliefs = _Codes.of(tables["beliefs"])
        offsets = arrays["tag_offsets"].astype(np.int64, copy=False)
        documents = arrays["tag_documents"].astype(np.int64, copy=False)
        tags = tables["tags"]
        if offsets.shape != (len(tags) + 1,) or int(offsets[-1]) != documents.size:
            raise ValueError("the tag columns do not match their table")
        if documents.size and (int(documents.min()) < 0 or int(documents.max()) >= count):
            raise ValueError("a tag names a memory the columns do not hold")
        columns._tags = {
            tag: documents[int(offsets[i]) : int(offsets[i + 1])] for i, tag in enumerate(tags)
        }
        columns.count = count
        columns._shape = None
        columns._room = None
        columns._index_versions()
        return columns

    def shape(self) -> _Shape:
        """The columns' :class:`_Shape`, computed on first use (then kept: the columns of a
        version never change, and a grown version extends it from the new memories)."""
        shape = self._shape
        if shape is None:
            shape = self._shape = _Shape.of(self.ticks, self.timeline_codes, self.has_expiry)
        return shape

    @property
    def has_beliefs(self) -> bool:
        """Whether any memory of the partition carries a ``belief_key``."""
        return bool(self._versions.size)

    def timeline_code(self, timeline_id: str) -> int | None:
        """The code :attr:`timeline_codes` holds for ``timeline_id`` (``None``: no memory
        of the partition is on it)."""
        return self._timelines.get(timeline_id)

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
            # The same mask with the passes the columns' shape shows to change nothing
            # skipped: every memory on the query's timeline, no expiry, ticks in order.
            shape = self.shape()
            if shape.timeline != code:
                mask &= self.timeline_codes == code
            if shape.ascending:
                mask[int(np.searchsorted(self.ticks, at.tick, side="right")) :] = False
            else:
                mask &= self.ticks <= at.tick
            if shape.expiring:
                mask &= ~self.has_expiry | (at.tick < self.expiry_ticks)
        if self._versions.size:
            mask &= ~self.superseded(query, retracted)
        return mask
