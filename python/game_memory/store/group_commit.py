"""Group commit: concurrent appends of one store object share one batch, and its fsyncs.

Appends from several threads (the store's I/O pool serves several coroutines at once) queue
here. One of them, the *leader*, takes everything queued and writes it as one batch
(``batches.write_batch`` in independent mode: each append keeps its own outcome, and a
conflict in one never fails another); the others wait for their outcome. While the leader
waits for its fsyncs, new appends queue up and form the next group, so the number of
groups follows the disk's latency, not the number of appends. An append alone (no
concurrency) is an ordinary append and waits for nobody.

Every append is acknowledged only after its batch committed, so each keeps the guarantee of
a single append: durable when it returns, all or nothing after a crash. Appends of other
processes on the same save are serialized by the writer lock and do not join a group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from game_memory.model import GameMemory

__all__ = ["GroupCommitter"]

Outcome = bool | BaseException


class _Slot:
    __slots__ = ("memory", "outcome")

    def __init__(self, memory: GameMemory) -> None:
        self.memory = memory
        self.outcome: Outcome | None = None


class GroupCommitter:
    """Leader/follower batching of appends; thread-safe.

    Args:
        write: Writes a group; returns one outcome per memory (``True``, ``False`` or the
            exception for that memory). It may raise for the whole group (a failed write).
        maximum_group: The most appends one group takes.
    """

    def __init__(
        self,
        write: Callable[[Sequence[GameMemory]], list[Outcome]],
        maximum_group: int = 256,
    ) -> None:
        self._write = write
        self._maximum_group = maximum_group
        self._condition = threading.Condition()
        self._queue: list[_Slot] = []
        self._leading = False
        self.groups = 0  # how many groups were written (for tests and benchmarks)

    def append(self, memory: GameMemory) -> bool:
        """Add ``memory`` through a group; return its outcome or raise its error."""
        slot = _Slot(memory)
        with self._condition:
            self._queue.append(slot)
            while slot.outcome is None and self._leading:
                self._condition.wait()
            if slot.outcome is not None:
                return self._result(slot)
            self._leading = True
        try:
            while slot.outcome is None:
                with self._condition:
                    group = self._queue[: self._maximum_group]
                    del self._queue[: self._maximum_group]
                try:
                    outcomes: list[Outcome] = list(self._write([s.memory for s in group]))
                except BaseException as exc:  # the whole group failed: each append says so
                    outcomes = [exc] * len(group)
                with self._condition:
                    for member, outcome in zip(group, outcomes, strict=True):
                        member.outcome = outcome
                    self.groups += 1
                    self._condition.notify_all()
        finally:
            with self._condition:
                self._leading = False
                self._condition.notify_all()
        return self._result(slot)

    @staticmethod
    def _result(slot: _Slot) -> bool:
        outcome = slot.outcome
        assert outcome is not None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
