"""The store keeps within an ONNX provider's own limits (the tiny BGE-M3 graph, real engine).

The engine refuses a text holding NUL, a text past ``maximum_characters_per_text`` and a call
of more than ``maximum_texts_per_call`` texts, each for the whole call. A memory may hold any
of those, and a rebuild batch may be larger than a call: so one memory, or one option inside
its documented range, left a session's vectors unbuilt for good ("run the rebuild again"
never finished). The store now fits what it sends to the limits the provider states.
"""

from __future__ import annotations

from pathlib import Path

import tiny_xlmr_model as tiny

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    VectorMemoryState,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.onnx import BgeM3OnnxEmbeddingOptions, BgeM3OnnxEmbeddingProvider

SESSION = "slot-1"


def memory(index: int, text: str) -> GameMemory:
    return GameMemory(
        memory_id=f"m{index}",
        session_id=SESSION,
        owner_id="mira",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=index),
        searchable_text=text,
    )


async def open_store(
    tmp_path: Path,
    folder: Path,
    *,
    with_provider: bool = True,
    options: VectorMemoryStoreOptions | None = None,
    **onnx: object,
) -> VectorMemoryStore:
    provider = (
        await BgeM3OnnxEmbeddingProvider.create(BgeM3OnnxEmbeddingOptions(folder, **onnx))
        if with_provider
        else None
    )
    return VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "save.index"),
        provider,
        options=options,
    )


def texts(count: int) -> list[str]:
    return [tiny.CORPUS[i % len(tiny.CORPUS)] + f" {i}" for i in range(count)]


async def test_a_memory_holding_nul_gets_its_vector_and_does_not_stop_a_rebuild(
    tmp_path: Path, bge_folder: Path
) -> None:
    corpus = texts(12)
    corpus[0] = "a note\x00from the bard"
    # Saved without a model (as a lexical game would), then rebuilt with one.
    async with await open_store(tmp_path, bge_folder, with_provider=False) as store:
        assert all(await store.append_many([memory(i, t) for i, t in enumerate(corpus)]))
    async with await open_store(tmp_path, bge_folder) as store:
        status = await store.rebuild(SESSION)
        assert status.state is VectorMemoryState.READY
        assert status.ready_entries == len(corpus)
        # And appended with the model: the memory's own vector is written.
        assert await store.append(memory(99, "another\x00note"))
        assert (await store.get_status(SESSION)).ready_entries == len(corpus) + 1
        query = GameMemoryQuery(session_id=SESSION, text="a note\x00from the bard", limit=3)
        assert (await store.recall(query)).fallback is False


async def test_a_rebuild_batch_larger_than_a_provider_call_is_split_into_calls(
    tmp_path: Path, bge_folder: Path
) -> None:
    corpus = texts(40)
    async with await open_store(tmp_path, bge_folder, with_provider=False) as store:
        assert all(await store.append_many([memory(i, t) for i, t in enumerate(corpus)]))
    options = VectorMemoryStoreOptions(rebuild_batch_size=1_024)
    async with await open_store(
        tmp_path, bge_folder, options=options, maximum_texts_per_call=8
    ) as store:
        status = await store.rebuild(SESSION)
        assert status.state is VectorMemoryState.READY
        assert status.ready_entries == len(corpus)


async def test_a_bulk_append_larger_than_a_provider_call_gets_every_vector(
    tmp_path: Path, bge_folder: Path
) -> None:
    corpus = texts(20)
    async with await open_store(tmp_path, bge_folder, maximum_texts_per_call=8) as store:
        assert all(await store.append_many([memory(i, t) for i, t in enumerate(corpus)]))
        assert (await store.get_status(SESSION)).ready_entries == len(corpus)


async def test_a_text_longer_than_the_provider_takes_is_cut_not_refused(
    tmp_path: Path, bge_folder: Path
) -> None:
    long_text = " ".join(tiny.CORPUS) * 4
    async with await open_store(tmp_path, bge_folder, maximum_characters_per_text=64) as store:
        assert len(long_text) > 64
        assert all(await store.append_many([memory(0, long_text), memory(1, tiny.CORPUS[1])]))
        assert (await store.get_status(SESSION)).ready_entries == 2
        result = await store.recall(GameMemoryQuery(session_id=SESSION, text=long_text, limit=2))
        assert result.fallback is False and result.hits
