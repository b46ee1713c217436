"""What to recall, and the one visibility rule every recall path applies."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from game_memory.model.fields import (
    MAXIMUM_QUERY_LIMIT,
    MAXIMUM_QUERY_TEXT_CHARACTERS,
    MAXIMUM_TAGS,
    BoundedId,
    Importance,
    check_bounded_id,
    check_unicode,
    strict_int,
    string_list,
)
from game_memory.model.memory import GameMemory, GameMemoryKind, GameMoment

__all__ = ["GameMemoryQuery", "memories_match_query", "memory_matches_query"]


def _unique_ids(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    seen: dict[str, None] = {}
    for item in string_list(value, what):
        seen.setdefault(check_bounded_id(item, what[:-1] if what.endswith("s") else what), None)
    if len(seen) > MAXIMUM_TAGS:
        raise ValueError(f"a query has {len(seen)} {what}; the limit is {MAXIMUM_TAGS}")
    return tuple(seen)


def _unique_kinds(value: Any) -> tuple[GameMemoryKind, ...]:
    if value is None:
        return ()
    if isinstance(value, str | GameMemoryKind):
        value = [value]
    seen: dict[GameMemoryKind, None] = {}
    for item in string_list(value, "kinds"):
        seen.setdefault(GameMemoryKind.parse(item), None)
    return tuple(seen)


class GameMemoryQuery(BaseModel):
    """What to recall: one session, optionally one owner, filters, text and a game moment.

    ``at_or_before`` is the game moment the question is asked at: memories from later
    ticks, from other timelines, or expired at that moment (expiry is exclusive) are
    invisible. Without it there is no time filtering at all. ``limit`` 0 is legal and
    recalls nothing.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: BoundedId
    limit: Annotated[int, BeforeValidator(strict_int), Field(ge=0, le=MAXIMUM_QUERY_LIMIT)]
    owner_id: BoundedId | None = None
    scopes: Annotated[tuple[str, ...], BeforeValidator(lambda v: _unique_ids(v, "scopes"))] = ()
    kinds: Annotated[tuple[GameMemoryKind, ...], BeforeValidator(_unique_kinds)] = ()
    tags: Annotated[tuple[str, ...], BeforeValidator(lambda v: _unique_ids(v, "tags"))] = ()
    text: str | None = None
    at_or_before: GameMoment | None = None
    minimum_importance: Importance = 0.0

    @field_validator("text")
    @classmethod
    def _text_bounded(cls, value: str | None) -> str | None:
        if value is not None:
            if len(value) > MAXIMUM_QUERY_TEXT_CHARACTERS:
                raise ValueError("query text is longer than 1,000,000 characters")
            check_unicode(value, "query text")
        return value


def memory_matches_query(memory: GameMemory, query: GameMemoryQuery) -> bool:
    """Return whether ``memory`` is visible to ``query`` (the canonical visibility predicate).

    Same session (and owner, if the query names one); scope and kind in the query's sets
    when those are non-empty; every query tag present; importance at least the minimum;
    and, when ``at_or_before`` is set, on the same timeline, not after it, and not expired
    at it (``at.tick < expires_at.tick``). Every recall path applies exactly this rule.
    """
    if memory.session_id != query.session_id:
        return False
    if query.owner_id is not None and memory.owner_id != query.owner_id:
        return False
    if query.scopes and memory.scope not in query.scopes:
        return False
    if query.kinds and memory.kind not in query.kinds:
        return False
    if query.tags:
        memory_tags = memory.tags
        if not all(tag in memory_tags for tag in query.tags):
            return False
    if memory.importance < query.minimum_importance:
        return False
    at = query.at_or_before
    if at is not None:
        moment = memory.moment
        if moment.timeline_id != at.timeline_id or moment.tick > at.tick:
            return False
        expiry = memory.expires_at
        if expiry is not None and not at.tick < expiry.tick:
            return False
    return True


def memories_match_query(memories: Sequence[GameMemory], query: GameMemoryQuery) -> bool:
    """Return whether every one of ``memories`` is visible to ``query``.

    ``all(memory_matches_query(m, query) for m in memories)``, each condition of the
    predicate checked for all memories at once by C-level maps (a recall checks the few
    dozen memories the store ranked for it); a query filtering by scope, kind or tag runs
    the predicate memory by memory. ``tests/test_model.py`` checks the two agree.
    """
    if not all(map(operator.eq, map(_session, memories), repeat(query.session_id))):
        return False
    owner = query.owner_id
    if owner is not None and not all(map(operator.eq, map(_owner, memories), repeat(owner))):
        return False
    if query.scopes or query.kinds or query.tags:
        return all(memory_matches_query(memory, query) for memory in memories)
    if any(map(operator.lt, map(_importance, memories), repeat(query.minimum_importance))):
        return False
    at = query.at_or_before
    if at is None:
        return True
    moments = list(map(_moment, memories))
    if not all(map(operator.eq, map(_timeline, moments), repeat(at.timeline_id))):
        return False
    if any(map(operator.gt, map(_tick, moments), repeat(at.tick))):
        return False
    expiries = list(map(_expires_at, memories))
    if not any(map(operator.is_not, expiries, repeat(None))):
        return True
    return all(expiry is None or at.tick < expiry.tick for expiry in expiries)


_session = operator.attrgetter("session_id")
_owner = operator.attrgetter("owner_id")
_importance = operator.attrgetter("importance")
_moment = operator.attrgetter("moment")
_timeline = operator.attrgetter("timeline_id")
_tick = operator.attrgetter("tick")
_expires_at = operator.attrgetter("expires_at")
