"""The vector index's partitions as this process holds them: entry versions and their vectors.

The database holds one entry per memory (the latest: written, marked, or absent); each
write takes the partition row's lock and numbers its entries from the partition's change
counter, so within one generation of a partition, change numbers increase in commit order.
A process holds a :class:`Loaded` partition: every entry it read, in change order, as an
:class:`~game_memory.index.partition.IndexPartition` (the shared join machinery's record
of a partition), and the vectors of the ready entries in one growing float32 matrix per
identity. Refreshing it reads the entries changed since its watermark and *appends* them
(a later slot supersedes an earlier one of the same memory, as in the file index), so the
join of a grown partition is extended, not recomputed. A new generation (entries deleted
by a reset or an orphan sweep) is loaded whole.

Each load has a number of its own (``IndexPartition.inode``): a join made on one load is
served vectors from that load only; once a load is replaced, :meth:`Loads.matrix` raises
``PartitionReplacedError`` and recall joins again.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from game_memory.durable.names import identity_hash
from game_memory.errors import DerivedIndexError
from game_memory.index.entries import NO_VALUE, EntryState
from game_memory.index.partition import FloatMatrix, IndexPartition, PartitionReplacedError

__all__ = ["EntryRow", "Loaded", "Loads", "decode_vectors"]

_HEADER = 4  # pgvector's binary value: dimensions (u16 BE), unused (u16), float32 BE values
_LOAD_NUMBERS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One entry as read: its change number, memory hash, digest, state, identity, code and
    the pgvector binary value of its vector (ready entries only)."""

    change: int
    memory_hash: bytes
    digest: bytes
    state: int
    identity: int | None
    code: str
    embedding: bytes | None


def decode_vectors(values: Sequence[bytes], dimensions: int, where: str) -> FloatMatrix:
    """Rows of pgvector binary values as one little-endian float32 matrix.

    Raises:
        DerivedIndexError: a value is not a vector of ``dimensions`` values.
    """
    width = _HEADER + 4 * dimensions
    data = b"".join(values)
    if len(data) != width * len(values):
        raise DerivedIndexError(
            f"a vector in {where} does not have the {dimensions} dimensions of its model; the "
            "derived index is damaged, rebuild it"
        )
    raw = np.frombuffer(data, dtype=np.uint8).reshape(len(values), width)
    headers = raw[:, :2].astype(np.uint16)
    if ((headers[:, 0] << 8) | headers[:, 1] != dimensions).any():
        raise DerivedIndexError(
            f"a vector in {where} does not have the {dimensions} dimensions of its model; the "
            "derived index is damaged, rebuild it"
        )
    return np.ascontiguousarray(raw[:, _HEADER:]).view(">f4").astype(np.float32)


class _Rows:
    """The vectors of one identity read so far, in a buffer with room to grow.

    Rows are only ever appended, so slices handed out stay valid when the buffer grows
    into a new array.
    """

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.array: FloatMatrix = np.empty((0, dimensions), dtype=np.float32)
        self.count = 0

    def append(self, rows: FloatMatrix) -> int:
        """Append ``rows``; return the position of the first."""
        first = self.count
        total = first + rows.shape[0]
        if total > self.array.shape[0]:
            grown = np.empty((total + total // 8 + 64, self.dimensions), dtype=np.float32)
            grown[:first] = self.array[:first]
            self.array = grown
        self.array[first:total] = rows
        self.count = total
        return first

    def view(self) -> FloatMatrix:
        matrix = self.array[: self.count]
        matrix.flags.writeable = False
        return matrix


@dataclass(eq=False)
class Loaded:
    """One process's load of one partition: its generation, watermark, entries and vectors."""

    session_id: str
    owner_id: str
    generation: int
    changes: int
    partition: IndexPartition
    rows: dict[int, _Rows] = field(default_factory=dict)
    numbers: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def change_of(self, slot: int) -> int:
        """The change number of the entry in ``slot`` (what an orphan sweep compares)."""
        return int(self.numbers[slot])

    @property
    def dead_rows(self) -> int:
        """Vector rows held for superseded entries."""
        return sum(rows.count for rows in self.rows.values()) - self.partition.live


def _empty(session_id: str, owner_id: str, generation: int) -> IndexPartition:
    return IndexPartition(
        identity_hash(session_id),
        identity_hash(owner_id),
        next(_LOAD_NUMBERS),
        0,
        0,
        generation & 0xFFFFFFFF,
        {},
        np.empty(0, np.uint8),
        np.empty(0, np.uint32),
        np.empty(0, np.uint32),
        np.empty(0, np.uint32),
        b"",
        b"",
        np.empty(0, "S32"),
    )


def load(
    base: Loaded | None,
    session_id: str,
    owner_id: str,
    generation: int,
    changes: int,
    entries: Sequence[EntryRow],
    dimensions: dict[int, int],
    where: str,
) -> Loaded:
    """``base`` extended by ``entries`` (changed since its watermark, in change order), or a
    new load of the partition when ``base`` is ``None`` or of another generation.

    Raises:
        DerivedIndexError: an entry is malformed (a bad state, hash or vector, an unknown
            identity).
    """
    if base is None or base.generation != generation:
        base = Loaded(session_id, owner_id, generation, 0, _empty(session_id, owner_id, generation))
    else:
        entries = [entry for entry in entries if entry.change > base.changes]
    old = base.partition
    start = old.records
    count = len(entries)
    states = np.empty(count, np.uint8)
    identities = np.full(count, NO_VALUE, np.uint32)
    rows = np.full(count, NO_VALUE, np.uint32)
    codes = np.empty(count, "S32")
    position = dict(old.position)
    ready: dict[int, list[int]] = {}
    for index, entry in enumerate(entries):
        if entry.state not in (EntryState.READY, EntryState.PENDING, EntryState.FAILED):
            raise DerivedIndexError(f"an entry in {where} has the unknown state {entry.state}")
        if len(entry.memory_hash) != 32 or len(entry.digest) != 32:
            raise DerivedIndexError(f"an entry in {where} has a malformed memory hash or digest")
        states[index] = entry.state
        codes[index] = entry.code.encode("ascii", "replace")[:32]
        position[bytes(entry.memory_hash)] = start + index
        if entry.state == EntryState.READY:
            if entry.identity is None or entry.identity not in dimensions:
                raise DerivedIndexError(
                    f"a ready entry in {where} names identity {entry.identity}, which the "
                    "index does not define; rebuild it"
                )
            if entry.embedding is None:
                raise DerivedIndexError(f"a ready entry in {where} has no vector; rebuild it")
            identities[index] = entry.identity
            ready.setdefault(entry.identity, []).append(index)
    for code, indexes in ready.items():
        vectors = decode_vectors(
            [entries[i].embedding or b"" for i in indexes], dimensions[code], where
        )
        buffer = base.rows.get(code)
        if buffer is None:
            buffer = base.rows[code] = _Rows(dimensions[code])
        first = buffer.append(vectors)
        rows[indexes] = np.arange(first, first + len(indexes), dtype=np.uint32)
    partition = IndexPartition(
        old.session_hash,
        old.owner_hash,
        old.inode,
        changes,
        start + count,
        old.tag,
        position,
        np.concatenate((old.states, states)),
        np.concatenate((old.identities, identities)),
        np.concatenate((old.rows, rows)),
        np.zeros(start + count, np.uint32),
        bytes(old.hashes) + b"".join(bytes(entry.memory_hash) for entry in entries),
        bytes(old.digests) + b"".join(bytes(entry.digest) for entry in entries),
        np.concatenate((old.codes, codes)),
    )
    base.partition = partition
    base.numbers = np.concatenate(
        (base.numbers, np.fromiter((e.change for e in entries), np.int64, count))
    )
    base.changes = max(base.changes, changes)
    return base


class Loads:
    """The loaded partitions of this process (at most ``maximum_entries`` live entries).

    Thread-safe; refreshing one partition is serialized by its load's lock.
    """

    def __init__(self, maximum_entries: int) -> None:
        self._maximum = maximum_entries
        self._loads: OrderedDict[tuple[str, str], Loaded] = OrderedDict()
        self._by_number: dict[int, Loaded] = {}
        #: Per session, its loads by owner id (what ``session`` returns, without a pass
        #: over every session's loads: one call per status of a save slot).
        self._sessions: dict[str, dict[str, Loaded]] = {}
        #: Each load's live entries as last counted, and their sum: the bound is kept by
        #: a running total (summing every load at each remember was quadratic in the
        #: NPCs loaded: 2,000,000 additions for a first status over 2,000 NPCs).
        self._counted: dict[tuple[str, str], int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def get(self, session_id: str, owner_id: str) -> Loaded | None:
        with self._lock:
            loaded = self._loads.get((session_id, owner_id))
            if loaded is not None:
                self._loads.move_to_end((session_id, owner_id))
            return loaded

    def session(self, session_id: str) -> dict[str, Loaded]:
        """Every loaded partition of a session, by owner id."""
        with self._lock:
            return dict(self._sessions.get(session_id, {}))

    def remember(self, loaded: Loaded) -> None:
        key = (loaded.session_id, loaded.owner_id)
        with self._lock:
            current = self._loads.get(key)
            if current is not None and current is not loaded:
                self._by_number.pop(current.partition.inode, None)
            self._loads[key] = loaded
            self._loads.move_to_end(key)
            self._by_number[loaded.partition.inode] = loaded
            self._sessions.setdefault(loaded.session_id, {})[loaded.owner_id] = loaded
            live = loaded.partition.live
            self._total += live - self._counted.get(key, 0)
            self._counted[key] = live
            while self._total > self._maximum and len(self._loads) > 1:
                evicted_key, evicted = self._loads.popitem(last=False)
                self._drop(evicted_key, evicted)

    def forget(self, session_id: str, owner_id: str) -> None:
        with self._lock:
            loaded = self._loads.pop((session_id, owner_id), None)
            if loaded is not None:
                self._drop((session_id, owner_id), loaded)

    def _drop(self, key: tuple[str, str], loaded: Loaded) -> None:
        """Forget the bookkeeping of a load just taken out of ``_loads`` (under the lock)."""
        self._by_number.pop(loaded.partition.inode, None)
        self._total -= self._counted.pop(key, 0)
        owners = self._sessions.get(key[0])
        if owners is not None:
            owners.pop(key[1], None)
            if not owners:
                del self._sessions[key[0]]

    def matrix(self, partition: IndexPartition, code: int, dimensions: int) -> FloatMatrix:
        """The vectors of identity ``code`` that ``partition`` (a version of a load) refers to.

        Raises:
            PartitionReplacedError: the load was replaced or evicted since; join again.
        """
        with self._lock:
            loaded = self._by_number.get(partition.inode)
        if loaded is None:
            raise PartitionReplacedError(
                "the index partition was reloaded while it was read; read it again"
            )
        with loaded.lock:
            rows = loaded.rows.get(code)
            return rows.view() if rows is not None else np.empty((0, dimensions), np.float32)
