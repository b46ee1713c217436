"""The front door's bulk append: one atomic batch into the save, then batched embedding.

``VectorMemoryStore.append_many`` calls :func:`append_many` with its collaborators. The
order is the single append's, per batch (a summary in it, a memory with ``consolidates``,
checked first as ``consolidate`` checks one): the save first (``GameMemoryStore.append_many``:
all or nothing, durable when it returns), then the derived index, then the retention
policy, so what the save holds never depends on the index:

1. the batch goes into the authoritative store as one atomic batch;
2. (hybrid mode) the memories that need a vector (the new ones, and stored ones whose
   vector is not ready) are embedded ``embedding_batch`` at a time, one provider call per
   chunk, and written to the index; a chunk that fails is reported
   (``memory_embedding_append_failed``, the chunk's first memory named) and its memories
   stay saved and lexically recallable, pending in the index;
3. every owner the batch added to is brought back within ``maximum_memories_per_owner``
   once (not once per memory), so a batch that takes an owner past the bound ends within
   it (down to 90% of it), like the same memories appended one by one. The owner's last
   new memory of the batch is never evicted (a single append's rule: the memory just
   appended stays); other memories of the batch may be, by the same value order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from game_memory.embedding.embedder import Embedder
from game_memory.forgetting import evict_over_bound, report_index_failure
from game_memory.index.protocol import VectorIndex
from game_memory.model import GameMemory, MemoryEmbeddingIdentity
from game_memory.model.memory import memory_list
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import Report, Runner
from game_memory.store.lifecycle import checked_summary
from game_memory.store.protocol import GameMemoryStore
from game_memory.write_guards import EraseGate, EvictionGuard

__all__ = ["EMBEDDING_BATCH", "append_many"]

#: Memories embedded per provider call by a bulk append.
EMBEDDING_BATCH = 256


async def append_many(
    memories: Sequence[GameMemory],
    store: GameMemoryStore,
    index: VectorIndex | None,
    embedder: Embedder | None,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
    guard: EvictionGuard,
    gate: EraseGate,
    embedding_batch: int = EMBEDDING_BATCH,
) -> list[bool]:
    """Save a batch atomically, index it in batches, apply the retention policy.

    Returns:
        One result per memory, as the store's ``append_many`` gives them.

    Raises:
        Everything the store's ``append_many`` raises (then nothing is saved or indexed);
        ``EmbeddingUnavailableError`` only with ``fail_when_embedding_unavailable`` (the
        batch is saved by then).
    """
    batch = memory_list(memories)
    await _check_summaries(batch, store)
    if options.maximum_memories_per_owner is None:
        async with gate.appending():  # no erase between the save and the index writes
            created = await store.append_many(batch)
            if embedder is not None and index is not None:
                await _index_batch(
                    batch, created, index, embedder, options, run, report, embedding_batch
                )
        return created
    # The retention policy: the batch is in flight from before the save until indexed, so
    # that no other append's eviction erases its memories in between (``EvictionGuard``).
    with guard.flying(memory for memory in batch if isinstance(memory, GameMemory)) as flight:
        saved: list[bool] | None = None
        try:
            async with gate.appending():  # no erase between the save and the index writes
                saved = await store.append_many(batch)
                if embedder is not None and index is not None:
                    await _index_batch(
                        batch, saved, index, embedder, options, run, report, embedding_batch
                    )
        finally:
            if saved is not None:  # out of the gate: each eviction is an erase of its own
                owners: dict[tuple[str, str], GameMemory] = {}
                for memory, new in zip(batch, saved, strict=True):
                    if new:  # the owner's last new memory of the batch is never evicted
                        owners[(memory.session_id, memory.owner_id)] = memory
                # Indexed: the rest of the batch may be evicted (by its value, as any).
                kept = {id(memory) for memory in owners.values()}
                flight.land(memory for memory in batch if id(memory) not in kept)
                for memory in owners.values():
                    await evict_over_bound(memory, store, index, options, run, report, guard)
    return saved


async def _check_summaries(batch: list[GameMemory], store: GameMemoryStore) -> None:
    """Check the batch's summaries (memories with ``consolidates``) as ``consolidate``
    checks one: a reflection of its owner, of sources the owner holds or the batch adds
    (in any order). Without this a plain append could retract any memory, or an id no
    memory has yet (hiding the memory later appended under it).

    Raises:
        InvalidArgumentError, MemoryNotFoundError: see ``checked_summary``.
    """
    summaries = [m for m in batch if isinstance(m, GameMemory) and m.consolidates]
    if not summaries:
        return
    owners = {(summary.session_id, summary.owner_id) for summary in summaries}
    for session_id, owner_id in owners:
        owned = await store.enumerate(session_id, owner_id)
        stored = {memory.memory_id: memory for memory in owned}
        moments = {memory.memory_id: memory.moment for memory in owned}
        moments.update(
            (memory.memory_id, memory.moment)
            for memory in batch
            if isinstance(memory, GameMemory)
            and memory.session_id == session_id
            and memory.owner_id == owner_id
        )
        for summary in summaries:
            if (summary.session_id, summary.owner_id) == (session_id, owner_id):
                checked_summary(
                    session_id,
                    owner_id,
                    summary.consolidates,
                    summary,
                    moments.get,
                    stored.get(summary.memory_id),
                )


async def _index_batch(
    batch: list[GameMemory],
    created: list[bool],
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
    embedding_batch: int,
) -> None:
    identity = embedder.identity
    wanted: dict[tuple[str, str, str], GameMemory] = {}
    for memory, new in zip(batch, created, strict=True):
        key = (memory.session_id, memory.owner_id, memory.memory_id)
        if key not in wanted and (new or not await _ready(index, memory, identity, run)):
            wanted[key] = memory
    pending = _by_partition(wanted.values())
    for start in range(0, len(pending), embedding_batch):
        chunk = pending[start : start + embedding_batch]
        await _index_chunk(chunk, index, embedder, options, run, report)


def _by_partition(memories: Iterable[GameMemory]) -> list[GameMemory]:
    """``memories`` grouped by owner partition (owners in order of first appearance), each
    owner's memories in the batch's order.

    The index writes a chunk once per partition it touches (a file append and its
    columns grown each time), so a batch interleaving many NPCs, as a game's import or a
    world's tick does, wrote about one memory per partition per chunk: 100k memories over
    200 NPCs made 78k partition appends of one or two entries. Grouped, a chunk spans a
    few partitions.
    """
    owners: dict[tuple[str, str], list[GameMemory]] = {}
    for memory in memories:
        owners.setdefault((memory.session_id, memory.owner_id), []).append(memory)
    return [memory for group in owners.values() for memory in group]


async def _ready(
    index: VectorIndex, memory: GameMemory, identity: MemoryEmbeddingIdentity, run: Runner
) -> bool:
    """Whether the index holds ``memory``'s vector already; ``False`` when the index cannot
    say (a database gone, a damaged folder): the batch is saved by then, and whatever the
    index does next is reported as a diagnostic, never raised (the memory is embedded, and
    its write fails and says so, or succeeds once the index is back)."""
    try:
        return await run(lambda: index.is_ready(memory, identity))
    except asyncio.CancelledError:
        raise
    except Exception:
        return False


async def _index_chunk(
    chunk: list[GameMemory],
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
) -> None:
    first = chunk[0]
    try:
        vectors = await embedder.embed_documents(
            chunk, f"{len(chunk)} memories from {first.memory_id!r}"
        )
        await run(lambda: index.write(chunk, vectors, embedder.identity))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await report_index_failure(
            report,
            options,
            first,
            f"{len(chunk)} memories were saved, but their derived vectors are unavailable. "
            "Lexical recall remains available; a rebuild embeds them.",
            exc,
        )
