"""A deterministic embedding provider for tests, examples and the bridge's ``hashing`` model.

It hashes word tokens into signed buckets (the "hashing trick"), so texts that share words
have similar vectors and nothing is loaded or downloaded. It is not a semantic model: use
``synonyms`` to map words onto one another where a test needs paraphrases to meet
(``{"feline": "cat"}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from game_memory.errors import EmbeddingUnavailableError
from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = ["HashingEmbeddingProvider"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class HashingEmbeddingProvider:
    """Embed text by feature hashing of lower-cased words; deterministic across runs.

    Args:
        dimensions: Width of the vectors (1..65,536).
        synonyms: Words to replace before hashing, so that they share a bucket.
        version: Part of the identity; change it to simulate a model change.
    """

    def __init__(
        self,
        dimensions: int = 256,
        *,
        synonyms: Mapping[str, str] | None = None,
        version: str = "v1",
    ) -> None:
        self._identity = MemoryEmbeddingIdentity(
            provider_id="hashing",
            model_id="feature-hashing-words",
            version=version,
            dimensions=dimensions,
        )
        self._synonyms = {key.lower(): value.lower() for key, value in (synonyms or {}).items()}
        self._closed = False

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        """The identity of every vector this provider returns."""
        return self._identity

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one text synchronously (the async methods wrap this)."""
        dimensions = self._identity.dimensions
        vector = np.zeros(dimensions, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            word = self._synonyms.get(word, word)
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % dimensions
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
        if not vector.any():
            # An empty or wordless text still gets a valid, non-zero vector.
            vector[0] = 1.0
        return vector

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query text."""
        self._check_open()
        await asyncio.sleep(0)
        return self.embed(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Embed documents, one vector per text in order."""
        self._check_open()
        await asyncio.sleep(0)
        return [self.embed(text) for text in texts]

    async def aclose(self) -> None:
        """Mark the provider closed; idempotent."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise EmbeddingUnavailableError(
                "the hashing embedding provider is closed; create a new one"
            )
