"""What every in-process ONNX provider shares: the ``EmbeddingProvider`` surface on an engine."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Self

import numpy as np
import numpy.typing as npt

from game_memory.errors import InvalidArgumentError
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.metrics import OnnxOperation

__all__ = ["OnnxEmbeddingProviderBase"]


class OnnxEmbeddingProviderBase:
    """An ``EmbeddingProvider`` whose vectors come from an :class:`OnnxInferenceEngine`.

    Vectors are float32 and already L2-normalized. Safe to call concurrently from one
    event loop; inference never runs on the loop. Use ``async with`` or call ``aclose()``.

    Args:
        identity: The identity of the vectors (the prefixes must be part of it).
        engine: Runs the model.
        query_prefix: Put before every query text before tokenization (e5: ``query: ``).
        document_prefix: Put before every document text (e5: ``passage: ``).
    """

    def __init__(
        self,
        identity: MemoryEmbeddingIdentity,
        engine: OnnxInferenceEngine,
        *,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        self._identity = identity
        self._engine = engine
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        """Provider, model, version (weights, tokenizer, preprocessing) and width."""
        return self._identity

    @property
    def engine(self) -> OnnxInferenceEngine:
        """The engine running this provider's model."""
        return self._engine

    @property
    def maximum_texts_per_call(self) -> int:
        """The most texts one :meth:`embed_documents` call takes (the store splits larger
        batches into calls of at most this many; ``EmbeddingProvider``)."""
        return self._engine.limits.maximum_texts_per_call

    @property
    def maximum_characters_per_text(self) -> int:
        """The longest text a call takes (the store cuts longer ones before the call)."""
        return self._engine.limits.maximum_characters_per_text

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one query text (after the query prefix, if the model has one).

        Raises:
            InvalidArgumentError: ``text`` is not a string.
            OnnxEmbeddingError: With the failure's kind; see ``docs/embeddings.md``.
            asyncio.CancelledError: The caller cancelled; the run was terminated.
        """
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, not {type(text).__name__}")
        (vector,) = await self._engine.embed(
            (text,), OnnxOperation.QUERY, prefix=self._query_prefix
        )
        return vector

    async def embed_documents(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Embed 1..``maximum_texts_per_call`` texts (after the document prefix, if any).

        One vector per text, in order.

        Raises:
            InvalidArgumentError: ``texts`` is empty, too long or holds a non-string.
            OnnxEmbeddingError: With the failure's kind; see ``docs/embeddings.md``.
            asyncio.CancelledError: The caller cancelled; the run was terminated.
        """
        return await self._engine.embed(
            texts, OnnxOperation.DOCUMENTS, prefix=self._document_prefix
        )

    async def aclose(self) -> None:
        """Cancel running work and release the model; idempotent. Later calls fail ``CLOSED``."""
        await self._engine.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
