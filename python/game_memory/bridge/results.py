"""Turn the core's results into the JSON objects of the protocol.

Pure functions; each returns plain dicts, lists, strings, numbers, booleans and ``None``.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

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
        "payload": json.loads(memory.payload_json),
        "expires_at": None if memory.expires_at is None else moment_to_json(memory.expires_at),
        "metadata": dict(memory.metadata),
        "source_input_id": memory.source_input_id,
        "belief_key": memory.belief_key,
        "consolidates": list(memory.consolidates),
    }


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


def recall_to_json(result: RecallResultView) -> dict[str, Any]:
    """Return ``{"memories", "stages", "fallback"}`` of one recall."""
    return {
        "memories": [hit_to_json(hit) for hit in result.hits],
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
