"""``InMemoryVectorIndex``: the derived vector index held in this process's memory.

It implements :class:`~game_memory.index.protocol.VectorIndex` with the file index's
observable behaviour (``tests/conformance/`` runs both) and the same machinery: each owner
partition is a :class:`~game_memory.index.memory_partition.MemoryPartition` (the entry
records, CRC-32 each, and float32 rows with a checksum per row, as the file index stores
them), a partition version is an :class:`~game_memory.index.partition.IndexPartition`, and
joins to snapshot views are cached and extended by the shared
:class:`~game_memory.index.join.JoinCache`.

* **Not durable, by design**: a crash or :meth:`~InMemoryVectorIndex.aclose` loses every
  vector; a new index simply needs a rebuild (derived data, like the file index).
* **Atomic per partition**: a write's rows are stored before the entries that point at
  them, under one lock, so a reader sees either the old entries or the new ones with rows.
* **Thread-safe**: every call may run in any executor thread; state changes happen under
  one ``threading.Lock``; checksumming and joins run outside it.
* **Bounded**: at most ``capacity`` live entries per owner partition (the file index's
  rule); superseded records and rows are dropped by the compaction of ``remove_orphans``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from game_memory.durable.names import identity_hash
from game_memory.errors import DerivedIndexError, InvalidArgumentError, StoreClosedError
from game_memory.index.entries import (
    NO_VALUE,
    EntryRecord,
    EntryState,
    MemoryDigests,
    memory_hash,
    row_checksums,
)
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.index.memory_partition import MemoryPartition
from game_memory.index.partition import (
    FloatMatrix,
    IndexPartition,
    PartitionReplacedError,
    new_tag,
)
from game_memory.index.protocol import OrphanCandidates
from game_memory.index.writer import check_capacity
from game_memory.model import GameMemory, MemoryEmbeddingIdentity
from game_memory.store.view import PartitionView

__all__ = ["InMemoryVectorIndex"]


def _groups(memories: Sequence[GameMemory]) -> dict[tuple[str, str], list[int]]:
    """Positions of ``memories`` per partition (session and owner hashes), in order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for position, memory in enumerate(memories):
        key = (identity_hash(memory.session_id), identity_hash(memory.owner_id))
        groups.setdefault(key, []).append(position)
    return groups


class InMemoryVectorIndex:
    """A derived vector index in memory (see the module docstring).

    Args:
        capacity: Most entries one owner partition may hold, 1..1,000,000.
        digest_cache_entries: Memory digests kept (the join's hot data), 1,000..10,000,000;
            the joins kept hold views of at most this many memories in all (a view keeps
            the memories it parsed alive: bound it with the store's ``cache_entries``).

    Raises:
        InvalidArgumentError: an option is out of range.
    """

    def __init__(self, *, capacity: int = 100_000, digest_cache_entries: int = 200_000) -> None:
        for name, value, low, high in (
            ("capacity", capacity, 1, 1_000_000),
            ("digest_cache_entries", digest_cache_entries, 1_000, 10_000_000),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidArgumentError(f"{name} must be an integer from {low:,} to {high:,}")
        self._capacity = capacity
        self._digests = MemoryDigests(digest_cache_entries)
        self._joins = JoinCache(self._digests)
        self._identities: list[str] = []  # an entry stores its identity's position here
        self._slots: dict[tuple[str, str], MemoryPartition] = {}
        self._sessions: dict[str, set[str]] = {}  # session hash -> owner hashes
        self._generations = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"InMemoryVectorIndex(partitions={len(self._slots)}, closed={self._closed})"

    @property
    def folder(self) -> Path | None:
        """Always ``None``: nothing of this index is on disk."""
        return None

    @property
    def capacity(self) -> int:
        """Most entries one owner partition may hold."""
        return self._capacity

    # -- plumbing (call the helpers below under the lock) -------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the in-memory vector index is closed (its vectors are gone)")

    def _code(self, identity: MemoryEmbeddingIdentity, *, create: bool) -> int | None:
        name = str(identity)
        if name in self._identities:
            return self._identities.index(name)
        if not create:
            return None
        self._identities.append(name)
        return len(self._identities) - 1

    def _partition(self, session_hash: str, owner_hash: str) -> IndexPartition | None:
        slot = self._slots.get((session_hash, owner_hash))
        return slot.partition if slot is not None else None

    def _slot(self, session_hash: str, owner_hash: str) -> MemoryPartition:
        slot = self._slots.get((session_hash, owner_hash))
        if slot is None:
            slot = MemoryPartition(session_hash, owner_hash, next(self._generations), new_tag(0))
            self._put(slot)
        return slot

    def _put(self, slot: MemoryPartition) -> None:
        self._slots[(slot.session_hash, slot.owner_hash)] = slot
        self._sessions.setdefault(slot.session_hash, set()).add(slot.owner_hash)

    def _drop(self, slot: MemoryPartition) -> None:
        if self._slots.get((slot.session_hash, slot.owner_hash)) is slot:
            del self._slots[(slot.session_hash, slot.owner_hash)]
            owners = self._sessions.get(slot.session_hash, set())
            owners.discard(slot.owner_hash)
            if not owners:
                self._sessions.pop(slot.session_hash, None)

    def _owners(self, session_hash: str) -> list[str]:
        return sorted(self._sessions.get(session_hash, ()))

    # -- reads --------------------------------------------------------------------------

    def join(self, view: PartitionView, identity: MemoryEmbeddingIdentity) -> PartitionJoin:
        """Match the entries of ``view``'s partition against it (cached, extended)."""
        self._check_open()
        session_hash, owner_hash = identity_hash(view.session_id), identity_hash(view.owner_id)
        with self._lock:
            active = self._code(identity, create=False)
            partition = self._partition(session_hash, owner_hash)
        return self._joins.join(view, partition, active)

    def session_joins(
        self,
        session_id: str,
        views: Sequence[PartitionView],
        identity: MemoryEmbeddingIdentity,
    ) -> list[PartitionJoin]:
        """Join every partition of a session, orphaned ones (no view) included."""
        self._check_open()
        session_hash = identity_hash(session_id)
        by_owner = {identity_hash(view.owner_id): view for view in views}
        with self._lock:
            active = self._code(identity, create=False)
            owners = sorted(set(by_owner) | set(self._owners(session_hash)))
            partitions = [self._partition(session_hash, owner) for owner in owners]
        return [
            self._joins.join(by_owner.get(owner), partition, active)
            for owner, partition in zip(owners, partitions, strict=True)
        ]

    def vectors(self, joined: PartitionJoin, identity: MemoryEmbeddingIdentity) -> FloatMatrix:
        """The active identity's rows of a joined partition (read-only; checksummed once).

        Raises:
            PartitionReplacedError: a compaction replaced the partition; join it again.
            DerivedIndexError: the rows are missing or fail their checksums.
        """
        self._check_open()
        partition, code = joined.partition, joined.active
        if partition is None or code is None:
            raise DerivedIndexError("the joined partition has no vectors of the active model")
        with self._lock:
            slot = self._slots.get((partition.session_hash, partition.owner_hash))
            if slot is None or slot.generation != partition.inode:
                raise PartitionReplacedError(
                    "the partition was compacted or reset since it was joined; join it again"
                )
            buffer, label = slot.rows.get(code), slot.label
        needed = partition.rows_needed(code)
        if needed == 0:
            return np.empty((0, identity.dimensions), dtype=np.float32)
        if buffer is None or buffer.rows < needed or buffer.dimensions != identity.dimensions:
            raise DerivedIndexError(f"the {label} lacks rows its entries refer to; rebuild it")
        with buffer.lock:
            buffer.verify(partition, code, label)
            matrix = buffer.array[:needed]
        matrix.flags.writeable = False  # a view: the buffer itself keeps growing
        return matrix

    def prefetch(self, session_id: str, owner_id: str, identity: MemoryEmbeddingIdentity) -> None:
        """Nothing to read ahead: every vector is held in memory."""

    def cached_vectors(
        self, view: PartitionView, identity: MemoryEmbeddingIdentity
    ) -> tuple[PartitionJoin, FloatMatrix] | None:
        """The join and rows of ``view`` when both are current and checked, without joining,
        extending or verifying anything and without waiting for a lock; else ``None``."""
        if self._closed or not self._lock.acquire(blocking=False):
            return None
        try:
            active = self._code(identity, create=False)
            key = (identity_hash(view.session_id), identity_hash(view.owner_id))
            slot = self._slots.get(key)
            if slot is None or active is None:
                return None
            partition, buffer = slot.partition, slot.rows.get(active)
        finally:
            self._lock.release()
        joined = self._joins.cached(view, partition, active)
        if joined is None or partition is None:
            return None
        needed = partition.rows_needed(active)
        if needed == 0:
            return joined, np.empty((0, identity.dimensions), dtype=np.float32)
        if buffer is None or buffer.dimensions != identity.dimensions:
            return None
        matrix = buffer.checked_rows(partition, needed)
        return None if matrix is None else (joined, matrix)

    def is_ready(self, memory: GameMemory, identity: MemoryEmbeddingIdentity) -> bool:
        """Whether ``memory`` has a ready vector of ``identity`` for its current content."""
        self._check_open()
        hashed, digest = self._digests.get(memory)
        session_hash, owner_hash = identity_hash(memory.session_id), identity_hash(memory.owner_id)
        with self._lock:
            partition = self._partition(session_hash, owner_hash)
            active = self._code(identity, create=False)
        record = partition.record(hashed) if partition is not None else None
        return (
            record is not None
            and record.state is EntryState.READY
            and record.identity == active
            and record.digest == digest
        )

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> None:
        """Store one row per memory as its ready entry (the latest entry wins).

        Partitions are written one after the other, as the file index does: when one would
        exceed the capacity, those before it stay written.

        Raises:
            CapacityExceededError: an owner partition would exceed :attr:`capacity`.
            InvalidArgumentError: ``vectors`` is not one row of ``identity.dimensions``
                values per memory.
        """
        self._check_open()
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        if memories and rows.shape != (len(memories), identity.dimensions):
            raise InvalidArgumentError(
                f"write takes one vector of {identity.dimensions} values per memory; got an "
                f"array of shape {rows.shape} for {len(memories)} memories"
            )
        digests = self._digests.get_many(memories)
        with self._lock:
            code = self._code(identity, create=True)
            assert code is not None
            for (session_hash, owner_hash), positions in _groups(memories).items():
                partition = self._partition(session_hash, owner_hash)
                known = partition.position if partition is not None else {}
                new = sum(1 for p in positions if digests[p][0] not in known)
                check_capacity(partition, new, self._capacity)
                slot = self._slot(session_hash, owner_hash)
                matrix = rows[positions]
                sums = row_checksums(matrix).tolist()
                first = slot.add_rows(code, matrix)  # the rows before the entries naming them
                slot.add(
                    [
                        EntryRecord(EntryState.READY, code, first + i, *digests[p], "", sums[i])
                        for i, p in enumerate(positions)
                    ]
                )

    def write_now(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> bool:
        """Always ``False``: an in-memory write takes the index's lock, which another
        thread may hold, so it is made by :meth:`write` off the loop."""
        return False

    def mark(self, memories: Sequence[GameMemory], state: EntryState, code: str) -> None:
        """Record that ``memories`` have no usable vector (``FAILED`` or ``PENDING``).

        Raises:
            InvalidArgumentError: ``state`` is neither, or ``code`` is not ASCII.
        """
        self._check_open()
        if state not in (EntryState.FAILED, EntryState.PENDING) or not code.isascii():
            raise InvalidArgumentError("mark records FAILED or PENDING with an ASCII code")
        digests = self._digests.get_many(memories)
        with self._lock:
            for (session_hash, owner_hash), positions in _groups(memories).items():
                self._slot(session_hash, owner_hash).add(
                    [EntryRecord(state, NO_VALUE, NO_VALUE, *digests[p], code) for p in positions]
                )

    # -- maintenance --------------------------------------------------------------------

    def verify(self, session_id: str, *, repair: bool) -> list[Exception]:
        """Check every partition of a session: record CRCs, identities, rows and checksums.

        Every record and every row a ready record names is checked (not only new ones),
        outside the lock on a copy of the records. With ``repair`` a damaged partition is
        deleted, so its memories have no vectors after.
        """
        self._check_open()
        session_hash = identity_hash(session_id)
        with self._lock:
            slots = [self._slots[(session_hash, owner)] for owner in self._owners(session_hash)]
            copies = [(slot, *slot.probes()) for slot in slots]
            identities = list(self._identities)
        damaged: list[Exception] = []
        for slot, entries, buffers in copies:
            try:
                slot.check(entries, buffers, identities)
            except DerivedIndexError as exc:
                if repair:
                    with self._lock:
                        self._drop(slot)
                damaged.append(exc)
        return damaged

    def orphans(self, session_id: str, views: Sequence[PartitionView]) -> OrphanCandidates:
        """The session's entries whose memory is absent from ``views``, as they are now."""
        self._check_open()
        session_hash = identity_hash(session_id)
        alive = self._alive(views)
        with self._lock:
            owners = self._owners(session_hash)
            partitions = [(owner, self._partition(session_hash, owner)) for owner in owners]
        entries: dict[object, dict[bytes, object]] = {}
        for owner_hash, partition in partitions:
            if partition is not None:
                known = alive.get(owner_hash, set())
                entries[owner_hash] = {
                    h: partition.record(h) for h in partition.position if h not in known
                }
        return OrphanCandidates(session_id, entries)

    def remove_orphans(self, candidates: OrphanCandidates, views: Sequence[PartitionView]) -> int:
        """Delete confirmed orphans, then compact every partition of the session.

        Raises:
            DerivedIndexError: a row to keep fails its checksum (run ``verify``).
        """
        self._check_open()
        session_hash = identity_hash(candidates.session_id)
        alive = self._alive(views)
        removed = 0
        with self._lock:
            for owner_hash in self._owners(session_hash):
                slot = self._slots[(session_hash, owner_hash)]
                partition = slot.partition
                if partition is None:
                    continue
                known = alive.get(owner_hash, set())
                listed = candidates.entries.get(owner_hash, {})
                orphans = [
                    hashed
                    for hashed, record in listed.items()
                    if hashed not in known and partition.record(hashed) == record
                ]
                if orphans:
                    tombstone = (EntryState.DELETED, NO_VALUE, NO_VALUE)
                    slot.add([EntryRecord(*tombstone, h, bytes(32), "") for h in orphans])
                    removed += len(orphans)
                fresh = slot.compacted(next(self._generations))
                self._drop(slot)
                if fresh is not None:
                    self._put(fresh)
        return removed

    def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> None:
        """Drop a session's, an owner's or listed memories' entries and rows (compacting)."""
        self._check_open()
        session_hash = identity_hash(session_id)
        with self._lock:
            owners = self._owners(session_hash)
            if owner_id is not None:
                owner_hash = identity_hash(owner_id)
                owners = [owner_hash] if owner_hash in owners else []
            for owner_hash in owners:
                slot = self._slots[(session_hash, owner_hash)]
                if memory_ids is None:
                    self._drop(slot)
                    continue
                hashes = [memory_hash(memory_id) for memory_id in memory_ids]
                tombstone = (EntryState.DELETED, NO_VALUE, NO_VALUE)
                slot.add([EntryRecord(*tombstone, h, bytes(32), "") for h in hashes])
                fresh = slot.compacted(next(self._generations))
                self._drop(slot)
                if fresh is not None:
                    self._put(fresh)

    def _alive(self, views: Sequence[PartitionView]) -> dict[str, set[bytes]]:
        """``sha256(memory_id)`` of every memory of ``views``, per owner hash."""
        return {
            identity_hash(view.owner_id): {h for h, _ in self._digests.get_many(view.memories)}
            for view in views
        }

    async def migrate_legacy_index(self) -> int:
        """Nothing to migrate in memory: 0.

        Raises:
            StoreClosedError: the index was closed.
        """
        self._check_open()
        return 0

    async def aclose(self) -> None:
        """Close the index and drop its vectors; idempotent."""
        self._closed = True
        with self._lock:
            self._slots.clear()
            self._sessions.clear()
