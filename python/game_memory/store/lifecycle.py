"""The rules of forgetting, erasing, consolidating and bounded NPCs, shared by every backend.

Pure functions over memories and moments, so the file, in-memory and PostgreSQL stores
decide alike:

* :func:`hides_from` / :func:`covered`: a retraction at moment ``m`` hides its memory from
  queries as of ``m`` or later on ``m``'s timeline (and from queries without a moment);
  a retraction adds nothing when one at an earlier or equal tick on that timeline exists.
* :func:`checked_summary`: what ``consolidate`` requires of its summary.
* :func:`eviction_order`: which memories a bounded owner gives up first, and
  :func:`eviction_target`: down to how many.

**Eviction value** (``maximum_memories_per_owner``): ``importance + 0.5 ** (age / 1,440)``
where ``age`` is how many game ticks the memory is older than the newest memory of the
owner on its timeline (recency decays in game time, one in-game day of half-life when a
tick is a minute, as the reranker's). The lowest value goes first; ties go to the older
memory (lower tick), then to the smaller id (ordinal). A summary of a consolidation is
kept like any other memory; a memory retracted (forgotten, or consolidated into a summary),
or an older version of a belief (``belief_key``) whose newer version hides it, as of the
owner's newest moment on the memory's timeline (its newest memory or retraction there) is
worth nothing and goes first; one hidden only on another timeline is still recalled on its
own, and is valued like any other.

**Eviction target**: an owner past its bound gives up memories down to 90% of the bound
(``bound - max(1, bound // 10)``, at least 1), so the partition is rewritten once per tenth
of the bound appended, not on every append past it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from game_memory.errors import InvalidArgumentError, MemoryNotFoundError
from game_memory.model import GameMemory, GameMemoryKind, GameMoment, check_bounded_id, ordinal_key

__all__ = [
    "EVICTION_HALF_LIFE_TICKS",
    "checked_ids",
    "checked_keep",
    "checked_summary",
    "covered",
    "eviction_order",
    "eviction_target",
    "hides_from",
    "newest_ticks",
]

#: The game ticks after which a memory's recency in the eviction value has halved.
EVICTION_HALF_LIFE_TICKS = 1_440.0


def hides_from(retraction: GameMoment, at: GameMoment | None) -> bool:
    """Whether a retraction at ``retraction`` hides its memory from a query as of ``at``."""
    return at is None or (retraction.timeline_id == at.timeline_id and retraction.tick <= at.tick)


def covered(existing: Iterable[GameMoment], at: GameMoment) -> bool:
    """Whether retractions already hide the memory from ``at`` on (a new one adds nothing)."""
    return any(m.timeline_id == at.timeline_id and m.tick <= at.tick for m in existing)


def checked_keep(keep: object) -> int:
    """The count of memories an ``erase_surplus`` leaves (``store.protocol.SurplusErasing``).

    Raises:
        InvalidArgumentError: not a whole number of 0 or more (a bool is none).
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise InvalidArgumentError(f"keep must be a whole number of memories, not {keep!r}")
    return keep


def checked_ids(memory_ids: Sequence[str], what: str = "memory_ids") -> tuple[str, ...]:
    """Validate a list of memory ids (unique, in order).

    Raises:
        InvalidArgumentError: not a list of valid ids.
    """
    if isinstance(memory_ids, str) or not isinstance(memory_ids, Sequence):
        raise InvalidArgumentError(f"{what} must be a list of memory ids, not {memory_ids!r}")
    try:
        return tuple(dict.fromkeys(check_bounded_id(value, "a memory id") for value in memory_ids))
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


def checked_summary(
    session_id: str,
    owner_id: str,
    memory_ids: Sequence[str],
    summary: GameMemory,
    held: Callable[[str], GameMoment | None],
    stored: GameMemory | None = None,
) -> GameMemory:
    """Check a consolidation; return the summary with its ``consolidates`` filled in.

    ``held(memory_id)`` is the moment of the owner's memory of that id (``None``: the
    owner holds none). A source later than the summary on the summary's timeline is
    refused: a summary stands for what came before it (retracted as of its moment, the
    source would never be recalled at any moment of its own).

    ``stored`` is the memory the owner holds under the summary's id, if any. When it is
    this summary already, the sources are not looked for: a consolidation sent again
    (a retry, or the summary appended again) returns ``False`` as any memory already
    stored does, even when its sources are gone since (erased, or evicted first by the
    retention policy as retracted).

    Raises:
        InvalidArgumentError: the summary is not a ``GameMemory`` of that session and owner,
            not a reflection, lists no memory, or names others in ``consolidates``.
            Or a source is later than the summary on its timeline.
        MemoryNotFoundError: an id names no memory the owner holds.
    """
    if not isinstance(summary, GameMemory):
        raise InvalidArgumentError("consolidate takes a GameMemory as its summary")
    if (summary.session_id, summary.owner_id) != (session_id, owner_id):
        raise InvalidArgumentError(
            f"the summary belongs to owner {summary.owner_id!r} of session "
            f"{summary.session_id!r}, not to {owner_id!r} of {session_id!r}"
        )
    if summary.kind is not GameMemoryKind.REFLECTION:
        raise InvalidArgumentError(
            f"a summary is a reflection (kind 'reflection'), not {summary.kind.value!r}"
        )
    ids = checked_ids(memory_ids)
    if not ids:
        raise InvalidArgumentError("consolidate needs at least one memory id to consolidate")
    if summary.memory_id in ids:
        raise InvalidArgumentError("a summary cannot consolidate itself")
    if summary.consolidates and summary.consolidates != ids:
        raise InvalidArgumentError(
            "the summary's consolidates differs from memory_ids; leave it empty or equal"
        )
    filled = summary.model_copy(update={"consolidates": ids})
    if stored is not None and stored == filled:
        return filled
    moments = {memory_id: held(memory_id) for memory_id in ids}
    missing = [memory_id for memory_id, moment in moments.items() if moment is None]
    if missing:
        raise MemoryNotFoundError(
            f"owner {owner_id!r} of session {session_id!r} holds no memory "
            f"{', '.join(repr(m) for m in missing[:5])}"
            + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
            + "; consolidate only what the owner remembers"
        )
    at = summary.moment
    later = [
        f"{memory_id!r} (tick {moment.tick:,})"
        for memory_id, moment in moments.items()
        if moment is not None and moment.timeline_id == at.timeline_id and moment.tick > at.tick
    ]
    if later:
        raise InvalidArgumentError(
            f"the summary at tick {at.tick:,} of timeline {at.timeline_id!r} cannot "
            f"consolidate memories from after it: {', '.join(later[:5])}"
            + (f" (and {len(later) - 5} more)" if len(later) > 5 else "")
            + "; give the summary the moment it was made, at or after its sources"
        )
    return filled


def eviction_target(bound: int) -> int:
    """How many memories an owner keeps when an append takes it past ``bound``."""
    return max(1, bound - max(1, bound // 10))


def newest_ticks(memories: Iterable[GameMemory]) -> dict[str, int]:
    """The newest tick of ``memories`` on each of their timelines: the owner's newest
    moment on a timeline, as of which eviction values a memory of that timeline."""
    newest: dict[str, int] = {}
    for memory in memories:
        timeline = memory.moment.timeline_id
        newest[timeline] = max(newest.get(timeline, memory.moment.tick), memory.moment.tick)
    return newest


def eviction_order(memories: Sequence[GameMemory], retracted: set[str]) -> list[GameMemory]:
    """The memories in the order a bounded owner gives them up (see the module docstring).

    ``retracted``: the ids of the memories retracted, or superseded by a newer version of
    their belief, as of the owner's newest moment on their own timeline (what hides a
    memory only on another timeline does not hide it on its own: it is worth what any
    memory is).
    """
    newest = newest_ticks(memories)

    def value(memory: GameMemory) -> tuple[float, int, str]:
        if memory.memory_id in retracted:
            worth = -1.0
        else:
            age = newest[memory.moment.timeline_id] - memory.moment.tick
            worth = memory.importance + math.pow(0.5, age / EVICTION_HALF_LIFE_TICKS)
        return (worth, memory.moment.tick, ordinal_key(memory.memory_id))

    return sorted(memories, key=value)
