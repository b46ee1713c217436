"""Explicit rebuild of a session's vectors: bounded, resumable, safe beside appends."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from game_memory.durable.names import identity_hash
from game_memory.errors import DerivedIndexError
from game_memory.index.entries import NO_VALUE, EntryRecord, EntryState
from game_memory.index.partition import PartitionReplacedError
from game_memory.model import GameMemory
from game_memory.model.diagnostics import DiagnosticSeverity
from game_memory.model.status import VectorMemoryStatus
from game_memory.store.view import PartitionView

if TYPE_CHECKING:
    from game_memory.memory import VectorMemoryStore

__all__ = ["rebuild_session"]


async def _notify(progress: Callable[[int, int], object] | None, done: int, total: int) -> None:
    if progress is not None:
        result = progress(done, total)
        if inspect.isawaitable(result):
            await result


async def rebuild_session(
    store: VectorMemoryStore,
    session_id: str,
    *,
    force: bool,
    progress: Callable[[int, int], object] | None,
) -> VectorMemoryStatus:
    """Rebuild one session (see ``VectorMemoryStore.rebuild``).

    0. Verify every index partition of the session (entries, rows and row checksums);
       delete the damaged ones (derived data) and report ``memory_vector_index_reset``.
    1. Read the session's snapshot; pick every memory without a ready vector of the
       active identity for its current content (all of them with ``force``).
    2. Embed them in batches; each batch's vectors are written before the next starts, so
       an interruption keeps the work done and a rerun resumes where it stopped.
    3. On a failed batch: report, mark the batch's memories that had no ready vector as
       failed (a forced rebuild never loses a good vector), stop.
    4. After the last batch, sweep orphans in three steps: list the index entries that
       are absent from the snapshot of step 1 (candidates); *then* re-read the save; then,
       under the index lock, delete each candidate that is still absent from that fresh
       read and whose entry has not changed since it was listed. A memory whose vector is
       in the index was appended to the save before its vector was written, so a candidate
       absent from a later read of the (append-only) save is a true orphan, and a memory
       appended meanwhile keeps its vector. Finally compact the session's partitions.

    The progress callback runs on the event loop; an exception it raises ends the rebuild
    (the batches already written stay written).
    """
    damaged = await store.run(lambda: _reset_damaged(store, session_id))
    for error in damaged:
        await store.report(
            "memory_vector_index_reset",
            DiagnosticSeverity.WARNING,
            "A damaged partition of the vector index was deleted; this rebuild embeds its "
            "memories again.",
            session_id=session_id,
            error=error,
        )
    views = await store.session_views(session_id)
    joins = await store.run(lambda: store.joins(session_id, views))
    ready: set[int] = set()
    for joined in joins:
        if joined.view is not None:
            ready.update(id(joined.view.memories[p]) for p in joined.positions.tolist())
    todo: list[GameMemory] = [
        memory for view in views for memory in view.ordered if force or id(memory) not in ready
    ]
    total = len(todo)
    await _notify(progress, 0, total)
    batch_size = store.options.rebuild_batch_size
    completed = True
    for start in range(0, total, batch_size):
        batch = todo[start : start + batch_size]
        try:
            vectors = await store.embed_documents(batch, f"rebuild of session {session_id!r}")
            await store.run(partial(store.write_vectors, batch, vectors))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            completed = False
            await store.report(
                "memory_embedding_rebuild_failed",
                DiagnosticSeverity.ERROR,
                "A rebuild batch failed; its memories stay lexically recallable. Run the "
                "rebuild again to resume.",
                session_id=session_id,
                owner_id=batch[0].owner_id,
                memory_id=batch[0].memory_id,
                error=exc,
            )
            try:
                # Memories that already had a ready vector (a forced rebuild) keep it.
                unready = [memory for memory in batch if id(memory) not in ready]
                failed = partial(
                    store.write_markers, unready, EntryState.FAILED, "embedding_rebuild_failed"
                )
                await store.run(failed)
            except Exception as write_error:
                await store.report(
                    "memory_vector_index_write_failed",
                    DiagnosticSeverity.ERROR,
                    "The rebuild could not record its failed batch in the vector index.",
                    session_id=session_id,
                    memory_id=batch[0].memory_id,
                    error=write_error,
                )
                raise DerivedIndexError(
                    f"the rebuild of session {session_id!r} failed while recording rebuild "
                    "state; delete the index folder and rebuild"
                ) from write_error
            break
        await _notify(progress, min(start + batch_size, total), total)
    if completed:
        candidates = await store.run(lambda: _orphan_candidates(store, session_id, views))
        current = await store.session_views(session_id)
        await store.run(lambda: _sweep(store, session_id, candidates, current))
    status = await store.get_status(session_id)
    if not status.requires_rebuild:
        await store.report(
            "memory_embedding_rebuild_completed",
            DiagnosticSeverity.INFORMATION,
            "The rebuild finished; every memory of the session has a vector of the active model.",
            session_id=session_id,
        )
    return status


def _reset_damaged(store: VectorMemoryStore, session_id: str) -> list[DerivedIndexError]:
    """Delete the session's damaged index partitions; return what was wrong (blocking)."""
    engine = store.index.engine
    session_hash = identity_hash(session_id)
    damaged: list[DerivedIndexError] = []
    for owner_hash in engine.owner_hashes(session_hash):
        for attempt in range(3):
            try:
                engine.verify_partition(session_hash, owner_hash)
                break
            except PartitionReplacedError:
                if attempt == 2:
                    raise
            except DerivedIndexError as exc:
                with engine.locked():
                    engine.reset_partition(session_hash, owner_hash)
                damaged.append(exc)
                break
    return damaged


def _alive(store: VectorMemoryStore, views: list[PartitionView]) -> dict[str, set[bytes]]:
    """``sha256(memory_id)`` of every memory of ``views``, per owner hash."""
    return {
        identity_hash(view.owner_id): {store_hash(store, m) for m in view.memories}
        for view in views
    }


def _orphan_candidates(
    store: VectorMemoryStore, session_id: str, views: list[PartitionView]
) -> dict[str, dict[bytes, EntryRecord]]:
    """Index entries of the session absent from ``views``, per owner hash (blocking)."""
    engine = store.index.engine
    session_hash = identity_hash(session_id)
    alive = _alive(store, views)
    candidates: dict[str, dict[bytes, EntryRecord]] = {}
    for owner_hash in engine.owner_hashes(session_hash):
        partition = engine.partition(session_hash, owner_hash)
        if partition is None:
            continue
        known = alive.get(owner_hash, set())
        found: dict[bytes, EntryRecord] = {}
        for memory_hash in partition.position:
            if memory_hash not in known:
                record = partition.record(memory_hash)
                assert record is not None
                found[memory_hash] = record
        candidates[owner_hash] = found
    return candidates


def _sweep(
    store: VectorMemoryStore,
    session_id: str,
    candidates: dict[str, dict[bytes, EntryRecord]],
    views: list[PartitionView],
) -> None:
    """Delete confirmed orphans and compact the session's partitions (blocking, locked).

    ``views`` must have been read *after* ``candidates`` were listed.
    """
    engine = store.index.engine
    session_hash = identity_hash(session_id)
    alive = _alive(store, views)
    with engine.locked():
        for owner_hash in engine.owner_hashes(session_hash):
            partition = engine.partition(session_hash, owner_hash)
            if partition is None:
                continue
            known = alive.get(owner_hash, set())
            orphans = [
                memory_hash
                for memory_hash, listed in candidates.get(owner_hash, {}).items()
                if memory_hash not in known and partition.record(memory_hash) == listed
            ]
            if orphans:
                engine.append(
                    session_hash,
                    owner_hash,
                    [
                        EntryRecord(EntryState.DELETED, NO_VALUE, NO_VALUE, h, bytes(32), "")
                        for h in orphans
                    ],
                )
            engine.compact(session_hash, owner_hash, set(range(len(engine.identities()))))


def store_hash(store: VectorMemoryStore, memory: GameMemory) -> bytes:
    """``sha256(memory_id)`` of a memory, through the store's digest cache."""
    return store._digests.get(memory)[0]
