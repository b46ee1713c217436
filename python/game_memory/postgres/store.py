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
* **Forget, erase, consolidate**: one transaction each, under the partition rows' locks;
  every process's cached views of what they changed are read again (``lifecycle.py``,
  whose :class:`~game_memory.postgres.lifecycle.PostgresLifecycle` is a base of the store).

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
    InvalidArgumentError,
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
)
from game_memory.postgres.check import check_database
from game_memory.postgres.connection import ConnectionPool, translate
from game_memory.postgres.lifecycle import PostgresLifecycle
from game_memory.postgres.reads import read_views
from game_memory.postgres.schema import check_schema, migrate_schema
from game_memory.postgres.views import ViewCache
from game_memory.postgres.writes import append_batch, append_one
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


class PostgresGameMemoryStore(PostgresLifecycle):
    """The authoritative save of memories in a PostgreSQL database.

    Args:
        url: A ``postgresql://`` URL. Tables live in the first schema of its
            ``search_path`` (``?options=-csearch_path%3Dgame,public`` picks one; the
            ``vector`` extension's schema must be on the path too), which must exist: the
            first call refuses one that does not (``PersistenceError``), and never uses a
            later schema's tables (``schema.py``).
        maximum_partition_entries: Most memories of one owner partition, 1..1,000,000.
        maximum_entries: Most memories of the whole store (its schema), 1..1,000,000, or
            ``None`` (the default: no store-wide bound). Setting it serializes every append
            of the database behind one lock: meant for tests and small deployments.
        maximum_snapshot_entries: Most memories one snapshot (or ``enumerate``) reads,
            1..1,000,000.
        cache_entries: Parsed memories kept across partitions, 1..10,000,000.
        max_connections: Connections (and worker threads) of this store object, 1..64.
        timeout: Seconds to connect, to wait for a free connection, and to wait for another
            writer's lock (``lock_timeout``, then ``StoreBusyError``); a connection whose
            host stopped answering fails within about as long, and ``aclose`` waits at
            most as long for running calls (``docs/postgres.md``).
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
        maximum_entries: int | None = None,
        maximum_snapshot_entries: int = 1_000_000,
        cache_entries: int = 200_000,
        max_connections: int = 4,
        timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        _check_range("maximum_partition_entries", maximum_partition_entries, 1, _LIMIT)
        _check_range("maximum_snapshot_entries", maximum_snapshot_entries, 1, _LIMIT)
        if maximum_entries is not None:
            _check_range("maximum_entries", maximum_entries, 1, _LIMIT)
        _check_range("cache_entries", cache_entries, 1, 10_000_000)
        _check_range("max_connections", max_connections, 1, 64)
        if not 0 < timeout <= 3_600:
            raise InvalidArgumentError("timeout must be between 0 and 3,600 seconds")
        self._pool = ConnectionPool(url, size=max_connections, timeout=timeout)
        self.where = self._pool.where
        self.maximum_partition_entries = maximum_partition_entries
        self.maximum_snapshot_entries = maximum_snapshot_entries
        self.maximum_entries = maximum_entries
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
            CapacityExceededError: the owner partition holds ``maximum_partition_entries``,
                or the store ``maximum_entries``, or the statement ran past the server's
                ``statement_timeout`` (its ``bound`` names which).
            PersistenceError: the database is unreachable or refuses the write.
            StoreBusyError: the database was too busy (a lock timeout, a deadlock).
            StoreClosedError: the store was closed.
        """
        if not isinstance(memory, GameMemory):
            raise InvalidArgumentError("append takes a GameMemory")
        await self._ensure_ready()
        return await self._run(
            lambda: self._call(
                "appending a memory",
                lambda c: append_one(
                    c, memory, self.maximum_partition_entries, self.where, self.maximum_entries
                ),
            )
        )

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Durably add a batch in one transaction, all or nothing; one result per memory.

        Results follow :meth:`append`: ``True`` added, ``False`` an equivalent memory was
        stored already or came earlier in the batch. One statement per owner partition,
        one commit for the whole batch. Keep a batch to one session (and a few thousand
        memories): on Citus a batch of one session is routed to one shard.

        Raises:
            MemoryConflictError: an id already holds (or the batch gives it) different
                content; nothing of the batch is added. It names the first such memory in
                batch order, with the in-memory and file stores' words (``writes.py``).
            CapacityExceededError: a partition would exceed ``maximum_partition_entries``,
                or the store ``maximum_entries`` (and nothing conflicts); nothing is added.
            PersistenceError: the database is unreachable or refuses the write.
            StoreBusyError: the batch kept racing concurrent appends of the same ids.
        """
        items = list(memories)
        if not all(isinstance(memory, GameMemory) for memory in items):
            raise InvalidArgumentError("append_many takes GameMemory objects")
        if not items:
            return []
        await self._ensure_ready()

        def append(connection: psycopg.Connection[Any]) -> list[bool]:
            for _ in range(_RACE_ATTEMPTS):
                results = append_batch(
                    connection,
                    items,
                    self.maximum_partition_entries,
                    self.where,
                    self.maximum_entries,
                )
                if results is not None:
                    return results
            raise StoreBusyError(
                f"a batch kept racing concurrent appends of the same ids in {self.where}; retry it"
            )

        return await self._run(lambda: self._call("appending memories", append))

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

    def _views(self, session_id: str, owner_id: str | None, bound: int) -> list[PartitionView]:
        """The current views of a session (or one owner); see ``reads.py``. Blocking."""
        session_id = _validated_id(session_id, "session_id")
        if owner_id is not None:
            owner_id = _validated_id(owner_id, "owner_id")
        return self._call(
            "reading a snapshot",
            lambda c: read_views(c, self._cache, session_id, owner_id, bound, self.where),
        )

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
        """Close the store; idempotent. Waits for running calls, then closes the connections.

        The wait is bounded by ``timeout``: a call still blocked then waits on a database
        that stopped answering (a server frozen while its host still acknowledges TCP: the
        keepalives end a vanished host's calls sooner). Its connection is cut, so it fails
        as a lost connection (``reason`` ``"unreachable"``: like any lost connection, its
        write may or may not have committed), a warning names the database, and the close
        returns.
        """
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        await self._pool.aclose(lambda: self._executor.shutdown(wait=True))
