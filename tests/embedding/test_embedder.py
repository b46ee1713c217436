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


class _Counting:
    """A provider whose query vector depends on the text, counting its calls."""

    def __init__(self, failing: str = "") -> None:
        self.calls: list[str] = []
        self.failing = failing
        self.identity = MemoryEmbeddingIdentity(
            provider_id="counting", model_id="counting", version="1", dimensions=4
        )

    async def embed_query(self, text: str) -> Any:
        self.calls.append(text)
        if text == self.failing:
            raise RuntimeError("the model failed")
        return [float(len(text)), 1.0, 0.0, float(text.count("a"))]

    async def embed_documents(self, texts: Sequence[str]) -> list[Any]:
        raise AssertionError("not used")

    async def aclose(self) -> None:
        return None


def _cached(provider: _Counting, entries: int) -> Embedder:
    gate = EmbeddingGate(1, 30.0)
    return Embedder(provider, gate, MemoryTextProjector(), query_cache=entries)  # type: ignore[arg-type]


async def test_a_question_asked_again_is_answered_without_the_model() -> None:
    provider = _Counting()
    embedder = _cached(provider, 2)
    first = await embedder.embed_query("where is the ferry")
    again = await embedder.embed_query("where is the ferry")
    assert provider.calls == ["where is the ferry"]
    assert again is first and not first.flags.writeable  # one read-only vector, shared
    assert first.tobytes() == embedder._normalize([18.0, 1.0, 0.0, 0.0]).tobytes()
    with pytest.raises(ValueError, match="read-only"):
        first[0] = 2.0


async def test_the_least_recently_used_question_is_forgotten_first() -> None:
    provider = _Counting()
    embedder = _cached(provider, 2)
    for text in ("a", "b", "a", "c", "a", "b"):  # "b" is forgotten when "c" comes
        await embedder.embed_query(text)
    assert provider.calls == ["a", "b", "c", "b"]


async def test_nothing_is_remembered_without_a_cache_a_long_text_or_a_failure() -> None:
    provider = _Counting(failing="broken")
    off = _cached(provider, 0)
    await off.embed_query("twice")
    await off.embed_query("twice")
    long = "x" * 2_049
    embedder = _cached(provider, 8)
    await embedder.embed_query(long)
    await embedder.embed_query(long)
    for _ in range(2):
        with pytest.raises(EmbeddingUnavailableError):
            await embedder.embed_query("broken")
    assert provider.calls == ["twice", "twice", long, long, "broken", "broken"]


@pytest.mark.parametrize("entries", [1_024, 0])
async def test_the_front_door_remembers_query_vectors_as_its_options_say(
    tmp_path: Any, make_memory: MemoryFactory, entries: int
) -> None:
    from game_memory import GameMemoryQuery, VectorMemoryStoreOptions, open_memory
    from game_memory.embedding.hashing import HashingEmbeddingProvider

    class Counted(HashingEmbeddingProvider):
        calls = 0

        async def embed_query(self, text: str) -> Any:
            Counted.calls += 1
            return await super().embed_query(text)

    options = VectorMemoryStoreOptions(query_embedding_cache=entries)
    memory = await open_memory(tmp_path / "save", model=Counted(), options=options)
    async with memory:
        await memory.append(make_memory("m1", text="the well is dry"))
        query = GameMemoryQuery(session_id="session", text="the well", limit=3)
        first = await memory.recall(query)
        again = await memory.recall(query)
    assert not first.fallback and [h.memory.memory_id for h in first.hits] == ["m1"]
    assert [(h.memory.memory_id, h.vector_score) for h in again.hits] == [
        (h.memory.memory_id, h.vector_score) for h in first.hits
    ]
    assert Counted.calls == (1 if entries else 2)


async def test_a_remembered_text_takes_at_most_two_kib_whatever_its_script() -> None:
    """The options promise at most 2 KiB per remembered text: 2,048 characters of ASCII,
    but 2,048 emoji take 8 KiB in memory (four bytes each), so those are embedded each
    time instead of remembered (1,024 of them would have held 8 MiB of keys)."""
    provider = _Counting()
    embedder = _cached(provider, 8)
    ascii_text, cjk_text = "a" * 2_048, "中" * 1_000  # 2,048 and 2,000 bytes of characters
    emoji_text, wide_cjk = "\N{GRINNING FACE}" * 2_048, "中" * 2_048  # 8,192 and 4,096 bytes
    for text in (ascii_text, cjk_text, emoji_text, wide_cjk) * 2:
        await embedder.embed_query(text)
    assert provider.calls == [ascii_text, cjk_text, emoji_text, wide_cjk, emoji_text, wide_cjk]
