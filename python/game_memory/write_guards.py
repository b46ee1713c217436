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
  indexed; an erase: erased from the save *and* from the index), and only then is the
  cancellation raised. Once a group commit has begun the store writes the memory whatever
  the caller does, so an append cut off after that point left a saved memory without its
  vector (and without a diagnostic) until a rebuild.
* :class:`WritesInFlight`: the writes begun and not ended, so that ``aclose`` waits for
  them before it closes the stores (a write cut off by the close left a memory saved
  without its vector, or erased from the save with its vector left in the index).
* :class:`OneLoop`: a front door serves the tasks of one event loop at a time. asyncio's
  locks belong to the loop that first waits on them, so the guards above make theirs anew
  when the loop has changed (a front door opened in one ``asyncio.run`` and used in the
  next); a call from a loop while another one that used the front door is still running
  (another thread) is refused with :class:`~game_memory.errors.InvalidArgumentError`
  instead of hanging or failing inside asyncio.

Across processes (two front doors on one save, or on one PostgreSQL database) each guards
its own; what a race there could leave is repaired as after a crash: erasing again, or a
rebuild, drops an orphan, and a rebuild writes a missing vector.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from typing import Any, Generic, TypeVar

from game_memory.errors import InvalidArgumentError
from game_memory.model import GameMemory

__all__ = ["EraseGate", "EvictionGuard", "Flight", "OneLoop", "WritesInFlight", "finished"]

_T = TypeVar("_T")
_P = TypeVar("_P")
_log = logging.getLogger("game_memory")

_ONE_LOOP = (
    "a front door serves the tasks of one event loop at a time, and {what}: call it from "
    "that loop (from another thread, hand the call to it with "
    "asyncio.run_coroutine_threadsafe), or wait until that loop has stopped"
)


async def finished(work: Coroutine[Any, Any, _T]) -> _T:
    """Run ``work`` to its end even when the caller is cancelled meanwhile.

    The cancellation is raised once ``work`` has ended, and then whatever ``work``
    raised is only logged: the caller asked to stop, not for the outcome. Used for the
    front door's writes: an append's end is bounded by the store's commit and one
    embedding's deadline, a batch's by its embedding calls (each with its deadline), so a
    cancelled ``append_many`` of thousands of memories answers its cancellation only once
    they are all indexed.
    """
    return await _finish(asyncio.ensure_future(work))


async def _finish(task: asyncio.Future[_T]) -> _T:
    """:func:`finished` of a task already started."""
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


class WritesInFlight:
    """The front door's writes begun and not yet ended, for ``aclose`` to wait for.

    A write counts from its call (once the front door found itself open) until it ends,
    the part a cancelled caller leaves to :meth:`finished` included; ``aclose`` refuses new
    calls first, then waits (:meth:`drained`), so the wait is bounded by the writes already
    begun (each bounded by the store's commit and its embeddings' deadlines).
    """

    def __init__(self) -> None:
        self._count = 0
        self._drained: asyncio.Future[None] | None = None

    def writing(self) -> WritesInFlight:
        """Count the ``with`` block (the caller's part of a write) in flight; blocks nest.

        This object is the context manager (two counter updates: it is on every append's
        path, where a generator-based one would cost a microsecond).
        """
        return self

    def __enter__(self) -> None:
        self._count += 1

    def __exit__(self, *_exc_info: object) -> None:
        self._leave()

    async def finished(self, work: Coroutine[Any, Any, _T]) -> _T:
        """:func:`finished`, with ``work`` counted in flight until it ends (also when the
        caller was cancelled and no longer waits for it)."""
        self._count += 1
        task = asyncio.ensure_future(work)
        task.add_done_callback(lambda _: self._leave())
        return await _finish(task)

    async def drained(self) -> None:
        """Return once no write is in flight (at once when none is)."""
        if not self._count:
            return
        loop = asyncio.get_running_loop()
        if self._drained is None or self._drained.done() or self._drained.get_loop() is not loop:
            self._drained = loop.create_future()
        await asyncio.shield(self._drained)

    def _leave(self) -> None:
        self._count -= 1
        if not self._count and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)


class OneLoop:
    """Which event loop a front door serves (see the module docstring).

    The loop of the latest call is remembered; a call from another loop takes the front
    door over when that one is no longer running (it ended, as an ``asyncio.run`` does),
    and is refused while it runs (it can only run in another thread: asyncio's locks, the
    store's commits and the thread pool's hand-offs of that loop would hang or fail).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # two threads' first calls: one of them is refused

    def check(self) -> None:
        """Raises: InvalidArgumentError: another running loop uses the front door."""
        loop = asyncio.get_running_loop()
        if loop is self._loop:
            return
        with self._lock:
            previous = self._loop
            if previous is not None and previous is not loop and previous.is_running():
                raise InvalidArgumentError(
                    _ONE_LOOP.format(
                        what="this call came from another event loop while the "
                        "one that uses it runs in another thread"
                    )
                )
            self._loop = loop


class _LoopBound(Generic[_P]):
    """An asyncio primitive of the running loop, made anew when the loop has changed.

    asyncio's locks and conditions belong to the loop that first waits on them and raise a
    RuntimeError in any other, so a front door used in a second ``asyncio.run`` failed once
    its guards had been contended in the first. ``idle(primitive)`` says nothing waits on
    it: only then may another loop take it over.
    """

    def __init__(self, make: Callable[[], _P], idle: Callable[[_P], bool]) -> None:
        self._make = make
        self._idle = idle
        self._primitive: _P | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> _P:
        """The primitive for the running loop.

        Raises:
            InvalidArgumentError: tasks of another loop wait on it.
        """
        loop = asyncio.get_running_loop()
        if self._primitive is None or self._loop is not loop:
            if self._primitive is not None and not self._idle(self._primitive):
                raise InvalidArgumentError(
                    _ONE_LOOP.format(what="tasks of another event loop are waiting on it")
                )
            self._primitive, self._loop = self._make(), loop
        return self._primitive


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

    An eviction is an erase: it holds ``gate`` alone (:meth:`EraseGate.erasing`, the front
    door's erase gate), so that no append runs between its erase from the save and from
    the index (an identical memory appended again there lost its new vector). It takes the
    gate after :attr:`lock`, and no append holds a share of the gate while it waits for
    :attr:`lock` (appends evict after leaving the gate), so the two cannot wait for each
    other.
    """

    def __init__(self, gate: EraseGate | None = None) -> None:
        #: Per owner, the ids in flight and how many appends have each in flight.
        self._flying: dict[_Owner, Counter[str]] = {}
        #: The erase gate the evictions hold (the front door's; a gate of its own if none).
        self.gate = EraseGate() if gate is None else gate
        self._lock = _LoopBound(asyncio.Lock, lambda lock: not lock.locked())

    @property
    def lock(self) -> asyncio.Lock:
        """One eviction at a time (a lock of the running event loop, see :class:`_LoopBound`).

        Raises:
            InvalidArgumentError: an eviction of another event loop holds it.
        """
        return self._lock.get()

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
        self._held_back = 0  # appends waiting for it
        # Made when first waited on, for the running loop (a new one when the loop changed).
        self._changed = _LoopBound(asyncio.Condition, lambda _: not self._asleep)

    @property
    def busy(self) -> bool:
        """Whether an append or an erase holds the gate, or an erase waits for it."""
        return bool(self._appending or self._erasing or self._waiting)

    @property
    def _asleep(self) -> int:
        """How many appends and erases wait on the condition."""
        return self._waiting + self._held_back

    def _condition(self) -> asyncio.Condition:
        """Raises: InvalidArgumentError: tasks of another event loop wait on the gate."""
        return self._changed.get()

    @contextlib.asynccontextmanager
    async def appending(self) -> AsyncIterator[None]:
        """Hold the gate with other appends: for a save and its index write."""
        if self._erasing or self._waiting:
            changed = self._condition()
            async with changed:
                self._held_back += 1
                try:
                    await changed.wait_for(lambda: not (self._erasing or self._waiting))
                finally:
                    self._held_back -= 1
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
            if self._asleep:
                changed = self._condition()
                async with changed:
                    changed.notify_all()
