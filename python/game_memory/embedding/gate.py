"""Bounded embedding calls: a concurrency limit and one deadline covering queue and call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from game_memory.errors import EmbeddingTimeoutError, EmbeddingUnavailableError, GameMemoryError

__all__ = ["EmbeddingGate"]

_T = TypeVar("_T")
_log = logging.getLogger("game_memory.vector")


class EmbeddingGate:
    """Run provider calls with at most ``concurrency`` in flight and a deadline each.

    One deadline of ``timeout`` seconds covers waiting for a slot and the call itself. When
    the deadline (or the caller's cancellation) wins, the call is asked to cancel, but its
    slot is released only once it has really settled: a provider that ignores cancellation
    keeps occupying its slot, so it can never pile up detached calls, and later calls time
    out in the queue instead.
    """

    def __init__(self, concurrency: int, timeout: float) -> None:
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._timeout = timeout
        #: The loop the slots serve, and how many are taken: asyncio's semaphore belongs
        #: to the loop that first waited on it and raises RuntimeError in any other, so a
        #: front door used in a second ``asyncio.run`` made new slots only while none is
        #: taken (a call of the other loop still running is refused, named).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._taken = 0

    def _slots_here(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if self._taken:
                raise EmbeddingUnavailableError(
                    "the embedding gate serves one event loop at a time, and calls of "
                    "another loop are running; use the front door from one loop (see "
                    "docs/api.md)"
                )
            self._slots, self._loop = asyncio.Semaphore(self._concurrency), loop
        return self._slots

    async def call(self, operation: Callable[[], Awaitable[_T]], what: str) -> _T:
        """Run ``operation()`` under the gate.

        Raises:
            EmbeddingTimeoutError: the queue or the call exceeded the deadline.
            EmbeddingUnavailableError: the provider raised (its error is chained).
            asyncio.CancelledError: the caller was cancelled.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        slots = self._slots_here()
        try:
            if slots.locked():
                await asyncio.wait_for(slots.acquire(), self._timeout)
            else:
                await slots.acquire()  # a free slot: taken without suspending
        except TimeoutError:
            raise EmbeddingTimeoutError(
                f"{what}: the embedding queue exceeded its configured deadline of "
                f"{self._timeout:g} s; the provider is overloaded or stuck"
            ) from None
        self._taken += 1
        try:
            task: asyncio.Future[_T] = asyncio.ensure_future(operation())
        except BaseException as exc:
            # The provider failed before returning an awaitable: nothing runs, free the slot.
            self._release()
            if isinstance(exc, GameMemoryError) or not isinstance(exc, Exception):
                raise
            raise EmbeddingUnavailableError(
                f"{what}: the embedding provider failed ({type(exc).__name__}: {exc})"
            ) from exc
        task.add_done_callback(self._settled)
        try:
            # The shield keeps the deadline from waiting for a provider that ignores
            # cancellation; asyncio.timeout is wait_for's deadline without its extra task.
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            raise EmbeddingTimeoutError(
                f"{what}: the embedding provider exceeded its configured deadline of "
                f"{self._timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            task.cancel()
            raise
        except GameMemoryError:
            raise
        except Exception as exc:
            raise EmbeddingUnavailableError(
                f"{what}: the embedding provider failed ({type(exc).__name__}: {exc})"
            ) from exc

    def _release(self) -> None:
        self._taken -= 1
        self._slots.release()

    def _settled(self, task: asyncio.Future[Any]) -> None:
        self._release()
        if not task.cancelled() and task.exception() is not None:
            _log.debug("embedding call settled with %r", task.exception())
