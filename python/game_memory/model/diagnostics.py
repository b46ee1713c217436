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
    memory_vectors_caught_up            INFORMATION  memories saved without a vector were
                                                 embedded in the background [session, owner]
    memory_embedding_catch_up_failed    WARNING  that background embedding failed
                                                 [session, owner]

``details`` is ``{"exception": "<exception class name>"}`` when an exception caused it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DiagnosticSeverity", "DiagnosticSink", "MemoryVectorDiagnostic"]


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
