"""How ready a session's derived vectors are for the active embedding identity."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    computed_field,
    model_validator,
)

from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = ["VectorMemoryState", "VectorMemoryStatus"]

#: The computed field a dump holds and validation checks instead of taking.
_COMPUTED = "requires_rebuild"


class VectorMemoryState(StrEnum):
    """The derived index's state for one session.

    EMPTY: no memories. READY: every memory has a vector of the active identity.
    DEGRADED: some memories lack vectors (embedding failed or pending) or orphan records
    exist; semantic recall works for the rest. REBUILD_REQUIRED: vectors of another model
    exist; semantic recall is off (lexical fallback) until ``rebuild``. LEXICAL: no
    embedding model is loaded; recall is lexical by choice and nothing needs a rebuild.
    """

    EMPTY = "empty"
    READY = "ready"
    DEGRADED = "degraded"
    REBUILD_REQUIRED = "rebuild_required"
    LEXICAL = "lexical"


class VectorMemoryStatus(BaseModel):
    """Counts behind a :class:`VectorMemoryState`: ``ready + pending + stale == total``.

    In lexical mode (no model) ``active_identity`` is ``None``, the state is ``LEXICAL``
    and every memory of the session counts as ready.

    A status reads back its own dump (``model_dump`` and ``model_dump_json``), which holds
    the computed ``requires_rebuild``: given as input, that value is checked, never taken:
    it must be the bool the counts give, or the status is refused (a dump edited by hand
    that no longer agrees with itself).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: VectorMemoryState
    active_identity: MemoryEmbeddingIdentity | None
    total_entries: int = Field(ge=0)
    ready_entries: int = Field(ge=0)
    pending_entries: int = Field(ge=0)
    stale_entries: int = Field(ge=0)
    orphan_entries: int = Field(ge=0)

    @model_validator(mode="wrap")
    @classmethod
    def _computed_input_agrees(
        cls, data: Any, handler: ModelWrapValidatorHandler[VectorMemoryStatus]
    ) -> VectorMemoryStatus:
        """Validate ``data`` without ``requires_rebuild`` (computed, so not a field), then
        check that a given value is what the validated counts compute."""
        if not isinstance(data, Mapping) or _COMPUTED not in data:
            return handler(data)
        claimed = data[_COMPUTED]
        status = handler({key: value for key, value in data.items() if key != _COMPUTED})
        if type(claimed) is not bool or claimed != status.requires_rebuild:
            raise ValueError(
                f"{_COMPUTED} is computed from the counts, which give "
                f"{status.requires_rebuild}, not {claimed!r}: leave it out or give that value"
            )
        return status

    @model_validator(mode="after")
    def _counts_add_up(self) -> VectorMemoryStatus:
        if self.ready_entries + self.pending_entries + self.stale_entries != self.total_entries:
            raise ValueError("ready + pending + stale must equal total")
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def requires_rebuild(self) -> bool:
        """Whether a rebuild would change anything (pending, stale or orphan entries)."""
        return bool(self.pending_entries or self.stale_entries or self.orphan_entries)

    @property
    def mode(self) -> str:
        """``"hybrid"`` with an embedding model, ``"lexical"`` without."""
        return "lexical" if self.active_identity is None else "hybrid"

    @classmethod
    def lexical(cls, memories: int) -> VectorMemoryStatus:
        """The status of a session of ``memories`` memories in lexical mode."""
        return cls(
            state=VectorMemoryState.LEXICAL,
            active_identity=None,
            total_entries=memories,
            ready_entries=memories,
            pending_entries=0,
            stale_entries=0,
            orphan_entries=0,
        )

    @classmethod
    def from_counts(
        cls,
        identity: MemoryEmbeddingIdentity,
        *,
        ready: int,
        pending: int,
        stale: int,
        orphans: int,
    ) -> VectorMemoryStatus:
        """Derive the state from the counts (the reference's rule)."""
        total = ready + pending + stale
        if total == 0 and orphans == 0:
            state = VectorMemoryState.EMPTY
        elif stale:
            state = VectorMemoryState.REBUILD_REQUIRED
        elif pending or orphans:
            state = VectorMemoryState.DEGRADED
        else:
            state = VectorMemoryState.READY
        return cls(
            state=state,
            active_identity=identity,
            total_entries=total,
            ready_entries=ready,
            pending_entries=pending,
            stale_entries=stale,
            orphan_entries=orphans,
        )
