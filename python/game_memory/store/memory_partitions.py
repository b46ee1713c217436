"""The state of the in-memory store: its partitions, and every change to them, atomically.

:class:`MemoryPartitions` holds the sessions' owner partitions (memories in append order,
their retractions) and the store-wide count, behind one ``threading.Lock``. Each change
(add, retract, erase, a consolidation's check-and-add) is one short critical section with
no ``await`` inside, so it is atomic for the tasks of an event loop and for threads; a read
takes what it needs under the lock (:meth:`MemoryPartitions.plan`) and builds its views
outside it from immutable data. ``InMemoryGameMemoryStore`` (``memory.py``) is the store
protocol over this state.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from game_memory.errors import CapacityExceededError, MemoryNotFoundError
from game_memory.model import GameMemory, GameMoment, ordinal_key
from game_memory.model.conflicts import memory_conflict
from game_memory.store.lifecycle import checked_summary, covered
from game_memory.store.retractions import Retraction
from game_memory.store.view import PartitionView

__all__ = ["MemoryPartitions", "PartitionRead", "build_view", "snapshot_too_large"]


@dataclass(slots=True)
class _Partition:
    """One owner's memories in append order and its retractions; both only grow, except
    by an erase, which replaces them and bumps ``generation``."""

    session_id: str
    owner_id: str
    memories: list[GameMemory] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)
    retractions: list[Retraction] = field(default_factory=list)
    view: PartitionView | None = None  # the newest view built, of a prefix of ``memories``
    generation: int = 0


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What one read saw of a partition, taken under the lock: reused view or new memories."""

    partition: _Partition
    base: PartitionView | None
    memories: tuple[GameMemory, ...] | None  # None: ``base`` is current
    retractions: tuple[Retraction, ...] = ()
    generation: int = 0

    @property
    def size(self) -> int:
        """How many memories the read holds."""
        if self.memories is not None:
            return len(self.memories)
        return len(self.base) if self.base is not None else 0


def snapshot_too_large(session_id: str, owner_id: str | None, bound: int) -> CapacityExceededError:
    """A snapshot read would hold more than ``bound`` memories (every backend's message).

    ``bound`` is the snapshot's (``maximum_snapshot_entries``, as the stores name it; the
    front door names the option that set it). Querying one owner helps only a read of a
    whole session, so only then is it advised.
    """
    if owner_id is None:
        where, advice = f"the snapshot of session {session_id!r}", "query one owner, or "
    else:
        where, advice = f"owner {owner_id!r} of session {session_id!r}", ""
    return CapacityExceededError(
        f"{where} holds more than {bound:,} memories, the most this snapshot may read "
        f"(maximum_snapshot_entries); {advice}read with a larger bound",
        bound="maximum_snapshot_entries",
    )


def build_view(read: PartitionRead) -> PartitionView:
    """The partition's view at the read's version, grown from the previous view."""
    base, memories = read.base, read.memories
    if memories is None:
        assert base is not None
        return base
    positions = dict(base.positions) if base is not None else {}
    for index in range(len(positions), len(memories)):
        positions[memories[index].memory_id] = index
    partition = read.partition
    return PartitionView(
        partition.session_id, partition.owner_id, memories, positions, base, read.retractions
    )


class MemoryPartitions:
    """Every partition of an in-memory store (see the module docstring)."""

    def __init__(self, maximum_entries: int) -> None:
        self.maximum_entries = maximum_entries
        self._sessions: dict[str, dict[str, _Partition]] = {}
        self._owner_order: dict[str, list[str]] = {}  # session -> owners, ordinal order
        self._count = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    # -- reads ----------------------------------------------------------------------------

    def plan(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionRead]:
        """Under the lock: what to read of a session (or owner), in owner order.

        Raises:
            CapacityExceededError: more than ``bound`` memories (:func:`snapshot_too_large`).
        """
        with self._lock:
            partitions = self._sessions.get(session_id, {})
            if owner_id is not None:
                owners = [owner_id] if owner_id in partitions else []
            else:
                owners = self._owner_order.get(session_id, [])
            reads: list[PartitionRead] = []
            total = 0
            for owner in owners:
                partition = partitions[owner]
                count = len(partition.memories)
                total += count
                if total > bound:
                    raise snapshot_too_large(session_id, owner_id, bound)
                base = partition.view
                retractions = tuple(partition.retractions)
                current = (
                    base is not None and len(base) == count and base.retractions == retractions
                )
                memories = None if current else tuple(partition.memories)
                reads.append(
                    PartitionRead(partition, base, memories, retractions, partition.generation)
                )
            return reads

    def keep(self, views: Sequence[PartitionView], reads: Sequence[PartitionRead]) -> None:
        """Remember the newest view of each partition, so the next read reuses it."""
        with self._lock:
            for view, read in zip(views, reads, strict=True):
                partition = read.partition
                if partition.generation != read.generation:
                    continue  # erased since the read: the view is of memories gone
                current = partition.view
                if (
                    current is None
                    or len(current) < len(view)
                    or len(current.retractions) < len(view.retractions)
                ):
                    partition.view = view

    def copy(
        self,
    ) -> tuple[
        list[tuple[str, str, str, str, tuple[GameMemory, ...], dict[str, int]]],
        dict[str, list[str]],
        int,
    ]:
        """For the checker: every partition's bookkeeping, the owner orders and the count."""
        with self._lock:
            partitions = [
                (p.session_id, p.owner_id, session, owner, tuple(p.memories), dict(p.positions))
                for session, owners in self._sessions.items()
                for owner, p in owners.items()
            ]
            orders = {session: list(owners) for session, owners in self._owner_order.items()}
            return partitions, orders, self._count

    # -- changes --------------------------------------------------------------------------

    def add(self, memory: GameMemory) -> bool:
        """Add a memory; ``False`` when an equal one is there.

        Raises:
            MemoryConflictError: the id holds different content.
            CapacityExceededError: the store holds ``maximum_entries`` memories.
        """
        with self._lock:
            return self._add(memory)

    def add_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Add a batch, all or nothing: every memory is checked before any is added.

        Results follow :meth:`add` (``False`` also for a repeat within the batch).

        Raises:
            MemoryConflictError: an id holds, or is given in the batch, other content.
            CapacityExceededError: the new memories do not fit ``maximum_entries``.
        """
        with self._lock:
            seen: dict[tuple[str, str, str], GameMemory] = {}
            results: list[bool] = []
            for memory in memories:
                key = (memory.session_id, memory.owner_id, memory.memory_id)
                partition = self._sessions.get(memory.session_id, {}).get(memory.owner_id)
                existing = seen.get(key)
                if existing is None and partition is not None:
                    position = partition.positions.get(memory.memory_id)
                    if position is not None:
                        existing = partition.memories[position]
                if existing is not None:
                    if existing != memory:
                        raise memory_conflict(memory, in_batch=key in seen)
                    results.append(False)
                    continue
                seen[key] = memory
                results.append(True)
            if self._count + len(seen) > self.maximum_entries:
                raise CapacityExceededError(
                    f"the batch adds {len(seen):,} memories but the store has room for "
                    f"{max(self.maximum_entries - self._count, 0):,}; " + self._full_message(),
                    bound="maximum_entries",
                )
            for memory in seen.values():
                self._add(memory)
            return results

    def add_summary(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Check a consolidation against the owner's memories and add its summary, in one
        critical section (an erase cannot remove a source in between).

        Raises:
            MemoryNotFoundError, InvalidArgumentError: see ``checked_summary``.
            MemoryConflictError, CapacityExceededError: see :meth:`add`.
        """
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)

            def held(memory_id: str) -> GameMoment | None:
                if partition is None or memory_id not in partition.positions:
                    return None
                return partition.memories[partition.positions[memory_id]].moment

            stored = None
            # Not a GameMemory: ``checked_summary`` refuses it (InvalidArgumentError), so
            # its ``memory_id`` is read only once it is one.
            if (
                isinstance(summary, GameMemory)
                and partition is not None
                and summary.memory_id in partition.positions
            ):
                stored = partition.memories[partition.positions[summary.memory_id]]
            checked = checked_summary(session_id, owner_id, memory_ids, summary, held, stored)
            return self._add(checked)

    def retract(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of ``at``; ``False`` when already retracted then.

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
        """
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)
            if partition is None or memory_id not in partition.positions:
                raise MemoryNotFoundError(
                    f"owner {owner_id!r} of session {session_id!r} holds no memory "
                    f"{memory_id!r}; nothing was forgotten. Check the id (enumerate lists "
                    "what the owner holds)"
                )
            if covered((m for i, m in partition.retractions if i == memory_id), at):
                return False
            partition.retractions.append((memory_id, at))
            return True

    def erase_surplus(
        self, session_id: str, owner_id: str, wanted: Sequence[str], keep: int
    ) -> list[str]:
        """Erase the first of ``wanted`` the owner holds, only as many as take it down to
        ``keep`` memories, counted under the lock; the ids erased."""
        with self._lock:
            partition = self._sessions.get(session_id, {}).get(owner_id)
            if partition is None:
                return []
            surplus = max(0, len(partition.memories) - keep)
            taken = [m for m in dict.fromkeys(wanted) if m in partition.positions][:surplus]
            if taken:
                self._erase_locked(session_id, owner_id, set(taken))
            return taken

    def erase(self, session_id: str, owner_id: str | None, wanted: set[str] | None) -> int:
        """Remove a session's, an owner's or listed memories (and their retractions)."""
        with self._lock:
            return self._erase_locked(session_id, owner_id, wanted)

    def _erase_locked(self, session_id: str, owner_id: str | None, wanted: set[str] | None) -> int:
        partitions = self._sessions.get(session_id, {})
        owners = list(partitions) if owner_id is None else [owner_id]
        erased = 0
        for owner in owners:
            partition = partitions.get(owner)
            if partition is None:
                continue
            kept = [
                m for m in partition.memories if wanted is not None and m.memory_id not in wanted
            ]
            gone = len(partition.memories) - len(kept)
            if not gone:
                continue
            erased += gone
            if not kept:
                del partitions[owner]
                self._owner_order[session_id].remove(owner)
                continue
            ids = {m.memory_id for m in kept}
            partition.memories = kept
            partition.positions = {m.memory_id: i for i, m in enumerate(kept)}
            partition.retractions = [r for r in partition.retractions if r[0] in ids]
            partition.view = None
            partition.generation += 1
        if not partitions:
            self._sessions.pop(session_id, None)
            self._owner_order.pop(session_id, None)
        self._count -= erased
        return erased

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._owner_order.clear()

    def _add(self, memory: GameMemory) -> bool:
        session_id, owner_id = memory.session_id, memory.owner_id
        partition = self._sessions.get(session_id, {}).get(owner_id)
        if partition is not None:
            position = partition.positions.get(memory.memory_id)
            if position is not None:
                if partition.memories[position] == memory:
                    return False
                raise memory_conflict(memory)
        if self._count >= self.maximum_entries:
            raise CapacityExceededError(self._full_message(), bound="maximum_entries")
        if partition is None:
            partition = _Partition(session_id, owner_id)
            self._sessions.setdefault(session_id, {})[owner_id] = partition
            owners = [*self._owner_order.get(session_id, []), owner_id]
            owners.sort(key=ordinal_key)
            self._owner_order[session_id] = owners
        partition.positions[memory.memory_id] = len(partition.memories)
        partition.memories.append(memory)
        self._count += 1
        return True

    def _full_message(self) -> str:
        largest = sorted(
            (
                (len(p.memories), p.owner_id, p.session_id)
                for owners in self._sessions.values()
                for p in owners.values()
            ),
            key=lambda item: (-item[0], ordinal_key(item[1])),
        )[:3]
        names = ", ".join(
            f"{owner!r} of session {session!r} ({n:,})" for n, owner, session in largest
        )
        return (
            f"the store holds {self._count:,} memories, its maximum_entries; the largest owners "
            f"are {names}. Keep each NPC bounded with the retention policy "
            "VectorMemoryStoreOptions(maximum_memories_per_owner=N) (game-memory serve "
            "--maximum-memories-per-owner N), erase what the game no longer needs, or open "
            "the store with a larger maximum_entries"
        )
