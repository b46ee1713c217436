"""Turn the core's results into the JSON objects of the protocol.

Pure functions; each returns plain dicts, lists, strings, numbers, booleans and ``None``.
"""

from __future__ import annotations

import json
import math
from enum import Enum
from typing import Any

from game_memory.bridge.budget import ResponseBudget
from game_memory.bridge.service import (
    DiagnosticView,
    MigrationView,
    RecallHitView,
    RecallResultView,
    StatusView,
)
from game_memory.model import GameMemory, GameMemorySearchStage, GameMoment

__all__ = [
    "diagnostic_to_json",
    "hit_to_json",
    "memory_json_bound",
    "memory_to_json",
    "migration_to_json",
    "moment_to_json",
    "recall_to_json",
    "stage_to_json",
    "status_to_json",
]


def moment_to_json(moment: GameMoment) -> dict[str, Any]:
    """Return ``{"timeline_id", "tick"}`` (and ``calendar_json`` when the moment has one)."""
    result: dict[str, Any] = {"timeline_id": moment.timeline_id, "tick": moment.tick}
    if moment.calendar_json is not None:
        result["calendar_json"] = moment.calendar_json
    return result


def _finite_or_text(literal: str) -> float | str:
    """A payload number as a float, or as its text when a 64-bit float cannot hold it: a
    memory stored before such numbers were refused (or migrated) holds one, and encoding
    infinity would fail the whole recall."""
    value = float(literal)
    return literal if math.isinf(value) else value


def memory_to_json(memory: GameMemory) -> dict[str, Any]:
    """Return the protocol's memory object; ``payload`` is the parsed ``payload_json``."""
    return {
        "memory_id": memory.memory_id,
        "session_id": memory.session_id,
        "owner_id": memory.owner_id,
        "text": memory.searchable_text or "",
        "kind": memory.kind.value,
        "scope": memory.scope,
        "moment": moment_to_json(memory.moment),
        "importance": memory.importance,
        "tags": list(memory.tags),
        "payload": json.loads(memory.payload_json, parse_float=_finite_or_text),
        "expires_at": None if memory.expires_at is None else moment_to_json(memory.expires_at),
        "metadata": dict(memory.metadata),
        "source_input_id": memory.source_input_id,
        "belief_key": memory.belief_key,
        "consolidates": list(memory.consolidates),
    }


#: Worst-case encoded bytes per character of a string: a character outside the Basic
#: Multilingual Plane becomes two ``\\u`` escapes (12 bytes) in the ASCII-only encoding used
#: for messages holding a lone surrogate. Re-encoding a parsed payload number grows it less
#: than that (``1e15`` -> ``1000000000000000.0``).
_BYTES_PER_CHARACTER = 12
#: Bytes of a memory object and its ``why`` besides its strings (keys, numbers, nulls).
_FIXED_BYTES = 1_024
#: Bytes per list or mapping entry besides its characters (quotes, commas, colons).
_ENTRY_BYTES = 16


def memory_json_bound(memory: GameMemory) -> int:
    """Return an upper bound on the encoded size of a recalled memory object, cheaply.

    Sums string lengths without serializing anything, so it costs a microsecond or two; it
    overestimates (ordinary text takes one byte a character, not twelve), which only makes
    the response budget measure exactly sooner.
    """
    moment = memory.moment
    characters = (
        len(memory.memory_id)
        + len(memory.session_id)
        + len(memory.owner_id)
        + len(memory.searchable_text or "")
        + len(memory.scope)
        + len(memory.payload_json)
        + len(memory.source_input_id or "")
        + len(memory.belief_key or "")
        + len(moment.timeline_id)
        + len(moment.calendar_json or "")
    )
    entries = 0
    # Most memories have few or none of these: skip the empty ones without a generator.
    if memory.expires_at is not None:
        expires = memory.expires_at
        characters += len(expires.timeline_id) + len(expires.calendar_json or "")
    if memory.tags:
        characters += sum(map(len, memory.tags))
        entries += len(memory.tags)
    if memory.metadata:
        characters += sum(map(len, memory.metadata)) + sum(map(len, memory.metadata.values()))
        entries += len(memory.metadata)
    if memory.consolidates:
        characters += sum(map(len, memory.consolidates))
        entries += len(memory.consolidates)
    return _BYTES_PER_CHARACTER * characters + _ENTRY_BYTES * entries + _FIXED_BYTES


def hit_to_json(hit: RecallHitView) -> dict[str, Any]:
    """Return a recalled memory object with its ``why``."""
    result = memory_to_json(hit.memory)
    result["why"] = {
        "lexical_rank": hit.lexical_rank,
        "vector_rank": hit.vector_rank,
        "vector_score": hit.vector_score,
        "fused_score": hit.fused_score,
        "age_ticks": hit.age_ticks,
    }
    return result


def stage_to_json(stage: GameMemorySearchStage) -> dict[str, Any]:
    """Return one stage; its name is the lower-case enum name (``"lexical_search"``)."""
    return {
        "stage": stage.stage.name.lower(),
        "duration_ms": stage.duration_ms,
        "scanned_count": stage.scanned_count,
        "candidate_count": stage.candidate_count,
        "reused": stage.reused,
    }


def recall_to_json(
    result: RecallResultView,
    budget: ResponseBudget | None = None,
    bounds: list[int] | None = None,
) -> dict[str, Any]:
    """Return ``{"memories", "stages", "fallback"}`` of one recall.

    Args:
        result: The recall.
        budget: When given, each memory object is charged to it as soon as it is built.
        bounds: The :func:`memory_json_bound` of each hit, when the caller has them.

    Raises:
        ResponseTooLargeError: The budget's cap was passed; the rest is not built.
    """
    memories: list[dict[str, Any]] = []
    for position, hit in enumerate(result.hits):
        item = hit_to_json(hit)
        if budget is not None:
            bound = memory_json_bound(hit.memory) if bounds is None else bounds[position]
            budget.charge(item, bound)
        memories.append(item)
    return {
        "memories": memories,
        "stages": [stage_to_json(stage) for stage in result.snapshot.stages],
        "fallback": result.fallback,
    }


def status_to_json(status: StatusView) -> dict[str, Any]:
    """Return the status object shared by ``memory.status`` and ``memory.rebuild``."""
    return {
        "mode": status.mode,
        "state": status.state,
        "active_identity": None if status.active_identity is None else str(status.active_identity),
        "total_entries": status.total_entries,
        "ready_entries": status.ready_entries,
        "pending_entries": status.pending_entries,
        "stale_entries": status.stale_entries,
        "orphan_entries": status.orphan_entries,
        "requires_rebuild": status.requires_rebuild,
    }


def migration_to_json(report: MigrationView) -> dict[str, Any]:
    """Return ``{"migrated_entries", "partitioned_entries", "vector_entries"}``."""
    return {
        "migrated_entries": report.migrated_entries,
        "partitioned_entries": report.partitioned_entries,
        "vector_entries": report.vector_entries,
    }


def diagnostic_to_json(diagnostic: DiagnosticView) -> dict[str, Any]:
    """Return the params of a ``memory.diagnostic`` notification."""
    severity: Any = diagnostic.severity
    if isinstance(severity, Enum):
        severity = severity.value
    details = diagnostic.details
    return {
        "code": str(diagnostic.code),
        "severity": str(severity),
        "message": diagnostic.message,
        "session_id": diagnostic.session_id,
        "owner_id": diagnostic.owner_id,
        "memory_id": diagnostic.memory_id,
        "details": None if details is None else _plain(dict(details)),
    }


def _plain(value: Any) -> Any:
    """Make diagnostic details JSON-safe (enums to values, tuples to lists, rest to str)."""
    if isinstance(value, Enum):
        return _plain(value.value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)
