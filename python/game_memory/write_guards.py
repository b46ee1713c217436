"""What keeps a front door's writes running at once (tasks of one event loop) from undoing
each other.

* :class:`EvictionGuard`: an append's memories are *in flight* from before their save until
  they are indexed, and no eviction of the retention policy erases them in between; the
  evictions run one at a time, each from a fresh count.
* :class:`EraseGate`: an erase and the appends of the same front door do not interleave.
  An append saves its memory, then (in another step, after embedding it) writes its
  vector; an erase erases from the save, then from the index. Interleaved, an erase that
  ran between an append's two steps left the appended vector behind for a memory no longer
  saved (an orphan), and an append whose two steps ran between the erase's two lost its
  vector to the index erase (a saved memory without one, recalled lexically only until a
  rebuild). Appends share the gate; an erase waits for those that hold it and holds it
  alone, and appends that come while an erase waits wait for it (so a stream of appends
  cannot starve an erase).
* :func:`finished`: a write the caller cancels still runs to its end (saved *and*
  indexed), and only then is the cancellation raised. Once a group commit has begun the
  store writes the memory whatever the caller does, so an append cut off after that point
  left a saved memory without its vector (and without a diagnostic) until a rebuild.

Across processes (two front doors on one save, or on one PostgreSQL database) each guards
its own; what a race there could leave is repaired as after a crash: erasing again, or a
rebuild, drops an orphan, and a rebuild writes a missing vector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator
from typing import Any, TypeVar

from game_memory.model import GameMemory

__all__ = ["EraseGate", "EvictionGuard", "Flight", "finished"]

_T = TypeVar("_T")
_log = logging.getLogger("game_memory")


async def finished(work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work`` to its end even when the caller is cancelled meanwhile.

    The cancellation is raised once ``work`` has ended, and then whatever ``work``
    raised is only logged: the caller asked to stop, not for the outcome. Used for the
    front door's writes: an append's end is bounded by the store's commit and one
    embedding's deadline, a batch's by its embedding calls (each with its deadline), so a
    cancelled ``append_many`` of thousands of memories answers its cancellation only once
    they are all indexed.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                break  # the work itself was cancelled (the loop is closing)
            cancelled = True  # the caller: finish the write first
    if cancelled:
        if not task.cancelled() and task.exception() is not None:
            _log.warning("a cancelled write failed as it finished: %r", task.exception())
        raise asyncio.CancelledError
    return task.result()


_Owner = tuple[str, str]


class Flight:
    """Memories an append has in flight (:meth:`EvictionGuard.flying`)."""

    def __init__(self, flying: dict[_Owner, Counter[str]], memories: Iterable[GameMemory]):
        self._flying = flying
        self._keys: Counter[tuple[str, str, str]] = Counter(memory.key for memory in memories)
        for (session_id, owner_id, memory_id), count in self._keys.items():
            flying.setdefault((session_id, owner_id), Counter())[memory_id] += count

    def land(self, memories: Iterable[GameMemory]) -> None:
        """``memories`` (of this flight) are indexed: other evictions may take them now."""
        for memory in memories:
            key = memory.key
            if self._keys[key] > 0:
                self._keys[key] -= 1
                self._drop(key)

    def land_all(self) -> None:
        """Every memory of this flight is done (saved and indexed, or failed)."""
        for key, count in self._keys.items():
            for _ in range(count):
                self._drop(key)
        self._keys.clear()

    def _drop(self, key: tuple[str, str, str]) -> None:
        owner = (key[0], key[1])
        counts = self._flying[owner]
        counts[key[2]] -= 1
        if counts[key[2]] <= 0:
            del counts[key[2]]
            if not counts:
                del self._flying[owner]


class EvictionGuard:
    """What keeps a front door's concurrent appends from evicting each other's memories.

    An append saves its memory, indexes it, then applies the retention policy. Two appends
    of one owner running at once (tasks of one event loop) could otherwise have the first's
    eviction erase the second's memory between its save and its index write: the vector
    written after the erase is left behind (an orphan until a rebuild), and two evictions
    counting from one state erase twice as much. So the memories being appended are *in
    flight* from before their save until they are indexed, and an eviction spares them
    (as it spares the memory just appended); and evictions run one at a time, each from a
    fresh count. Across processes each front door guards its own; the orphan a race there
    could leave is swept by erasing again or by a rebuild, as after a crash.
    """

    def __init__(self) -> None:
        #: Per owner, the ids in flight and how many appends have each in flight.
        self._flying: dict[_Owner, Counter[str]] = {}
        self.lock = asyncio.Lock()

    @contextlib.contextmanager
    def flying(self, memories: Iterable[GameMemory]) -> Iterator[Flight]:
        """Mark ``memories`` in flight for the ``with`` block (saving and indexing them);
        :meth:`Flight.land` lets some go earlier."""
        flight = Flight(self._flying, memories)
        try:
            yield flight
        finally:
            flight.land_all()

    def spared(self, session_id: str, owner_id: str) -> set[str]:
        """The ids of the owner's memories in flight (an eviction leaves them): the owner's
        alone, however many memories other owners have in flight."""
        return set(self._flying.get((session_id, owner_id), ()))


class EraseGate:
    """Appends share it, an erase holds it alone (see the module docstring).

    Nothing is awaited on an append's way in or out while no erase is running or waiting:
    an append costs two counter updates.
    """

    def __init__(self) -> None:
        self._appending = 0  # appends holding the gate
        self._erasing = False  # an erase holds it
        self._waiting = 0  # erases waiting for it
        self._changed: asyncio.Condition | None = None

    @property
    def busy(self) -> bool:
        """Whether an append or an erase holds the gate, or an erase waits for it."""
        return bool(self._appending or self._erasing or self._waiting)

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    @contextlib.asynccontextmanager
    async def appending(self) -> AsyncIterator[None]:
        """Hold the gate with other appends: for a save and its index write."""
        if self._erasing or self._waiting:
            changed = self._condition()
            async with changed:
                await changed.wait_for(lambda: not (self._erasing or self._waiting))
        self._appending += 1  # no await since the check: nothing came in between
        try:
            yield
        finally:
            self._appending -= 1
            if not self._appending and self._waiting:
                changed = self._condition()
                async with changed:
                    changed.notify_all()

    @contextlib.asynccontextmanager
    async def erasing(self) -> AsyncIterator[None]:
        """Hold the gate alone: for an erase from the save and from the index."""
        if self._erasing or self._appending or self._waiting:
            changed = self._condition()
            async with changed:
                self._waiting += 1
                try:
                    await changed.wait_for(lambda: not (self._erasing or self._appending))
                finally:
                    self._waiting -= 1
                    if not self._waiting:  # appends held back by erases (one cancelled?)
                        changed.notify_all()
        self._erasing = True  # no await since the check: nothing came in between
        try:
            yield
        finally:
            self._erasing = False
            if self._changed is not None:
                async with self._changed:
                    self._changed.notify_all()
