"""The save's writes over one connection: one memory in one statement, or a batch in one
transaction (see ``statements.py`` for the SQL and why positions follow commit order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from game_memory.errors import CapacityExceededError, MemoryConflictError, PersistenceError
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
        PersistenceError: the stored row is damaged.
    """
    if not _equivalent(memory, digest, document, where):
        raise memory_conflict(memory)


def _equivalent(memory: GameMemory, digest: bytes, document: bytes, where: str) -> bool:
    """Whether the stored row (``digest``, ``document``) of ``memory``'s id holds a memory
    equal to it (see :func:`check_equivalent`).

    Raises:
        PersistenceError: the stored row is damaged.
    """
    stored = decode_row(
        document,
        digest,
        sql_key(memory.session_id),
        sql_key(memory.owner_id),
        sql_key(memory.memory_id),
        where,
    )
    return stored == memory


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


_Key = tuple[str, str, str]  # (session id, owner id, memory id)


@dataclass(frozen=True, slots=True)
class _Batch:
    """A batch of ``append_many`` as the statements take it: the first copy of each id, per
    partition, and what the stores' shared rule needs to name a conflict (the batch
    position of each id's first copy, and the first later copy that differs from it)."""

    memories: Sequence[GameMemory]
    groups: dict[tuple[str, str], dict[str, GameMemory]]
    first: dict[_Key, int]
    repeats: dict[_Key, tuple[int, GameMemory]]

    @classmethod
    def of(cls, memories: Sequence[GameMemory]) -> _Batch:
        groups: dict[tuple[str, str], dict[str, GameMemory]] = {}
        first: dict[_Key, int] = {}
        repeats: dict[_Key, tuple[int, GameMemory]] = {}
        for position, memory in enumerate(memories):
            key = (memory.session_id, memory.owner_id, memory.memory_id)
            group = groups.setdefault((memory.session_id, memory.owner_id), {})
            if key not in first:
                first[key] = position
                group[memory.memory_id] = memory
            elif group[memory.memory_id] != memory and key not in repeats:
                repeats[key] = (position, memory)
        return cls(memories, groups, first, repeats)

    def first_conflict(
        self, stored_conflicts: list[GameMemory], present: set[_Key]
    ) -> MemoryConflictError | None:
        """The conflict the in-memory and file stores raise for this batch: the first
        memory, in batch order, unlike its id's reference, which is the stored memory when
        the id is stored ("already holds different content") and the batch's first copy
        of the id when not ("given twice"). ``stored_conflicts`` are the first copies
        unlike their stored memory; ``present`` the ids stored."""
        found: list[tuple[int, MemoryConflictError]] = []
        unlike_stored: set[_Key] = set()
        for memory in stored_conflicts:
            key = (memory.session_id, memory.owner_id, memory.memory_id)
            unlike_stored.add(key)
            found.append((self.first[key], memory_conflict(memory)))
        for key, (position, memory) in self.repeats.items():
            if key not in unlike_stored:  # its first copy, earlier, is the conflict then
                found.append((position, memory_conflict(memory, in_batch=key not in present)))
        return min(found, key=lambda item: item[0])[1] if found else None

    def results(self, present: set[_Key]) -> list[bool]:
        """One result per memory, as ``append`` gives: ``True`` for the first copy of an id
        that was not stored."""
        results: list[bool] = []
        for position, memory in enumerate(self.memories):
            key = (memory.session_id, memory.owner_id, memory.memory_id)
            results.append(self.first[key] == position and key not in present)
        return results


@dataclass(frozen=True, slots=True)
class _Written:
    """What one partition's ``APPEND_MANY`` did: how many of its memories were new, how many
    of those it inserted (fewer when a concurrent append of one won a race, none when the
    partition was ``full``), the ids already stored, and the batch's memories whose stored
    id holds other content."""

    new: int
    inserted: int
    full: bool
    present: list[str]
    conflicts: list[GameMemory]


def _append_partition(
    connection: psycopg.Connection[Any],
    session_id: str,
    owner_id: str,
    batch: dict[str, GameMemory],
    capacity: int,
    where: str,
) -> _Written:
    """Run ``APPEND_MANY`` for one partition's memories (distinct ids) in the caller's
    transaction, moving the bound on positions on when erasures left room."""
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
    conflicts = [
        by_key[key]
        for key, digest, document in zip(keys, digests, documents, strict=True)
        if not _equivalent(by_key[key], digest, document, where)
    ]
    return _Written(
        new=int(new),
        inserted=int(inserted),
        full=bool(new and not claimed),
        present=[by_key[key].memory_id for key in present],
        conflicts=conflicts,
    )


def append_batch(
    connection: psycopg.Connection[Any],
    memories: Sequence[GameMemory],
    capacity: int,
    where: str,
    maximum_entries: int | None = None,
) -> list[bool] | None:
    """One attempt at a batch in one transaction, all or nothing; one result per memory
    (``True`` added, ``False`` stored already or given earlier in the batch).

    Partitions are written (their rows locked) in key order, whatever the batch's order,
    after the entries lock when there is a ``maximum_entries`` (the lock order of
    ``statements.py``), so concurrent batches, consolidations and erases never deadlock
    on each other. Errors, though, are the in-memory and file stores' (the conformance
    suite holds them to it): the conflict of the first memory in *batch* order that is
    unlike its id's stored memory, or, for an id not stored, its first copy in the batch
    (:meth:`_Batch.first_conflict`); then, with no conflict anywhere, a capacity
    shortfall. So on a conflict every partition is still written before the transaction
    rolls back: the price of naming the same memory as the other stores, paid only by a
    batch that fails.

    Returns:
        The results, or ``None`` when a concurrent append of one of the ids won a race
        and the transaction was rolled back (try again).

    Raises:
        MemoryConflictError, CapacityExceededError: nothing of the batch is added.
    """
    batch = _Batch.of(memories)
    added = 0
    lost = False
    present: set[_Key] = set()
    stored_conflicts: list[GameMemory] = []
    shortfall: CapacityExceededError | None = None
    # Partition rows are locked in key order (C collation: code point order), the order an
    # erase of a session locks them in: two batches naming the same owners in another order
    # would otherwise deadlock, and PostgreSQL would abort one of them.
    ordered = sorted(
        batch.groups.items(), key=lambda item: (sql_key(item[0][0]), sql_key(item[0][1]))
    )
    with connection.transaction() as transaction:
        stored = 0
        if maximum_entries is not None:  # first: the lock order of ``statements.py``
            stored = _count_locked(connection)
        for (session_id, owner_id), group in ordered:
            written = _append_partition(connection, session_id, owner_id, group, capacity, where)
            present.update((session_id, owner_id, memory_id) for memory_id in written.present)
            stored_conflicts.extend(written.conflicts)
            if written.full:
                detail = f"cannot take {written.new:,} more memories"
                shortfall = shortfall or _full(owner_id, session_id, capacity, detail)
                continue
            if written.inserted != written.new:  # a concurrent append of one of these won
                lost = True
                raise psycopg.Rollback(transaction)
            added += written.inserted
            if maximum_entries is not None and stored + added > maximum_entries:
                shortfall = shortfall or _store_full(maximum_entries)
        error = batch.first_conflict(stored_conflicts, present) or shortfall
        if error is not None:
            raise error
    return None if lost else batch.results(present)
