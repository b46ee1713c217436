"""``PostgresVectorIndex``: the derived vector index of a shared world, in PostgreSQL + pgvector.

It implements :class:`~game_memory.index.protocol.VectorIndex` with the same join machinery
as the file index (:class:`~game_memory.index.join.JoinCache` over
:class:`~game_memory.index.partition.IndexPartition` versions), so recall matches entries to
the authoritative snapshot by memory hash and content digest exactly as on files, and scores
the same float32 vectors with the same code: hybrid recall gives identical results.

The database holds one entry per memory (``vector`` column; no approximate index: recall is
exact, per partition, in this process). A process caches each partition it reads and
refreshes it with one statement that returns only the entries changed since
(``index_cache.py``); writes lock the partition's row, so any number of processes on any
number of hosts may write and read at once. Derived data: every failure is a
``DerivedIndexError`` and never touches the save; ``verify(repair=True)`` deletes damaged
partitions, which a rebuild then embeds again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector
from psycopg.adapt import Loader

from game_memory.durable.names import identity_hash
from game_memory.errors import (
    DerivedIndexError,
    InvalidArgumentError,
    PersistenceError,
    StoreClosedError,
)
from game_memory.index.entries import EntryState, MemoryDigests, memory_hash
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.index.partition import FloatMatrix
from game_memory.index.protocol import OrphanCandidates
from game_memory.model import GameMemory, MemoryEmbeddingIdentity
from game_memory.postgres import index_statements as sql
from game_memory.postgres.connection import ConnectionPool, translate
from game_memory.postgres.index_cache import Loads
from game_memory.postgres.index_reads import IndexReader
from game_memory.postgres.index_writes import (
    erase_entries,
    reset_partition,
    sweep_session,
    write_partition,
)
from game_memory.postgres.rows import from_sql_key, sql_key
from game_memory.postgres.schema import check_schema, migrate_schema
from game_memory.store.view import PartitionView

__all__ = ["PostgresVectorIndex"]

_T = TypeVar("_T")


class _RawVector(Loader):
    """Load a pgvector value as its binary bytes (decoded in bulk by ``decode_vectors``)."""

    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> bytes:
        return bytes(data)


def _configure(connection: psycopg.Connection[Any]) -> None:
    register_vector(connection)
    info = psycopg.types.TypeInfo.fetch(connection, "vector")
    assert info is not None  # register_vector raised otherwise
    connection.adapters.register_loader(info.oid, _RawVector)


class PostgresVectorIndex:
    """The derived vector index in a PostgreSQL database (pgvector).

    Derived data: it may be emptied at any time and rebuilt from the save with
    ``VectorMemoryStore.rebuild``. It may share the save's database (the default of
    ``open_memory``) or live in another one.

    Args:
        url: A ``postgresql://`` URL (see :class:`PostgresGameMemoryStore`).
        capacity: Most entries one owner partition may hold, 1..1,000,000.
        cache_entries: Entries (with their vectors) kept in this process, 1..10,000,000
            (200,000 at 384 dimensions hold about 300 MB of vectors).
        digest_cache_entries: Memory digests kept (the join's hot data), 1,000..10,000,000;
            the joins kept hold views of at most this many memories in all (a view keeps
            the memories it parsed alive: bound it with the store's ``cache_entries``).
        max_connections: Connections of this index object, 1..64.
        timeout: Seconds to connect, to wait for a free connection or another writer's
            lock, and the bound on a dead peer and on ``aclose`` (see
            :class:`PostgresGameMemoryStore`).
        migrate: Bring the schema up to date on first use.

    Raises:
        InvalidArgumentError: a bad URL or an option out of range.
    """

    def __init__(
        self,
        url: str,
        *,
        capacity: int = 100_000,
        cache_entries: int = 200_000,
        digest_cache_entries: int = 200_000,
        max_connections: int = 4,
        timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        if isinstance(capacity, bool) or not 1 <= capacity <= 1_000_000:
            raise InvalidArgumentError("capacity must be an integer from 1 to 1,000,000")
        if isinstance(cache_entries, bool) or not 1 <= cache_entries <= 10_000_000:
            raise InvalidArgumentError("cache_entries must be an integer from 1 to 10,000,000")
        if isinstance(digest_cache_entries, bool) or not (
            1_000 <= digest_cache_entries <= 10_000_000
        ):
            raise InvalidArgumentError(
                "digest_cache_entries must be an integer from 1,000 to 10,000,000"
            )
        if isinstance(max_connections, bool) or not 1 <= max_connections <= 64:
            raise InvalidArgumentError("max_connections must be an integer from 1 to 64")
        self._pool = ConnectionPool(
            url,
            size=max_connections,
            timeout=timeout,
            configure=_configure,
            error=DerivedIndexError,
        )
        self.where = f"the vector index in {self._pool.where}"
        self._capacity = capacity
        self._migrate = migrate
        self._digests = MemoryDigests(digest_cache_entries)
        self._joins = JoinCache(self._digests)
        self._loads = Loads(cache_entries)
        self._reader = IndexReader(self._loads, self.where)
        self._ready = False
        self._ready_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresVectorIndex({self._pool.where!r})"

    @property
    def folder(self) -> Path | None:
        """``None``: the index is not in a local folder."""
        return None

    @property
    def capacity(self) -> int:
        """Most entries one owner partition may hold."""
        return self._capacity

    # -- plumbing -----------------------------------------------------------------------

    def _call(self, what: str, function: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """Run ``function`` on a pooled connection (the schema checked once). Blocking."""
        if self._closed:
            raise StoreClosedError(f"{self.where} is closed; open a new one")
        try:
            if not self._ready:
                with self._ready_lock:
                    if not self._ready:
                        with self._pool.direct() as connection:
                            try:
                                if self._migrate:
                                    migrate_schema(connection, self._pool.where)
                                else:
                                    check_schema(connection, self._pool.where)
                            except PersistenceError as exc:  # the index reports its own kind
                                raise DerivedIndexError(str(exc)) from exc
                        self._ready = True
            with self._pool.connection() as connection:
                return function(connection)
        except psycopg.Error as exc:
            raise translate(exc, what, self.where, error=DerivedIndexError) from exc

    # -- reads --------------------------------------------------------------------------

    def join(self, view: PartitionView, identity: MemoryEmbeddingIdentity) -> PartitionJoin:
        """Match the entries of ``view``'s partition against it (one statement; blocking)."""

        def join(connection: psycopg.Connection[Any]) -> PartitionJoin:
            active = self._reader.code(connection, identity, create=False)
            loaded = self._reader.refresh(connection, view.session_id, view.owner_id)
            return self._joins.join(view, None if loaded is None else loaded.partition, active)

        return self._call("reading vectors", join)

    def session_joins(
        self,
        session_id: str,
        views: Sequence[PartitionView],
        identity: MemoryEmbeddingIdentity,
    ) -> list[PartitionJoin]:
        """Join every partition of a session, orphaned ones included (blocking)."""

        def joins(connection: psycopg.Connection[Any]) -> list[PartitionJoin]:
            active = self._reader.code(connection, identity, create=False)
            loads = self._reader.refresh_session(connection, session_id)
            by_owner = {view.owner_id: view for view in views}
            owners = sorted(set(by_owner) | set(loads), key=lambda o: identity_hash(o))
            return [
                self._joins.join(
                    by_owner.get(owner),
                    loads[owner].partition if owner in loads else None,
                    active,
                )
                for owner in owners
            ]

        return self._call("reading vectors", joins)

    def vectors(self, joined: PartitionJoin, identity: MemoryEmbeddingIdentity) -> FloatMatrix:
        """The active identity's vectors of a joined partition (from this process's load).

        Raises:
            PartitionReplacedError: the partition was reloaded since it was joined.
            DerivedIndexError: the joined partition has no vectors of the active model.
        """
        if self._closed:
            raise StoreClosedError(f"{self.where} is closed; open a new one")
        if joined.partition is None or joined.active is None:
            raise DerivedIndexError("the joined partition has no vectors of the active model")
        return self._loads.matrix(joined.partition, joined.active, identity.dimensions)

    def prefetch(self, session_id: str, owner_id: str, identity: MemoryEmbeddingIdentity) -> None:
        """Nothing: what a search needs is the database's to say when it asks (:meth:`join`)."""

    def cached_vectors(
        self, view: PartitionView, identity: MemoryEmbeddingIdentity
    ) -> tuple[PartitionJoin, FloatMatrix] | None:
        """Always ``None``: whether this process's load is current is the database's to say,
        so a recall asks it off the event loop (:meth:`join`)."""
        return None

    def is_ready(self, memory: GameMemory, identity: MemoryEmbeddingIdentity) -> bool:
        """Whether ``memory`` has a ready vector of ``identity`` for its content (blocking)."""

        def ready(connection: psycopg.Connection[Any]) -> bool:
            active = self._reader.code(connection, identity, create=False)
            if active is None:
                return False
            hashed, digest = self._digests.get(memory)
            row = connection.execute(
                sql.ENTRY,
                {
                    "session": sql_key(memory.session_id),
                    "owner": sql_key(memory.owner_id),
                    "hash": hashed,
                },
            ).fetchone()
            return (
                row is not None
                and row[0] == EntryState.READY
                and row[1] == active
                and bytes(row[2]) == digest
            )

        return self._call("reading an entry", ready)

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> None:
        """Write ready entries for ``memories`` durably: one transaction per partition.

        Raises:
            CapacityExceededError: an owner partition would exceed :attr:`capacity` (that
                partition's entries are not written).
        """
        if len(memories) != len(vectors):
            raise InvalidArgumentError("write needs one vector per memory")

        def write(connection: psycopg.Connection[Any]) -> None:
            code = self._reader.code(connection, identity, create=True)
            for (session_id, owner_id), positions in _groups(memories).items():
                entries = [
                    (
                        *self._digests.get(memories[p]),
                        int(EntryState.READY),
                        code,
                        "",
                        Vector(np.asarray(vectors[p], dtype=np.float32)),
                    )
                    for p in positions
                ]
                write_partition(connection, session_id, owner_id, entries, self._capacity)

        self._call("writing vectors", write)

    def write_now(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> bool:
        """Always ``False``: a write is a database round trip, made by :meth:`write` off
        the event loop."""
        return False

    def mark(self, memories: Sequence[GameMemory], state: EntryState, code: str) -> None:
        """Record that ``memories`` have no usable vector (one transaction per partition)."""

        def mark(connection: psycopg.Connection[Any]) -> None:
            for (session_id, owner_id), positions in _groups(memories).items():
                entries = [
                    (*self._digests.get(memories[p]), int(state), None, code, None)
                    for p in positions
                ]
                write_partition(connection, session_id, owner_id, entries, None)

        self._call("marking entries", mark)

    # -- maintenance --------------------------------------------------------------------

    def verify(self, session_id: str, *, repair: bool) -> list[Exception]:
        """Check every partition of a session in SQL (states, hashes, vectors against their
        model's dimensions, the entry count); with ``repair`` delete the damaged ones."""

        def verify(connection: psycopg.Connection[Any]) -> list[Exception]:
            damaged: list[Exception] = []
            session = sql_key(session_id)
            rows = connection.execute(sql.VERIFY, {"session": session}).fetchall()
            for owner_key, recorded, entries, malformed in rows:
                owner = from_sql_key(owner_key)
                if not malformed and recorded == entries:
                    continue
                damaged.append(
                    DerivedIndexError(
                        f"partition {owner!r} of session {session_id!r} in {self.where} holds "
                        f"{malformed} malformed entries and {entries} entries where it records "
                        f"{recorded}; the derived index is damaged, rebuild it"
                    )
                )
                if repair:
                    reset_partition(connection, session, owner_key)
                    self._loads.forget(session_id, owner)
            return damaged

        return self._call("verifying the vector index", verify)

    def orphans(self, session_id: str, views: Sequence[PartitionView]) -> OrphanCandidates:
        """The session's entries whose memory is absent from ``views`` (blocking)."""

        def orphans(connection: psycopg.Connection[Any]) -> OrphanCandidates:
            loads = self._reader.refresh_session(connection, session_id)
            alive = self._alive(views)
            entries: dict[object, dict[bytes, object]] = {}
            for owner, loaded in loads.items():
                partition = loaded.partition
                known = alive.get(owner, set())
                entries[owner] = {
                    hashed: loaded.change_of(slot)
                    for hashed, slot in partition.position.items()
                    if hashed not in known
                }
            return OrphanCandidates(session_id, entries)

        return self._call("listing orphan vectors", orphans)

    def remove_orphans(self, candidates: OrphanCandidates, views: Sequence[PartitionView]) -> int:
        """Delete each listed entry still absent from ``views`` and unchanged since listed."""
        alive = self._alive(views)
        session = sql_key(candidates.session_id)

        def remove(connection: psycopg.Connection[Any]) -> int:
            chosen = {
                sql_key(owner): [
                    (h, cast(int, c))  # the change numbers this index listed
                    for h, c in listed.items()
                    if h not in alive.get(owner, set())
                ]
                for owner, listed in candidates.entries.items()
                if isinstance(owner, str)
            }
            removed = sweep_session(connection, session, chosen)
            for owner in self._loads.session(candidates.session_id):
                self._loads.forget(candidates.session_id, owner)
            return removed

        return self._call("removing orphan vectors", remove)

    def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the entries and vectors of a session, an owner or listed memories of one
        owner in one transaction; every process reloads the partitions touched (blocking).
        The rows' bytes leave the database files when PostgreSQL reuses the space."""
        session = sql_key(session_id)
        owner = None if owner_id is None else sql_key(owner_id)
        hashes = None if memory_ids is None else [memory_hash(m) for m in memory_ids]

        def erase(connection: psycopg.Connection[Any]) -> None:
            erase_entries(connection, session, owner, hashes)
            owners = [owner_id] if owner_id is not None else list(self._loads.session(session_id))
            for name in owners:
                self._loads.forget(session_id, name)

        self._call("erasing vectors", erase)

    def _alive(self, views: Sequence[PartitionView]) -> dict[str, set[bytes]]:
        """``sha256(memory_id)`` of every memory of ``views``, per owner id."""
        return {
            view.owner_id: {h for h, _ in self._digests.get_many(view.memories)} for view in views
        }

    async def migrate_legacy_index(self) -> int:
        """Nothing to migrate in a database: ``0``."""
        if self._closed:
            raise StoreClosedError(f"{self.where} is closed; open a new one")
        return 0

    async def aclose(self) -> None:
        """Close the connections; idempotent. Calls still running in other threads get at
        most ``timeout`` s to end; then their connections are cut, as
        :meth:`PostgresGameMemoryStore.aclose <game_memory.postgres.PostgresGameMemoryStore.aclose>`
        does."""
        self._closed = True
        await self._pool.aclose()


def _groups(memories: Sequence[GameMemory]) -> dict[tuple[str, str], list[int]]:
    """Positions of ``memories`` per partition (session and owner), in order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for position, memory in enumerate(memories):
        groups.setdefault((memory.session_id, memory.owner_id), []).append(position)
    return groups
