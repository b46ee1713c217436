"""Index entries joined to the authoritative snapshot: only vectors that may be scored.

A :class:`PartitionJoin` matches one owner partition's index entries to the authoritative
view of the same partition by ``sha256(memory_id)`` and checks each content digest. Only
ready entries of the active identity whose digest matches become scoring rows; orphans
(no such memory), mismatches (another content), stale (another identity) and pending
entries are counted and left out. Views and index partitions are immutable versions, so
a join is computed once per pair and cached, and extended (not recomputed) when both
versions only grew; a warm search is then one matrix-vector product plus a gather of the
visible rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from game_memory.durable.names import identity_hash
from game_memory.index.entries import EntryState, MemoryDigests
from game_memory.index.partition import IndexPartition, Positions
from game_memory.store.growing import Growing
from game_memory.store.lazy import same_prefix
from game_memory.store.view import PartitionView

__all__ = ["INLINE_ENTRIES", "INLINE_GROWTH", "JoinCache", "PartitionJoin", "view_digests"]

IntArray = npt.NDArray[np.int64]

#: Most memories and entries together by which :meth:`JoinCache.extended_now` extends a
#: join on the caller's thread (the event loop): each costs a digest lookup and a few
#: bytes compared, and the join's arrays are copied once.
INLINE_GROWTH = 64
#: Most entries of a partition whose join :meth:`JoinCache.extended_now` extends there:
#: larger ones are scored in the pool anyway (``recall.pipeline.INLINE_ROWS``), which
#: extends the join itself, and their arrays' copies (0.3 ms at 100k) stay off the loop.
INLINE_ENTRIES = 16_384


_READY, _STALE, _UNREADY, _ORPHAN, _MISMATCHED = range(5)


class _Grown:
    """Bytes that only grow at their end: a head shared as it is (the view's hashes or
    digests: bytes, or views of its read file's map) and a tail owned here.

    An aligned join kept a copy of its view's 32 bytes per memory in a ``bytearray`` to
    grow it with appends: 6.4 MB written into fresh memory by the first recall of a 100k
    save, which page-faulted more than it copied. Now only what appends add is copied.
    """

    __slots__ = ("head", "tail")

    def __init__(self, head: bytes | memoryview = b"") -> None:
        self.head = head
        self.tail = bytearray()

    def __len__(self) -> int:
        return len(self.head) + len(self.tail)

    def extend(self, more: bytes | memoryview) -> None:
        self.tail += more

    def slice(self, start: int, stop: int) -> bytes:
        """``bytes(self)[start:stop]`` (``0 <= start <= stop``) without joining the rest."""
        split = len(self.head)
        if stop <= split:
            return bytes(self.head[start:stop])
        if start >= split:
            return bytes(self.tail[start - split : stop - split])
        return bytes(self.head[start:]) + bytes(self.tail[: stop - split])

    def whole(self) -> bytes:
        return self.slice(0, len(self))


@dataclass(slots=True)
class _JoinState:
    """What a join needs to be extended to grown versions instead of being recomputed.

    Owned by one join at a time: extending a join moves (and then updates in place) its
    state into the new join, so an extension costs what changed, not the partition's size.
    A join whose state moved on keeps its arrays and counts, which stay valid for searches
    that still hold it; it just cannot be extended again (``owner`` is then another join).

    An **aligned** join (``aligned`` records, the usual case: every entry was appended for
    the memory appended at the same position) keeps the view's hashes and digests as byte
    strings and each slot's class in an array, and no object per memory; it becomes a
    general one (the dictionaries, built then) the first time an extension breaks the
    alignment.
    """

    slots: dict[bytes, int] | None  # sha256(memory_id) -> view position
    expected: list[bytes] | None  # content digest per view position
    classes: dict[bytes, tuple[int, int, int]] | None  # entry -> (class, row, view position)
    counts: list[int]  # entries per class
    owner: object = None
    aligned: int = -1  # records of an aligned join (slot i is view position i); -1: general
    hashes: _Grown = field(default_factory=_Grown)  # aligned: the view's memory hashes
    contents: _Grown = field(default_factory=_Grown)  # aligned: their content digests
    kinds: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    #: Room the newest ``kinds``, ``rows`` and ``positions`` grow into (``store/growing.py``).
    rooms: dict[str, Growing] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionJoin:
    """Index entries of one partition matched against its authoritative view.

    ``rows`` and ``positions`` are parallel: the row (in the active identity's matrix) and
    the view position of every scorable memory. ``pending`` counts the view's memories that
    have no ready vector of any identity for their current content (no entry, a pending or
    failed entry, or an entry computed from other content, which is also ``mismatched``).
    """

    view: PartitionView | None
    partition: IndexPartition | None
    active: int | None
    rows: IntArray
    positions: IntArray
    ready: int
    stale: int
    pending: int
    orphans: int
    mismatched: int
    state: _JoinState = field(repr=False)
    dense: bool = False

    @property
    def entries(self) -> int:
        """How many memories of the partition have an entry (any state)."""
        return self.partition.live if self.partition is not None else 0


def _classify(
    partition: IndexPartition,
    slot: int,
    position: int | None,
    expected: list[bytes],
    active: int | None,
) -> tuple[int, int, int]:
    if position is None:
        return (_ORPHAN, 0, -1)
    if partition.digest(slot) != expected[position]:
        return (_MISMATCHED, 0, position)
    if partition.states[slot] != EntryState.READY:
        return (_UNREADY, 0, position)
    if active is None or partition.identities[slot] != active:
        return (_STALE, 0, position)
    return (_READY, int(partition.rows[slot]), position)


def _counting(values: IntArray, start: int = 0) -> bool:
    """Whether ``values[start:]`` is ``start, start + 1, …`` (one vector comparison)."""
    return bool(np.array_equal(values[start:], np.arange(start, values.size, dtype=np.int64)))


def _finish(
    view: PartitionView | None,
    partition: IndexPartition | None,
    active: int | None,
    state: _JoinState,
    rows: IntArray,
    positions: IntArray,
    dense: bool = False,
) -> PartitionJoin:
    counts = state.counts
    memories = len(view.memories) if view is not None else 0
    joined = PartitionJoin(
        view,
        partition,
        active,
        rows,
        positions,
        counts[_READY],
        counts[_STALE],
        memories - counts[_READY] - counts[_STALE],
        counts[_ORPHAN],
        counts[_MISMATCHED],
        state,
        dense,
    )
    state.owner = joined
    return joined


def view_digests(
    view: PartitionView, digests: MemoryDigests, start: int = 0
) -> tuple[list[bytes], list[bytes]]:
    """``sha256(memory_id)`` and content digests of the view's memories from ``start`` on.

    A view opened from its read file carries them for its first memories (nothing is
    decoded for those); the others are computed (and cached) from the memories.
    """
    prefix = view.prefix
    known = min(prefix.count, len(view)) if prefix is not None else 0
    hashes: list[bytes] = []
    contents: list[bytes] = []
    if prefix is not None and start < known:
        blob, more = bytes(prefix.hashes), bytes(prefix.digests)  # bytes slices: dict keys
        hashes = [blob[at : at + 32] for at in range(start * 32, known * 32, 32)]
        contents = [more[at : at + 32] for at in range(start * 32, known * 32, 32)]
    rest = view.memories[max(start, known) :]
    if rest:
        for hashed, digest in digests.get_many(rest):
            hashes.append(hashed)
            contents.append(digest)
    return hashes, contents


def _view_blobs(
    view: PartitionView, digests: MemoryDigests, start: int = 0
) -> tuple[bytes | memoryview, bytes | memoryview]:
    """:func:`view_digests` as two byte strings (32 bytes per memory), without a list:
    views of the read file's map when the view's memories from ``start`` are all restored."""
    prefix = view.prefix
    known = min(prefix.count, len(view)) if prefix is not None else 0
    hashes: bytes | memoryview = b""
    contents: bytes | memoryview = b""
    if prefix is not None and start < known:
        hashes = prefix.hashes[start * 32 : known * 32]
        contents = prefix.digests[start * 32 : known * 32]
    rest = view.memories[max(start, known) :]
    if rest:
        pairs = digests.get_many(rest)
        hashes = b"".join((hashes, *(hashed for hashed, _ in pairs)))
        contents = b"".join((contents, *(digest for _, digest in pairs)))
    return hashes, contents


def _kinds(
    partition: IndexPartition,
    start: int,
    stop: int,
    contents: bytes | memoryview,
    active: int | None,
) -> npt.NDArray[np.int64]:
    """The class of slots ``start..stop``, each the entry of the view's memory at its slot
    (``contents``: those memories' digests)."""
    stored = np.frombuffer(partition.digests, "<u8", (stop - start) * 4, start * 32)
    wanted = np.frombuffer(contents, "<u8", (stop - start) * 4)
    same = (stored.reshape(-1, 4) == wanted.reshape(-1, 4)).all(axis=1)
    ready = partition.states[start:stop] == EntryState.READY
    current = partition.identities[start:stop].astype(np.int64) == (
        -1 if active is None else active
    )
    return np.where(
        ~same, _MISMATCHED, np.where(~ready, _UNREADY, np.where(~current, _STALE, _READY))
    ).astype(np.int64)


def _same_bytes(stored: bytes | memoryview, wanted: bytes | memoryview) -> bool:
    """Whether ``stored`` (an index partition's bytes, a read-only view of its columns,
    ``index/columns.py``) holds exactly ``wanted``.

    Compared as numpy arrays: ``memoryview == bytes`` compares item by item in Python's
    generic buffer path, about a thousand times slower than ``memcmp`` (0.9 ms for the
    hashes of 10k memories, measured), and this runs on the first recall after an open.
    """
    if len(stored) != len(wanted):
        return False
    return bool(np.array_equal(np.frombuffer(stored, np.uint8), np.frombuffer(wanted, np.uint8)))


def _aligned_join(
    view: PartitionView, partition: IndexPartition, active: int | None, digests: MemoryDigests
) -> PartitionJoin | None:
    """The join of entries that line up with the view (slot i names memory i), or ``None``.

    No dictionary is built: the hashes are compared as one byte string, which also proves
    that every record names another memory (the view's ids are unique) and, with no
    tombstone among them, that each record is its memory's latest.
    """
    records = partition.records
    if records == 0 or records > len(view):
        return None
    if bool((partition.states == EntryState.DELETED).any()):
        return None
    hashes, contents = _view_blobs(view, digests)
    if not _same_bytes(partition.hashes, hashes[: records * 32]):
        return None
    if isinstance(partition.position, Positions):
        partition.position.unique = True
    kind = _kinds(partition, 0, records, contents, active)
    chosen = kind == _READY
    positions = np.flatnonzero(chosen).astype(np.int64)
    rows = partition.rows[:records][chosen].astype(np.int64)
    counts = np.bincount(kind, minlength=5).tolist()
    state = _JoinState(
        None, None, None, counts, None, records, _Grown(hashes), _Grown(contents), kind
    )
    dense = _counting(positions) and _counting(rows)
    return _finish(view, partition, active, state, rows, positions, dense)


def _extend_aligned(
    old: PartitionJoin, view: PartitionView, partition: IndexPartition, digests: MemoryDigests
) -> PartitionJoin | None:
    """Extend an aligned join whose new records still line up, or ``None`` (nothing moved)."""
    assert old.view is not None
    state = old.state
    start, stop, known = state.aligned, partition.records, len(old.view)
    if stop > len(view) or bool((partition.states[start:] == EntryState.DELETED).any()):
        return None
    more_hashes, more_contents = _view_blobs(view, digests, known)
    end = known * 32
    if stop > start:
        wanted = (state.hashes.slice(start * 32, end) + more_hashes)[: (stop - start) * 32]
        if not _same_bytes(partition.hashes[start * 32 : stop * 32], wanted):
            return None
    state.hashes.extend(more_hashes)
    state.contents.extend(more_contents)
    if isinstance(partition.position, Positions):
        partition.position.unique = True
    rows, positions = old.rows, old.positions
    dense = old.dense
    if stop > start:
        kind = _kinds(partition, start, stop, state.contents.slice(start * 32, stop * 32),
                      old.active)  # fmt: skip
        chosen = kind == _READY
        rooms = state.rooms
        positions, rooms["positions"] = Growing.extend(
            positions, rooms.get("positions"), np.flatnonzero(chosen) + start
        )
        rows, rooms["rows"] = Growing.extend(
            rows, rooms.get("rows"), partition.rows[start:stop][chosen]
        )
        for number, count in enumerate(np.bincount(kind, minlength=5).tolist()):
            state.counts[number] += count
        state.kinds, rooms["kinds"] = Growing.extend(state.kinds, rooms.get("kinds"), kind)
        # Only what was added needs checking: the old arrays are a prefix of the new.
        known = old.positions.size
        dense = dense and _counting(positions, known) and _counting(rows, known)
    state.aligned = stop
    return _finish(view, partition, old.active, state, rows, positions, dense)


def _generalize(old: PartitionJoin) -> None:
    """Give an aligned join's state the dictionaries of a general one (same content)."""
    state = old.state
    assert old.view is not None and old.partition is not None
    if state.aligned < 0:
        return
    blob, more = state.hashes.whole(), state.contents.whole()
    hashes = [blob[at : at + 32] for at in range(0, len(blob), 32)]
    state.slots = dict(zip(hashes, range(len(hashes)), strict=True))
    state.expected = [more[at : at + 32] for at in range(0, len(more), 32)]
    records = state.aligned
    rows = np.where(state.kinds == _READY, old.partition.rows[:records].astype(np.int64), 0)
    state.classes = dict(
        zip(
            hashes[:records],
            zip(state.kinds.tolist(), rows.tolist(), range(records), strict=True),
            strict=True,
        )
    )
    state.aligned = -1
    state.hashes, state.contents = _Grown(), _Grown()


def _join(
    view: PartitionView | None,
    partition: IndexPartition | None,
    active: int | None,
    digests: MemoryDigests,
) -> PartitionJoin:
    if view is not None and partition is not None:
        aligned = _aligned_join(view, partition, active, digests)
        if aligned is not None:
            return aligned
    hashes, expected = view_digests(view, digests) if view is not None else ([], [])
    slots = dict(zip(hashes, range(len(hashes)), strict=True))
    classes: dict[bytes, tuple[int, int, int]] = {}
    rows = positions = np.empty(0, np.int64)
    counts = [0] * 5
    if partition is not None and partition.position:
        # A cold join classifies every live entry at once (numpy), in the entries' order.
        live = list(partition.position)
        slot = np.fromiter(partition.position.values(), np.int64, len(live))
        get = slots.get
        position = np.fromiter((get(hashed, -1) for hashed in live), np.int64, len(live))
        kind = np.full(len(live), _ORPHAN, np.int64)
        held = position >= 0
        stored = np.frombuffer(partition.digests, np.uint8).reshape(-1, 32)[slot[held]]
        wanted = np.frombuffer(b"".join(expected), np.uint8).reshape(-1, 32)[position[held]]
        same = (stored == wanted).all(axis=1)
        ready = partition.states[slot[held]] == EntryState.READY
        active_code = -1 if active is None else active
        current = partition.identities[slot[held]].astype(np.int64) == active_code
        kind[held] = np.where(
            ~same, _MISMATCHED, np.where(~ready, _UNREADY, np.where(~current, _STALE, _READY))
        )
        row = np.where(kind == _READY, partition.rows[slot].astype(np.int64), 0)
        chosen = kind == _READY
        rows, positions = row[chosen], position[chosen]
        classes = dict(
            zip(live, zip(kind.tolist(), row.tolist(), position.tolist(), strict=True), strict=True)
        )
        counts = np.bincount(kind, minlength=5).tolist()
    return _finish(
        view, partition, active, _JoinState(slots, expected, classes, counts), rows, positions
    )


def _extends(old: PartitionJoin, view: PartitionView | None, partition: IndexPartition) -> bool:
    """Whether ``view`` and ``partition`` are grown versions of ``old``'s (same prefix)."""
    before = old.partition
    if before is None or view is None or old.view is None:
        return False
    if (before.inode, before.tag) != (partition.inode, partition.tag):
        return False
    if before.records > partition.records:
        return False
    # Views of a partition share their memory objects (or, read lazily, their records).
    return view.extends(old.view) or same_prefix(view.memories, old.view.memories)


def _extend_join(
    old: PartitionJoin,
    view: PartitionView,
    partition: IndexPartition,
    digests: MemoryDigests,
) -> PartitionJoin:
    """Join grown versions by reclassifying only the memories and entries that changed.

    Call with ``old`` owning its state (see :class:`_JoinState`); the state moves on.
    """
    assert old.view is not None and old.partition is not None
    if old.state.aligned >= 0:
        extended = _extend_aligned(old, view, partition, digests)
        if extended is not None:
            return extended
        _generalize(old)
    state = old.state
    slots, expected, classes, counts = state.slots, state.expected, state.classes, state.counts
    assert slots is not None and expected is not None and classes is not None
    touched: set[bytes] = set()
    hashes, contents = view_digests(view, digests, len(old.view.memories))
    for hashed, digest in zip(hashes, contents, strict=True):
        slots[hashed] = len(expected)
        expected.append(digest)
        touched.add(hashed)
    start = old.partition.records
    for record in range(start, partition.records):
        touched.add(partition.memory_hash(record))
    dropped: list[int] = []
    new_rows: list[int] = []
    new_positions: list[int] = []
    for hashed in touched:
        previous = classes.pop(hashed, None)
        if previous is not None:
            counts[previous[0]] -= 1
            if previous[0] == _READY:
                dropped.append(previous[2])
        slot = partition.position.get(hashed)
        if slot is None:
            continue  # no entry (or a tombstone): nothing to classify
        current = _classify(partition, slot, slots.get(hashed), expected, old.active)
        classes[hashed] = current
        counts[current[0]] += 1
        if current[0] == _READY:
            new_rows.append(current[1])
            new_positions.append(current[2])
    rows, positions = old.rows, old.positions
    if dropped:
        keep = ~np.isin(positions, np.asarray(dropped, dtype=np.int64))
        rows, positions = rows[keep], positions[keep]
    if new_rows:
        rows = np.concatenate((rows, np.asarray(new_rows, dtype=np.int64)))
        positions = np.concatenate((positions, np.asarray(new_positions, dtype=np.int64)))
    return _finish(view, partition, old.active, state, rows, positions)


class JoinCache:
    """The latest join per partition (session and owner), reused while nothing changed.

    Views and index partitions are immutable versions: a join is valid exactly as long as
    both are the current ones. When both have only grown (an append: the view gained
    memories, the entries file gained records), the previous join is extended by
    reclassifying just what changed, so a search after an append costs what the append
    added, not the partition's size. One join is kept per partition (at most ``maximum``),
    so superseded versions and their matrices are released instead of piling up.

    A join holds its view, and so every memory the view parsed: the joins kept hold at
    most the digest cache's bound of memories in all (``MemoryDigests.maximum``, the
    index's ``digest_cache_entries``), least recently used dropped first (the latest
    join is always kept). Without it, 4,096 joins kept their views whatever the store's
    partition cache let go: 1,000 NPCs of 100 memories held all 100,000 parsed memories
    (785 MB) under a partition cache of 5,000. The count bound was 4,096 until a world of
    5,000 NPCs was measured re-joining every partition on every session-wide call.
    """

    def __init__(self, digests: MemoryDigests, maximum: int = 16_384) -> None:
        self._digests = digests
        self._maximum = maximum
        self._maximum_memories = digests.maximum
        self._memories = 0  # the views' memories of the joins kept
        self._joins: OrderedDict[tuple[str, str], PartitionJoin] = OrderedDict()
        self._lock = threading.Lock()

    def join(
        self, view: PartitionView | None, partition: IndexPartition | None, active: int | None
    ) -> PartitionJoin:
        """Return the (cached or extended) join of ``view`` and ``partition`` under ``active``."""
        if view is not None:
            key = (identity_hash(view.session_id), identity_hash(view.owner_id))
        elif partition is not None:
            key = (partition.session_hash, partition.owner_hash)
        else:
            return _join(None, None, active, self._digests)
        with self._lock:
            cached = self._joins.get(key)
        if cached is not None and cached.active == active:
            if cached.view is view and cached.partition is partition:
                with self._lock:
                    self._joins.move_to_end(key)
                return cached
            if (
                partition is not None
                and view is not None
                and _extends(cached, view, partition)
                and self._claim(key, cached)
            ):
                joined = _extend_join(cached, view, partition, self._digests)
                self._remember(key, joined)
                return joined
        joined = _join(view, partition, active, self._digests)
        self._remember(key, joined)
        return joined

    def cached(
        self, view: PartitionView, partition: IndexPartition | None, active: int | None
    ) -> PartitionJoin | None:
        """The cached join of exactly ``view`` and ``partition`` under ``active``, or ``None``.

        Never joins nor extends: what :meth:`join` returns without work, for a caller that
        must not block (a recall on the event loop). The lock is only tried.
        """
        key = (identity_hash(view.session_id), identity_hash(view.owner_id))
        if not self._lock.acquire(blocking=False):
            return None
        try:
            cached = self._joins.get(key)
            if (
                cached is None
                or cached.active != active
                or cached.view is not view
                or cached.partition is not partition
            ):
                return None
            self._joins.move_to_end(key)
            return cached
        finally:
            self._lock.release()

    def extended_now(
        self,
        view: PartitionView,
        partition: IndexPartition,
        active: int | None,
        most: int | None = None,
    ) -> PartitionJoin | None:
        """:meth:`cached`, or the cached join extended when that is cheap enough for the
        event loop: ``view`` grew from the cached one's in one line of views (no memory
        compared), by at most ``most`` memories and entries together, and the join is
        aligned (records in the view's order) and stays so: only the added memories'
        digests and entries are looked at; a partition of at most :data:`INLINE_ENTRIES`
        entries. ``None`` otherwise (the caller joins off the loop); locks are only tried.
        The first search after an append then needs no hop to a worker thread. ``most``
        defaults to :data:`INLINE_GROWTH`."""
        joined = self.cached(view, partition, active)
        if joined is not None:
            return joined
        key = (identity_hash(view.session_id), identity_hash(view.owner_id))
        if not self._lock.acquire(blocking=False):
            return None
        try:
            cached = self._joins.get(key)
        finally:
            self._lock.release()
        if cached is None or cached.active != active or cached.state.aligned < 0:
            return None
        before, shown = cached.partition, cached.view
        if before is None or shown is None or not view.extends(shown):
            return None
        growth = len(view) - len(shown) + partition.records - before.records
        too_large = partition.records > INLINE_ENTRIES
        if too_large or growth > (INLINE_GROWTH if most is None else most):
            return None
        if not _extends(cached, view, partition):
            return None
        if not self._claim(key, cached, blocking=False):
            return None
        try:
            extended = _extend_aligned(cached, view, partition, self._digests)
        except Exception:  # the pool's join meets it again and names it
            extended = None
        if extended is None:  # not aligned any more: give it back for the thread's join
            with self._lock:
                cached.state.owner = cached
                if key not in self._joins:
                    self._joins[key] = cached
                    self._memories += _memories(cached)
            return None
        self._remember(key, extended)
        return extended

    def _claim(self, key: tuple[str, str], cached: PartitionJoin, blocking: bool = True) -> bool:
        """Take ``cached``'s state for an extension, unless another thread already did (or,
        not ``blocking``, holds the lock)."""
        if not self._lock.acquire(blocking=blocking):
            return False
        try:
            if self._joins.get(key) is not cached or cached.state.owner is not cached:
                return False
            cached.state.owner = self  # claimed: the extended join becomes the owner
            del self._joins[key]
            self._memories -= _memories(cached)
            return True
        finally:
            self._lock.release()

    def _remember(self, key: tuple[str, str], joined: PartitionJoin) -> None:
        with self._lock:
            joins = self._joins
            replaced = joins.get(key)
            if replaced is not None:
                self._memories -= _memories(replaced)
            joins[key] = joined
            joins.move_to_end(key)
            self._memories += _memories(joined)
            while len(joins) > 1 and (
                len(joins) > self._maximum or self._memories > self._maximum_memories
            ):
                _, dropped = joins.popitem(last=False)
                self._memories -= _memories(dropped)

    def __len__(self) -> int:
        """How many joins are kept."""
        with self._lock:
            return len(self._joins)

    @property
    def memories(self) -> int:
        """The memories of the views the kept joins hold."""
        with self._lock:
            return self._memories


def _memories(joined: PartitionJoin) -> int:
    """The memories ``joined``'s view holds (what keeping the join keeps alive)."""
    return 0 if joined.view is None else len(joined.view)
