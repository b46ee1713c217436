"""The save's snapshot read over one connection: cached views brought up to date in one
statement that returns only the rows appended since, or a partition whole (with its
retractions) when a forget or an erase moved its generation on (see ``views.py``)."""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import ValidationError

from game_memory.errors import PersistenceError
from game_memory.model import GameMoment, ordinal_key
from game_memory.model.memory import STORED
from game_memory.postgres.rows import decode_row, from_sql_key, sql_key
from game_memory.postgres.statements import OWNER_ROWS, SESSION_ROWS
from game_memory.postgres.views import CachedPartition, ViewCache, extend_view
from game_memory.store.memory_partitions import snapshot_too_large
from game_memory.store.view import PartitionView

__all__ = ["read_views"]

_Row = tuple[int, str, bytes, bytes]
_Retraction = tuple[str, GameMoment]


class _Group:
    """What one statement returned of one partition."""

    def __init__(self, next_seq: int, generation: int) -> None:
        self.next_seq = next_seq
        self.generation = generation
        self.rows: list[_Row] = []
        self.retractions: list[tuple[str, bytes]] = []


def _group(rows: list[tuple[Any, ...]]) -> dict[str, _Group]:
    """Rows per partition (owner key): its ``next_seq`` and ``generation``, its memory rows
    ``(seq, memory key, digest, document)`` in position order, its retraction rows."""
    grouped: dict[str, _Group] = {}
    for kind, owner_key, next_seq, generation, seq, memory_key, digest, document in rows:
        group = grouped.get(owner_key)
        if group is None:
            group = grouped[owner_key] = _Group(int(next_seq), int(generation))
        if kind == 1:
            group.retractions.append((memory_key, bytes(document)))
        elif seq is not None:
            group.rows.append((int(seq), memory_key, digest, document))
    for group in grouped.values():
        group.rows.sort(key=lambda row: row[0])
    return grouped


def _retractions(found: list[tuple[str, bytes]], where: str) -> tuple[_Retraction, ...]:
    try:
        return tuple(
            (from_sql_key(memory_key), GameMoment.model_validate_json(moment, context=STORED))
            for memory_key, moment in found
        )
    except ValidationError as exc:
        raise PersistenceError(
            f"{where} holds a damaged retraction: {exc.error_count()} problems"
        ) from exc


def read_views(
    connection: psycopg.Connection[Any],
    cache: ViewCache,
    session_id: str,
    owner_id: str | None,
    bound: int,
    where: str,
) -> list[PartitionView]:
    """The current views of a session (or one owner), by owner id (ordinal). Blocking.

    One statement: the partitions' positions and the rows after what ``cache`` holds, so
    the result is one committed state. At most ``bound + 1`` rows are transferred, and the
    bound holds for what the partitions hold now (a forget or an erase since the cached
    read never counts a partition twice, nor its erased memories).

    Raises:
        CapacityExceededError: the partitions hold more than ``bound`` memories.
        PersistenceError: a row is damaged.
    """
    if owner_id is not None:
        cached = cache.get(session_id, owner_id)
        known = {} if cached is None else {owner_id: cached}
    else:
        known = cache.session(session_id)
    # The cached sizes do not bound what is read: a partition that a forget or an erase
    # moved to another generation comes back whole (replacing its cached view), and an
    # erase shrinks it. So the statement returns at most ``bound + 1`` rows, and the bound
    # is checked on the views it leaves.
    keys = {sql_key(owner): owner for owner in known}
    session_key = sql_key(session_id)
    parameters: dict[str, Any] = {"session": session_key, "limit": bound + 1}
    if owner_id is not None:
        parameters["owner"] = sql_key(owner_id)
        parameters["seen"] = known[owner_id].next_seq if known else 0
        parameters["generation"] = known[owner_id].generation if known else -1
        statement = OWNER_ROWS
    else:
        parameters["owners"] = list(keys)
        parameters["seen"] = [known[owner].next_seq for owner in keys.values()]
        parameters["generations"] = [known[owner].generation for owner in keys.values()]
        statement = SESSION_ROWS
    rows = connection.execute(statement, parameters).fetchall()
    if sum(1 for row in rows if row[0] == 0) > bound:
        raise snapshot_too_large(session_id, owner_id, bound)
    current = {owner: cached.view for owner, cached in known.items()}
    for owner_key, group in _group(rows).items():
        owner = keys.get(owner_key)
        base = known.get(owner) if owner is not None else None
        whole = base is None or base.generation != group.generation
        memories = [
            decode_row(document, digest, session_key, owner_key, memory_key, where)
            for _, memory_key, digest, document in group.rows
        ]
        if owner is None:
            if not memories:
                continue  # positions used only by lost races, or erased: nothing to show
            owner = memories[0].owner_id
        if whole:
            retractions = _retractions(group.retractions, where)
            view = extend_view(None, session_id, owner, memories, where, retractions)
        else:
            assert base is not None
            view = extend_view(base.view, session_id, owner, memories, where)
        if view is None:  # erased whole
            cache.drop(session_id, owner)
            current.pop(owner, None)
            continue
        cache.remember(session_id, owner, CachedPartition(view, group.next_seq, group.generation))
        current[owner] = view
    views = list(current.values())
    if sum(len(view) for view in views) > bound:
        raise snapshot_too_large(session_id, owner_id, bound)
    if len(views) > 1:
        views.sort(key=lambda view: ordinal_key(view.owner_id))
    return views
