"""What the erase tests of the derived index share: a witness's memory, the float32 bytes
of its vector (what must not stay on disk once it is erased), and a grep for them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from game_memory import GameMemory, GameMoment
from game_memory.embedding.embedder import Embedder
from game_memory.embedding.gate import EmbeddingGate
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.projector import MemoryTextProjector

__all__ = ["files_holding", "vector_bytes", "witnessed"]


def witnessed(memory_id: str, text: str, tick: int = 1) -> GameMemory:
    """A memory of NPC ``mira`` in slot ``slot``: ``text`` after its id."""
    return GameMemory(
        memory_id=memory_id,
        session_id="slot",
        owner_id="mira",
        scope="personal",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=tick),
        searchable_text=f"{memory_id} {text}",
    )


async def vector_bytes(memories: Sequence[GameMemory]) -> list[bytes]:
    """Each memory's vector by the hashing model, as the index writes it (float32 bytes)."""
    embedder = Embedder(HashingEmbeddingProvider(), EmbeddingGate(1, 60.0), MemoryTextProjector())
    matrix = await embedder.embed_documents(list(memories), "the erased memories")
    return [np.asarray(row, dtype="<f4").tobytes() for row in matrix]


def files_holding(folder: Path, vectors: Sequence[bytes]) -> list[str]:
    """The names of the files under ``folder`` holding any of ``vectors``, sorted."""
    return sorted(
        path.name
        for path in folder.rglob("*")
        if path.is_file() and any(vector in path.read_bytes() for vector in vectors)
    )
