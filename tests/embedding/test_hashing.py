"""HashingEmbeddingProvider: the deterministic provider tests and the terminal demo use."""

from __future__ import annotations

import numpy as np
import pytest

from game_memory import EmbeddingProvider, EmbeddingUnavailableError, HashingEmbeddingProvider


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_same_text_always_embeds_to_the_same_vector() -> None:
    first = HashingEmbeddingProvider(64).embed("The cat sat")
    again = HashingEmbeddingProvider(64).embed("the CAT sat")
    assert first.dtype == np.float32 and first.shape == (64,)
    assert np.array_equal(first, again)


def test_synonyms_put_paraphrases_on_one_axis() -> None:
    provider = HashingEmbeddingProvider(64, synonyms={"feline": "cat"})
    assert np.array_equal(provider.embed("feline"), provider.embed("cat"))
    plain = HashingEmbeddingProvider(64)
    assert cosine(plain.embed("feline"), plain.embed("cat")) < 0.99


def test_a_text_without_words_still_gets_a_nonzero_vector() -> None:
    assert np.linalg.norm(HashingEmbeddingProvider(8).embed("  !? ")) > 0


async def test_it_satisfies_the_provider_protocol_and_refuses_calls_once_closed() -> None:
    provider = HashingEmbeddingProvider(16)
    assert isinstance(provider, EmbeddingProvider)
    assert len(await provider.embed_documents(["a", "b"])) == 2
    await provider.aclose()
    await provider.aclose()
    with pytest.raises(EmbeddingUnavailableError, match="closed"):
        await provider.embed_query("a")
