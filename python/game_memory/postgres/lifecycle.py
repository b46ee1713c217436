"""Memory over a whole game in PostgreSQL: forget, erase and consolidate, each one transaction.

Every statement filters on ``session_id`` first (one shard on Citus). Each call locks the
partition rows it changes (in owner order; after the store-wide entries lock when it may add
a memory under a ``maximum_entries``: the lock order of ``statements.py``, so no two writers
deadlock), makes its change,
and moves their ``generation`` on, so every process's cached views of them are read again
whole (``views.py``); it commits before returning, with ``synchronous_commit = on``: durable
and atomic, like an append.

* **forget**: a row in ``game_memory_retractions`` (the memory id and the moment; no text),
  unless a retraction already hides the memory from that moment on.
* **erase**: the memories' rows and their retractions are deleted. The partition rows stay
  (ids and counters only), so that readers elsewhere notice the new generation. The bytes of
  deleted rows leave the database files when PostgreSQL reuses or frees the space
  (``VACUUM``; ``compact`` runs it on the save's tables).
* **consolidate**: the summary is appended in the same transaction that checked, under the
  partition's lock, that its sources are there.

Forget and erase add no memory, so they never take the entries lock: they lock partition
rows only (in owner order), which keeps to the same order.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from game_memory.errors import InvalidArgumentError, MemoryNotFoundError, PersistenceError
from game_memory.model import CompactionReport, GameMemory, GameMoment, check_bounded_id
from game_memory.model.memory import STORED
from game_memory.postgres.rows import decode_row, sql_key
from game_memory.postgres.statements import EXISTING
from game_memory.postgres.writes import append_one, lock_entries
from game_memory.store.lifecycle import checked_ids, checked_keep, checked_summary, covered

__all__ = [
    "PostgresLifecycle",
    "consolidate_summary",
    "erase_rows",
    "erase_surplus_rows",
    "forget_memory",
    "save_bytes",
    "vacuum_save",
]

_T = TypeVar("_T")


def _validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


class PostgresLifecycle(abc.ABC):
    """The store's forget, erase, consolidate and compact; a base of
    ``PostgresGameMemoryStore``, which provides the attributes below."""

    where: str
    maximum_partition_entries: int
    maximum_entries: int | None

    @abc.abstractmethod
    async def _ensure_ready(self) -> float:
        """Provided by the concrete store."""

    @abc.abstractmethod
    async def _run(self, function: Callable[[], _T]) -> _T:
        """Provided by the concrete store."""

    @abc.abstractmethod
    def _call(self, what: str, function: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Provided by the concrete store."""

    async def _database(self, what: str, function: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        await self._ensure_ready()
        return await self._run(lambda: self._call(what, function))

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of ``at``: one durable transaction (``lifecycle.py``).

        Returns:
            ``False`` when a retraction already hides it from ``at`` on.

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
            StoreBusyError: another writer held the owner's lock past ``lock_timeout``
                (the store's ``timeout``); nothing changed, retry later.
        """
        for value, what in ((session_id, "session_id"), (owner_id, "owner_id")):
            _validated_id(value, what)
        _validated_id(memory_id, "memory_id")
        if not isinstance(at, GameMoment):
            raise InvalidArgumentError("forget takes the game moment of the retraction")
        return await self._database(
            "forgetting a memory", lambda c: forget_memory(c, session_id, owner_id, memory_id, at)
        )

    async def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Delete a session's, an owner's or listed memories (and their retractions) in one
        durable transaction; return how many. Their rows' bytes leave the database files
        when PostgreSQL reuses the space (``compact`` vacuums the tables).

        Raises:
            InvalidArgumentError: ``memory_ids`` without ``owner_id``, or a bad id.
            StoreBusyError: another writer held a lock it needs past ``lock_timeout`` (the
                store's ``timeout``); nothing changed, retry later.
        """
        _validated_id(session_id, "session_id")
        if owner_id is not None:
            _validated_id(owner_id, "owner_id")
        wanted = None if memory_ids is None else list(checked_ids(memory_ids))
        if wanted is not None and owner_id is None:
            raise InvalidArgumentError("erase takes memory_ids only together with owner_id")
        return await self._database(
            "erasing memories", lambda c: erase_rows(c, session_id, owner_id, wanted)
        )

    async def erase_surplus(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], keep: int
    ) -> list[str]:
        """Erase the first of ``memory_ids`` the owner holds, only as many as take it down
        to ``keep`` memories, counted under the partition's lock (the retention policy's
        erase, safe beside another server's: ``store.protocol.SurplusErasing``); the ids
        erased. As :meth:`erase` otherwise.

        Raises:
            InvalidArgumentError: a bad id, or ``keep`` below 0.
        """
        _validated_id(session_id, "session_id")
        _validated_id(owner_id, "owner_id")
        wanted = list(checked_ids(memory_ids))
        keep = checked_keep(keep)
        return await self._database(
            "erasing memories",
            lambda c: erase_surplus_rows(c, session_id, owner_id, wanted, keep),
        )

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append ``summary`` retracting ``memory_ids`` as of its moment, in one transaction
        that first checks the sources under the partition's lock.

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: the summary is of another owner or not a reflection.
            MemoryConflictError: the summary's id holds other content.
            CapacityExceededError: the partition holds ``maximum_partition_entries``, or
                the store ``maximum_entries``, so the summary cannot be added.
            StoreBusyError: the database was too busy (its ``lock_timeout`` passed while
                waiting for a concurrent writer's lock); nothing changed, retry later.
        """
        _validated_id(session_id, "session_id")
        _validated_id(owner_id, "owner_id")
        ids = list(checked_ids(memory_ids))
        return await self._database(
            "consolidating memories",
            lambda c: consolidate_summary(
                c,
                session_id,
                owner_id,
                ids,
                summary,
                self.maximum_partition_entries,
                self.where,
                self.maximum_entries,
            ),
        )

    async def compact(self) -> CompactionReport:
        """``VACUUM`` the save's tables; report their size on disk before and after."""

        def compact(connection: psycopg.Connection[Any]) -> CompactionReport:
            before = save_bytes(connection)
            vacuum_save(connection)
            return CompactionReport(bytes_before=before, bytes_after=save_bytes(connection))

        return await self._database("compacting the save", compact)


_MOMENT = GameMoment.__pydantic_serializer__

_LOCK_OWNER = """
SELECT generation FROM game_memory_partitions
WHERE session_id = %(session)s AND owner_id = %(owner)s FOR UPDATE
"""

_LOCK_SESSION = """
SELECT owner_id FROM game_memory_partitions
WHERE session_id = %(session)s ORDER BY owner_id FOR UPDATE
"""

_HELD = """
SELECT memory_id FROM game_memory_memories
WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_id = ANY(%(memories)s::text[])
"""

_SOURCES = """
SELECT memory_id, digest, document FROM game_memory_memories
WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_id = ANY(%(memories)s::text[])
"""

_RETRACTED = """
SELECT moment FROM game_memory_retractions
WHERE session_id = %(session)s AND owner_id = %(owner)s AND memory_id = %(memory)s
"""

_RETRACT = """
INSERT INTO game_memory_retractions (session_id, owner_id, memory_id, timeline_id, tick, moment)
VALUES (%(session)s, %(owner)s, %(memory)s, %(timeline)s, %(tick)s, %(moment)s)
ON CONFLICT DO NOTHING
"""

_BUMP = """
UPDATE game_memory_partitions SET generation = generation + 1
WHERE session_id = %(session)s AND owner_id = ANY(%(owners)s::text[])
"""

_OWNERS_CLAUSE = "session_id = %(session)s AND owner_id = ANY(%(owners)s::text[])"

_COUNT_OWNER = """
SELECT count(*) FROM game_memory_memories
WHERE session_id = %(session)s AND owner_id = %(owner)s
"""


def forget_memory(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str,
    memory_id: str,
    at: GameMoment,
) -> bool:
    """Retract a memory as of ``at`` in one transaction; ``False`` when already covered.

    Raises:
        MemoryNotFoundError: the owner holds no memory ``memory_id``.
    """
    keys = {
        "session": sql_key(session_id),
        "owner": sql_key(owner_id),
        "memory": sql_key(memory_id),
    }
    with connection.transaction():
        connection.execute(_LOCK_OWNER, keys).fetchone()
        held = connection.execute(_HELD, {**keys, "memories": [keys["memory"]]}).fetchone()
        if held is None:
            raise MemoryNotFoundError(
                f"owner {owner_id!r} of session {session_id!r} holds no memory {memory_id!r}; "
                "nothing was forgotten. Check the id (enumerate lists what the owner holds)"
            )
        existing = [
            GameMoment.model_validate_json(bytes(row[0]), context=STORED)
            for row in connection.execute(_RETRACTED, keys).fetchall()
        ]
        if covered(existing, at):
            return False
        connection.execute(
            _RETRACT,
            {
                **keys,
                "timeline": sql_key(at.timeline_id),
                "tick": at.tick,
                "moment": _MOMENT.to_json(at),
            },
        )
        connection.execute(_BUMP, {"session": keys["session"], "owners": [keys["owner"]]})
        return True


def erase_rows(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str | None,
    memory_ids: Sequence[str] | None,
) -> int:
    """Delete a session's, an owner's or listed memories and their retractions; how many."""
    session = sql_key(session_id)
    with connection.transaction():
        if owner_id is None:
            owners = [row[0] for row in connection.execute(_LOCK_SESSION, {"session": session})]
        else:
            owners = [sql_key(owner_id)]
            connection.execute(_LOCK_OWNER, {"session": session, "owner": owners[0]}).fetchone()
        keys: dict[str, Any] = {"session": session, "owners": owners}
        where = _OWNERS_CLAUSE
        if memory_ids is not None:
            keys["memories"] = [sql_key(memory_id) for memory_id in memory_ids]
            where += " AND memory_id = ANY(%(memories)s::text[])"
        erased = connection.execute(
            f"DELETE FROM game_memory_memories WHERE {where}", keys
        ).rowcount
        connection.execute(f"DELETE FROM game_memory_retractions WHERE {where}", keys)
        if erased:
            connection.execute(_BUMP, keys)
        return int(erased)


def erase_surplus_rows(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str,
    memory_ids: Sequence[str],
    keep: int,
) -> list[str]:
    """Under the owner's partition lock, erase the first of ``memory_ids`` it holds (in
    their order), only as many as take it down to ``keep`` memories; the ids erased.

    The retention policy chooses its victims from a snapshot: two servers evicting from
    one owner at once each erased their whole choice, and the owner fell below its target
    (both new memories gone). Counted under the lock, it never does.
    """
    session, owner = sql_key(session_id), sql_key(owner_id)
    keys = {sql_key(memory_id): memory_id for memory_id in memory_ids}
    with connection.transaction():
        if connection.execute(_LOCK_OWNER, {"session": session, "owner": owner}).fetchone() is None:
            return []
        row = connection.execute(_COUNT_OWNER, {"session": session, "owner": owner}).fetchone()
        surplus = max(0, int(row[0]) - keep) if row is not None else 0
        if not surplus:
            return []
        held = {
            found[0]
            for found in connection.execute(
                _HELD, {"session": session, "owner": owner, "memories": list(keys)}
            )
        }
        taken = [memory_id for key, memory_id in keys.items() if key in held][:surplus]
        if taken:
            erase_rows(connection, session_id, owner_id, taken)
        return taken


def consolidate_summary(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str,
    memory_ids: Sequence[str],
    summary: GameMemory,
    capacity: int,
    where: str,
    maximum_entries: int | None,
) -> bool:
    """Check a consolidation under the partition's lock and append its summary, in one
    transaction; ``False`` when the same summary is there.

    With ``maximum_entries`` the store-wide entries lock is taken before the partition row
    (the lock order of ``statements.py``), as every append takes them: the other way round
    a consolidation and an append to the same owner each waited for the other's lock.

    Raises:
        MemoryNotFoundError, InvalidArgumentError: see ``checked_summary``.
        MemoryConflictError, CapacityExceededError: see ``append_one``.
    """
    session, owner = sql_key(session_id), sql_key(owner_id)
    with connection.transaction():
        if maximum_entries is not None:
            lock_entries(connection)  # append_one below takes it again: at once
        connection.execute(_LOCK_OWNER, {"session": session, "owner": owner}).fetchone()
        keys = {"session": session, "owner": owner, "memories": [sql_key(m) for m in memory_ids]}
        moments = {
            str(row[0]): decode_row(
                bytes(row[2]), bytes(row[1]), session, owner, row[0], where
            ).moment
            for row in connection.execute(_SOURCES, keys).fetchall()
        }
        checked = checked_summary(
            session_id,
            owner_id,
            memory_ids,
            summary,
            lambda memory_id: moments.get(sql_key(memory_id)),
            _stored(connection, summary, where),
        )
        return append_one(connection, checked, capacity, where, maximum_entries)


def _stored(
    connection: psycopg.Connection[Any], summary: GameMemory, where: str
) -> GameMemory | None:
    """The memory the owner holds under the summary's id, if any (``checked_summary``)."""
    row = connection.execute(
        EXISTING,
        {
            "session": sql_key(summary.session_id),
            "owner": sql_key(summary.owner_id),
            "memory": sql_key(summary.memory_id),
        },
    ).fetchone()
    if row is None:
        return None
    keys = sql_key(summary.session_id), sql_key(summary.owner_id), sql_key(summary.memory_id)
    return decode_row(bytes(row[1]), bytes(row[0]), *keys, where)


_TABLES = ("game_memory_memories", "game_memory_retractions", "game_memory_partitions")


def save_bytes(connection: psycopg.Connection[Any]) -> int:
    """The size on disk of the save's tables (with their indexes and TOAST)."""
    row = connection.execute(
        "SELECT sum(pg_total_relation_size(to_regclass(t))) FROM unnest(%(tables)s::text[]) t",
        {"tables": list(_TABLES)},
    ).fetchone()
    return int(row[0] or 0) if row is not None else 0


def vacuum_save(connection: psycopg.Connection[Any]) -> None:
    """``VACUUM`` the save's tables (autocommit: VACUUM cannot run in a transaction), so the
    space of erased rows is reused and freed pages at their end are given back.

    Raises:
        PersistenceError: PostgreSQL skipped a table: only its owner (or a superuser) may
            vacuum it, and the server says so with a warning, not an error, so a compact by
            another role reported success while nothing was done.
    """
    skipped: list[str] = []

    def notice(diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.severity_nonlocalized == "WARNING" and diagnostic.message_primary:
            skipped.append(diagnostic.message_primary)

    connection.add_notice_handler(notice)
    try:
        for table in _TABLES:
            connection.execute(f"VACUUM {table}")
    finally:
        connection.remove_notice_handler(notice)
    if skipped:
        raise PersistenceError(
            f"compact could not vacuum the save's tables ({skipped[0]}): VACUUM needs the "
            "tables' owner or a superuser; run compact as that role"
        )
