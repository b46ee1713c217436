"""The seam between recall and any embedding model: the smallest protocol the store needs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import numpy as np
import numpy.typing as npt

from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = ["EmbeddingProvider", "EmbeddingVector"]

EmbeddingVector: TypeAlias = npt.NDArray[np.floating] | Sequence[float]


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns text into vectors of a fixed identity.

    Queries and documents are separate calls because asymmetric models embed them
    differently. Implementations must be safe to call concurrently from one event loop,
    must honour asyncio cancellation, and must never block the loop (run inference in an
    executor). Vectors need not be normalized; the store L2-normalizes them. Failures
    should raise ``EmbeddingUnavailableError`` (or a subclass).

    A provider with limits of its own may say so with two optional integer attributes (the
    ONNX providers do): ``maximum_texts_per_call``, and the store never passes more texts
    to one ``embed_documents`` call (a rebuild batch or a bulk append larger than that is
    split into several calls); ``maximum_characters_per_text``, and the store cuts longer
    texts to it before the call, rather than have the provider refuse the whole batch.
    """

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        """The identity of every vector this provider returns."""
        ...

    async def embed_query(self, text: str) -> EmbeddingVector:
        """Embed one query text."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[EmbeddingVector]:
        """Embed documents, returning one vector per text in the same order."""
        ...

    async def aclose(self) -> None:
        """Release the model; idempotent. Later calls raise."""
        ...
