"""The vector index's writes over one connection, each in one transaction.

Lock order, as everywhere in the index: the partition's row first, then its entries.
"""

from __future__ import annotations

from typing import Any

import psycopg

from game_memory.errors import CapacityExceededError
from game_memory.postgres import index_statements as sql
from game_memory.postgres.rows import sql_key

__all__ = ["erase_entries", "reset_partition", "sweep_session", "write_partition"]


def write_partition(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str,
    entries: list[tuple[Any, ...]],
    capacity: int | None,
) -> None:
    """Write entries ``(hash, digest, state, identity, code, vector)`` of one partition in one
    transaction: lock its row and reserve change numbers, upsert, count the new ones.

    ``capacity`` ``None`` writes without the bound (marks: as in the file index, recording
    that memories have no vector never fails for lack of room).

    Raises:
        CapacityExceededError: the partition would hold more than ``capacity`` entries
            (nothing is written).
    """
    session, owner = sql_key(session_id), sql_key(owner_id)
    with connection.transaction():
        row = connection.execute(
            sql.BUMP, {"session": session, "owner": owner, "count": len(entries)}
        ).fetchone()
        assert row is not None
        first, count = int(row[0]), int(row[1])
        cursor = connection.cursor()
        cursor.executemany(
            sql.UPSERT,
            [
                (session, owner, hashed, first + i + 1, state, code_, digest, text, vector)
                for i, (hashed, digest, state, code_, text, vector) in enumerate(entries)
            ],
            returning=True,
        )
        added = 0
        while True:
            result = cursor.fetchone()
            added += 1 if result is not None and result[0] else 0
            if not cursor.nextset():
                break
        if capacity is not None and count + added > capacity:
            raise CapacityExceededError(
                f"an owner partition of the vector index would hold {count + added:,} "
                f"entries, more than the index capacity of {capacity:,}; open the "
                "index with a larger capacity",
                bound="capacity",
            )
        if added:
            connection.execute(sql.SETTLE, {"session": session, "owner": owner, "added": added})


def reset_partition(connection: psycopg.Connection[Any], session: str, owner: str) -> None:
    """Delete every entry of a partition and give it a new generation (readers reload it)."""
    keys = {"session": session, "owner": owner, "entries": 0}
    with connection.transaction():
        connection.execute(sql.LOCK_PARTITION, keys)
        connection.execute(
            "DELETE FROM game_memory_index_entries WHERE session_id = %(session)s "
            "AND owner_id = %(owner)s",
            keys,
        )
        connection.execute(sql.RESET, keys)


def sweep_session(
    connection: psycopg.Connection[Any],
    session: str,
    chosen: dict[str, list[tuple[bytes, int]]],
) -> int:
    """Delete the chosen ``(memory hash, change)`` entries still unchanged, per owner key,
    and compact the session; return how many were deleted. One transaction.

    The compaction is a new generation for every partition of the session, so every
    process reloads it without superseded vectors (as the file index rewrites its files);
    the database reclaims the dead rows itself (VACUUM).
    """
    removed = 0
    with connection.transaction():
        locked = connection.execute(sql.LOCK_SESSION, {"session": session}).fetchall()
        entries = {owner: int(count) for owner, count in locked}
        for owner, listed in chosen.items():
            if owner not in entries or not listed:
                continue
            deleted = connection.execute(
                sql.DELETE_ORPHANS,
                {
                    "session": session,
                    "owner": owner,
                    "hashes": [h for h, _ in listed],
                    "changes": [c for _, c in listed],
                },
            ).rowcount
            entries[owner] -= deleted
            removed += deleted
        connection.execute(
            sql.COMPACT_SESSION,
            {"session": session, "owners": list(entries), "entries": list(entries.values())},
        )
    return removed


def erase_entries(
    connection: psycopg.Connection[Any],
    session: str,
    owner: str | None,
    hashes: list[bytes] | None,
) -> int:
    """Delete the entries (and vectors) of a session, an owner, or listed memory hashes of
    one owner, and give the partitions touched a new generation with their entry count, so
    every process reloads them without those vectors. One transaction; how many went."""
    with connection.transaction():
        locked = connection.execute(sql.LOCK_SESSION, {"session": session}).fetchall()
        owners = [key for key, _ in locked if owner is None or key == owner]
        if not owners:
            return 0
        keys: dict[str, Any] = {"session": session, "owners": owners}
        where = "session_id = %(session)s AND owner_id = ANY(%(owners)s::text[])"
        if hashes is not None:
            keys["hashes"] = hashes
            where += " AND memory_hash = ANY(%(hashes)s::bytea[])"
        removed = connection.execute(
            f"DELETE FROM game_memory_index_entries WHERE {where}", keys
        ).rowcount
        counts = dict(
            connection.execute(
                "SELECT owner_id, count(*) FROM game_memory_index_entries "
                "WHERE session_id = %(session)s AND owner_id = ANY(%(owners)s::text[]) "
                "GROUP BY owner_id",
                keys,
            ).fetchall()
        )
        connection.execute(
            sql.COMPACT_SESSION,
            {
                "session": session,
                "owners": owners,
                "entries": [int(counts.get(key, 0)) for key in owners],
            },
        )
        return int(removed)
