"""Turn validated bridge params into the core's models (memories and queries).

Pure functions. The default ``memory_id`` of a remember is a content digest, so a game that
resends the same remember after a lost response creates nothing new.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pydantic import JsonValue, ValidationError

from game_memory.bridge.codes import ErrorCode, RpcError, describe_validation_error
from game_memory.bridge.params import ConsolidateParams, RecallParams, RememberParams
from game_memory.model import GameMemory, GameMemoryKind, GameMemoryQuery, content_memory_id

__all__ = ["build_memory", "build_query", "build_summary", "canonical_json"]

_RENAMES = {"payload_json": "payload", "searchable_text": "text"}


def canonical_json(value: JsonValue) -> str:
    """Serialize a JSON value canonically: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _invalid(method: str, error: ValidationError, prefix: str = "") -> RpcError:
    text, field = describe_validation_error(error, _RENAMES, prefix)
    return RpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params for {method}: {text}; fix the named parameter and send it again",
        {"kind": "ValidationError", "field": field},
    )


def build_memory(
    params: RememberParams,
    method: str = "memory.remember",
    prefix: str = "",
    consolidates: Sequence[str] = (),
) -> GameMemory:
    """Build the memory a ``memory.remember`` stores.

    ``text`` becomes ``searchable_text``; ``payload`` (default ``{"text": text}``) is
    stored as canonical JSON; ``memory_id`` defaults to :func:`content_memory_id`.

    Args:
        params: The remember params.
        method: The method called, named in an error (``memory.remember_many``).
        prefix: Where ``params`` sit in that method's params (``memories.3``,
            ``summary``), put before the field an error names.
        consolidates: A summary's sources, part of its default id (not set on the memory:
            the consolidate sets them).

    Raises:
        RpcError: ``INVALID_PARAMS`` naming the protocol field the core model refused (an
            unpaired surrogate in the payload). Blank ids, payload depth and ``expires_at``
            against ``moment`` are the core's rules too, but :class:`RememberParams` checks
            them first, so that the error names the field.
    """
    payload: JsonValue = params.payload if params.payload_given else {"text": params.text}
    payload_json = canonical_json(payload)
    memory_id = params.memory_id
    if memory_id is None:
        memory_id = content_memory_id(
            params.session_id,
            params.owner_id,
            params.moment,
            params.kind,
            params.scope,
            params.text,
            payload_json,
            params.belief_key,
            tuple(dict.fromkeys(consolidates)),
        )
    try:
        return GameMemory(
            memory_id=memory_id,
            session_id=params.session_id,
            owner_id=params.owner_id,
            scope=params.scope,
            kind=params.kind,
            payload_json=payload_json,
            moment=params.moment,
            importance=params.importance,
            searchable_text=params.text,
            tags=tuple(params.tags),
            source_input_id=params.source_input_id,
            expires_at=params.expires_at,
            metadata=params.metadata or {},
            belief_key=params.belief_key,
        )
    except ValidationError as exc:
        raise _invalid(method, exc, prefix) from exc


def build_summary(params: ConsolidateParams) -> GameMemory:
    """Build the summary a ``memory.consolidate`` appends (a reflection by default).

    ``summary`` is validated as the params of a ``memory.remember`` of the call's session
    and owner, so its fields and defaults are a remember's; its default id also covers
    the sources (``memory_ids``), so a summary of one text and moment over other sources
    is another memory, not a conflict.

    Raises:
        RpcError: ``INVALID_PARAMS`` naming the summary field that is wrong (``summary.kind``
            for a kind other than ``reflection``).
    """
    fields = {"kind": "reflection", **params.summary}
    for name in ("session_id", "owner_id"):
        if name in fields and fields[name] != getattr(params, name):
            raise RpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params for memory.consolidate: summary.{name} differs from {name}; "
                "leave it out (the call's is used)",
                {"kind": "ValidationError", "field": f"summary.{name}"},
            )
    fields.update(session_id=params.session_id, owner_id=params.owner_id)
    try:
        remember = RememberParams.model_validate(fields)
    except ValidationError as exc:
        raise _invalid("memory.consolidate", exc, "summary") from exc
    if remember.kind is not GameMemoryKind.REFLECTION:
        raise RpcError(
            ErrorCode.INVALID_PARAMS,
            "invalid params for memory.consolidate: summary.kind must be 'reflection' (a "
            f"summary is a reflection), not {remember.kind.value!r}; leave it out",
            {"kind": "ValidationError", "field": "summary.kind"},
        )
    return build_memory(remember, "memory.consolidate", "summary", params.memory_ids)


def build_query(params: RecallParams) -> GameMemoryQuery:
    """Build the query a ``memory.recall`` runs (``require_semantic`` is not part of it).

    Raises:
        RpcError: ``INVALID_PARAMS`` naming the field the core model refused.
    """
    try:
        return GameMemoryQuery(
            session_id=params.session_id,
            limit=params.limit,
            owner_id=params.owner_id,
            scopes=tuple(params.scopes),
            kinds=tuple(params.kinds),
            tags=tuple(params.tags),
            text=params.text,
            at_or_before=params.at_or_before,
            minimum_importance=params.minimum_importance,
        )
    except ValidationError as exc:
        raise _invalid("memory.recall", exc) from exc
