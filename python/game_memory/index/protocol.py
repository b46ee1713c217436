"""The derived index's seam: what recall, status and rebuild need from a vector index.

A backend (the file index, the in-memory index, later PostgreSQL) implements
:class:`VectorIndex`. Entries are keyed by memory and carry a content digest and the
embedding identity that produced them, so an index can be joined against an authoritative
snapshot: only vectors of the right memory, computed from its current content by the active
model, ever reach scoring (:class:`~game_memory.index.join.PartitionJoin`).

The calls block (file or socket work, numpy): callers run them off the event loop, and an
implementation must be safe to call from several threads at once. Every failure of the
derived data is a ``DerivedIndexError``; an index never touches the save.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from game_memory.index.entries import EntryState
from game_memory.index.join import PartitionJoin
from game_memory.index.partition import FloatMatrix
from game_memory.model import GameMemory, MemoryEmbeddingIdentity
from game_memory.store.view import PartitionView

__all__ = ["OrphanCandidates", "VectorIndex"]


@dataclass(frozen=True, slots=True)
class OrphanCandidates:
    """Entries of a session whose memory was absent from a snapshot, as they were then.

    ``entries`` maps a backend's partition key to ``{memory key: entry version}``; only the
    index that listed them reads the values. See :meth:`VectorIndex.remove_orphans`.
    """

    session_id: str
    entries: Mapping[object, Mapping[bytes, object]]

    @property
    def count(self) -> int:
        """How many entries were listed."""
        return sum(len(found) for found in self.entries.values())


@runtime_checkable
class VectorIndex(Protocol):
    """A derived, rebuildable index of memory vectors, partitioned by session and owner."""

    @property
    def folder(self) -> Path | None:
        """The local folder holding the index, or ``None`` when it is not on this disk."""
        ...

    @property
    def capacity(self) -> int:
        """Most entries one owner partition may hold."""
        ...

    # -- reads --------------------------------------------------------------------------

    def join(self, view: PartitionView, identity: MemoryEmbeddingIdentity) -> PartitionJoin:
        """Match the entries of ``view``'s partition against ``view`` under ``identity``.

        Joins are cached while both sides are unchanged and extended when both only grew,
        so a warm recall costs what changed, not the partition's size.
        """
        ...

    def session_joins(
        self,
        session_id: str,
        views: Sequence[PartitionView],
        identity: MemoryEmbeddingIdentity,
    ) -> list[PartitionJoin]:
        """Join every partition of a session: those of ``views`` and any the index holds
        without a view (their entries are orphans; the join's ``view`` is ``None``)."""
        ...

    def vectors(self, joined: PartitionJoin, identity: MemoryEmbeddingIdentity) -> FloatMatrix:
        """The float32 rows ``joined.rows`` index into (read-only, checksummed once).

        Raises:
            PartitionReplacedError: a compaction replaced the partition since it was
                joined; join it again.
        """
        ...

    def cached_vectors(
        self, view: PartitionView, identity: MemoryEmbeddingIdentity
    ) -> tuple[PartitionJoin, FloatMatrix] | None:
        """:meth:`join` and :meth:`vectors` of ``view``, answered from memory, or ``None``.

        Called on the event loop, so it must not block: it returns the join and rows only
        when they are already held, current (nothing changed since they were read, as
        :meth:`join` would see it) and checked, without reading, joining, verifying or
        waiting for a lock. ``None`` is always a correct answer; the caller then makes the
        blocking calls off the loop. Never raises for damaged data (the blocking calls
        report it).
        """
        ...

    def prefetch(self, session_id: str, owner_id: str, identity: MemoryEmbeddingIdentity) -> None:
        """Read and check ahead what a search of this owner's partition will need (blocking).

        The front door calls it on a thread of its own as an owner's first recall begins,
        while the save is read: work that releases the interpreter (reading files, checking
        vectors against their checksums) then overlaps that read. Doing nothing is a correct
        implementation. Never raises: whatever fails is left for the search, which meets
        and names it.
        """
        ...

    def is_ready(self, memory: GameMemory, identity: MemoryEmbeddingIdentity) -> bool:
        """Whether ``memory`` has a ready vector of ``identity`` for its current content."""
        ...

    # -- writes -------------------------------------------------------------------------

    def write(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> None:
        """Store one normalized row per memory as its ready entry (the latest entry wins).

        Raises:
            CapacityExceededError: an owner partition would exceed :attr:`capacity`.
        """
        ...

    def write_now(
        self,
        memories: Sequence[GameMemory],
        vectors: FloatMatrix,
        identity: MemoryEmbeddingIdentity,
    ) -> bool:
        """:meth:`write`, on the event loop, when it needs no wait; whether it wrote.

        An implementation writes here only when that takes no more than a few unsynced
        writes to files it holds open or cached: nothing to read first, no lock to wait for,
        nothing to fsync. It then writes and raises exactly as :meth:`write`. ``False``
        (nothing done) is always a correct answer: the caller then calls :meth:`write` off
        the loop.
        """
        ...

    def mark(self, memories: Sequence[GameMemory], state: EntryState, code: str) -> None:
        """Record that ``memories`` have no usable vector (``FAILED`` or ``PENDING``, with a
        diagnostic code), so status counts them and a rebuild retries them."""
        ...

    # -- maintenance --------------------------------------------------------------------

    def verify(self, session_id: str, *, repair: bool) -> list[Exception]:
        """Check every partition of a session, its vectors and their checksums.

        Returns what is damaged (``DerivedIndexError`` per partition); with ``repair`` the
        damaged partitions are deleted first, so their memories have no vectors after.
        """
        ...

    def orphans(self, session_id: str, views: Sequence[PartitionView]) -> OrphanCandidates:
        """List the session's entries whose memory is absent from ``views``."""
        ...

    def remove_orphans(self, candidates: OrphanCandidates, views: Sequence[PartitionView]) -> int:
        """Delete each candidate still absent from ``views`` and unchanged since it was
        listed, then compact the session; return how many were deleted.

        ``views`` must be read *after* the candidates were listed: a memory whose vector is
        in the index was saved before its vector was written, so a candidate absent from a
        later read is a true orphan, and a memory saved meanwhile keeps its vector.
        """
        ...

    def erase(
        self,
        session_id: str,
        owner_id: str | None = None,
        memory_ids: Sequence[str] | None = None,
    ) -> None:
        """Drop the entries and vectors of a session, an owner, or listed memories of one
        owner, and rewrite what remains, so none of their bytes are left (the save's erase
        comes first; a crash between the two leaves orphans the next rebuild sweeps)."""
        ...

    async def migrate_legacy_index(self) -> int:
        """Import a legacy index found in the index's place; return how many records."""
        ...

    async def aclose(self) -> None:
        """Release resources; idempotent."""
        ...
