"""A bounded cache of the save's partition views, brought up to date by reading new rows only.

Between a forget or an erase, partitions only grow, and every memory of a partition has a
position (``seq``) assigned under the partition row's lock, so positions increase in commit
order. A forget or an erase moves the partition's ``generation`` on, under the same lock. A
cached view with the partition's ``next_seq`` and ``generation`` as of its read is
therefore current exactly while both are unchanged; it is brought up to date by the rows
from that position on in the same generation (a warm snapshot transfers what was appended
since, not the partition), and read again whole, retractions included, in another.
A grown view is built on the previous one (:class:`PartitionView`'s ``base``), so its
lexical index and predicate columns are extended instead of rebuilt, and a derived join
extends too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from game_memory.errors import PersistenceError
from game_memory.model import GameMemory, GameMoment
from game_memory.store.view import PartitionView

__all__ = ["CachedPartition", "ViewCache", "extend_view"]


@dataclass(frozen=True, slots=True)
class CachedPartition:
    """A partition's view and the ``next_seq`` and ``generation`` it was read at (rows below
    ``next_seq`` of that generation are in it)."""

    view: PartitionView
    next_seq: int
    generation: int = 0


def extend_view(
    base: PartitionView | None,
    session_id: str,
    owner_id: str,
    memories: list[GameMemory],
    where: str,
    retractions: tuple[tuple[str, GameMoment], ...] | None = None,
) -> PartitionView | None:
    """``base`` grown by ``memories`` (in position order), or a new view; ``None`` if empty.

    ``retractions`` are the partition's when it was read whole (``base`` is then ``None``);
    a grown view keeps ``base``'s.

    Raises:
        PersistenceError: one id would hold two memories (the save is damaged).
    """
    if not memories and (base is None or retractions is None):
        return base
    positions = dict(base.positions) if base is not None else {}
    ordered = list(base.memories) if base is not None else []
    for memory in memories:
        if memory.memory_id in positions:
            raise PersistenceError(
                f"{where} holds memory id {memory.memory_id!r} of owner {owner_id!r} twice; "
                "the save is damaged"
            )
        positions[memory.memory_id] = len(ordered)
        ordered.append(memory)
    if not ordered:
        return None
    held = retractions if retractions is not None else (base.retractions if base else ())
    return PartitionView(session_id, owner_id, tuple(ordered), positions, base, held)


class ViewCache:
    """The latest view of each partition read, at most ``maximum_entries`` memories in all.

    Thread-safe. A newer version (a larger ``next_seq``) replaces an older one, never the
    reverse, so two threads refreshing one partition at once keep the newer read.
    """

    def __init__(self, maximum_entries: int) -> None:
        self._maximum = maximum_entries
        self._sessions: dict[str, dict[str, CachedPartition]] = {}
        self._order: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()

    def get(self, session_id: str, owner_id: str) -> CachedPartition | None:
        """The cached partition, if any (marked recently used)."""
        with self._lock:
            cached = self._sessions.get(session_id, {}).get(owner_id)
            if cached is not None:
                self._order.move_to_end((session_id, owner_id))
            return cached

    def session(self, session_id: str) -> dict[str, CachedPartition]:
        """Every cached partition of a session, by owner id (a copy)."""
        with self._lock:
            return dict(self._sessions.get(session_id, {}))

    def remember(self, session_id: str, owner_id: str, partition: CachedPartition) -> None:
        """Keep ``partition`` unless a newer version is cached; evict the least recently used."""
        key = (session_id, owner_id)
        with self._lock:
            owners = self._sessions.setdefault(session_id, {})
            current = owners.get(owner_id)
            if current is not None:
                if (current.generation, current.next_seq) >= (
                    partition.generation,
                    partition.next_seq,
                ):
                    self._order.move_to_end(key)
                    return
                self._entries -= len(current.view)
            owners[owner_id] = partition
            self._order[key] = None
            self._order.move_to_end(key)
            self._entries += len(partition.view)
            while self._entries > self._maximum and len(self._order) > 1:
                (session, owner), _ = self._order.popitem(last=False)
                evicted = self._sessions[session].pop(owner)
                if not self._sessions[session]:
                    del self._sessions[session]
                self._entries -= len(evicted.view)

    def drop(self, session_id: str, owner_id: str) -> None:
        """Forget a partition (it was erased whole)."""
        with self._lock:
            owners = self._sessions.get(session_id, {})
            cached = owners.pop(owner_id, None)
            if cached is not None:
                self._entries -= len(cached.view)
                self._order.pop((session_id, owner_id), None)
            if not owners:
                self._sessions.pop(session_id, None)
