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
from pydantic import ValidationError

from game_memory.errors import EmbeddingUnavailableError, InvalidArgumentError
from game_memory.model.identity import MemoryEmbeddingIdentity

__all__ = ["HashingEmbeddingProvider"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def _identity(dimensions: object, version: str) -> MemoryEmbeddingIdentity:
    """The provider's identity, its arguments checked with the identity's own rules.

    Raises:
        InvalidArgumentError: ``dimensions`` is not an integer from 1 to 65,536, or
            ``version`` is not a non-blank label (the identity's pydantic error, named).
    """
    if (
        isinstance(dimensions, bool)
        or not isinstance(dimensions, int)
        or not 1 <= dimensions <= 65_536
    ):
        shown = dimensions if isinstance(dimensions, int) else type(dimensions).__name__
        raise InvalidArgumentError(f"dimensions must be an integer from 1 to 65,536, not {shown}")
    try:
        return MemoryEmbeddingIdentity(
            provider_id="hashing",
            model_id="feature-hashing-words",
            version=version,
            dimensions=dimensions,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "an argument"
        reason = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidArgumentError(f"{name} of the hashing provider {reason}") from exc


def _synonyms(synonyms: object) -> dict[str, str]:
    """``synonyms`` lower-cased, checked: a mapping of words to words, or ``None``.

    Raises:
        InvalidArgumentError: not a mapping, or a key or value is not a string.
    """
    if synonyms is None:
        return {}
    if not isinstance(synonyms, Mapping):
        raise InvalidArgumentError(
            "synonyms must be a mapping of words to words, such as {'feline': 'cat'}, not "
            f"{type(synonyms).__name__}"
        )
    words = list(synonyms.items())
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in words):
        raise InvalidArgumentError("synonyms must map words (strings) to words (strings)")
    return {key.lower(): value.lower() for key, value in words}


class HashingEmbeddingProvider:
    """Embed text by feature hashing of lower-cased words; deterministic across runs.

    Args:
        dimensions: Width of the vectors (1..65,536).
        synonyms: Words to replace before hashing, so that they share a bucket.
        version: Part of the identity; change it to simulate a model change.

    Raises:
        InvalidArgumentError: an argument is of the wrong type or out of its bounds
            (the message names it).
    """

    def __init__(
        self,
        dimensions: int = 256,
        *,
        synonyms: Mapping[str, str] | None = None,
        version: str = "v1",
    ) -> None:
        self._identity = _identity(dimensions, version)
        self._synonyms = _synonyms(synonyms)
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
        """Embed one query text.

        Raises:
            InvalidArgumentError: ``text`` is not a string.
            EmbeddingUnavailableError: the provider was closed.
        """
        self._check_open()
        if not isinstance(text, str):
            raise InvalidArgumentError(f"embed_query takes a text (str), not {type(text).__name__}")
        await asyncio.sleep(0)
        return self.embed(text)

    async def embed_documents(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Embed documents, one vector per text in order.

        Raises:
            InvalidArgumentError: ``texts`` is not a list of strings (a single string
                included: it is one text, not a list of its characters).
            EmbeddingUnavailableError: the provider was closed.
        """
        self._check_open()
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidArgumentError(
                f"embed_documents takes a list of texts (str), not {type(texts).__name__}"
            )
        if not all(isinstance(text, str) for text in texts):
            raise InvalidArgumentError("embed_documents takes a list of texts (str) only")
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
