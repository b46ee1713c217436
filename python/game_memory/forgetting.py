"""Memory over a whole game: consolidate, erase for good, and keep an owner bounded.

Functions over explicit collaborators (the save, the derived index, the embedder, options),
as recall and rebuild are; ``VectorMemoryStore`` calls them. ``forget`` needs none of this:
a retraction is the save's alone (the vectors stay and are hidden by the same visibility
rules as their memories).

* **Erase** removes from the save first, then from the derived index; a crash between the
  two leaves derived orphans, which the next rebuild's sweep removes (they are never
  recalled: every vector is joined to the save's snapshot).
* **Consolidate** appends the summary (whose ``consolidates`` retracts the sources as of its
  moment: one append, so both or neither) and then embeds it, as ``append`` does.
* **Bounded owners** (``maximum_memories_per_owner``): after an append takes the owner past
  the bound, its lowest-value memories (``store/lifecycle.py``) are erased, never the one
  just appended, and ``memories_evicted`` reports the count, without any text.
"""

from __future__ import annotations

from collections.abc import Sequence

from game_memory.embedding.embedder import Embedder
from game_memory.index.protocol import VectorIndex
from game_memory.model import (
    DiagnosticSeverity,
    GameMemory,
    GameMemoryQuery,
    MemoryVectorDiagnostic,
)
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import Report, Runner
from game_memory.store.lifecycle import eviction_order
from game_memory.store.protocol import GameMemoryStore

__all__ = ["erase_memories", "evict_over_bound", "index_memory"]


async def erase_memories(
    store: GameMemoryStore,
    index: VectorIndex | None,
    run: Runner,
    session_id: str,
    owner_id: str | None,
    memory_ids: Sequence[str] | None,
) -> int:
    """Erase from the save, then drop the derived entries and rows; return the count."""
    erased = await store.erase(session_id, owner_id, memory_ids)
    if index is not None:
        ids = None if memory_ids is None else list(memory_ids)
        await run(lambda: index.erase(session_id, owner_id, ids))
    return erased


async def index_memory(
    memory: GameMemory,
    created: bool,
    index: VectorIndex,
    embedder: Embedder,
    run: Runner,
) -> None:
    """Embed a memory just saved and write its vector (skipped when already ready).

    Raises:
        whatever embedding or the index raises; the caller reports it.
    """
    if not created and await run(lambda: index.is_ready(memory, embedder.identity)):
        return
    vectors = await embedder.embed_documents([memory], f"memory {memory.memory_id!r}")
    await run(lambda: index.write([memory], vectors, embedder.identity))


async def evict_over_bound(
    memory: GameMemory,
    store: GameMemoryStore,
    index: VectorIndex | None,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
) -> int:
    """Keep ``memory``'s owner within ``maximum_memories_per_owner``; return how many went."""
    bound = options.maximum_memories_per_owner
    if bound is None:
        return 0
    query = GameMemoryQuery(session_id=memory.session_id, owner_id=memory.owner_id, limit=0)
    snapshot = await store.snapshot(query, maximum_entries=options.maximum_index_entries)
    if not snapshot.views or len(snapshot.views[0]) <= bound:
        return 0
    view = snapshot.views[0]
    excess = len(view) - bound
    retracted = {
        view.memories[position].memory_id
        for position in view.retracted(GameMemoryQuery(session_id=memory.session_id, limit=0))
        .nonzero()[0]
        .tolist()
    }
    victims = [
        m.memory_id
        for m in eviction_order(view.memories, retracted)
        if m.memory_id != memory.memory_id
    ][:excess]
    erased = await erase_memories(store, index, run, memory.session_id, memory.owner_id, victims)
    if erased:
        await report(
            MemoryVectorDiagnostic(
                code="memories_evicted",
                severity=DiagnosticSeverity.INFORMATION,
                message=f"The owner kept its maximum_memories_per_owner of {bound:,}: "
                f"{erased:,} lowest-value memories were erased.",
                session_id=memory.session_id,
                owner_id=memory.owner_id,
                details={"count": erased, "bound": bound},
            )
        )
    return erased
