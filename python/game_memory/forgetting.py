"""Memory over a whole game: forget on game time, erase for good, bounded owners, summaries.

(And :func:`index_memory`, the vector of a memory just saved, which an append and a
consolidation share.)

:class:`MemoryOverTime` holds the front door's calls of this one job; ``VectorMemoryStore``
(``memory.py``) inherits them. They are thin: the rules live behind the store protocol
(``store/lifecycle.py`` has the shared ones), so every backend behaves alike.

* **Forget** is the save's alone: a retraction on game time. The derived vectors stay;
  every vector is joined to the snapshot, whose visibility rules hide the memory.
* **Erase** removes from the save first, then from the derived index (the index rewrites
  what it kept, so no vector bytes stay either). A crash between the two leaves derived
  orphans: they are never recalled, and erasing again, or the next rebuild's sweep,
  removes them.
* **Consolidate** appends the summary (whose ``consolidates`` retracts the sources as of
  its moment: one append, so both or neither) and then embeds it, as an append does.
* **Bounded owners** (``maximum_memories_per_owner``): after an append takes an owner past
  the bound, its lowest-value memories (:func:`~game_memory.store.lifecycle.eviction_order`)
  are erased down to :func:`~game_memory.store.lifecycle.eviction_target` (90% of the
  bound, so a full partition is rewritten once every tenth of the bound, not on every
  append), never the memory just appended, and ``memories_evicted`` reports the count,
  without any text. Appends running at once (tasks of one event loop) never evict each
  other's memories while those are being indexed (an erased memory's vector written after
  its erase would be left behind), and their evictions run one at a time, each counting
  what the one before left (:class:`~game_memory.write_guards.EvictionGuard`).

An erase (an eviction too) and this front door's appends are never interleaved
(:class:`~game_memory.write_guards.EraseGate`): the appends' vectors would otherwise be left
behind by the erase, or erased after their memory was saved again. Every write runs to its
end when its caller is cancelled (:func:`~game_memory.write_guards.finished`), and
``aclose`` waits for the writes in flight (:class:`~game_memory.write_guards.WritesInFlight`).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from game_memory.embedding.embedder import Embedder
from game_memory.errors import (
    DerivedIndexError,
    EmbeddingUnavailableError,
    GameMemoryError,
    PersistenceError,
)
from game_memory.index.protocol import VectorIndex
from game_memory.model import (
    CompactionReport,
    DiagnosticSeverity,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    MemoryVectorDiagnostic,
)
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.pipeline import Report, Runner, report_failure
from game_memory.store.lifecycle import checked_ids, eviction_order, eviction_target, newest_ticks
from game_memory.store.protocol import GameMemoryStore, SurplusErasing
from game_memory.write_guards import EraseGate, EvictionGuard, WritesInFlight

__all__ = [
    "MemoryOverTime",
    "erase_memories",
    "evict_over_bound",
    "index_memory",
    "index_side",
    "report_index_failure",
]

_T = TypeVar("_T")


class MemoryOverTime(abc.ABC):
    """The front door's forget, erase, consolidate and compact (see the module docstring).

    A base of ``VectorMemoryStore``, which provides the attributes below.
    """

    authoritative: GameMemoryStore
    index: VectorIndex | None
    options: VectorMemoryStoreOptions
    _eviction_guard: EvictionGuard
    _erase_gate: EraseGate
    _writes: WritesInFlight

    @abc.abstractmethod
    def _check_open(self) -> None:
        """Provided by the concrete store."""

    @abc.abstractmethod
    async def _run(self, function: Callable[[], _T]) -> _T:
        """Provided by the concrete store."""

    @abc.abstractmethod
    async def _report(self, diagnostic: MemoryVectorDiagnostic) -> None:
        """Provided by the concrete store."""

    @abc.abstractmethod
    async def _index(self, memory: GameMemory, created: bool) -> None:
        """Provided by the concrete store."""

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of the game moment ``at``; durable like an append.

        Recall as of ``at`` or later on that timeline, and recall without ``at_or_before``,
        no longer sees it; earlier moments and other timelines still do (load an earlier
        save: the NPC remembers again). Idempotent.

        Returns:
            ``False`` when a retraction already hid it from ``at`` on (nothing changed).

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
            InvalidArgumentError: an id or ``at`` is invalid.
        """
        self._check_open()
        with self._writes.writing():  # ``aclose`` waits for it
            return await self.authoritative.forget(session_id, owner_id, memory_id, at)

    async def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Remove memories for good, not on game time: a session, an owner, or listed ids.

        No byte of their text, payload or vectors is left in the save or the index when this
        returns, and the capacity count goes down. An earlier save does not bring them back.
        Crash-safe: interrupted, it is finished by the next use of the save (or erase
        again: it completes, and drops derived vectors a crash left behind). Appends of
        this front door running at the same time are not interleaved with it: it waits
        for those being saved and indexed (a batch's whole embedding included), and those
        that come while it waits or runs wait for it. Cancelled while it waits for them,
        it erases nothing; cancelled once it began, it runs to its end (from the save and
        from the index) before the cancellation is raised. ``aclose`` waits for it.

        Returns:
            How many memories were erased from the save.

        Raises:
            InvalidArgumentError: ``memory_ids`` without ``owner_id``, or a bad id.
            PersistenceError: a partition to erase from is damaged (salvage it first).
            DerivedIndexError: the save's erase is done, but the vector index could not
                drop the vectors (its folder is not writable, or the index was closed
                meanwhile other than by ``aclose``, which waits for the erase): they are
                never recalled, and the same erase run again, or a rebuild, drops them
                once it can.
        """
        self._check_open()
        with self._writes.writing():  # ``aclose`` waits for it
            async with self._erase_gate.erasing():  # no append between the save and the index
                # Begun, it runs to its end: cut off after the save's erase, it left the
                # vectors in the index (orphans) and the session degraded.
                return await self._writes.finished(
                    erase_memories(
                        self.authoritative, self.index, self._run, session_id, owner_id, memory_ids
                    )
                )

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Replace memories by a summary as of its moment: both or neither, durably.

        ``summary`` (kind ``reflection``, written by the game or its dialogue model; the
        library never calls a model for it) is appended with ``consolidates`` set to
        ``memory_ids``; as of its moment those memories are retracted, and earlier moments
        recall them as before. Recall's evidence shows the sources (``consolidates``).

        Returns:
            ``False`` when the same summary was already there.

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: the summary is not a ``GameMemory``, is of another
                owner or not a reflection, or ``memory_ids`` is not a list of valid ids.
            MemoryConflictError: the summary's id holds other content.
        """
        self._check_open()
        # A summary is an append: indexed, then the retention policy, as after any.
        with self._writes.writing():  # ``aclose`` waits for it
            return await self._saved_then_indexed(
                self._stored_summary(summary, memory_ids),
                lambda: self.authoritative.consolidate(session_id, owner_id, memory_ids, summary),
            )

    async def _saved_then_indexed(
        self, memory: GameMemory, save: Callable[[], Awaitable[bool]]
    ) -> bool:
        """``save()`` ``memory``, index it, then keep its owner within the retention policy
        (``maximum_memories_per_owner``); return what ``save`` returned.

        The save and the index write share the erase gate with other appends, so that no
        erase runs between them (:class:`~game_memory.write_guards.EraseGate`). With the
        policy on, the memory is in flight from before its save until it is indexed, so
        that no other append's eviction erases it in between (:class:`EvictionGuard`).
        Cancelled, it still runs to its end before the cancellation is raised
        (:func:`~game_memory.write_guards.finished`): a memory saved is always indexed.
        Counted in flight until then (:class:`~game_memory.write_guards.WritesInFlight`).
        """
        return await self._writes.finished(self._save_and_index(memory, save))

    async def _save_and_index(
        self, memory: GameMemory, save: Callable[[], Awaitable[bool]]
    ) -> bool:
        if self.options.maximum_memories_per_owner is None or not isinstance(memory, GameMemory):
            async with self._erase_gate.appending():
                created = await save()
                await self._index(memory, created)
            return created
        with self._eviction_guard.flying([memory]):
            created = False
            try:
                async with self._erase_gate.appending():
                    created = await save()
                    await self._index(memory, created)
            finally:
                if created:  # out of the gate: the eviction holds it alone, as an erase
                    await self._evict(memory)
        return created

    @staticmethod
    def _stored_summary(summary: GameMemory, memory_ids: Sequence[str]) -> GameMemory:
        """The summary as the store saves it (its ``consolidates`` filled in).

        Built before the store is called, so ``memory_ids`` is checked here first (an
        unhashable id, ``[["m1"]]``, must not reach ``dict.fromkeys``); a summary that is
        not a ``GameMemory`` is returned as is, for the store's own check to refuse.

        Raises:
            InvalidArgumentError: ``memory_ids`` is not a list of valid ids.
        """
        if not isinstance(summary, GameMemory):
            return summary
        return summary.model_copy(update={"consolidates": checked_ids(memory_ids)})

    async def compact(self) -> CompactionReport:
        """Compact the save: rewrite what needs it (see the store's ``compact``).

        Erases already rewrite what they touch; this tidies the rest (partitions whose
        files could be fewer, redundant retractions, leftovers of interrupted writes). The
        derived index reclaims erased vectors at the erase and superseded ones at rebuild.
        """
        self._check_open()
        return await self.authoritative.compact()

    async def _evict(self, memory: GameMemory) -> None:
        """After ``memory`` was appended: keep its owner within the retention policy."""
        if self.options.maximum_memories_per_owner is not None:
            await evict_over_bound(
                memory,
                self.authoritative,
                self.index,
                self.options,
                self._run,
                self._report,
                self._eviction_guard,
            )


async def erase_memories(
    store: GameMemoryStore,
    index: VectorIndex | None,
    run: Runner,
    session_id: str,
    owner_id: str | None,
    memory_ids: Sequence[str] | None,
) -> int:
    """Erase from the save, then drop the derived entries and rows; return the count.

    Raises:
        DerivedIndexError: the save's erase is done, but the index could not drop the
            vectors (an unwritable index folder or its lock file, an unreachable database,
            a closed index: whatever the index raised); the message says so and what to do.
    """
    erased = await store.erase(session_id, owner_id, memory_ids)
    failure = await _drop_vectors(index, run, session_id, owner_id, memory_ids)
    if failure is not None:
        raise DerivedIndexError(
            f"erased {erased:,} memories from the save (the save's erase is done), but the "
            f"vector index could not drop their vectors ({type(failure).__name__}: "
            f"{failure}). They are never recalled (the save decides), "
            "but their vector bytes stay in the index until the same erase, run again, or "
            "a rebuild ('game-memory rebuild') succeeds: fix what stopped the index (an "
            "unwritable index folder, an unreachable database), then do either"
        ) from failure
    return erased


async def _drop_vectors(
    index: VectorIndex | None,
    run: Runner,
    session_id: str,
    owner_id: str | None,
    memory_ids: Sequence[str] | None,
) -> Exception | None:
    """Drop the derived entries and rows of erased memories; the error if that failed.

    Every failure of the index counts, whatever its class: the save's erase is done by
    then, so the caller must hear that the vectors stayed (a ``DerivedIndexError``), not
    that the store is closed (a closed index, or front door: its thread pool shut down),
    nor that the *save* is unsafe (``PersistenceError`` from the index's lock file, which
    ``durable/lock.py`` raises for the save and the index alike), as if nothing had
    happened. Only a cancellation passes (``BaseException``; the caller runs the erase
    to its end first).
    """
    if index is None:
        return None
    ids = None if memory_ids is None else list(memory_ids)
    try:
        await run(lambda: index.erase(session_id, owner_id, ids))
    except Exception as exc:
        return exc
    return None


def index_side(exc: Exception) -> Exception:
    """``exc`` as the index's failure: a ``PersistenceError`` (the lock file of the index,
    its folder: ``durable/`` raises the save's class for both) or a raw ``OSError`` from
    the derived index becomes a ``DerivedIndexError`` chained to it; anything else is
    returned as is. Called once the save's write is done, so no caller is told that the
    save is corrupt or unsafe (nor that it "was not changed") for derived data."""
    if isinstance(exc, (PersistenceError, OSError)):
        error = DerivedIndexError(
            f"the derived vector index failed ({type(exc).__name__}: {exc}), not the save: "
            "what the save was given is saved. Fix what stopped the index (its folder or "
            "lock file not writable, a full disk), then run 'game-memory rebuild' "
            "(memory.rebuild)"
        )
        error.__cause__ = exc  # as ``raise error from exc`` would chain it
        return error
    return exc


async def index_memory(
    memory: GameMemory,
    created: bool,
    index: VectorIndex,
    embedder: Embedder,
    run: Runner,
    report: Report,
    options: VectorMemoryStoreOptions,
) -> None:
    """Embed a memory just saved (an append, a summary) and write its vector, skipped when
    it is ready already. A failure is reported (``memory_embedding_append_failed``), the
    memory stays saved and lexically recallable.

    Raises:
        EmbeddingUnavailableError (or the index's error): only with
            ``fail_when_embedding_unavailable``.
    """
    try:
        if not created and await run(lambda: index.is_ready(memory, embedder.identity)):
            return
        vectors = await embedder.embed_documents([memory], f"memory {memory.memory_id!r}")
        # Into a partition the index holds, unlocked: a few unsynced writes, made here
        # rather than after a hop into the pool and back (which cost twice as much).
        if not index.write_now([memory], vectors, embedder.identity):
            await run(lambda: index.write([memory], vectors, embedder.identity))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await report_index_failure(
            report,
            options,
            memory,
            "The memory was saved, but its derived vector is unavailable. Lexical recall "
            "remains available.",
            exc,
        )


async def report_index_failure(
    report: Report,
    options: VectorMemoryStoreOptions,
    memory: GameMemory,
    message: str,
    exc: Exception,
) -> None:
    """Report that saved memories (the first is ``memory``) got no vectors, as
    ``memory_embedding_append_failed``; the memories stay saved and lexically recallable.

    The index's failure is reported (and raised) as a ``DerivedIndexError``
    (:func:`index_side`): the memories are saved by then, and a ``PersistenceError`` from
    the index's lock file named the save's class.

    Raises:
        EmbeddingUnavailableError (or the index's own error, re-raised from the caller's
            ``except``): only with ``fail_when_embedding_unavailable``.
    """
    exc = index_side(exc)
    await report_failure(
        report,
        "memory_embedding_append_failed",
        DiagnosticSeverity.WARNING,
        message,
        session_id=memory.session_id,
        owner_id=memory.owner_id,
        memory_id=memory.memory_id,
        error=exc,
    )
    if options.fail_when_embedding_unavailable:
        if isinstance(exc, GameMemoryError):
            raise exc
        raise EmbeddingUnavailableError(f"embedding failed: {exc}") from exc


def _with_their_beliefs(
    spared: set[str], memories: Sequence[GameMemory], worthless: set[str]
) -> set[str]:
    """``spared``, and the versions that hide a spared memory: the memories not
    ``worthless`` of each ``belief_key`` a spared memory holds.

    The memory just appended is spared, even as an older version of its belief (an older
    report heard later): were the newer version that hides it then valued as any other and
    evicted, the outdated version would be what the NPC believed, decided by the order of
    a batch rather than by game time.
    """
    keys = {m.belief_key for m in memories if m.memory_id in spared and m.belief_key}
    if not keys:
        return spared
    return spared | {
        m.memory_id for m in memories if m.belief_key in keys and m.memory_id not in worthless
    }


async def evict_over_bound(
    memory: GameMemory,
    store: GameMemoryStore,
    index: VectorIndex | None,
    options: VectorMemoryStoreOptions,
    run: Runner,
    report: Report,
    guard: EvictionGuard,
) -> int:
    """Keep ``memory``'s owner within ``maximum_memories_per_owner``; return how many went.

    Never evicts ``memory`` nor a memory ``guard`` has in flight; one eviction at a time
    per guard (:class:`EvictionGuard`). The eviction holds the guard's erase gate alone,
    from its count to its erase from the index, as an erase does: an append between its
    erase from the save and from the index (the same memory appended again) lost its new
    vector. Call it holding no share of that gate (an append evicts after leaving it).
    """
    bound = options.maximum_memories_per_owner
    if bound is None:
        return 0
    async with guard.lock, guard.gate.erasing():
        return await _evict_locked(memory, store, index, bound, run, report, guard)


async def _evict_locked(
    memory: GameMemory,
    store: GameMemoryStore,
    index: VectorIndex | None,
    bound: int,
    run: Runner,
    report: Report,
    guard: EvictionGuard,
) -> int:
    query = GameMemoryQuery(session_id=memory.session_id, owner_id=memory.owner_id, limit=0)
    snapshot = await store.snapshot(query)
    if not snapshot.views or len(snapshot.views[0]) <= bound:
        return 0
    view = snapshot.views[0]
    excess = len(view) - eviction_target(bound)
    # Worth nothing: what is retracted, or an older version of a belief the owner holds a
    # newer version of, as of the owner's newest moment on the memory's own timeline (its
    # newest memory or retraction there: the latest the save knows of that timeline),
    # where it can be recalled. Not one hidden only on another timeline: it is still
    # recalled on its own, and an erase is for good. Without the versions, a superseded
    # belief of high importance outlived its newer version, and the NPC believed the old
    # one again.
    newest = newest_ticks(view.memories)
    for _, moment in view.retractions:
        if moment.timeline_id in newest:
            newest[moment.timeline_id] = max(newest[moment.timeline_id], moment.tick)
    retracted: set[str] = set()
    for timeline, tick in newest.items():
        as_of = GameMoment(timeline_id=timeline, tick=tick)
        query = GameMemoryQuery(session_id=memory.session_id, limit=0, at_or_before=as_of)
        hidden = view.retracted(query)
        hidden |= view.columns.superseded(query, hidden)
        for position in hidden.nonzero()[0].tolist():
            held = view.memories[position]
            if held.moment.timeline_id == timeline:
                retracted.add(held.memory_id)
    spared = _with_their_beliefs(
        guard.spared(memory.session_id, memory.owner_id) | {memory.memory_id},
        view.memories,
        retracted,
    )
    victims = [
        m.memory_id for m in eviction_order(view.memories, retracted) if m.memory_id not in spared
    ][:excess]
    if isinstance(store, SurplusErasing):
        # Counted again under the store's lock: another process evicting from this owner
        # chose from the same snapshot, and both erases whole took it below its target.
        victims = await store.erase_surplus(
            memory.session_id, memory.owner_id, victims, eviction_target(bound)
        )
        erased = len(victims)
    else:
        erased = await store.erase(memory.session_id, memory.owner_id, victims)
    failure = await _drop_vectors(index, run, memory.session_id, memory.owner_id, victims)
    if failure is not None:
        # The save kept its bound and the append that led here succeeded: it does not fail
        # for derived bytes. The vectors left behind are never recalled.
        await report_failure(
            report,
            "memory_vector_erase_failed",
            DiagnosticSeverity.WARNING,
            "The evicted memories were erased from the save, but the vector index could "
            "not drop their vectors; erase them again or rebuild once it is writable.",
            session_id=memory.session_id,
            owner_id=memory.owner_id,
            error=index_side(failure),
        )
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
