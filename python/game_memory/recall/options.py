"""Bounds and switches of a :class:`~game_memory.memory.VectorMemoryStore`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from game_memory.model.fields import StrictFloat, StrictInt
from game_memory.recall.fusion import FusionOptions

__all__ = ["VectorMemoryStoreOptions"]


class VectorMemoryStoreOptions(BaseModel):
    """Options of the hybrid store; every bound is a number with a documented range.

    A bound refuses a bool (``True`` is not the bound 1) and, where it counts something, a
    float with a fraction: pydantic's ``ValidationError`` names the field, as for a value
    out of range.

    Attributes:
        maximum_index_entries: Largest snapshot (memories of a session or owner) a search
            or status reads, 1..1,000,000.
        maximum_stored_vector_values: ``maximum_index_entries × dimensions`` must not
            exceed it (bounds memory), 1..10,000,000,000.
        maximum_vector_comparisons_per_search: Above ``entries × dimensions`` a search
            skips vector recall (lexical fallback), 1..10,000,000,000.
        candidate_multiplier: Each channel returns ``limit × multiplier`` candidates.
        maximum_candidates: ... but never more than this, 1..100,000.
        rebuild_batch_size: Memories embedded per provider call during a rebuild.
        maximum_concurrent_embedding_calls: Provider calls in flight at once.
        query_embedding_cache: Query vectors remembered by their text (texts of up to
            2,048 characters; least recently used forgotten), 0..65,536 (0: none): a
            question asked again is not embedded again. At most 1,024 × (dimensions × 4
            bytes + 2 KiB) by default (3.5 MiB at 384 dimensions).
        embedding_timeout: Seconds one embedding call may take, queueing included.
        diagnostic_timeout: Seconds a diagnostic sink may take before it is dropped.
        fail_when_embedding_unavailable: Raise instead of falling back to lexical recall
            (and instead of only reporting a vector of an append that failed):
            ``EmbeddingUnavailableError`` when the provider fails, ``DerivedIndexError``
            when the memories have no vectors of the model (another model's, or none:
            rebuild), ``CapacityExceededError`` past
            ``maximum_vector_comparisons_per_search``. A store opened without an index
            recalls lexically by design and never raises for it.
        dispose_embedding_provider: ``aclose()`` also closes the provider.
        fusion: How lexical and vector rankings are combined.
        maximum_memories_per_owner: The retention policy (default off): when an append
            takes an owner past it, the owner's lowest-value memories are erased (see
            ``store/lifecycle.py`` for the value) and ``memories_evicted`` reports how
            many, 1..1,000,000.
        int8_copies: Keep an int8 copy of the vectors of an NPC with 4,096 memories or
            more: read from the file index's file of codes at its first recall
            (``index/row_codes.py``: written at close), else made once it was recalled 4
            times (in the background while no recall runs): recalls then scan a quarter
            of the bytes, with the same results (``index/quantized.py``). Costs ``d + 4``
            bytes a memory (about a quarter of its float32 vector) and, when made, about
            1.1 µs of one core a memory. Off: a game short of memory keeps and reads
            none, only the float32 rows (a file index still writes its files of codes
            at close, for the processes that read them).
        catch_up: Embed in the background the memories a hybrid recall finds without a
            vector of the active model (``catch_up.py``: saved in lexical mode, or just
            before a process was killed), one NPC at a time, once per NPC. Off: they stay
            lexically recalled until ``rebuild`` (a tool that only reads, such as the CLI's
            ``search``, writes nothing).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    maximum_index_entries: Annotated[StrictInt, Field(ge=1, le=1_000_000)] = 100_000
    maximum_stored_vector_values: Annotated[StrictInt, Field(ge=1, le=10_000_000_000)] = 200_000_000
    maximum_vector_comparisons_per_search: Annotated[StrictInt, Field(ge=1, le=10_000_000_000)] = (
        200_000_000
    )
    candidate_multiplier: Annotated[StrictInt, Field(ge=1, le=100)] = 4
    maximum_candidates: Annotated[StrictInt, Field(ge=1, le=100_000)] = 512
    rebuild_batch_size: Annotated[StrictInt, Field(ge=1, le=1_024)] = 32
    maximum_concurrent_embedding_calls: Annotated[StrictInt, Field(ge=1, le=256)] = 4
    query_embedding_cache: Annotated[StrictInt, Field(ge=0, le=65_536)] = 1_024
    embedding_timeout: Annotated[StrictFloat, Field(ge=0.001, le=600.0)] = 30.0
    diagnostic_timeout: Annotated[StrictFloat, Field(ge=0.001, le=30.0)] = 0.5
    fail_when_embedding_unavailable: bool = False
    dispose_embedding_provider: bool = True
    fusion: FusionOptions = FusionOptions()
    maximum_memories_per_owner: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    int8_copies: bool = True
    catch_up: bool = True

    def candidate_limit(self, limit: int) -> int:
        """How many candidates each channel returns for a query of ``limit``."""
        return min(self.maximum_candidates, max(limit, limit * self.candidate_multiplier))
