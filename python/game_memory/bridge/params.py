"""The params of every bridge method, as pydantic models (snake_case, unknown fields refused).

The models check shapes and protocol bounds; :mod:`game_memory.bridge.convert` turns them
into the core's models, whose validators check the rest. A few of the core's rules are
checked here as well, because only here can the error name the parameter: blank ids, payload
depth (pydantic's own nesting limit would answer first, with a path of type names) and
``expires_at`` against ``moment`` (the core's check is about the whole memory, unnamed).
Numbers may arrive as whole floats (Godot's JSON parser makes every number a float), so
integer fields accept ``8.0`` but refuse ``8.5``, ``"8"`` and booleans.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    ValidationInfo,
    field_validator,
)

from game_memory.model import MAXIMUM_PAYLOAD_DEPTH, GameMemoryKind, GameMoment
from game_memory.strict_json import nests_deeper_than

__all__ = [
    "MAXIMUM_RECALL_LIMIT",
    "MAXIMUM_RECALL_MANY_QUERIES",
    "MAXIMUM_REMEMBER_MANY_MEMORIES",
    "ConsolidateParams",
    "EraseParams",
    "ForgetParams",
    "InitializeParams",
    "MigrateParams",
    "RebuildParams",
    "RecallManyParams",
    "RecallParams",
    "RememberManyParams",
    "RememberParams",
    "StatusParams",
]

#: Largest ``limit`` of one recall.
MAXIMUM_RECALL_LIMIT = 100
#: Most queries in one ``memory.recall_many``.
MAXIMUM_RECALL_MANY_QUERIES = 64
#: Most memories in one ``memory.remember_many`` (one atomic batch).
MAXIMUM_REMEMBER_MANY_MEMORIES = 256

_MAXIMUM_ID = 1_024
_MAXIMUM_LIST = 256


def _whole_number(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError("must be a whole number")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


def _real_number(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError("must be a number")
    return value


def _kind(value: Any) -> GameMemoryKind:
    # Names only: the core also takes the reference's ordinals (0 to 5), which a client
    # sending a number by mistake would see stored as another kind without an error.
    if not isinstance(value, str):
        raise ValueError("a memory kind is a string such as 'event' or 'fact', not a number")
    return GameMemoryKind.parse(value)


def _moment(value: Any) -> Any:
    # The core model reads a tick given as a numeric string ("5"), as legacy saves may hold
    # one; the protocol's integers are JSON numbers (docs/protocol.md), so "5" is refused.
    if isinstance(value, dict) and isinstance(value.get("tick"), str):
        raise ValueError("its tick must be a whole number, not a string")
    return value


def _string_list(value: Any) -> Any:
    if isinstance(value, str):
        raise ValueError("must be a list of strings, not one string")
    return value


def _not_blank(value: str) -> str:
    # The store refuses blank ids too, but without naming the parameter: check it here.
    if not value.strip():
        raise ValueError("must not be blank (empty or only whitespace); send a non-blank id")
    return value


def _payload_depth(value: Any) -> Any:
    # Before pydantic sees the value: its JsonValue check recurses and, past about 255
    # levels, fails with a message and a path of its own internals. The count is the core's
    # (an object or array is one level; GameMemory refuses payload_json deeper than 128).
    if nests_deeper_than(value, MAXIMUM_PAYLOAD_DEPTH):
        raise ValueError(f"nested deeper than {MAXIMUM_PAYLOAD_DEPTH} levels")
    return value


Id = Annotated[str, Field(min_length=1, max_length=_MAXIMUM_ID), AfterValidator(_not_blank)]
Kind = Annotated[GameMemoryKind, BeforeValidator(_kind)]
Moment = Annotated[GameMoment, BeforeValidator(_moment)]
Unit = Annotated[float, BeforeValidator(_real_number), Field(ge=0.0, le=1.0, allow_inf_nan=False)]
IdList = Annotated[list[Id], BeforeValidator(_string_list), Field(max_length=_MAXIMUM_LIST)]
Payload = Annotated[JsonValue, BeforeValidator(_payload_depth)]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InitializeParams(_Params):
    """``initialize``: the protocol version the client speaks and, over WebSocket, the token."""

    protocol_version: Annotated[int, BeforeValidator(_whole_number)]
    token: str | None = None


class RememberParams(_Params):
    """``memory.remember``: one memory of one NPC at one game moment.

    ``payload`` defaults to ``{"text": text}`` when absent (an explicit ``null`` is kept);
    ``memory_id`` defaults to a content digest, so resending the same remember is a no-op.
    """

    session_id: Id
    owner_id: Id
    text: Annotated[str, Field(max_length=1_000_000)]
    moment: Moment
    kind: Kind = GameMemoryKind.EVENT
    scope: Id = "personal"
    importance: Unit = 0.5
    tags: IdList = Field(default_factory=list)
    payload: Payload = None
    memory_id: Id | None = None
    expires_at: Moment | None = None
    source_input_id: Id | None = None
    metadata: dict[str, str] | None = None
    belief_key: Id | None = None

    @field_validator("expires_at")
    @classmethod
    def _expiry_follows_moment(
        cls, value: GameMoment | None, info: ValidationInfo
    ) -> GameMoment | None:
        # The core's rule (GameMemory), checked on the field so the error names expires_at
        # (memories.3.expires_at, summary.expires_at), not the whole memory.
        moment = info.data.get("moment")
        if value is None or not isinstance(moment, GameMoment):
            return value  # an invalid moment is reported on its own
        if value.timeline_id != moment.timeline_id:
            raise ValueError("must be on the same timeline as moment")
        if value.tick < moment.tick:
            raise ValueError("must not be before moment")
        return value

    @property
    def payload_given(self) -> bool:
        """Whether the client sent ``payload`` (possibly ``null``)."""
        return "payload" in self.model_fields_set


class RecallParams(_Params):
    """``memory.recall``: what to recall, as of which game moment, and how many."""

    session_id: Id
    owner_id: Id | None = None
    text: Annotated[str | None, Field(max_length=1_000_000)] = None
    at_or_before: Moment | None = None
    limit: Annotated[int, BeforeValidator(_whole_number), Field(ge=0, le=MAXIMUM_RECALL_LIMIT)] = 8
    scopes: IdList = Field(default_factory=list)
    kinds: Annotated[list[Kind], Field(max_length=_MAXIMUM_LIST)] = Field(default_factory=list)
    tags: IdList = Field(default_factory=list)
    minimum_importance: Unit = 0.0
    require_semantic: StrictBool = False


class RememberManyParams(_Params):
    """``memory.remember_many``: 1..256 remember params, stored as one atomic batch.

    Every entry is validated before anything is stored: one invalid entry refuses the
    whole call (``data.field`` names it, such as ``memories.3.text``).
    """

    memories: Annotated[
        list[RememberParams], Field(min_length=1, max_length=MAXIMUM_REMEMBER_MANY_MEMORIES)
    ]


class RecallManyParams(_Params):
    """``memory.recall_many``: 1..64 recall params, each validated on its own.

    Only the list is checked here: a query that is not valid (not even an object) fails in
    its own result entry when the call runs, and the other queries are answered.
    """

    queries: Annotated[list[Any], Field(min_length=1, max_length=MAXIMUM_RECALL_MANY_QUERIES)]


class ForgetParams(_Params):
    """``memory.forget``: retract one memory of one NPC as of a game moment."""

    session_id: Id
    owner_id: Id
    memory_id: Id
    at: Moment


class EraseParams(_Params):
    """``memory.erase``: remove a session's memories for good, or one NPC's, or listed ones.

    ``memory_ids`` needs ``owner_id``; without ``owner_id`` the whole session goes.
    """

    session_id: Id
    owner_id: Id | None = None
    memory_ids: IdList | None = None


class ConsolidateParams(_Params):
    """``memory.consolidate``: a summary of one NPC's memories, retracting them as of its moment.

    ``summary`` takes the fields of ``memory.remember`` except the session and owner (the
    call's); its kind defaults to ``reflection``.
    """

    session_id: Id
    owner_id: Id
    memory_ids: Annotated[
        list[Id], BeforeValidator(_string_list), Field(min_length=1, max_length=1_024)
    ]
    summary: dict[str, Any]


class StatusParams(_Params):
    """``memory.status``: the session whose index status to report."""

    session_id: Id


class RebuildParams(_Params):
    """``memory.rebuild``: re-embed a session; ``force`` re-embeds ready entries too."""

    session_id: Id
    force: StrictBool = False


class MigrateParams(_Params):
    """``memory.migrate``: no params."""
