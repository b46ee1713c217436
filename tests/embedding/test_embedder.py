"""The embedder's checks and normalization, one vector at a time or a batch at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from game_memory import EmbeddingUnavailableError, MemoryEmbeddingIdentity
from game_memory.embedding.embedder import Embedder
from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.projector import MemoryTextProjector
from support.vectors import MemoryFactory


class _Given:
    """A provider that returns the vectors it is given, whatever they are."""

    def __init__(self, vectors: Sequence[Any]) -> None:
        self.vectors = vectors
        self.identity = MemoryEmbeddingIdentity(
            provider_id="given", model_id="given", version="1", dimensions=4
        )

    async def embed_query(self, text: str) -> Any:
        return self.vectors[0]

    async def embed_documents(self, texts: Sequence[str]) -> list[Any]:
        return list(self.vectors)

    async def aclose(self) -> None:
        return None


def _embedder(vectors: Sequence[Any]) -> Embedder:
    return Embedder(_Given(vectors), EmbeddingGate(1, 30.0), MemoryTextProjector())  # type: ignore[arg-type]


async def test_a_batch_is_normalized_to_the_same_float32_values_as_one_at_a_time(
    make_memory: MemoryFactory,
) -> None:
    rng = np.random.default_rng(7)
    vectors = [rng.standard_normal(4).astype(np.float32) for _ in range(64)]
    vectors += [rng.standard_normal(4).tolist(), (rng.standard_normal(4) * 1e-30)]
    embedder = _embedder(vectors)
    memories = [make_memory(f"m{n}") for n in range(len(vectors))]
    batch = await embedder.embed_documents(memories, "a batch")
    one_by_one = np.stack([embedder._normalize(vector) for vector in vectors])
    assert batch.dtype == np.float32 and batch.shape == (len(vectors), 4)
    assert batch.tobytes() == one_by_one.tobytes()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([1.0, 2.0, 3.0], "shape"),
        ([1.0, float("nan"), 0.0, 0.0], "NaN or infinity"),
        ([0.0, 0.0, 0.0, 0.0], "all-zero"),
    ],
)
async def test_a_bad_vector_in_a_batch_fails_it_with_the_one_vector_message(
    bad: Any, message: str, make_memory: MemoryFactory
) -> None:
    embedder = _embedder([[1.0, 0.0, 0.0, 0.0], bad])
    with pytest.raises(EmbeddingUnavailableError, match=message):
        await embedder.embed_documents([make_memory("a"), make_memory("b")], "a batch")
