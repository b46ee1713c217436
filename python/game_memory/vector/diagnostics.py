"""Structured diagnostics: what went wrong on the derived side, without text or content.

Codes the hybrid store reports (ids attached in brackets)::

    memory_embedding_append_failed      WARNING  a saved memory got no vector
                                                 [session, owner, memory]
    memory_vector_search_failed         WARNING  one recall fell back to lexical [session]
    memory_vector_rebuild_required      WARNING  vectors of another model: recall is lexical
                                                 until a rebuild (once per session) [session]
    memory_embedding_rebuild_failed     ERROR    a rebuild batch failed [session, owner, memory]
    memory_vector_index_write_failed    ERROR    that failure could not be recorded
                                                 [session, memory]
    memory_vector_index_reset           WARNING  a rebuild deleted a damaged partition [session]
    memory_embedding_rebuild_completed  INFORMATION  nothing is left to rebuild [session]

``details`` is ``{"exception": "<exception class name>"}`` when an exception caused it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "DiagnosticDispatcher",
    "DiagnosticSeverity",
    "DiagnosticSink",
    "MemoryVectorDiagnostic",
]

_log = logging.getLogger("game_memory.vector")


class DiagnosticSeverity(StrEnum):
    """How bad a diagnostic is."""

    INFORMATION = "information"
    WARNING = "warning"
    ERROR = "error"


class MemoryVectorDiagnostic(BaseModel):
    """One event of the vector side, for logs and the Godot ``diagnostic_emitted`` signal.

    Carries ids but never memory text, payloads or vectors. ``details`` is a small JSON
    object (at most 65,536 characters serialized), e.g. ``{"exception": "TimeoutError"}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: str = Field(min_length=1, max_length=256)
    severity: DiagnosticSeverity
    message: str = Field(min_length=1, max_length=4_096)
    session_id: str | None = Field(default=None, max_length=1_024)
    owner_id: str | None = Field(default=None, max_length=1_024)
    memory_id: str | None = Field(default=None, max_length=1_024)
    details: dict[str, Any] | None = None

    @field_validator("message")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\0" in value or not value.strip():
            raise ValueError("a diagnostic message must be non-blank text without NUL")
        return value

    @field_validator("details")
    @classmethod
    def _small_json(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > 65_536:
            raise ValueError("diagnostic details are larger than 65,536 characters")
        return value


DiagnosticSink = Callable[[MemoryVectorDiagnostic], Awaitable[object] | object]


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
