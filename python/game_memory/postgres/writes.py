"""The save's writes over one connection: one memory in one statement, or a batch in one
transaction (see ``statements.py`` for the SQL and why positions follow commit order)."""

from __future__ import annotations

from typing import Any

import psycopg

from game_memory.errors import CapacityExceededError, PersistenceError
from game_memory.model import GameMemory
from game_memory.model.conflicts import memory_conflict
from game_memory.postgres.rows import decode_row, encode_memory, sql_key
from game_memory.postgres.statements import (
    APPEND,
    APPEND_MANY,
    COUNT_ENTRIES,
    EXISTING,
    HELD,
    LOCK_ENTRIES,
    PARTITION_LOCKED,
)

__all__ = ["append_batch", "append_one", "lock_entries"]

_RACE_ATTEMPTS = 3


def _full(owner_id: str, session_id: str, capacity: int, detail: str) -> CapacityExceededError:
    return CapacityExceededError(
        f"owner {owner_id!r} of session {session_id!r} {detail}: maximum_partition_entries is "
        f"{capacity:,}; open the store with a larger bound to add more",
        bound="maximum_partition_entries",
    )


def check_equivalent(memory: GameMemory, digest: bytes, document: bytes, where: str) -> None:
    """Raise the conflict unless the stored memory equals ``memory`` (the same model in
    other JSON, such as metadata in another order, is a duplicate).

    Raises:
        MemoryConflictError: the id holds different content.
    """
    stored = decode_row(
        document,
        digest,
        sql_key(memory.session_id),
        sql_key(memory.owner_id),
        sql_key(memory.memory_id),
        where,
    )
    if stored != memory:
        raise memory_conflict(memory)


def _position_bound(
    connection: psycopg.Connection[Any], session: str, owner: str, capacity: int, wanted: int
) -> int | None:
    """The ``capacity`` to pass ``APPEND``/``APPEND_MANY`` so that ``wanted`` more memories
    fit when the partition's positions are used up but erasures left room; ``None`` if the
    partition (an existing one) holds too many memories for them. Run in a transaction.

    The statements bound positions (``next_seq``), which an erase never lowers: positions
    stay unique and in commit order for cached readers. So when they run out, the memories
    the partition holds are counted under its row's lock (no append to it commits
    meanwhile), and the bound on positions is moved on by the room erasures left.
    """
    keys = {"session": session, "owner": owner}
    row = connection.execute(PARTITION_LOCKED, keys).fetchone()
    if row is None:
        return None
    held = connection.execute(HELD, keys).fetchone()
    assert held is not None
    if int(held[0]) + wanted > capacity:
        return None
    return int(row[0]) + capacity - int(held[0])


def _store_full(maximum: int) -> CapacityExceededError:
    return CapacityExceededError(
        f"the store holds {maximum:,} memories, its maximum_entries; to add more, open the "
        "database with a larger maximum_entries or with none (a database's default): "
        "open_memory(..., maximum_entries=N) or PostgresGameMemoryStore(..., "
        "maximum_entries=N), or --maximum-entries N on game-memory serve and every other "
        "command (left out: no bound)",
        bound="maximum_entries",
    )


def lock_entries(connection: psycopg.Connection[Any]) -> None:
    """Take the store-wide entries lock to the end of the caller's transaction (run in one).

    It comes first in the lock order (``statements.py``): a transaction that also locks
    partition rows must call this before it locks any, or two writers deadlock. Taking it
    again in the same transaction returns at once.
    """
    connection.execute(LOCK_ENTRIES)


def _count_locked(connection: psycopg.Connection[Any]) -> int:
    """How many memories the store holds, counted under the entries lock (in a transaction).

    Two statements, one more round trip than one: the count must start after the lock is
    granted to see what every earlier holder committed (``COUNT_ENTRIES``).
    """
    lock_entries(connection)
    row = connection.execute(COUNT_ENTRIES).fetchone()
    assert row is not None
    return int(row[0])


def append_one(
    connection: psycopg.Connection[Any],
    memory: GameMemory,
    capacity: int,
    where: str,
    maximum_entries: int | None = None,
) -> bool:
    """Add ``memory`` in one autocommit statement; ``False`` for an equivalent duplicate.

    With ``maximum_entries`` the append runs in a transaction serialized with every other
    append of the schema (the entries lock, then the partition row: the lock order of
    ``statements.py``), so the store-wide count is exact.

    Raises:
        MemoryConflictError: the id holds different content (nothing changes).
        CapacityExceededError: the partition holds ``capacity`` memories, or the store
            ``maximum_entries``.
    """
    if maximum_entries is not None:
        with connection.transaction():
            if _count_locked(connection) < maximum_entries:
                return append_one(connection, memory, capacity, where)
            found = connection.execute(
                EXISTING,
                {
                    "session": sql_key(memory.session_id),
                    "owner": sql_key(memory.owner_id),
                    "memory": sql_key(memory.memory_id),
                },
            ).fetchone()
            if found is None:
                raise _store_full(maximum_entries)
            check_equivalent(memory, found[0], found[1], where)
            return False
    document, digest = encode_memory(memory)
    parameters = {
        "session": sql_key(memory.session_id),
        "owner": sql_key(memory.owner_id),
        "memory": sql_key(memory.memory_id),
        "digest": digest,
        "document": document,
        "capacity": capacity,
    }
    for _ in range(_RACE_ATTEMPTS):
        row = connection.execute(APPEND, parameters).fetchone()
        assert row is not None
        inserted, existing_digest, existing_document, claimed = row
        if inserted is not None:
            return True
        if existing_digest is None and claimed == 0:
            with connection.transaction():  # positions used up: did erasures leave room?
                bound = _position_bound(
                    connection, sql_key(memory.session_id), sql_key(memory.owner_id), capacity, 1
                )
                if bound is None:
                    raise _full(memory.owner_id, memory.session_id, capacity, "is full")
                row = connection.execute(APPEND, {**parameters, "capacity": bound}).fetchone()
            assert row is not None
            inserted, existing_digest, existing_document, claimed = row
            if inserted is not None:
                return True
        if existing_digest is None:
            # A concurrent append of this id committed after our snapshot: read its row.
            found = connection.execute(EXISTING, parameters).fetchone()
            if found is None:
                continue
            existing_digest, existing_document = found
        if bytes(existing_digest) != digest:
            check_equivalent(memory, existing_digest, existing_document, where)
        return False
    raise PersistenceError(
        f"memory {memory.memory_id!r} could not be appended to {where}: its row kept "
        "vanishing between reads (rows deleted outside game-memory?)"
    )


def append_batch(
    connection: psycopg.Connection[Any],
    groups: dict[tuple[str, str], dict[str, GameMemory]],
    capacity: int,
    where: str,
    maximum_entries: int | None = None,
    stored_keys: set[tuple[str, str, str]] | None = None,
) -> int | None:
    """One attempt at a batch (distinct ids per partition) in one transaction.

    Partitions are written (their rows locked) in key order, whatever the order of
    ``groups``, after the entries lock when there is a ``maximum_entries`` (the lock order
    of ``statements.py``), so concurrent batches, consolidations and erases never deadlock
    on each other.

    ``stored_keys``, when given, receives ``(session, owner, memory id)`` of the memories
    that were already stored (equivalent), so the caller can tell each result.

    Returns:
        How many memories were new, or ``None`` when a concurrent append of one of the
        ids won a race and the transaction was rolled back (try again).

    Raises:
        MemoryConflictError, CapacityExceededError: nothing of the batch is added.
    """
    added = 0
    lost = False
    # Partition rows are locked in key order (C collation: code point order), the order an
    # erase of a session locks them in: two batches naming the same owners in another order
    # would otherwise deadlock, and PostgreSQL would abort one of them.
    ordered = sorted(groups.items(), key=lambda item: (sql_key(item[0][0]), sql_key(item[0][1])))
    with connection.transaction() as transaction:
        stored = 0
        if maximum_entries is not None:  # first: the lock order of ``statements.py``
            stored = _count_locked(connection)
        for (session_id, owner_id), batch in ordered:
            encoded = [encode_memory(memory) for memory in batch.values()]
            parameters = {
                "session": sql_key(session_id),
                "owner": sql_key(owner_id),
                "memories": [sql_key(memory_id) for memory_id in batch],
                "digests": [digest for _, digest in encoded],
                "documents": [document for document, _ in encoded],
                "capacity": capacity,
            }
            row = connection.execute(APPEND_MANY, parameters).fetchone()
            assert row is not None
            new, claimed, inserted, keys, digests, documents, present = row
            if new and not claimed:  # positions used up: did erasures leave room?
                bound = _position_bound(
                    connection, sql_key(session_id), sql_key(owner_id), capacity, int(new)
                )
                if bound is not None:
                    parameters["capacity"] = bound
                    row = connection.execute(APPEND_MANY, parameters).fetchone()
                    assert row is not None
                    new, claimed, inserted, keys, digests, documents, present = row
            by_key = {sql_key(memory_id): memory for memory_id, memory in batch.items()}
            for key, digest, document in zip(keys, digests, documents, strict=True):
                check_equivalent(by_key[key], digest, document, where)
            if stored_keys is not None:
                stored_keys.update((session_id, owner_id, by_key[key].memory_id) for key in present)
            if new and not claimed:
                raise _full(owner_id, session_id, capacity, f"cannot take {new:,} more memories")
            if inserted != new:  # a concurrent append of one of these ids won: retry
                lost = True
                raise psycopg.Rollback(transaction)
            added += int(inserted)
            if maximum_entries is not None and stored + added > maximum_entries:
                raise _store_full(maximum_entries)
    return None if lost else added
