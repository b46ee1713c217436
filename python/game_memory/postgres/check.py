"""A consistency checker for the save in PostgreSQL: every row against its digest and partition.

Meant for tests, post-mortems and ``game-memory check --database``. It reads every memory
(in batches, through a server-side cursor, in one repeatable-read snapshot) and reports as
sentences: documents that do not match their content digest (checked in SQL), that do not
decode or name another partition, and partitions whose ``next_seq`` is missing or behind
their memories (which would hide memories from cached readers). With ``fix=True`` only the
repair that loses nothing is applied: the partition rows are moved up to their memories.
A damaged document is never "repaired": restore it from a backup.
"""

from __future__ import annotations

from typing import Any

import psycopg

from game_memory.errors import PersistenceError
from game_memory.model import StoreCheckReport
from game_memory.postgres.rows import decode_row

__all__ = ["check_database"]

_MAXIMUM_PROBLEMS = 1_000
_BATCH = 2_000

_BEHIND = """
SELECT m.session_id, m.owner_id, max(m.seq) + 1, max(p.next_seq)
FROM game_memory_memories m
LEFT JOIN game_memory_partitions p USING (session_id, owner_id)
GROUP BY m.session_id, m.owner_id
HAVING max(p.next_seq) IS NULL OR max(p.next_seq) < max(m.seq) + 1
"""

#: Locks every partition row it meets (``ON CONFLICT DO UPDATE`` locks even the rows its
#: ``WHERE`` leaves alone), so it meets them in key order, the lock order of
#: ``statements.py``; in a hash aggregate's order it could deadlock with a batch or an erase.
_REPAIR = """
INSERT INTO game_memory_partitions AS p (session_id, owner_id, next_seq)
SELECT session_id, owner_id, max(seq) + 1 FROM game_memory_memories
GROUP BY session_id, owner_id
ORDER BY session_id, owner_id
ON CONFLICT (session_id, owner_id) DO UPDATE SET next_seq = excluded.next_seq
    WHERE p.next_seq < excluded.next_seq
"""


def _problems(connection: psycopg.Connection[Any], where: str) -> tuple[list[str], int]:
    problems: list[str] = []
    memories = 0
    with connection.transaction():
        connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for session, owner, memory in connection.execute(
            "SELECT session_id, owner_id, memory_id FROM game_memory_memories "
            "WHERE sha256(document) <> digest LIMIT %s",
            (_MAXIMUM_PROBLEMS,),
        ):
            problems.append(
                f"memory {memory!r} of owner {owner!r} in session {session!r} does not match "
                "its content digest"
            )
        for session, owner, needed, next_seq in connection.execute(_BEHIND):
            problems.append(
                f"partition of owner {owner!r} in session {session!r} "
                + (
                    "has no partition row"
                    if next_seq is None
                    else f"is at position {next_seq} but holds memories up to {needed - 1}"
                )
            )
        cursor = connection.cursor("game_memory_check")
        cursor.itersize = _BATCH
        cursor.execute(
            "SELECT session_id, owner_id, memory_id, digest, document FROM game_memory_memories "
            "WHERE sha256(document) = digest"
        )
        for session, owner, memory_key, digest, document in cursor:
            memories += 1
            if len(problems) >= _MAXIMUM_PROBLEMS:
                continue
            try:
                decode_row(document, digest, session, owner, memory_key, where)
            except PersistenceError as exc:
                problems.append(str(exc))
        cursor.close()
        row = connection.execute("SELECT count(*) FROM game_memory_memories").fetchone()
        memories = int(row[0]) if row is not None else memories
    return problems, memories


def check_database(connection: psycopg.Connection[Any], where: str, fix: bool) -> StoreCheckReport:
    """Check (and with ``fix``, repair) the save; see the module docstring. Blocking."""
    problems, memories = _problems(connection, where)
    repairs: list[str] = []
    if fix and any("partition of owner" in problem for problem in problems):
        cursor = connection.execute(_REPAIR)
        repairs.append(f"moved {cursor.rowcount} partition rows up to their memories")
        problems, memories = _problems(connection, where)
    return StoreCheckReport(
        memories=memories,
        ledger_entries=memories,
        problems=tuple(problems),
        repairs=tuple(repairs),
    )
