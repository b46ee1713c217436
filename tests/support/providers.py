"""Embedding providers for the vector tests: a deterministic one and a fault-injecting one.

:class:`FaultyProvider` wraps :class:`HashingEmbeddingProvider` (deterministic; ``synonyms``
put paraphrases on one axis) and can be told, per operation, to fail, hang, hang while
ignoring cancellation, raise before returning an awaitable, or return wrong sizes, NaN or
zero vectors. It counts calls, texts and calls in flight, so tests can prove what ran.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from game_memory import EmbeddingUnavailableError, HashingEmbeddingProvider, MemoryEmbeddingIdentity

__all__ = ["SYNONYMS", "Fault", "FaultyProvider", "Vector"]

Vector = npt.NDArray[np.float32]

#: Words the test provider maps onto one axis: "feline" embeds exactly like "cat".
SYNONYMS: Mapping[str, str] = {
    "feline": "cat",
    "kitten": "cat",
    "hound": "dog",
    "puppy": "dog",
    "blade": "sword",
}


class Fault(enum.Enum):
    """What a :class:`FaultyProvider` call does."""

    NONE = "none"
    FAIL = "fail"  # raises EmbeddingUnavailableError
    CRASH = "crash"  # raises a foreign error (RuntimeError)
    RAISE_EARLY = "raise_early"  # raises before returning an awaitable (a sync bug)
    HANG = "hang"  # waits until released; honours cancellation
    HANG_STUBBORN = "hang_stubborn"  # waits until released; swallows cancellation
    WRONG_SIZE = "wrong_size"  # vectors one dimension short
    WRONG_COUNT = "wrong_count"  # one vector too few in a batch
    NAN = "nan"  # a NaN in every vector
    ZERO = "zero"  # all-zero vectors


@dataclass
class _Counters:
    calls: int = 0
    texts: list[str] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    cancelled: int = 0
    settled: int = 0


class FaultyProvider:
    """A deterministic provider whose queries and documents can be made to misbehave.

    Args:
        dimensions: Vector width.
        version: Identity version (change it to simulate a model change).
        synonyms: Word mapping for the hashing provider (default :data:`SYNONYMS`).
    """

    def __init__(
        self,
        dimensions: int = 256,
        *,
        version: str = "v1",
        synonyms: Mapping[str, str] | None = None,
    ) -> None:
        self.inner = HashingEmbeddingProvider(
            dimensions, synonyms=SYNONYMS if synonyms is None else synonyms, version=version
        )
        self.query_fault = Fault.NONE
        self.document_fault = Fault.NONE
        self.release = asyncio.Event()
        self.queries = _Counters()
        self.documents = _Counters()
        self.closed = 0
        #: Called with the texts at the start of every ``embed_documents`` (may be async).
        self.on_documents: Callable[[Sequence[str]], Awaitable[None] | None] | None = None

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        return self.inner.identity

    def set_fault(self, fault: Fault) -> None:
        """Make both queries and documents misbehave as ``fault``."""
        self.query_fault = self.document_fault = fault

    def embed_query(self, text: str) -> Awaitable[Vector]:
        if self.query_fault is Fault.RAISE_EARLY:
            raise RuntimeError("the provider broke before starting")
        return self._query(text)

    def embed_documents(self, texts: Sequence[str]) -> Awaitable[list[Vector]]:
        if self.document_fault is Fault.RAISE_EARLY:
            raise RuntimeError("the provider broke before starting")
        return self._documents(list(texts))

    async def _query(self, text: str) -> Vector:
        vectors = await self._run(self.queries, self.query_fault, [text])
        return vectors[0]

    async def _documents(self, texts: list[str]) -> list[Vector]:
        if self.on_documents is not None:
            result = self.on_documents(texts)
            if result is not None:
                await result
        vectors = await self._run(self.documents, self.document_fault, texts)
        if self.document_fault is Fault.WRONG_COUNT:
            return vectors[:-1]
        return vectors

    async def _run(self, counters: _Counters, fault: Fault, texts: list[str]) -> list[Vector]:
        counters.calls += 1
        counters.texts.extend(texts)
        counters.in_flight += 1
        counters.most_in_flight = max(counters.most_in_flight, counters.in_flight)
        try:
            await asyncio.sleep(0)
            if fault is Fault.FAIL:
                raise EmbeddingUnavailableError("the test provider is down")
            if fault is Fault.CRASH:
                raise RuntimeError("the test provider crashed")
            if fault is Fault.HANG:
                await self.release.wait()
            elif fault is Fault.HANG_STUBBORN:
                while not self.release.is_set():
                    try:
                        await self.release.wait()
                    except asyncio.CancelledError:
                        counters.cancelled += 1  # ignored on purpose
            vectors = [self.inner.embed(text) for text in texts]
            if fault is Fault.WRONG_SIZE:
                return [vector[:-1] for vector in vectors]
            if fault is Fault.NAN:
                for vector in vectors:
                    vector[0] = np.nan
            if fault is Fault.ZERO:
                return [np.zeros_like(vector) for vector in vectors]
            return vectors
        except asyncio.CancelledError:
            counters.cancelled += 1
            raise
        finally:
            counters.in_flight -= 1
            counters.settled += 1

    async def aclose(self) -> None:
        self.closed += 1
