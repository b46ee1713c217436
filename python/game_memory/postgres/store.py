"""``PostgresGameMemoryStore``: the authoritative save in a PostgreSQL database.

Guarantees (the same contract as the file store, see ``docs/postgres.md``):

* **Durable and atomic**: an append is one statement in its own transaction with
  ``synchronous_commit = on``; when it returns the memory is in the write-ahead log on disk,
  and a crash at any instant leaves it wholly present or absent.
* **Many writers**: any number of processes on any number of hosts may append at once.
  Appends to one owner partition are serialized by that partition's row lock (held for one
  statement); appends to different owners, of one session or not, run in parallel.
  Idempotence and conflicts hold across processes: two appends of one id never both land.
* **Consistent reads**: a snapshot is one statement, so it sees one committed state; it
  never blocks writers nor waits for them.
* **Fail closed**: a row whose document does not match its content digest, does not decode
  or names another partition raises ``PersistenceError``; nothing is guessed.
* **Bounded**: each owner partition holds at most ``maximum_partition_entries`` memories;
  every snapshot is bounded; the cache of parsed partitions is bounded.

Lexical ranking is the BM25 contract of ``store/lexical.py`` evaluated on the snapshot's
views in this process (bit-identical to the file store's scores); the views are cached per
partition and refreshed by reading only rows appended since (``views.py``), so a warm
snapshot costs one round trip that returns what changed.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import psycopg

from game_memory.errors import (
    CapacityExceededError,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
    StoreBusyError,
    StoreClosedError,
)
from game_memory.model import (
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    MigrationReport,
    StoreCheckReport,
    check_bounded_id,
    ordinal_key,
)
from game_memory.postgres.check import check_database
from game_memory.postgres.connection import ConnectionPool, translate
from game_memory.postgres.rows import decode_row, encode_memory, sql_key
from game_memory.postgres.schema import check_schema, migrate_schema
from game_memory.postgres.statements import (
    APPEND,
    APPEND_MANY,
    EXISTING,
    OWNER_ROWS,
    SESSION_ROWS,
)
from game_memory.postgres.views import CachedPartition, ViewCache, extend_view
from game_memory.store.lexical import lexical_search
from game_memory.store.protocol import StoreSnapshot
from game_memory.store.view import PartitionView

__all__ = ["PostgresGameMemoryStore"]

_T = TypeVar("_T")
_LIMIT = 1_000_000
_RACE_ATTEMPTS = 3
Stage = GameMemorySearchStageKind


class _State(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


def _check_range(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an integer from {low:,} to {high:,}")
    return value


def _validated_id(value: str, what: str) -> str:
    try:
        return check_bounded_id(value, what)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from exc


class PostgresGameMemoryStore:
    """The authoritative save of memories in a PostgreSQL database.

    Args:
        url: A ``postgresql://`` URL. Tables live in the first schema of its
            ``search_path`` (``?options=-csearch_path%3Dgame,public`` picks one; the
            ``vector`` extension's schema must be on the path too).
        maximum_partition_entries: Most memories of one owner partition, 1..1,000,000.
        maximum_snapshot_entries: Most memories one snapshot (or ``enumerate``) reads,
            1..1,000,000.
        cache_entries: Parsed memories kept across partitions, 1..10,000,000.
        max_connections: Connections (and worker threads) of this store object, 1..64.
        timeout: Seconds to connect, and to wait for a free connection.
        migrate: Bring the schema up to date on first use (idempotent, safe from many
            processes). With ``False`` a database at another version is refused.

    Raises:
        InvalidArgumentError: the URL is not a ``postgresql://`` URL or an option is out of
            range. Nothing connects before the first call.
    """

    def __init__(
        self,
        url: str,
        *,
        maximum_partition_entries: int = 1_000_000,
        maximum_snapshot_entries: int = 1_000_000,
        cache_entries: int = 200_000,
        max_connections: int = 4,
        timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        _check_range("maximum_partition_entries", maximum_partition_entries, 1, _LIMIT)
        _check_range("maximum_snapshot_entries", maximum_snapshot_entries, 1, _LIMIT)
        _check_range("cache_entries", cache_entries, 1, 10_000_000)
        _check_range("max_connections", max_connections, 1, 64)
        if not 0 < timeout <= 3_600:
            raise InvalidArgumentError("timeout must be between 0 and 3,600 seconds")
        self._pool = ConnectionPool(url, size=max_connections, timeout=timeout)
        self.where = self._pool.where
        self.maximum_partition_entries = maximum_partition_entries
        self.maximum_snapshot_entries = maximum_snapshot_entries
        self._migrate = migrate
        self._cache = ViewCache(cache_entries)
        self._executor = ThreadPoolExecutor(max_connections, thread_name_prefix="game-memory-pg")
        self._state = _State.OPEN
        self._ready = False
        self._ready_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"PostgresGameMemoryStore({self.where!r}, state={self._state.value})"

    @property
    def folder(self) -> Path | None:
        """``None``: the save is not in a local folder."""
        return None

    async def __aenter__(self) -> PostgresGameMemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------

    async def _run(self, function: Callable[[], _T]) -> _T:
        """Run blocking ``function`` in the store's threads (it completes even if cancelled)."""
        if self._state is _State.CLOSED:
            raise StoreClosedError(f"the memory store in {self.where} is closed; open a new one")
        try:
            future = self._executor.submit(function)
        except RuntimeError as exc:  # shut down by a concurrent aclose()
            raise StoreClosedError(f"the memory store in {self.where} is closed") from exc
        return await asyncio.wrap_future(future)

    def _call(self, what: str, function: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``function`` on a pooled connection, translating psycopg's errors (blocking)."""
        try:
            with self._pool.connection() as connection:
                return function(connection)
        except psycopg.Error as exc:
            raise translate(exc, what, self.where) from exc

    async def _ensure_ready(self) -> float:
        """Check (and with ``migrate``, bring up to date) the schema once; seconds it took."""
        if self._ready:
            return 0.0
        async with self._ready_lock:
            if self._ready:
                return 0.0
            started = time.perf_counter()

            def prepare(connection: psycopg.Connection[Any]) -> None:
                if self._migrate:
                    migrate_schema(connection, self.where)
                else:
                    check_schema(connection, self.where)

            await self._run(lambda: self._call("preparing the schema", prepare))
            self._ready = True
            return time.perf_counter() - started

    # -- writes -------------------------------------------------------------------------

    async def append(self, memory: GameMemory) -> bool:
        """Durably add ``memory`` to its owner's partition (one atomic, durable statement).

        Idempotent: an equivalent memory already there returns ``False`` and writes nothing,
        also when another process appended it a moment before. Cancelling the awaiting task
        does not interrupt the statement: it commits (or not) atomically.

        Raises:
            MemoryConflictError: the id already holds different content (nothing changes).
            CapacityExceededError: the owner partition holds ``maximum_partition_entries``.
            PersistenceError: the database is unreachable or refuses the write.
            StoreBusyError: the database was too busy (a lock or statement timeout).
            StoreClosedError: the store was closed.
        """
        if not isinstance(memory, GameMemory):
            raise InvalidArgumentError("append takes a GameMemory")
        await self._ensure_ready()
        return await self._run(lambda: self._call("appending a memory", self._append(memory)))

    def _append(self, memory: GameMemory) -> Callable[[psycopg.Connection[Any]], bool]:
        document, digest = encode_memory(memory)
        parameters = {
            "session": sql_key(memory.session_id),
            "owner": sql_key(memory.owner_id),
            "memory": sql_key(memory.memory_id),
            "digest": digest,
            "document": document,
            "capacity": self.maximum_partition_entries,
        }

        def append(connection: psycopg.Connection[Any]) -> bool:
            for _ in range(_RACE_ATTEMPTS):
                row = connection.execute(APPEND, parameters).fetchone()
                assert row is not None
                inserted, existing_digest, existing_document, claimed = row
                if inserted is not None:
                    return True
                if existing_digest is None and claimed == 0:
                    raise CapacityExceededError(
                        f"owner {memory.owner_id!r} of session {memory.session_id!r} holds "
                        f"{self.maximum_partition_entries:,} memories, the store's "
                        "maximum_partition_entries; open it with a larger bound to add more",
                        bound="maximum_partition_entries",
                    )
                if existing_digest is None:
                    # A concurrent append of this id committed after our snapshot: read it.
                    found = connection.execute(EXISTING, parameters).fetchone()
                    if found is None:
                        continue
                    existing_digest, existing_document = found
                if bytes(existing_digest) == digest:
                    return False
                self._check_equivalent(memory, existing_digest, existing_document)
                return False
            raise PersistenceError(
                f"memory {memory.memory_id!r} could not be appended to {self.where}: its row "
                "kept vanishing between reads (rows deleted outside game-memory?)"
            )

        return append

    async def append_many(self, memories: Sequence[GameMemory]) -> int:
        """Durably add many memories in one transaction; return how many were new.

        The bulk form of :meth:`append` (for imports and tools; not part of the store
        protocol): all or nothing. Equivalent memories already stored are skipped; one
        statement per owner partition, one commit for the whole batch. Keep a batch to one
        session (and a few thousand memories): on Citus a batch of one session is routed
        to one shard.

        Raises:
            MemoryConflictError: an id already holds (or the batch gives it) different
                content; nothing of the batch is added.
            CapacityExceededError: a partition would exceed ``maximum_partition_entries``;
                nothing is added.
        """
        items = list(memories)
        if not all(isinstance(memory, GameMemory) for memory in items):
            raise InvalidArgumentError("append_many takes GameMemory objects")
        groups: dict[tuple[str, str], dict[str, GameMemory]] = {}
        for memory in items:
            group = groups.setdefault((memory.session_id, memory.owner_id), {})
            previous = group.setdefault(memory.memory_id, memory)
            if previous != memory:
                raise MemoryConflictError(
                    f"the batch gives memory id {memory.memory_id!r} of owner "
                    f"{memory.owner_id!r} two different contents; an id cannot be reused"
                )
        if not groups:
            return 0
        await self._ensure_ready()

        def append(connection: psycopg.Connection[Any]) -> int:
            for _ in range(_RACE_ATTEMPTS):
                added = self._append_batch(connection, groups)
                if added is not None:
                    return added
            raise StoreBusyError(
                f"a batch kept racing concurrent appends of the same ids in {self.where}; retry it"
            )

        return await self._run(lambda: self._call("appending memories", append))

    def _append_batch(
        self,
        connection: psycopg.Connection[Any],
        groups: dict[tuple[str, str], dict[str, GameMemory]],
    ) -> int | None:
        """One attempt at a batch in one transaction; ``None`` when a race rolled it back."""
        added = 0
        lost = False
        with connection.transaction() as transaction:
            for (session_id, owner_id), batch in groups.items():
                encoded = [encode_memory(memory) for memory in batch.values()]
                row = connection.execute(
                    APPEND_MANY,
                    {
                        "session": sql_key(session_id),
                        "owner": sql_key(owner_id),
                        "memories": [sql_key(memory_id) for memory_id in batch],
                        "digests": [digest for _, digest in encoded],
                        "documents": [document for document, _ in encoded],
                        "capacity": self.maximum_partition_entries,
                    },
                ).fetchone()
                assert row is not None
                new, claimed, inserted, keys, digests, documents = row
                by_key = {sql_key(memory_id): memory for memory_id, memory in batch.items()}
                for key, digest, document in zip(keys, digests, documents, strict=True):
                    self._check_equivalent(by_key[key], digest, document)
                if new and not claimed:
                    raise CapacityExceededError(
                        f"owner {owner_id!r} of session {session_id!r} cannot take {new:,} more "
                        f"memories: maximum_partition_entries is "
                        f"{self.maximum_partition_entries:,}; nothing of the batch was added",
                        bound="maximum_partition_entries",
                    )
                if inserted != new:  # a concurrent append of one of these ids won: retry
                    lost = True
                    raise psycopg.Rollback(transaction)
                added += int(inserted)
        return None if lost else added

    def _check_equivalent(self, memory: GameMemory, digest: bytes, document: bytes) -> None:
        """Raise the conflict unless the stored memory equals ``memory`` (same model, other
        JSON: metadata in another order, say)."""
        stored = decode_row(
            document,
            digest,
            sql_key(memory.session_id),
            sql_key(memory.owner_id),
            sql_key(memory.memory_id),
            self.where,
        )
        if stored != memory:
            raise MemoryConflictError(
                f"memory id {memory.memory_id!r} of owner {memory.owner_id!r} in session "
                f"{memory.session_id!r} already holds different content; an id cannot be "
                "reused. Use a new id (derive_memory_id gives stable ones)."
            )

    # -- reads --------------------------------------------------------------------------

    async def snapshot(
        self, query: GameMemoryQuery, *, maximum_entries: int | None = None
    ) -> StoreSnapshot:
        """Read the query's partitions in one statement and rank them lexically (BM25).

        Reads only the query owner's partition when ``owner_id`` is set, else the session's
        partitions. Visibility follows ``memory_matches_query`` (game time: nothing after
        ``at_or_before``, on another timeline, or expired then). Sees one committed state of
        the database and takes no lock. Stages: STORAGE_MIGRATION, AUTHORITATIVE_SNAPSHOT,
        LEXICAL_SEARCH.

        Raises:
            CapacityExceededError: the partitions hold more than ``maximum_entries`` (or the
                store's ``maximum_snapshot_entries``) memories.
            PersistenceError: the database is unreachable, or a row is damaged.
        """
        if not isinstance(query, GameMemoryQuery):
            raise InvalidArgumentError("snapshot takes a GameMemoryQuery")
        bound = self.maximum_snapshot_entries
        if maximum_entries is not None:
            _check_range("maximum_entries", maximum_entries, 1, _LIMIT)
            bound = min(bound, maximum_entries)
        migration = await self._ensure_ready()

        def read() -> StoreSnapshot:
            begun = time.perf_counter()
            views = self._views(query.session_id, query.owner_id, bound)
            size = sum(len(view) for view in views)
            read_at = time.perf_counter()
            hits, visible = lexical_search(views, query, query.limit)
            ranked_at = time.perf_counter()
            stages = (
                GameMemorySearchStage.measured(Stage.STORAGE_MIGRATION, migration, 0, 0),
                GameMemorySearchStage.measured(
                    Stage.AUTHORITATIVE_SNAPSHOT, read_at - begun, size, size
                ),
                GameMemorySearchStage.measured(
                    Stage.LEXICAL_SEARCH, ranked_at - read_at, size, len(hits)
                ),
            )
            return StoreSnapshot(tuple(views), tuple(hits), visible, stages)

        return await self._run(read)

    def _too_large(self, session_id: str, bound: int) -> CapacityExceededError:
        return CapacityExceededError(
            f"the snapshot of session {session_id!r} holds more than {bound:,} memories "
            "(maximum_snapshot_entries); query one owner, or raise the bound",
            bound="maximum_snapshot_entries",
        )

    def _views(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionView]:
        """The current views of a session (or one owner), by owner id (ordinal). Blocking."""
        session_id = _validated_id(session_id, "session_id")
        if owner_id is not None:
            owner_id = _validated_id(owner_id, "owner_id")
            cached = self._cache.get(session_id, owner_id)
            known = {} if cached is None else {owner_id: cached}
        else:
            known = self._cache.session(session_id)
        known_total = sum(len(c.view) for c in known.values())
        if known_total > bound:
            raise self._too_large(session_id, bound)  # partitions only grow
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
        rows = self._call(
            "reading a snapshot", lambda c: c.execute(statement, parameters).fetchall()
        )
        if len(rows) > bound - known_total:
            raise self._too_large(session_id, bound)
        current = {owner: cached.view for owner, cached in known.items()}
        for owner_key, next_seq, new_memories in self._group(rows):
            owner = keys.get(owner_key)
            base = known.get(owner) if owner is not None else None
            memories = [
                decode_row(document, digest, session_key, owner_key, memory_key, self.where)
                for _, memory_key, digest, document in new_memories
            ]
            if owner is None:
                if not memories:
                    continue  # positions used only by lost races: nothing to show
                owner = memories[0].owner_id
            view = extend_view(
                base.view if base is not None else None, session_id, owner, memories, self.where
            )
            if view is None:
                continue
            self._cache.remember(session_id, owner, CachedPartition(view, next_seq))
            current[owner] = view
        views = list(current.values())
        if len(views) > 1:
            views.sort(key=lambda view: ordinal_key(view.owner_id))
        return views

    @staticmethod
    def _group(
        rows: list[tuple[Any, ...]],
    ) -> list[tuple[str, int, list[tuple[int, str, bytes, bytes]]]]:
        """Rows per partition: ``(owner key, next_seq, [(seq, memory key, digest, document)])``
        with each partition's rows in position order."""
        grouped: dict[str, tuple[int, list[tuple[int, str, bytes, bytes]]]] = {}
        for owner_key, next_seq, seq, memory_key, digest, document in rows:
            entry = grouped.setdefault(owner_key, (int(next_seq), []))
            if seq is not None:
                entry[1].append((int(seq), memory_key, digest, document))
        result = []
        for owner_key, (next_seq, found) in grouped.items():
            found.sort(key=lambda row: row[0])
            result.append((owner_key, next_seq, found))
        return result

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or of one owner), ordered by owner then memory id.

        Raises:
            CapacityExceededError: more than ``maximum_snapshot_entries`` memories.
        """
        await self._ensure_ready()
        views = await self._run(
            lambda: self._views(session_id, owner_id, self.maximum_snapshot_entries)
        )
        return [memory for view in views for memory in view.ordered]

    async def count(self) -> int:
        """How many memories the whole database holds (a count over every session)."""
        await self._ensure_ready()

        def count(connection: psycopg.Connection[Any]) -> int:
            row = connection.execute("SELECT count(*) FROM game_memory_memories").fetchone()
            return int(row[0]) if row is not None else 0

        return await self._run(lambda: self._call("counting memories", count))

    async def migrate_legacy_layout(self) -> MigrationReport:
        """Nothing to migrate in a database (``0`` migrated); brings the schema up to date.

        A legacy file save is copied in with ``game-memory migrate --to-database``.
        """
        await self._ensure_ready()
        return MigrationReport(migrated_entries=0, partitioned_entries=await self.count())

    async def check(self, *, fix: bool = False) -> StoreCheckReport:
        """Verify every row against its digest and partition; see ``postgres/check.py``.

        With ``fix=True`` only repairs that lose nothing are applied (a partition row
        missing or behind its memories is restored).
        """
        await self._ensure_ready()
        return await self._run(
            lambda: self._call("checking the save", lambda c: check_database(c, self.where, fix))
        )

    async def aclose(self) -> None:
        """Close the store; idempotent. Waits for running calls, then closes the connections."""
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        self._pool.close()
