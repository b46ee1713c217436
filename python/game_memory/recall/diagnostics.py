"""Deliver diagnostics to a sink without letting the sink change any outcome."""

from __future__ import annotations

import asyncio
import inspect
import logging

from game_memory.model.diagnostics import DiagnosticSink, MemoryVectorDiagnostic

__all__ = ["DiagnosticDispatcher"]

_log = logging.getLogger("game_memory.vector")


class DiagnosticDispatcher:
    """Deliver diagnostics to a sink without letting the sink change any outcome.

    A synchronous sink is called inline (it must be quick: it runs on the event loop). An
    asynchronous one is awaited for at most ``timeout`` seconds, one at a time: a busy sink
    drops later diagnostics after waiting ``timeout`` for its slot instead of queueing them
    without bound. A sink that overruns its deadline is asked to cancel but keeps the slot
    until it really settles, and while it is stuck later diagnostics are dropped at once
    (never waited for), so a hung sink costs nothing after its first deadline. Exceptions
    from the sink are logged and swallowed; the caller's own cancellation propagates.
    """

    def __init__(self, sink: DiagnosticSink | None, timeout: float) -> None:
        self._sink = sink
        self._timeout = timeout
        self._slot = asyncio.Semaphore(1)
        self._stuck = False

    async def report(self, diagnostic: MemoryVectorDiagnostic) -> None:
        """Deliver ``diagnostic`` (or drop it if the sink is busy, stuck or slow)."""
        if self._sink is None:
            return
        if self._stuck:
            _log.warning("diagnostic %s dropped: the sink is stuck", diagnostic.code)
            return
        try:
            await asyncio.wait_for(self._slot.acquire(), self._timeout)
        except TimeoutError:
            _log.warning("diagnostic %s dropped: the sink is busy", diagnostic.code)
            return
        try:
            result = self._sink(diagnostic)
            if not inspect.isawaitable(result):
                self._slot.release()
                return
            task = asyncio.ensure_future(result)
        except Exception:  # a sink must never change an outcome
            self._slot.release()
            _log.exception("diagnostic sink failed on %s", diagnostic.code)
            return
        task.add_done_callback(self._settled)
        try:
            await asyncio.wait_for(asyncio.shield(task), self._timeout)
        except TimeoutError:
            if not task.done():
                self._stuck = True
                task.cancel()
            _log.warning("diagnostic %s dropped: the sink took too long", diagnostic.code)
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:
            _log.exception("diagnostic sink failed on %s", diagnostic.code)

    def _settled(self, task: asyncio.Future[object]) -> None:
        self._stuck = False
        self._slot.release()
        if not task.cancelled() and task.exception() is not None:
            _log.debug("diagnostic sink settled with %r", task.exception())
