"""Upkeep of derived files that a load hands off: done soon, never lost at close.

Why: a partition's load checks its read-file parts and the save files they cover, and
records what it checked in stamps (``read_files.py``, ``covered_stamps.py``), each written
durably: three fsyncs. The first recall after a load must not wait on them, so the load
hands them here, and the store's read-file thread writes them. That thread's queue is
dropped when the store closes (a queued read file is bounded by what close writes
anyway), but a dropped stamp would be dropped at every short session ("load, ask, quit")
and every load would check the same bytes again. So the jobs wait in a queue of their
own, which the read-file thread drains and the closing store drains too.

Contract: a job never raises (it is an optimisation: a stamp not written is a full check
at the next load); jobs run in the order given, each once.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable

__all__ = ["Upkeep"]


class Upkeep:
    """Jobs queued for ``submit`` (a thread pool's), drained there or by :meth:`drain`."""

    def __init__(self, submit: Callable[[Callable[[], None]], object]) -> None:
        self._submit = submit
        self._jobs: deque[Callable[[], object]] = deque()
        self._lock = threading.Lock()

    def __call__(self, job: Callable[[], object]) -> None:
        """Queue ``job`` and ask the thread to drain the queue; never raises (a thread that
        takes no more work, as when closing, leaves the job to :meth:`drain`)."""
        with self._lock:
            self._jobs.append(job)
        with contextlib.suppress(RuntimeError):
            self._submit(self.drain)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    def drain(self) -> None:
        """Run every job queued, oldest first (from the thread, or from a closing store
        after the thread stopped)."""
        while True:
            with self._lock:
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            job()
