"""Joined partitions built by hand, and the vector top-k written plainly: what the tests
of a recall's vector scoring compare against (``tests/recall/test_vector_scoring.py``,
``tests/recall/test_quantized.py``)."""

from __future__ import annotations

import math
import operator
import os

import numpy as np
import numpy.typing as npt

from game_memory import GameMemory
from game_memory.durable.names import identity_hash
from game_memory.index.entries import (
    EntryRecord,
    EntryState,
    MemoryDigests,
    content_digest,
    decode_entries,
    encode_entry,
    memory_hash,
)
from game_memory.index.join import JoinCache, PartitionJoin
from game_memory.index.partition import extend_partition
from game_memory.model import ordinal_key
from game_memory.store.view import PartitionView

__all__ = ["ACTIVE", "Part", "part_of", "reference_top"]

ACTIVE = 0
#: A joined partition, its matrix and the view's visibility mask: one part of a recall.
Part = tuple[PartitionJoin, npt.NDArray[np.float32], npt.NDArray[np.bool_]]


def _view(memories: list[GameMemory]) -> PartitionView:
    positions = {memory.memory_id: index for index, memory in enumerate(memories)}
    return PartitionView("session", memories[0].owner_id, tuple(memories), positions)


def part_of(memories: list[GameMemory], rows: list[int], matrix: np.ndarray) -> PartitionJoin:
    records = [
        EntryRecord(
            state=EntryState.READY,
            identity=ACTIVE,
            row=row,
            memory_hash=memory_hash(memory.memory_id),
            digest=content_digest(memory),
            code="",
        )
        for memory, row in zip(memories, rows, strict=True)
    ]
    decoded, _ = decode_entries(b"".join(encode_entry(record, 7) for record in records))
    partition = extend_partition(
        None,
        decoded,
        identity_hash("session"),
        identity_hash(memories[0].owner_id),
        os.stat(__file__),  # any stat: the partition is never compared with a file
    )
    return JoinCache(MemoryDigests()).join(_view(memories), partition, ACTIVE)


def reference_top(
    parts: list[Part], query: npt.NDArray[np.float32], limit: int
) -> list[tuple[str, float, list[float]]]:
    """The vector top-k written plainly: every visible row scored alone, in float64 (each
    term exact, a plain left-to-right sum), rounded once to float32."""
    rows: list[tuple[tuple[float, float, int, str, str], str, float, list[float]]] = []
    for joined, matrix, visible in parts:
        assert joined.view is not None
        whole = np.clip(
            np.array(
                [math.fsum(map(operator.mul, row, query.tolist())) for row in matrix.tolist()],
                dtype=np.float32,
            ),
            -1.0,
            1.0,
        )
        for position, row in zip(joined.positions.tolist(), joined.rows.tolist(), strict=True):
            if not visible[position]:
                continue
            memory = joined.view.memories[position]
            score = float(whole[row])
            key = (
                -score,
                -memory.importance,
                -memory.moment.tick,
                ordinal_key(memory.owner_id),
                ordinal_key(memory.memory_id),
            )
            rows.append((key, memory.memory_id, score, matrix[row].tolist()))
    rows.sort(key=lambda entry: entry[0])
    return [(memory_id, score, vector) for _, memory_id, score, vector in rows[:limit]]
