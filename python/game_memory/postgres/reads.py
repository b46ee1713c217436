"""The save's snapshot read over one connection: cached views brought up to date in one
statement that returns only the rows appended since (see ``views.py``)."""

from __future__ import annotations

from typing import Any

import psycopg

from game_memory.errors import CapacityExceededError
from game_memory.model import ordinal_key
from game_memory.postgres.rows import decode_row, sql_key
from game_memory.postgres.statements import OWNER_ROWS, SESSION_ROWS
from game_memory.postgres.views import CachedPartition, ViewCache, extend_view
from game_memory.store.view import PartitionView

__all__ = ["read_views"]

_Row = tuple[int, str, bytes, bytes]


def _too_large(session_id: str, bound: int) -> CapacityExceededError:
    return CapacityExceededError(
        f"the snapshot of session {session_id!r} holds more than {bound:,} memories "
        "(maximum_snapshot_entries); query one owner, or raise the bound",
        bound="maximum_snapshot_entries",
    )


def _group(rows: list[tuple[Any, ...]]) -> list[tuple[str, int, list[_Row]]]:
    """Rows per partition: ``(owner key, next_seq, [(seq, memory key, digest, document)])``,
    each partition's rows in position order."""
    grouped: dict[str, tuple[int, list[_Row]]] = {}
    for owner_key, next_seq, seq, memory_key, digest, document in rows:
        entry = grouped.setdefault(owner_key, (int(next_seq), []))
        if seq is not None:
            entry[1].append((int(seq), memory_key, digest, document))
    result = []
    for owner_key, (next_seq, found) in grouped.items():
        found.sort(key=lambda row: row[0])
        result.append((owner_key, next_seq, found))
    return result


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
    the result is one committed state. At most ``bound + 1`` rows are transferred.

    Raises:
        CapacityExceededError: the partitions hold more than ``bound`` memories.
        PersistenceError: a row is damaged.
    """
    if owner_id is not None:
        cached = cache.get(session_id, owner_id)
        known = {} if cached is None else {owner_id: cached}
    else:
        known = cache.session(session_id)
    known_total = sum(len(c.view) for c in known.values())
    if known_total > bound:
        raise _too_large(session_id, bound)  # partitions only grow
    keys = {sql_key(owner): owner for owner in known}
    session_key = sql_key(session_id)
    parameters: dict[str, Any] = {"session": session_key, "limit": bound - known_total + 1}
    if owner_id is not None:
        parameters["owner"] = sql_key(owner_id)
        parameters["seen"] = known[owner_id].next_seq if known else 0
        statement = OWNER_ROWS
    else:
        parameters["owners"] = list(keys)
        parameters["seen"] = [known[owner].next_seq for owner in keys.values()]
        statement = SESSION_ROWS
    rows = connection.execute(statement, parameters).fetchall()
    if len(rows) > bound - known_total:
        raise _too_large(session_id, bound)
    current = {owner: cached.view for owner, cached in known.items()}
    for owner_key, next_seq, new_rows in _group(rows):
        owner = keys.get(owner_key)
        base = known.get(owner) if owner is not None else None
        memories = [
            decode_row(document, digest, session_key, owner_key, memory_key, where)
            for _, memory_key, digest, document in new_rows
        ]
        if owner is None:
            if not memories:
                continue  # positions used only by lost races: nothing to show
            owner = memories[0].owner_id
        view = extend_view(
            base.view if base is not None else None, session_id, owner, memories, where
        )
        if view is None:
            continue
        cache.remember(session_id, owner, CachedPartition(view, next_seq))
        current[owner] = view
    views = list(current.values())
    if len(views) > 1:
        views.sort(key=lambda view: ordinal_key(view.owner_id))
    return views
