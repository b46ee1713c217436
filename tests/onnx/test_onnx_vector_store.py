"""The BGE-M3 provider (tiny graph) under the hybrid vector store: round trip and identity."""

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


async def open_store(tmp_path: Path, folder: Path, **options: object) -> VectorMemoryStore:
    provider = await BgeM3OnnxEmbeddingProvider.create(BgeM3OnnxEmbeddingOptions(folder, **options))
    return VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "save.index"),
        provider,
    )


async def test_vectors_round_trip_through_the_store_and_a_new_identity_needs_a_rebuild(
    tmp_path: Path, bge_folder: Path
) -> None:
    async with await open_store(tmp_path, bge_folder) as store:
        for index, text in enumerate(tiny.CORPUS):
            assert await store.append(memory(index, text))
        status = await store.get_status(SESSION)
        assert status.state is VectorMemoryState.READY
        assert status.ready_entries == len(tiny.CORPUS)
        assert status.active_identity == store.provider.identity
        hits = await store.search(
            GameMemoryQuery(
                session_id=SESSION,
                owner_id="mira",
                text=tiny.CORPUS[3],
                limit=3,
                at_or_before=GameMoment(timeline_id="main", tick=100),
            )
        )
        assert hits and hits[0].memory_id == "m3"

    # Same weights and tokenizer, other truncation: the identity differs, so the old
    # vectors are stale until a rebuild.
    async with await open_store(tmp_path, bge_folder, maximum_tokens=64) as store:
        status = await store.get_status(SESSION)
        assert status.state is VectorMemoryState.REBUILD_REQUIRED
        rebuilt = await store.rebuild(SESSION)
        assert rebuilt.state is VectorMemoryState.READY
        assert rebuilt.ready_entries == len(tiny.CORPUS)

    async with await open_store(tmp_path, bge_folder, maximum_tokens=64) as store:
        assert (await store.get_status(SESSION)).state is VectorMemoryState.READY
