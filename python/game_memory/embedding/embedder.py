"""Embedding as recall and rebuild need it: bounded provider calls, checked unit vectors.

An :class:`Embedder` puts a provider behind an :class:`EmbeddingGate` (concurrency and one
deadline per call) and a :class:`MemoryTextProjector` (what text is embedded), and checks
what comes back: the shape its identity promises, finite values, not all zero. Every
vector it returns is L2-normalized float32, so a dot product is the cosine.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.projector import MemoryTextProjector
from game_memory.embedding.provider import EmbeddingProvider, EmbeddingVector
from game_memory.errors import EmbeddingUnavailableError
from game_memory.model import GameMemory, GameMemoryQuery, MemoryEmbeddingIdentity

__all__ = ["CACHED_QUERY_BYTES", "CACHED_QUERY_CHARACTERS", "Embedder"]

#: Longest query text whose vector is remembered; longer ones are embedded each time.
CACHED_QUERY_CHARACTERS = 2_048
#: Most bytes of characters a remembered text may hold in memory (``sys.getsizeof`` beyond
#: an empty string's): Python stores a text at 1, 2 or 4 bytes per character by its widest
#: one, so 2,048 characters can take 8 KiB; this bounds the cache's keys at 2 KiB each
#: (2 MiB for 1,024 texts) whatever the script: 2,048 ASCII characters, about 1,000 CJK,
#: about 500 emoji.
CACHED_QUERY_BYTES = 2_048
_CACHED_QUERY_SIZE = sys.getsizeof("") + CACHED_QUERY_BYTES


class Embedder:
    """A provider with its gate and projector; the identity is fixed at construction.

    Args:
        provider: The embedding model.
        gate: Bounds concurrent calls and gives each a deadline.
        projector: What text of a memory or query is embedded.
        query_cache: How many query vectors to remember, by text (least recently used
            forgotten; 0: none). An NPC is asked the same questions again and again, and
            a model takes milliseconds per question where a lookup takes microseconds; the
            vector of a text is the same each time (the identity is fixed, and a query is
            embedded alone), so a remembered one is the one the model would return.
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        gate: EmbeddingGate,
        projector: MemoryTextProjector,
        *,
        query_cache: int = 0,
    ) -> None:
        self.provider = provider
        self.identity: MemoryEmbeddingIdentity = provider.identity
        self.projector = projector
        self._gate = gate
        self._query_cache = query_cache
        self._queries: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._texts_per_call = _stated_limit(provider, "maximum_texts_per_call")
        self._characters = _stated_limit(provider, "maximum_characters_per_text")

    def query_text(self, query: GameMemoryQuery) -> str:
        """The text embedded for ``query`` (empty without text: vector recall is skipped)."""
        return self._fit(self.projector.project_query(query))

    def _fit(self, text: str) -> str:
        """``text`` cut to the provider's stated longest text, if it states one."""
        limit = self._characters
        return text[:limit] if limit is not None and len(text) > limit else text

    def remembered(self, text: str) -> npt.NDArray[np.float32] | None:
        """The vector of ``text`` from the query cache (marked recently used), or ``None``:
        what :meth:`embed_query` would answer without a provider call."""
        remembered = self._queries.get(text)
        if remembered is not None:
            self._queries.move_to_end(text)
        return remembered

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed a query text through the gate; one normalized vector (read-only).

        A text embedded before is answered from the query cache (see the class), without
        a provider call; only vectors that passed the checks are remembered, and only for
        texts within :data:`CACHED_QUERY_CHARACTERS` and :data:`CACHED_QUERY_BYTES`.

        Raises:
            EmbeddingTimeoutError: the queue or the call exceeded the deadline.
            EmbeddingUnavailableError: the provider failed or returned a bad vector.
        """
        remembered = self.remembered(text)
        if remembered is not None:
            return remembered
        embedded = await self._gate.call(lambda: self.provider.embed_query(text), "the query")
        vector = self._normalize(embedded)
        vector.flags.writeable = False
        if (
            self._query_cache
            and len(text) <= CACHED_QUERY_CHARACTERS
            and sys.getsizeof(text) <= _CACHED_QUERY_SIZE
        ):
            self._queries[text] = vector
            if len(self._queries) > self._query_cache:
                self._queries.popitem(last=False)
        return vector

    async def embed_documents(
        self, memories: Sequence[GameMemory], what: str
    ) -> npt.NDArray[np.float32]:
        """Embed memories through the gate; one normalized row per memory, in order.

        ``what`` names the work in error messages (``"memory 'm1'"``).

        Raises:
            EmbeddingTimeoutError: the queue or the call exceeded the deadline.
            EmbeddingUnavailableError: the provider failed or returned a bad batch.
        """
        texts = [self._fit(self.projector.project_document(memory)) for memory in memories]
        per_call = self._texts_per_call or len(texts)
        if len(texts) <= per_call:
            return self._normalize_rows(await self._embed_call(texts, what))
        # More texts than the provider takes at once: one call (and one deadline) each.
        parts = [
            self._normalize_rows(await self._embed_call(texts[start : start + per_call], what))
            for start in range(0, len(texts), per_call)
        ]
        return np.concatenate(parts)

    async def _embed_call(self, texts: list[str], what: str) -> Sequence[EmbeddingVector]:
        vectors = await self._gate.call(lambda: self.provider.embed_documents(texts), what)
        if vectors is None or len(vectors) != len(texts):
            raise EmbeddingUnavailableError(
                f"{what}: the provider returned an invalid batch size "
                f"({'none' if vectors is None else len(vectors)} vectors for {len(texts)} texts)"
            )
        return vectors

    def _normalize_rows(self, vectors: Sequence[EmbeddingVector]) -> npt.NDArray[np.float32]:
        """:meth:`_normalize` of each vector, as one matrix: the checks and the division
        run once over the batch (a bulk append embeds hundreds per call), with the same
        arithmetic per row (so the same float32 values) and the same errors."""
        dimensions = self.identity.dimensions
        try:
            matrix = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError):  # ragged or not numbers: the per-vector checks say
            matrix = None
        if (
            matrix is None
            or matrix.shape != (len(vectors), dimensions)
            or not np.isfinite(matrix).all()
        ):
            return np.stack([self._normalize(vector) for vector in vectors])
        with np.errstate(over="ignore", under="ignore"):
            norms = [math.sqrt(float(row @ row)) for row in matrix]
        if 0.0 in norms or math.inf in norms:  # all zero, or a sum of squares out of range
            return np.stack([self._normalize(vector) for vector in vectors])
        normalized: npt.NDArray[np.float32] = (
            matrix / np.array(norms, dtype=np.float64)[:, None]
        ).astype(np.float32)
        return normalized

    def _normalize(self, vector: EmbeddingVector) -> npt.NDArray[np.float32]:
        array = np.asarray(vector, dtype=np.float64)
        dimensions = self.identity.dimensions
        if array.shape != (dimensions,):
            raise EmbeddingUnavailableError(
                f"the provider returned a vector of shape {array.shape}; its identity "
                f"{self.identity} promises {dimensions} dimensions"
            )
        if not np.isfinite(array).all():
            raise EmbeddingUnavailableError("the provider returned a vector with NaN or infinity")
        with np.errstate(over="ignore", under="ignore"):
            norm = math.sqrt(float(array @ array))
        if norm == 0.0 or math.isinf(norm):
            # The sum of squares left float64's range (components near 1e154 or beyond, or
            # all below 1e-154): scaled by the largest first, the direction is exact.
            largest = float(np.abs(array).max())
            if largest == 0.0:
                raise EmbeddingUnavailableError("the provider returned an all-zero vector")
            array = array / largest
            norm = math.sqrt(float(array @ array))
        return (array / norm).astype(np.float32)


def _stated_limit(provider: EmbeddingProvider, name: str) -> int | None:
    """A limit the provider states (``EmbeddingProvider``'s optional attributes), or
    ``None``: one that is not a positive ``int`` is not a statement the store can use."""
    value = getattr(provider, name, None)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
