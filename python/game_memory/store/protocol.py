"""The save's seam: what recall, rebuild and the front door need from an authoritative store.

A backend (the file store, the in-memory store, later PostgreSQL) implements
:class:`GameMemoryStore`; nothing above it asks which class it holds (httpx's client never
asks which transport it has). The one read recall makes is :meth:`GameMemoryStore.snapshot`:
a bounded, consistent read of the query's partitions *together with* their lexical ranking,
so the hybrid pipeline validates derived vectors against the same read and never invents
lexical scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from game_memory.model import (
    CompactionReport,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMoment,
    MigrationReport,
    StoreCheckReport,
)
from game_memory.store.lexical import LexicalHit
from game_memory.store.view import PartitionView

__all__ = ["GameMemoryStore", "StoreSnapshot", "SurplusErasing"]


@dataclass(frozen=True, slots=True)
class StoreSnapshot:
    """One bounded authoritative read of a query's partitions, ranked lexically.

    Attributes:
        views: Every owner partition the query reads (one when the query names an owner,
            else the session's), sorted by owner id (ordinal). Each view holds *all* of the
            partition's memories, visible to the query or not: visibility is applied by the
            query's rules (``PartitionView.mask``), never by leaving memories out.
        lexical: The best ``query.limit`` visible memories by the BM25 contract of
            ``store/lexical.py`` (score, then newest tick, then id, then owner), each with its
            score.
        visible: How many memories of the views the query can see.
        stages: STORAGE_MIGRATION, AUTHORITATIVE_SNAPSHOT and LEXICAL_SEARCH, measured.
            STORAGE_MIGRATION counts the memories migrated by this read and the memories
            in the store when the backend knows that cheaply (0 when it would cost a scan
            of every session, as on PostgreSQL).

    Views are immutable. A backend should hand out the *same* view object while a
    partition is unchanged, and a grown partition's view should start with the previous
    view's memory objects, so derived joins are reused or extended instead of recomputed;
    correctness never depends on it.
    """

    views: tuple[PartitionView, ...]
    lexical: tuple[LexicalHit, ...]
    visible: int
    stages: tuple[GameMemorySearchStage, ...]

    @property
    def authoritative_memories(self) -> Sequence[GameMemory]:
        """Every memory of the snapshot, by owner then memory id (ordinal).

        A tuple, or for one partition opened from its read file a lazy sequence that
        decodes a memory when it is read and compares equal to the tuple.
        """
        if len(self.views) == 1:
            return self.views[0].ordered
        return tuple(memory for view in self.views for memory in view.ordered)

    def search_snapshot(self) -> GameMemorySearchSnapshot:
        """The reference's search result: the lexical hits, the snapshot and the stages."""
        return GameMemorySearchSnapshot.model_construct(
            memories=tuple(hit.memory for hit in self.lexical),
            authoritative_memories=self.authoritative_memories,
            stages=self.stages,
        )


@runtime_checkable
class GameMemoryStore(Protocol):
    """An authoritative store of memories, partitioned by session and owner.

    Every method may raise ``StoreClosedError`` after :meth:`aclose`, and any
    ``GameMemoryError`` its backend documents. Methods are safe to await concurrently from
    one event loop and never block it.
    """

    @property
    def folder(self) -> Path | None:
        """The local folder holding the save, or ``None`` when it is not on this disk.

        The front door refuses a derived index folder inside it.
        """
        ...

    async def append(self, memory: GameMemory) -> bool:
        """Add a memory durably; ``False`` when an equivalent one is already there.

        Raises:
            MemoryConflictError: the id already holds different content (nothing changes).
            CapacityExceededError: a bound of the store is reached (it names the bound).
        """
        ...

    async def append_many(self, memories: Sequence[GameMemory]) -> list[bool]:
        """Add a batch durably and atomically; one result per memory, in order.

        All or nothing: when it returns every new memory is durable; when it raises, or
        the process dies before it returns, none of the batch is added (after a crash the
        store recovers to before the batch). Each result follows :meth:`append`: ``True``
        added, ``False`` an equivalent memory was already stored or came earlier in the
        batch. An empty batch returns ``[]``.

        Raises:
            MemoryConflictError: an id holds, or is given in the batch, other content;
                nothing is added.
            CapacityExceededError: the new memories do not fit a bound (it names it);
                nothing is added.
        """
        ...

    async def snapshot(
        self, query: GameMemoryQuery, *, maximum_entries: int | None = None
    ) -> StoreSnapshot:
        """Read the query's partitions once and rank them lexically (see :class:`StoreSnapshot`).

        ``query.limit`` bounds the lexical hits (0 reads the partitions and ranks nothing).

        Raises:
            CapacityExceededError: the partitions hold more than ``maximum_entries`` (or the
                store's own bound) memories.
        """
        ...

    async def enumerate(self, session_id: str, owner_id: str | None = None) -> list[GameMemory]:
        """Every memory of a session (or one owner), by owner then memory id (ordinal)."""
        ...

    async def forget(self, session_id: str, owner_id: str, memory_id: str, at: GameMoment) -> bool:
        """Retract a memory as of ``at`` (durably, like an append): from that moment on, on
        that timeline, and without ``at_or_before``, recall no longer sees it; earlier
        moments and other timelines still do.

        Returns:
            ``False`` when a retraction already hides it from ``at`` on (nothing changed).

        Raises:
            MemoryNotFoundError: the owner holds no memory ``memory_id``.
        """
        ...

    async def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> int:
        """Remove memories for good: a whole session, one owner, or the listed ids of one
        owner. Their bytes leave the save before this returns; the capacity count goes down.

        Returns:
            How many memories were erased (ids the owner does not hold are ignored).

        Raises:
            InvalidArgumentError: ``memory_ids`` without ``owner_id``.
        """
        ...

    async def consolidate(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], summary: GameMemory
    ) -> bool:
        """Append ``summary`` (a ``reflection`` whose ``consolidates`` names the memories) and
        so retract those memories as of the summary's moment, atomically: both or neither.

        Returns:
            ``False`` when the same summary was already appended.

        Raises:
            MemoryNotFoundError: an id names no memory of the owner.
            InvalidArgumentError: the summary is of another owner, not a reflection, or its
                ``consolidates`` differs from ``memory_ids``.
            MemoryConflictError: the summary's id holds other content.
        """
        ...

    async def compact(self) -> CompactionReport:
        """Rewrite what needs it so the store's files (if any) hold no more than they must.

        A backend with nothing to compact (its erases free space at once) reports zeros.
        """
        ...

    async def count(self) -> int:
        """How many memories the whole store holds."""
        ...

    async def migrate_legacy_layout(self) -> MigrationReport:
        """Bring a legacy save into the current layout (idempotent; ``0`` migrated if none)."""
        ...

    async def check(self, *, fix: bool = False) -> StoreCheckReport:
        """Verify the store's own consistency; with ``fix`` apply only repairs losing nothing."""
        ...

    async def aclose(self) -> None:
        """Release resources; idempotent."""
        ...


@runtime_checkable
class SurplusErasing(Protocol):
    """An optional capability of a store: an erase bounded by the owner's count, taken
    under the store's own lock (the file store's writer lock, a PostgreSQL partition
    lock). The retention policy uses it when a store has it: its victims are chosen from
    a snapshot, and two processes evicting from one owner at once otherwise both erased
    their whole choice, taking the owner below its target. Without it, the policy calls
    :meth:`GameMemoryStore.erase`, which is exact within one front door only."""

    async def erase_surplus(
        self, session_id: str, owner_id: str, memory_ids: Sequence[str], keep: int
    ) -> list[str]:
        """Erase the first of ``memory_ids`` (in their order) that the owner holds, only as
        many as take it down to ``keep`` memories counted under the store's lock; return
        the ids erased. Otherwise as :meth:`GameMemoryStore.erase`."""
        ...
