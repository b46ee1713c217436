"""Explicit rebuild of a session's vectors: bounded, resumable, safe beside appends.

A function over explicit collaborators (the save, the index, the embedder, options), like
recall: the front door only guards that one rebuild of a session runs at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from game_memory.durable.fs import refused_access
from game_memory.durable.names import identity_hash
from game_memory.embedding.embedder import Embedder
from game_memory.errors import CapacityExceededError, DerivedIndexError, StoreClosedError
from game_memory.index.entries import EntryState, memory_hash
from game_memory.index.join import PartitionJoin
from game_memory.index.protocol import VectorIndex
from game_memory.model import (
    DiagnosticSeverity,
    GameMemory,
    GameMemoryQuery,
    MemoryEmbeddingIdentity,
    VectorMemoryStatus,
)
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import Report, Runner, report_failure
from game_memory.store.protocol import GameMemoryStore
from game_memory.store.view import PartitionView

__all__ = ["index_status", "rebuild_session", "session_views", "still_saved", "write_still_saved"]

logger = logging.getLogger("game_memory.index")


async def _notify(progress: Callable[[int, int], object] | None, done: int, total: int) -> None:
    if progress is not None:
        result = progress(done, total)
        if inspect.isawaitable(result):
            await result


async def session_views(
    store: GameMemoryStore, session_id: str, options: VectorMemoryStoreOptions
) -> tuple[PartitionView, ...]:
    """Every partition view of a session (one bounded authoritative read).

    Raises:
        CapacityExceededError: the session holds more than ``maximum_index_entries``
            (named so: the store's own message names its snapshot parameter, which the
            caller of a status or a rebuild never set).
    """
    query = GameMemoryQuery(session_id=session_id, limit=0)
    bound = options.maximum_index_entries
    try:
        snapshot = await store.snapshot(query, maximum_entries=bound)
    except CapacityExceededError as exc:
        if exc.bound != "maximum_snapshot_entries":
            raise  # another bound, named so by the store (its maximum_entries, a database's
            # statement_timeout): not this one
        raise CapacityExceededError(
            f"session {session_id!r} holds more than {bound:,} memories, the most a status "
            "or a rebuild of a whole session reads (VectorMemoryStoreOptions."
            "maximum_index_entries); open the front door with a larger one (the CLI and "
            "the sidecar use the default), or erase what the game no longer needs. Recalls "
            "of one NPC are not affected",
            bound="maximum_index_entries",
        ) from exc
    return snapshot.views


async def index_status(
    store: GameMemoryStore,
    index: VectorIndex,
    identity: MemoryEmbeddingIdentity,
    session_id: str,
    options: VectorMemoryStoreOptions,
    run: Runner,
) -> VectorMemoryStatus:
    """Count ready, pending, stale and orphan vectors of a session; derive its state.

    Reads the session's snapshot and verifies its index partitions (entries, and every
    row read again with its checksum, each call: ``VectorIndex.verify``). A damaged index
    is derived data gone bad, not an error of the call: the status is ``DEGRADED`` with
    every memory of the session pending (none of its vectors is trusted), the reason is
    logged (logger ``game_memory.index``, a warning), and ``rebuild`` repairs it without
    help.

    Orphans are counted against a read of the save made *after* the index was read: the
    first read comes before it, so a memory another task or process saved and indexed in
    between has an entry but no place in that read, and counting it made a status taken
    while the game remembers read ``DEGRADED`` (and a rebuild's final status fail). Only
    when the joins find orphans is the save read again (no cost otherwise).
    """
    views = await session_views(store, session_id, options)
    try:
        damaged = await run(lambda: index.verify(session_id, repair=False))
        joins = (
            [] if damaged else await run(lambda: index.session_joins(session_id, views, identity))
        )
    except DerivedIndexError as exc:
        damaged = [exc]
    if damaged:
        reasons = "; ".join(str(error) for error in damaged[:3])
        if any(refused_access(error) is not None for error in damaged):
            # Not damage a rebuild repairs: it could not write either.
            logger.warning(
                "the vector index of session %r cannot be used: its folder is not writable "
                "(%s); recall is lexical for it until the folder is made writable",
                session_id,
                reasons,
            )
        else:
            logger.warning(
                "the vector index of session %r is damaged (%s); recall is lexical for it "
                "until a rebuild ('game-memory rebuild --force' or memory.rebuild) repairs it",
                session_id,
                reasons,
            )
        total = sum(len(view) for view in views)
        return VectorMemoryStatus.from_counts(
            identity, ready=0, pending=total, stale=0, orphans=0 if total else len(damaged)
        )
    orphans = sum(j.orphans for j in joins)
    if orphans:
        current = await session_views(store, session_id, options)
        orphans = await run(lambda: _still_orphaned(joins, current))
    return VectorMemoryStatus.from_counts(
        identity,
        ready=sum(j.ready for j in joins),
        pending=sum(j.pending for j in joins),
        stale=sum(j.stale for j in joins),
        orphans=orphans,
    )


def _still_orphaned(joins: Sequence[PartitionJoin], current: Sequence[PartitionView]) -> int:
    """How many orphan entries of ``joins`` name a memory absent from ``current`` as well
    (blocking: it hashes the ids of the partitions with orphans).

    ``current`` must be read after the index the joins read: an entry is written after its
    memory is saved, so every memory an entry then named and the save held is in it. An
    entry still absent is a true orphan (an erase whose index step has not run yet, or
    never ran). A memory of a join's own view stays counted where the join put it (ready,
    pending, stale), never as an orphan, even if an erase dropped it since.
    """
    later = {identity_hash(view.owner_id): view for view in current}
    count = 0
    for joined in joins:
        partition = joined.partition
        if not joined.orphans or partition is None:
            continue
        held = set(joined.view.memory_ids) if joined.view is not None else set()
        newer = later.get(partition.owner_hash)
        if newer is not None:
            held.update(newer.memory_ids)
        saved = {memory_hash(memory_id) for memory_id in held}
        count += sum(1 for hashed in partition.position if hashed not in saved)
    return count


async def rebuild_session(
    session_id: str,
    *,
    store: GameMemoryStore,
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
    force: bool,
    progress: Callable[[int, int], object] | None,
    gate: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
) -> VectorMemoryStatus:
    """Rebuild one session (see ``VectorMemoryStore.rebuild``).

    0. Verify every index partition of the session (entries, rows and row checksums);
       delete the damaged ones (derived data) and report ``memory_vector_index_reset``.
    1. Read the session's snapshot; pick every memory without a ready vector of the
       active identity for its current content (all of them with ``force``).
    2. Embed them in batches; each batch's vectors are written before the next starts, so
       an interruption keeps the work done and a rerun resumes where it stopped. Just
       before a batch is written, holding ``gate()`` as an append holds the front door's
       erase gate (an erase of the same front door waits, and is waited for), the
       batch's memories are read again from the save: one erased while the batch was
       embedded, or replaced by another memory under its id, is not written (its vector
       would outlive its erase, or stand for content the save no longer holds).
    3. On a failed batch: report, mark the batch's memories that had no ready vector as
       failed (a forced rebuild never loses a good vector), sweep (4), stop.
    4. After the last batch, sweep orphans in three steps: list the index entries that
       are absent from a read of the save made after that batch was written (candidates;
       a memory erased while its batch was embedded is absent from it, though its vector
       was just written); *then* re-read the save; then delete each candidate that is
       still absent from that fresh read and whose entry has not changed since it was
       listed (see ``VectorIndex.remove_orphans``). Finally the session's partitions are
       compacted.

    The progress callback runs on the event loop; an exception it raises ends the rebuild
    (the batches already written stay written).
    """
    identity = embedder.identity
    damaged = await run(lambda: index.verify(session_id, repair=True))
    for error in damaged:
        await report_failure(
            report,
            "memory_vector_index_reset",
            DiagnosticSeverity.WARNING,
            "A damaged partition of the vector index was deleted; this rebuild embeds its "
            "memories again.",
            session_id=session_id,
            error=error,
        )
    views = await session_views(store, session_id, options)
    joins = await run(lambda: index.session_joins(session_id, views, identity))
    ready: set[int] = set()
    for joined in joins:
        if joined.view is not None:
            ready.update(id(joined.view.memories[p]) for p in joined.positions.tolist())
    todo: list[GameMemory] = [
        memory for view in views for memory in view.ordered if force or id(memory) not in ready
    ]
    total = len(todo)
    await _notify(progress, 0, total)
    batch_size = options.rebuild_batch_size
    completed = True
    for start in range(0, total, batch_size):
        batch = todo[start : start + batch_size]
        try:
            vectors = await embedder.embed_documents(batch, f"rebuild of session {session_id!r}")
            await write_still_saved(session_id, batch, vectors, store, index, identity, run, gate)
        except (asyncio.CancelledError, StoreClosedError):
            raise  # the caller's doing, not a failed batch: nothing to record
        except Exception as exc:
            completed = False
            await report_failure(
                report,
                "memory_embedding_rebuild_failed",
                DiagnosticSeverity.ERROR,
                "A rebuild batch failed; its memories stay lexically recallable. Run the "
                "rebuild again to resume.",
                session_id=session_id,
                owner_id=batch[0].owner_id,
                memory_id=batch[0].memory_id,
                error=exc,
            )
            await _mark_failed(index, run, report, session_id, batch, ready)
            break
        await _notify(progress, min(start + batch_size, total), total)
    # Candidates are listed against a read of the save made *after* the last batch was
    # written, not against the first read: a memory erased (by another process) while its
    # batch was embedded had its vector written after the erase dropped it, and only a
    # later read lacks it. Any read made before the listing keeps the sweep safe. After a
    # failed batch too: what was written stays, and so would such a vector.
    listed = await session_views(store, session_id, options)
    candidates = await run(lambda: index.orphans(session_id, listed))
    current = await session_views(store, session_id, options)
    await run(lambda: index.remove_orphans(candidates, current))
    status = await index_status(store, index, identity, session_id, options, run)
    if completed and not status.requires_rebuild:
        await report_failure(
            report,
            "memory_embedding_rebuild_completed",
            DiagnosticSeverity.INFORMATION,
            "The rebuild finished; every memory of the session has a vector of the active model.",
            session_id=session_id,
        )
    return status


async def write_still_saved(
    session_id: str,
    batch: Sequence[GameMemory],
    vectors: np.ndarray,
    store: GameMemoryStore,
    index: VectorIndex,
    identity: MemoryEmbeddingIdentity,
    run: Runner,
    gate: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None,
) -> int:
    """Write the vectors of the batch's memories the save still holds as they were embedded,
    read again under ``gate()`` as an append holds the front door's erase gate (an erase
    waits, and is waited for); how many were written. A memory erased while its batch was
    embedded, or replaced under its id, gets no vector (it would outlive its erase, or stand
    for content the save no longer holds). A rebuild's batches and a catch-up's
    (``catch_up.py``) are written here."""
    async with gate() if gate is not None else contextlib.nullcontext():
        kept = await still_saved(store, session_id, batch)
        if kept:
            chosen = [batch[position] for position in kept]
            rows = vectors[kept] if len(kept) < len(batch) else vectors
            await run(partial(index.write, chosen, rows, identity))
    return len(kept)


async def still_saved(
    store: GameMemoryStore, session_id: str, batch: Sequence[GameMemory]
) -> list[int]:
    """The positions in ``batch`` of the memories the save still holds as they are (same
    id, same content), read now."""
    owners: dict[str, list[int]] = {}
    for position, memory in enumerate(batch):
        owners.setdefault(memory.owner_id, []).append(position)
    kept: list[int] = []
    for owner_id, positions in owners.items():
        query = GameMemoryQuery(session_id=session_id, owner_id=owner_id, limit=0)
        views = (await store.snapshot(query)).views
        if not views:
            continue
        view = views[0]
        for position in positions:
            memory = batch[position]
            held = view.positions.get(memory.memory_id)
            if held is None:
                continue
            saved = view.memories[held]
            if saved is memory or saved == memory:  # the same object: no field compared
                kept.append(position)
    return sorted(kept)


async def _mark_failed(
    index: VectorIndex,
    run: Runner,
    report: Report,
    session_id: str,
    batch: Sequence[GameMemory],
    ready: set[int],
) -> None:
    """Record a failed batch in the index; memories that had a ready vector keep it."""
    unready = [memory for memory in batch if id(memory) not in ready]
    try:
        await run(partial(index.mark, unready, EntryState.FAILED, "embedding_rebuild_failed"))
    except Exception as write_error:
        await report_failure(
            report,
            "memory_vector_index_write_failed",
            DiagnosticSeverity.ERROR,
            "The rebuild could not record its failed batch in the vector index.",
            session_id=session_id,
            memory_id=batch[0].memory_id,
            error=write_error,
        )
        raise DerivedIndexError(
            f"the rebuild of session {session_id!r} failed, and the vector index could not "
            f"record which batch ({write_error}); fix what stopped the index (an unwritable "
            "index folder, an unreachable database) and run the rebuild again: it resumes"
        ) from write_error
