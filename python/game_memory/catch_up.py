"""The automatic catch-up of missing vectors: one owner at a time, bounded, in the background.

A memory can be saved and left without a vector of the active model: the process was killed
between its save and its index write (the Godot addon kills the sidecar two seconds after the
game quits), or the save was written in lexical mode and is now opened with a model. Such a
memory is recalled lexically only, and nothing else ever embeds it but a rebuild.

So recall names every owner whose index join found such memories (``RecallParts.missing``,
:mod:`game_memory.recall.pipeline`), and the front door hands the name to :class:`CatchUps`,
which runs :func:`catch_up_owner` for it in the background:

* one owner at a time for the whole front door, in batches of at most
  :data:`CATCH_UP_BATCH` (and ``rebuild_batch_size``): a recall's query embedding waits for
  at most one batch at the embedding gate;
* each owner at most once per front door, and again only after an append of its session
  failed to index (:meth:`CatchUps.rearm`): a provider that keeps failing meets one attempt,
  never a retry loop;
* never while a rebuild of the session runs (the rebuild embeds them);
* each batch is written as a rebuild writes one: under the erase gate, the save re-read
  first, so a memory erased (or replaced under its id) while its batch was embedded gets no
  vector; a batch is written whole or not at all, even when the catch-up is cancelled.

A session whose vectors are of another model (stale) is not caught up: that stays an
explicit rebuild (``memory_vector_rebuild_required``). The recall that named an owner answers
with what the index holds; later recalls of that owner are semantic once its catch-up ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

import numpy as np

from game_memory.embedding.embedder import Embedder
from game_memory.errors import StoreClosedError
from game_memory.index.join import PartitionJoin
from game_memory.index.protocol import VectorIndex
from game_memory.model import (
    DiagnosticSeverity,
    GameMemory,
    GameMemoryQuery,
    MemoryVectorDiagnostic,
)
from game_memory.rebuild import write_still_saved
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import Report, Runner, report_failure
from game_memory.store.protocol import GameMemoryStore
from game_memory.store.view import PartitionView
from game_memory.write_guards import finished

__all__ = ["CatchUps", "catch_up_owner"]

logger = logging.getLogger("game_memory.index")

#: Most memories a catch-up embeds per provider call (fewer with a smaller
#: ``rebuild_batch_size``): a recall's query embedding waits for at most one such call.
CATCH_UP_BATCH = 16

#: The diagnostic of a finished catch-up (``details.count``: the vectors written).
CAUGHT_UP = "memory_vectors_caught_up"
#: The diagnostic of a failed catch-up: the memories stay lexically recallable.
CATCH_UP_FAILED = "memory_embedding_catch_up_failed"

#: The gate a batch is written under (the front door's ``EraseGate.appending``).
Gate = Callable[[], contextlib.AbstractAsyncContextManager[None]]


async def catch_up_owner(
    session_id: str,
    owner_id: str,
    *,
    store: GameMemoryStore,
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
    gate: Gate,
    rebuilding: Callable[[str], bool] = lambda _session_id: False,
) -> int:
    """Embed the owner's memories that have no ready vector of the active model.

    Reads the owner's view, joins it to its index partition, and embeds what the join
    finds without a vector, in batches (:data:`CATCH_UP_BATCH`); each batch is written as
    a rebuild's is (``rebuild.write_still_saved``). An owner holding vectors of another model is
    left alone (a rebuild replaces them). Reports ``memory_vectors_caught_up``
    (information, ``details.count``) when it wrote vectors, or
    ``memory_embedding_catch_up_failed`` (warning) when a step failed: the batches written
    stay, the rest stays lexically recallable until a later catch-up or a rebuild. It ends
    early, reporting nothing, when ``rebuilding(session_id)`` turns true before a batch (the
    rebuild embeds the rest) or the owner was erased meanwhile (a batch's re-read finds
    none of its memories, and the owner holds none).

    Returns:
        How many vectors were written.

    Raises:
        asyncio.CancelledError: the caller cancelled it (a batch being written is written
            first). Nothing else: a failure is reported.
    """
    written = 0
    try:
        found = await _without_vectors(session_id, owner_id, store, index, embedder, options, run)
        if found is None:
            return 0  # nothing without a vector, or another model's vectors (a rebuild's)
        view, todo = found
        size = min(options.rebuild_batch_size, CATCH_UP_BATCH)
        for start in range(0, len(todo), size):
            if rebuilding(session_id):
                return written  # a rebuild of the session embeds the rest, and reports
            chunk = todo[start : start + size]
            # Decoded a batch at a time, off the event loop: decoding every memory an NPC
            # of 30,000 lacks vectors for took 1.6 s, which the loop's other work waited.
            batch = await run(partial(_memories_at, view, chunk))
            vectors = await embedder.embed_documents(batch, f"catch-up of owner {owner_id!r}")
            # Through ``finished``: cancelled, the batch is still written whole (the index
            # write runs on in its thread anyway) before the gate is let go.
            kept = await finished(
                write_still_saved(
                    session_id, batch, vectors, store, index, embedder.identity, run, gate
                )
            )
            written += kept
            if not kept and not await _holds_owner(store, session_id, owner_id):
                return written  # erased meanwhile (the NPC or its session): nothing to report
    except (asyncio.CancelledError, StoreClosedError):
        raise  # the front door is closing: nothing failed
    except Exception as exc:
        await report_failure(
            report,
            CATCH_UP_FAILED,
            DiagnosticSeverity.WARNING,
            "Memories of this NPC saved without a vector could not be embedded; they stay "
            "lexically recallable. A rebuild embeds them.",
            session_id=session_id,
            owner_id=owner_id,
            error=exc,
        )
        return written
    if written:
        await report(
            MemoryVectorDiagnostic(
                code=CAUGHT_UP,
                severity=DiagnosticSeverity.INFORMATION,
                message=(
                    f"{written} memories of this NPC saved without a vector were embedded; "
                    "its recalls are semantic again."
                ),
                session_id=session_id,
                owner_id=owner_id,
                details={"count": written},
            )
        )
    return written


async def _without_vectors(
    session_id: str,
    owner_id: str,
    store: GameMemoryStore,
    index: VectorIndex,
    embedder: Embedder,
    options: VectorMemoryStoreOptions,
    run: Runner,
) -> tuple[PartitionView, list[int]] | None:
    """The owner's view, read now, and the positions of its memories without a ready
    vector of the active model (nothing decoded); ``None`` when there are none, or when the
    owner holds vectors of another model (stale: a rebuild's to replace)."""
    query = GameMemoryQuery(session_id=session_id, owner_id=owner_id, limit=0)
    views = (await store.snapshot(query, maximum_entries=options.maximum_index_entries)).views
    if not views:
        return None
    view = views[0]
    joined = await run(lambda: index.join(view, embedder.identity))
    if joined.stale or not joined.pending:
        return None
    return view, await run(partial(_unready, view, joined))


def _unready(view: PartitionView, joined: PartitionJoin) -> list[int]:
    """The positions in ``view`` of the memories ``joined`` found no ready vector for."""
    ready = np.zeros(len(view), dtype=bool)
    ready[joined.positions] = True
    positions: list[int] = np.flatnonzero(~ready).tolist()
    return positions


def _memories_at(view: PartitionView, positions: Sequence[int]) -> list[GameMemory]:
    """The memories at ``positions`` of ``view`` (decoded now: blocking)."""
    return view.memories_at(positions)


async def _holds_owner(store: GameMemoryStore, session_id: str, owner_id: str) -> bool:
    """Whether the save holds any memory of the owner now (read now)."""
    query = GameMemoryQuery(session_id=session_id, owner_id=owner_id, limit=0)
    return bool((await store.snapshot(query)).views)


_Key = tuple[str, str]


class CatchUps:
    """The front door's catch-ups: which owners are queued, which were tried, the one task
    that runs them one after another.

    Args:
        work: Catches one owner up (``work(session_id, owner_id)``, :func:`catch_up_owner`
            with the front door's collaborators); it reports its own failures.
        rebuilding: Whether a rebuild of a session runs (its owners are skipped then).

    Everything here runs on the event loop; :meth:`request` is the recall's hook and costs
    a few dictionary operations.
    """

    def __init__(
        self, work: Callable[[str, str], Awaitable[object]], rebuilding: Callable[[str], bool]
    ) -> None:
        self._work = work
        self._rebuilding = rebuilding
        self._queued: OrderedDict[_Key, None] = OrderedDict()
        #: Per session, the owners queued or caught up (or tried) by this front door.
        self._tried: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def request(self, session_id: str, owner_id: str) -> None:
        """Queue a catch-up of the owner, unless it was tried already, a rebuild of its
        session runs, or :meth:`aclose` was called; start the task that runs them."""
        if self._closed or self._rebuilding(session_id):
            return
        tried = self._tried.setdefault(session_id, set())
        if owner_id in tried:
            return
        tried.add(owner_id)
        self._queued[(session_id, owner_id)] = None
        task = self._task
        loop = asyncio.get_running_loop()
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._drain(), name="game-memory catch-up")

    def rearm(self, session_id: str) -> None:
        """An append of the session failed to index: each of its owners may be caught up
        once more (a failed batch names only its first memory's owner)."""
        self._tried.pop(session_id, None)

    async def idle(self) -> None:
        """Return once no catch-up is queued or running (what tests await)."""
        while (task := self._task) is not None and not task.done():
            await asyncio.wait([task])

    async def aclose(self) -> None:
        """Start no more; cancel the running one and wait for it (the batch it is writing,
        if any, is written first). The caller's own cancellation is raised."""
        self._closed = True
        self._queued.clear()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            await asyncio.wait([task])

    async def _drain(self) -> None:
        """Run the queued catch-ups, oldest first, until none is left."""
        while self._queued and not self._closed:
            (session_id, owner_id), _ = self._queued.popitem(last=False)
            if self._rebuilding(session_id):
                self._untried(session_id, owner_id)  # the rebuild's now
                continue
            try:
                await self._work(session_id, owner_id)
            except StoreClosedError:
                return  # closed under it: nothing failed
            except asyncio.CancelledError:
                if not self._closed:
                    # Not aclose: the loop ended under it (a front door used across several
                    # ``asyncio.run``). The owner and the queued ones were not caught up:
                    # the next recall that finds them starts them again.
                    self._untried(session_id, owner_id)
                    for queued_session, queued_owner in self._queued:
                        self._untried(queued_session, queued_owner)
                    self._queued.clear()
                raise
            except Exception:  # the work reports its own failures; anything else is a bug
                logger.exception("the catch-up of owner %r failed", owner_id)

    def _untried(self, session_id: str, owner_id: str) -> None:
        """Let ``request`` queue the owner again."""
        self._tried.get(session_id, set()).discard(owner_id)
