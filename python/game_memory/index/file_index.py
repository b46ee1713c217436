"""``FileVectorMemoryIndex``: the derived vector index of one save, in a folder of its own.

It implements :class:`~game_memory.index.protocol.VectorIndex` over the blocking
:class:`~game_memory.index.engine.IndexEngine` (the on-disk format is described there), and
owns the caches that make a warm recall one matrix-vector product: the digests of memory
objects and the joins of snapshot views to index partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from game_memory.durable import fs
from game_memory.durable.folder_paths import folder_path
from game_memory.durable.lock import check_lock_timeout
from game_memory.durable.names import identity_hash, partition_hash
from game_memory.errors import (
    DerivedIndexError,
    GameMemoryError,
    InvalidArgumentError,
    PersistenceError,
    StoreBusyError,
    StoreClosedError,
)
from game_memory.index.engine import IndexEngine, check_capacity
from game_memory.index.entries import NO_VALUE, EntryRecord, EntryState, MemoryDigests, memory_hash
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.index.legacy import LegacyRecordError, has_legacy_index, migrate_legacy_index
from game_memory.index.partition import (
    FloatMatrix,
    IndexPartition,
    PartitionReplacedError,
    derived_error,
)
from game_memory.index.protocol import OrphanCandidates
from game_memory.model import GameMemory, MemoryEmbeddingIdentity
from game_memory.store.view import PartitionView

__all__ = ["FileVectorMemoryIndex"]

_LOG = logging.getLogger(__name__)

_RETRIES = 3


class FileVectorMemoryIndex:
    """The derived vector index of one save, in a folder of its own.

    Derived data: it may be deleted at any time and rebuilt from the save with
    ``VectorMemoryStore.rebuild``. Keep it outside the save folder (the front door refuses
    an index inside it). A reference (C#) flat index found in the folder is migrated on
    first use. Writers are serialized across processes by a lock; readers take none.

    Args:
        directory: The index folder (created if missing; no symbolic links).
        capacity: Most entries one owner partition may hold, 1..1,000,000.
        lock_timeout: Seconds to wait for another writer before ``StoreBusyError``.
        digest_cache_entries: Memory digests kept in memory (the join's hot data),
            1,000..10,000,000; the joins kept hold views of at most this many memories in
            all (a view keeps the memories it parsed alive: bound it with the store's
            ``cache_entries`` to bound both).
        create: Create the folder on first use. ``False`` (read-only tools): a folder that
            does not exist reads as an empty index and is not created.
        durable_writes: fsync every write (off by default: see :meth:`write`; compactions
            and resets are always replaced atomically and durably).

    Raises:
        InvalidArgumentError: an option is out of range.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        capacity: int = 100_000,
        lock_timeout: float = 30.0,
        digest_cache_entries: int = 200_000,
        create: bool = True,
        durable_writes: bool = False,
    ) -> None:
        check_lock_timeout(lock_timeout)
        if isinstance(capacity, bool) or not 1 <= capacity <= 1_000_000:
            raise InvalidArgumentError("capacity must be an integer from 1 to 1,000,000")
        if isinstance(digest_cache_entries, bool) or not (
            1_000 <= digest_cache_entries <= 10_000_000
        ):
            raise InvalidArgumentError(
                "digest_cache_entries must be an integer from 1,000 to 10,000,000"
            )
        self.directory = folder_path(
            directory, "directory", "the index folder's path (str or os.PathLike)"
        )
        self._capacity = capacity
        self._durable = durable_writes
        self._lock_timeout = lock_timeout
        self._create = create
        self._engine = IndexEngine(self.directory, capacity=capacity, lock_timeout=lock_timeout)
        self._digests = MemoryDigests(digest_cache_entries)
        self._joins = JoinCache(self._digests)
        self._open_lock = threading.Lock()
        self._opened = False
        self._closed = False

    def __repr__(self) -> str:
        return f"FileVectorMemoryIndex({str(self.directory)!r})"

    @property
    def folder(self) -> Path:
        """The index folder (absolute)."""
        return self.directory

    @property
    def capacity(self) -> int:
        """Most entries one owner partition may hold."""
        return self._capacity

    @property
    def engine(self) -> IndexEngine:
        """The blocking engine, opened (and legacy-migrated) on first use. Blocks.

        For tools and tests that inspect the files; recall goes through the protocol.
        """
        if self._closed:
            raise StoreClosedError(f"the vector index at {self.directory} is closed")
        if not self._opened:
            with self._open_lock:
                if not self._opened:
                    self._open_engine(create=self._create, drop_invalid=False)
        return self._engine

    def _open_engine(self, *, create: bool, drop_invalid: bool) -> int:
        """Open the engine and migrate the reference records found in the folder (call
        under the open lock; see ``legacy.migrate_legacy_index`` for ``drop_invalid``);
        how many records were migrated.

        Raises:
            LegacyRecordError: a reference record is invalid (without ``drop_invalid``).
            DerivedIndexError: the folder is damaged, or not writable (then named so).
        """
        migrated = 0
        try:
            self._engine.open(create=create)
            if self._engine.is_open and has_legacy_index(self.directory):
                migrated = migrate_legacy_index(self._engine, drop_invalid=drop_invalid)
        except DerivedIndexError as exc:
            refused = fs.refused_access(exc)
            if refused is None or not has_legacy_index(self.directory):
                raise
            # Not "damaged": the reference vectors are whole, they need a writable folder.
            raise DerivedIndexError(
                f"the index folder {self.directory} is not writable "
                f"({refused.strerror or refused}) and holds reference (C#) vector records, "
                "which are migrated into this index's files in that folder before recall can "
                "use them: make the folder writable (deleting it would lose those vectors, "
                "and a rebuild cannot write either); recall is lexical meanwhile"
            ) from exc
        self._opened = self._engine.is_open
        return migrated

    # -- reads --------------------------------------------------------------------------

    def join(self, view: PartitionView, identity: MemoryEmbeddingIdentity) -> PartitionJoin:
        """Match the entries of ``view``'s partition against it (cached; blocking)."""
        engine = self.engine
        session_hash = identity_hash(view.session_id)
        partition = engine.partition(session_hash, identity_hash(view.owner_id))
        # After the partition: a partition read whole has its session's record checked again.
        active = engine.session_code(session_hash, identity)
        return self._joins.join(view, partition, active)

    def session_joins(
        self,
        session_id: str,
        views: Sequence[PartitionView],
        identity: MemoryEmbeddingIdentity,
    ) -> list[PartitionJoin]:
        """Join every partition of a session, orphaned ones included (blocking)."""
        engine = self.engine
        session_hash = identity_hash(session_id)
        by_owner = {identity_hash(view.owner_id): view for view in views}
        owners = sorted(set(by_owner) | set(engine.owner_hashes(session_hash)))
        partitions = [engine.partition(session_hash, owner) for owner in owners]
        active = engine.session_code(session_hash, identity)
        return [
            self._joins.join(by_owner.get(owner), partition, active)
            for owner, partition in zip(owners, partitions, strict=True)
        ]

    def vectors(self, joined: PartitionJoin, identity: MemoryEmbeddingIdentity) -> FloatMatrix:
        """The active identity's rows of a joined partition (blocking).

        Raises:
            PartitionReplacedError: a compaction replaced the partition; join it again.
            DerivedIndexError: the rows are missing or damaged.
        """
        if joined.partition is None or joined.active is None:
            raise DerivedIndexError("the joined partition has no vectors of the active model")
        return self.engine.matrix(joined.partition, joined.active, identity.dimensions)

    def prefetch(self, session_id: str, owner_id: str, identity: MemoryEmbeddingIdentity) -> None:
        """Read the partition's entries and the active model's rows, and verify the rows not
        checked yet (and stamp them), as the search's :meth:`join` and :meth:`vectors` would:
        a copied save's first search at 100k then finds its 150 MB of rows checked while the
        save was read (95 -> 66 ms, measured). Never raises (the search names any damage)."""
        try:
            engine = self.engine
            session_hash = identity_hash(session_id)
            partition = engine.partition(session_hash, identity_hash(owner_id))
            active = engine.session_code(session_hash, identity)
            if partition is not None and active is not None:
                engine.matrix(partition, active, identity.dimensions)
        except (GameMemoryError, OSError, ValueError) as exc:
            _LOG.debug("prefetching a partition failed (%s); the search will meet it", exc)

    def cached_vectors(
        self, view: PartitionView, identity: MemoryEmbeddingIdentity
    ) -> tuple[PartitionJoin, FloatMatrix] | None:
        """The join and rows of ``view`` when this process holds both, current and checked
        (one ``lstat`` of the entries file; nothing read, no lock waited for; a join a few
        appends behind extended, ``JoinCache.extended_now``), else ``None``."""
        if self._closed or not self._opened:
            return None
        engine = self._engine
        session_hash = identity_hash(view.session_id)
        active = engine.known_session_code(session_hash, identity)
        if active is None:
            return None
        partition = engine.cached_partition(session_hash, identity_hash(view.owner_id))
        if partition is None:
            return None
        joined = self._joins.extended_now(view, partition, active)
        if joined is None:
            return None
        matrix = engine.cached_matrix(partition, active, identity.dimensions)
        return None if matrix is None else (joined, matrix)

    def is_ready(self, memory: GameMemory, identity: MemoryEmbeddingIdentity) -> bool:
        """Whether ``memory`` has a ready vector of ``identity`` for its content (blocking)."""
        engine = self.engine
        session_hash = identity_hash(memory.session_id)
        partition = engine.partition(session_hash, identity_hash(memory.owner_id))
        if partition is None:
            return False
        hashed, digest = self._digests.get(memory)
        record = partition.record(hashed)
        active = engine.session_code(session_hash, identity)
        return (
            record is not None
            and record.state is EntryState.READY
            and record.identity == active
            and record.digest == digest
        )

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> None:
        """Write ready entries for ``memories`` (blocking; under the index lock).

        Per partition, the rows are written before the entries that point at them, so a
        process killed at any instant leaves either the new entries with their rows or the
        old entries. They are not fsynced unless ``durable_writes``: this is derived data,
        and after a power loss a torn or missing entry, or a row that fails its checksum,
        is found and rebuilt like any other damage (the save's own append is durable).

        Raises:
            CapacityExceededError: an owner partition would exceed :attr:`capacity`.
            InvalidArgumentError: ``vectors`` is not one finite row of ``identity``'s width
                per memory.
        """
        rows = _rows(memories, vectors, identity)
        if rows is None:
            raise InvalidArgumentError(
                f"write takes one finite row of {identity.dimensions} values per memory; got "
                f"an array of shape {np.shape(vectors)} for {len(memories)} memories"
            )
        engine = self._writable()
        with engine.locked():
            code = engine.identity_code(identity, create=True)
            assert code is not None
            groups = _groups(memories)
            for session_hash in sorted({session for session, _ in groups}):
                # Before any partition is read: it may drop another model's vectors.
                engine.claim_session(session_hash, code)
            for (session_hash, owner_hash), positions in groups.items():
                digests = self._digests.get_many([memories[p] for p in positions])
                # First, what a rewrite a killed writer interrupted may have left.
                current = engine.tidy(
                    session_hash, owner_hash, engine.partition(session_hash, owner_hash)
                )
                self._check_capacity(current, digests)
                matrix = rows if len(positions) == len(rows) else rows[positions]
                engine.append_ready(
                    current,
                    session_hash,
                    owner_hash,
                    code,
                    matrix.astype(np.float32, copy=False),
                    digests,
                    self._durable,
                )

    def write_now(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> bool:
        """:meth:`write` of one partition's memories when it needs no wait: the index open,
        the identity known, the session folder's record of codes read and naming it
        (``session_codes.py``), the partition cached and current (nothing to read), the writer
        lock free, and writes not fsynced (``durable_writes`` off). Then the same records
        and rows are written as :meth:`write` writes them, and the same errors raised;
        otherwise nothing is done and ``False`` returned (call :meth:`write` off the loop).
        """
        if self._closed or not self._opened or self._durable or not memories:
            return False
        engine = self._engine
        code = engine.known_identity_code(identity)
        groups = _groups(memories)
        if code is None or len(groups) != 1:
            return False
        session_hash, owner_hash = next(iter(groups))
        verdict = engine.codes.cached(session_hash)
        if verdict is None or not verdict.vouches(code):
            return False  # write() records what the session folder's codes mean first
        rows = _rows(memories, vectors, identity)
        if rows is None:
            return False  # write() names the error
        if engine.cached_partition(session_hash, owner_hash) is None:
            return False
        lock = engine.locked()
        if not lock.try_acquire():
            return False
        try:
            current = engine.partition(session_hash, owner_hash)
            if not engine.is_tidy(session_hash, owner_hash, current):
                return False  # write() tidies it first (it may compact: not on the loop)
            digests = self._digests.get_many(memories)
            self._check_capacity(current, digests)
            engine.append_ready(
                current,
                session_hash,
                owner_hash,
                code,
                rows.astype(np.float32, copy=False),
                digests,
                False,
            )
        finally:
            lock.release()
        return True

    def mark(self, memories: Sequence[GameMemory], state: EntryState, code: str) -> None:
        """Record that ``memories`` have no usable vector (blocking; under the index lock).

        Raises:
            InvalidArgumentError: ``state`` is not ``FAILED`` or ``PENDING``, or ``code`` is
                not ASCII of at most 32 characters.
        """
        if state not in (EntryState.FAILED, EntryState.PENDING):
            raise InvalidArgumentError(f"mark records FAILED or PENDING entries, not {state!r}")
        if not code.isascii() or len(code) > 32:
            raise InvalidArgumentError("a mark's code is ASCII text of at most 32 characters")
        engine = self._writable()
        with engine.locked():
            for (session_hash, owner_hash), positions in _groups(memories).items():
                records = [
                    EntryRecord(state, NO_VALUE, NO_VALUE, *self._digests.get(memories[p]), code)
                    for p in positions
                ]
                engine.tidy(session_hash, owner_hash, engine.partition(session_hash, owner_hash))
                engine.append(session_hash, owner_hash, records, durable=self._durable)

    def _check_capacity(
        self, partition: IndexPartition | None, digests: list[tuple[bytes, bytes]]
    ) -> None:
        """Raise ``CapacityExceededError`` if entries for ``digests`` (each memory's hash and
        content digest) do not fit in ``partition`` (as read under the lock: the append
        writes on top of it)."""
        if partition is not None and partition.records + len(digests) <= self._capacity:
            # Live memories never outnumber the records read, so this fits without the
            # memory-to-slot dictionary (an append would otherwise build it: O(partition)).
            return
        new = sum(
            1 for hashed, _ in digests if partition is None or hashed not in partition.position
        )
        check_capacity(partition, new, self._capacity)

    # -- maintenance --------------------------------------------------------------------

    def verify(self, session_id: str, *, repair: bool) -> list[Exception]:
        """Verify a session's partitions (entries, rows, checksums); maybe delete the damaged.

        Blocking. A partition replaced by a concurrent compaction is read again. Damage no
        partition explains (a corrupt ``format.json`` or ``identities.json``) is reported
        as one error; with ``repair`` the whole index is emptied then (derived data: every
        session is rebuilt from its save), so a rebuild repairs it without help. Reference
        (C#) records that cannot be migrated are reported as one error too; with ``repair``
        the valid ones are migrated and the invalid ones deleted (their memories have no
        entry then: the rebuild embeds them), and the session's partitions are verified.
        """
        damaged: list[Exception] = []
        try:
            try:
                engine = self.engine
            except LegacyRecordError as exc:
                if not repair:
                    return [exc]
                damaged.append(exc)
                engine = self._migrate_dropping_invalid()
            engine.identities()
        except PartitionReplacedError:
            raise
        except LegacyRecordError:
            raise  # what the repair could not get past: its message says what to do
        except DerivedIndexError as exc:
            if repair:
                self._reset()
            return [*damaged, exc]
        damaged.extend(self._verify_partitions(engine, session_id, repair=repair))
        return damaged

    def _migrate_dropping_invalid(self) -> IndexEngine:
        """Migrate the valid reference records and delete the invalid ones (a rebuild's
        repair of records that stop every migration); the engine, opened.

        Raises:
            LegacyRecordError: a record could not be deleted (named, with what to do).
        """
        with self._open_lock:
            self._open_engine(create=self._create, drop_invalid=True)
        return self._engine

    def _verify_partitions(
        self, engine: IndexEngine, session_id: str, *, repair: bool
    ) -> list[Exception]:
        """:meth:`verify` of the session's partitions, the folder's own files found sound."""
        session_hash = identity_hash(session_id)
        damaged: list[Exception] = []
        for owner_hash in engine.owner_hashes(session_hash):
            for attempt in range(_RETRIES):
                try:
                    engine.verify_partition(session_hash, owner_hash)
                    break
                except PartitionReplacedError:
                    if attempt == _RETRIES - 1:
                        raise
                except DerivedIndexError as exc:
                    if repair:
                        with engine.locked():
                            engine.reset_partition(session_hash, owner_hash)
                    damaged.append(exc)
                    break
        if not damaged:
            damaged.extend(self._leftovers(engine, session_hash, repair=repair))
        return damaged

    def _leftovers(
        self, engine: IndexEngine, session_hash: str, *, repair: bool
    ) -> list[Exception]:
        """What interrupted rewrites left in the session's partitions (``IndexEngine.tidy``:
        files that may hold erased memories' vectors): removed with ``repair``, else
        reported. Seen without the lock, then confirmed under it (a rewrite in progress
        shows the same files); a report is skipped when the lock cannot be had in time,
        and made unconfirmed when it cannot be taken at all (a read-only folder)."""
        owners = engine.untidy_owners(session_hash)
        if not owners:
            return []
        if repair:
            with engine.locked():
                for owner_hash in engine.untidy_owners(session_hash):
                    partition = engine.partition(session_hash, owner_hash)
                    engine.tidy(session_hash, owner_hash, partition, sweep=True)
            return []
        try:
            with engine.locked():
                owners = engine.untidy_owners(session_hash)
        except StoreBusyError:
            return []
        except PersistenceError as exc:
            _LOG.debug("leftovers of a rewrite not confirmed under the lock (%s)", exc)
        if not owners:
            return []
        return [
            DerivedIndexError(
                f"{len(owners)} partition(s) of {engine.session_directory(session_hash)} hold "
                "files an interrupted rewrite left (they may hold erased memories' vectors); "
                "erasing again or a rebuild removes them"
            )
        ]

    def _reset(self) -> None:
        """Empty the whole index and start from a fresh engine (no cached partitions)."""
        with self._open_lock:
            try:
                fs.ensure_directory(self._engine.data)
            except PersistenceError as exc:
                raise derived_error(exc) from exc
            with self._engine.locked():
                self._engine.reset()
            self._engine = IndexEngine(
                self.directory, capacity=self._capacity, lock_timeout=self._lock_timeout
            )
            self._joins = JoinCache(self._digests)
            self._opened = False

    def orphans(self, session_id: str, views: Sequence[PartitionView]) -> OrphanCandidates:
        """The session's entries whose memory is absent from ``views`` (blocking)."""
        engine = self.engine
        session_hash = identity_hash(session_id)
        alive = self._alive(views)
        entries: dict[object, dict[bytes, object]] = {}
        for owner_hash in engine.owner_hashes(session_hash):
            partition = engine.partition(session_hash, owner_hash)
            if partition is None:
                continue
            known = alive.get(owner_hash, set())
            found: dict[bytes, object] = {}
            for hashed in partition.position:
                if hashed not in known:
                    found[hashed] = partition.record(hashed)
            entries[owner_hash] = found
        return OrphanCandidates(session_id, entries)

    def remove_orphans(self, candidates: OrphanCandidates, views: Sequence[PartitionView]) -> int:
        """Delete confirmed orphans and compact the session (blocking; under the lock).

        The session folder is listed once (``IndexEngine.session_files``), and only the
        partitions with something to drop are rewritten (``IndexEngine.compact``): the cost
        grows with the session's NPCs, not with their square.
        """
        engine = self.engine
        if not engine.is_open:
            return 0  # an index never written holds no orphans
        session_hash = identity_hash(candidates.session_id)
        alive = self._alive(views)
        removed = 0
        with engine.locked():
            for owner_hash, names in sorted(engine.session_files(session_hash).items()):
                partition = engine.partition(session_hash, owner_hash)
                if partition is None:
                    # No entries file, yet files of the owner: what a reset or an erase
                    # killed midway left (row files that may hold erased vectors, a
                    # rewrite mark). No writer is between its steps under the lock, so
                    # they are leftovers: without this the session read as damaged after
                    # every rebuild, and no rebuild repaired it.
                    if names:
                        engine.reset_partition(session_hash, owner_hash, names)
                    continue
                known = alive.get(owner_hash, set())
                listed = candidates.entries.get(owner_hash, {})
                orphans = [
                    hashed
                    for hashed, record in listed.items()
                    if hashed not in known and partition.record(hashed) == record
                ]
                if orphans:
                    tombstones = [
                        EntryRecord(EntryState.DELETED, NO_VALUE, NO_VALUE, h, bytes(32), "")
                        for h in orphans
                    ]
                    engine.append(session_hash, owner_hash, tombstones)
                    removed += len(orphans)
                engine.compact(
                    session_hash, owner_hash, set(range(len(engine.identities()))), names
                )
        return removed

    def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> None:
        """Drop entries and rows of a session, an owner or listed memories (blocking, locked).

        A whole partition's files are deleted; listed memories get tombstones and the
        partition is compacted, which rewrites its row files without their vectors. An
        index opened without ``create`` whose folder does not exist holds nothing to drop:
        the erase does nothing (and creates nothing). The session folder is listed once,
        whatever the number of partitions (``IndexEngine.session_files``).
        """
        engine = self.engine
        if not engine.is_open:
            return
        session_hash = identity_hash(session_id)
        with engine.locked():
            files = engine.session_files(session_hash)  # orphan row files included
            owners = sorted(files)
            if owner_id is not None:
                owner_hash = identity_hash(owner_id)
                owners = [owner_hash] if owner_hash in files else []
            for owner_hash in owners:
                names = files[owner_hash]
                if memory_ids is None:
                    engine.reset_partition(session_hash, owner_hash, names)
                    continue
                tombstones = [
                    EntryRecord(
                        EntryState.DELETED, NO_VALUE, NO_VALUE, memory_hash(m), bytes(32), ""
                    )
                    for m in memory_ids
                ]
                engine.append(session_hash, owner_hash, tombstones)
                engine.compact(
                    session_hash, owner_hash, set(range(len(engine.identities()))), names
                )
            if owner_id is None and memory_ids is None:
                self._drop_session_folder(session_hash)

    def _drop_session_folder(self, session_hash: str) -> None:
        """After an erase of a whole session: delete its folder's record of identity codes
        and the folder, if nothing else is left in it (under the lock). A game that makes
        and deletes save slots for weeks kept one folder per slot it ever had, named by
        the hash of its id, which nothing reclaimed."""
        engine = self.engine
        folder = engine.session_directory(session_hash)
        try:
            engine.codes.drop(session_hash)
            os.rmdir(folder)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return  # stamps or files of another kind: the folder stays, harmless
            raise DerivedIndexError(
                f"could not remove the erased session's folder {folder} "
                f"({exc.strerror or exc}); it holds no vectors: delete it"
            ) from exc
        with contextlib.suppress(OSError):
            fs.fsync_directory(engine.data)

    def _writable(self) -> IndexEngine:
        """The engine, for a write: an index opened without ``create`` whose folder does
        not exist refuses writes with a clear error (instead of a missing lock file)."""
        engine = self.engine
        if not engine.is_open:
            raise DerivedIndexError(
                f"the index folder {self.directory} does not exist and this index was opened "
                "without create: open it with create=True to write vectors"
            )
        return engine

    def _alive(self, views: Sequence[PartitionView]) -> dict[str, set[bytes]]:
        """``sha256(memory_id)`` of every memory of ``views``, per owner hash."""
        return {
            identity_hash(view.owner_id): {h for h, _ in self._digests.get_many(view.memories)}
            for view in views
        }

    async def migrate_legacy_index(self) -> int:
        """Migrate a reference flat index found in the folder; return how many records.

        Also done on first use. Idempotent: the migrated files are removed, so a second
        call finds nothing and returns 0.

        Raises:
            DerivedIndexError: a reference record is invalid (nothing is migrated then; a
                rebuild migrates the valid ones and deletes the invalid ones), or the
                folder is not writable.
            StoreClosedError: the index was closed.
        """
        if self._closed:
            raise StoreClosedError(f"the vector index at {self.directory} is closed")

        def migrate() -> int:
            with self._open_lock:
                return self._open_engine(create=True, drop_invalid=False)

        return await asyncio.to_thread(migrate)

    async def aclose(self) -> None:
        """Close the index; idempotent. Stamps the partitions this object wrote to as
        checked (``IndexEngine.stamp_written``: their files fsynced, then every row not
        checked yet checked), so the next open of the unchanged files checks nothing, and
        writes the int8 codes of large partitions' rows that are missing or behind
        (``IndexEngine.keep_codes``), so the next open's first recall scores from them."""
        if self._closed:
            return
        if self._opened:
            await asyncio.to_thread(self._engine.close_upkeep)
        self._closed = True


def _rows(
    memories: Sequence[GameMemory], vectors: FloatMatrix, identity: MemoryEmbeddingIdentity
) -> np.ndarray | None:
    """``vectors`` as an array when it is one finite row of ``identity``'s width per memory,
    else ``None``."""
    rows = np.asarray(vectors)
    if rows.shape != (len(memories), identity.dimensions) or not np.isfinite(rows).all():
        return None
    return rows


def _groups(memories: Sequence[GameMemory]) -> dict[tuple[str, str], list[int]]:
    """Positions of ``memories`` per partition (session and owner hashes), in order."""
    by_ids: dict[tuple[str, str], list[int]] = {}
    for position, memory in enumerate(memories):
        by_ids.setdefault((memory.session_id, memory.owner_id), []).append(position)
    # One hash per partition, not two per memory (a batch is mostly one or a few owners),
    # memoized (``partition_hash``: the ids repeat on every write).
    return {(partition_hash(s), partition_hash(o)): found for (s, o), found in by_ids.items()}
