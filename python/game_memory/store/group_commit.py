"""Concurrent appends of one store object share a group commit: one writer drains a queue.

Each ``append`` puts its memory and a future on the queue. When no writer job is running
one is started in the store's thread pool; it takes up to ``MAXIMUM_GROUP`` queued memories,
writes them as one group (``batches.write_batch`` in independent mode, then
``group_writes.py``), settles each future with that memory's own outcome, and repeats
until the queue is empty. Appends that arrive while a group is being written form the
next group, so under load the fsyncs are shared and a lone append pays no wait.

An outcome is acknowledged only by its future completing with ``True``, which happens
after the group's fsyncs; a failed write fails every memory of its group. The writer job
holds one pool thread, never one per waiting append, so waiting appends do not starve
reads. Cancelling an awaiting task does not take its memory out of a group already being
written (it completes, or not, atomically in the background), as for any store call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from game_memory.model import GameMemory
from game_memory.store.batches import Outcome
from game_memory.store.ledger import MAXIMUM_GROUP
from game_memory.store.pool import settle

__all__ = ["GroupCommitter"]

_T = TypeVar("_T")


_Waiting = tuple[GameMemory, asyncio.AbstractEventLoop, "asyncio.Future[bool]"]


class GroupCommitter:
    """The queue of one store object's appends and its writer job.

    Args:
        commit: Writes a group, returning one outcome per memory (``True``, ``False`` or
            the memory's exception); an exception it raises fails the whole group.
        submit: Starts a job in the store's pool (raises ``RuntimeError`` once closed).
        closed: The error to raise when ``submit`` finds the pool shut down.
        maximum: The largest group.
    """

    def __init__(
        self,
        commit: Callable[[Sequence[GameMemory]], Sequence[Outcome]],
        submit: Callable[[Callable[[], None]], object],
        closed: Callable[[], BaseException],
        maximum: int = MAXIMUM_GROUP,
    ) -> None:
        self._commit = commit
        self._submit = submit
        self._closed = closed
        self._maximum = maximum
        self._mutex = threading.Lock()
        self._queue: list[_Waiting] = []
        self._running = False

    async def append(self, memory: GameMemory) -> bool:
        """Queue ``memory`` for the next group and wait for its outcome.

        Raises:
            BaseException: ``closed()`` when the pool was shut down (nothing queued); the
                memory's own error, or the group's failed write.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        waiting: _Waiting = (memory, loop, future)
        with self._mutex:
            self._queue.append(waiting)
            start = not self._running
            self._running = True
        if start:
            try:
                self._submit(self._drain)
            except RuntimeError as exc:
                with self._mutex:
                    self._running = False
                    if waiting in self._queue:
                        self._queue.remove(waiting)
                raise self._closed() from exc
        return await future

    def _drain(self) -> None:
        """The writer job: write groups until the queue is empty."""
        while True:
            with self._mutex:
                group = self._queue[: self._maximum]
                del self._queue[: self._maximum]
                if not group:
                    self._running = False
                    return
            try:
                outcomes: Sequence[Outcome] = self._commit([item[0] for item in group])
            except BaseException as exc:  # handed to every waiting task, never lost
                outcomes = [exc] * len(group)
            for (_memory, loop, future), outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    settle(loop, future, None, outcome)
                else:
                    settle(loop, future, outcome, None)
