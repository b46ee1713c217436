"""``fusion.fuse`` gives exactly the candidates of the implementation it replaced.

``fuse_reference`` below is ``fuse`` as it stood before it was made cheaper, kept verbatim
with the helpers it called. The tests compare the two on seeded random channel lists in
every mode and normalization: the same candidates in the same order, every float the same
bits (``float.hex``), the same vector objects, and the same error for a key that arrives
with two contents.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import GameMemory
from game_memory.errors import DerivedIndexError
from game_memory.model import ordinal_key
from game_memory.recall.fusion import (
    FusedCandidate,
    FusionMode,
    FusionOptions,
    _best_possible,
    _clip,
    _scale,
    fuse,
)
from support.vectors import MemoryFactory

# -- the reference: fuse and _contribution as they were (on the helpers this change kept) --


@dataclass(slots=True)
class _Row:
    """The row object fusion used before its rows became plain lists (verbatim)."""

    memory: GameMemory
    score: float = 0.0
    lexical_rank: int | None = None
    vector_rank: int | None = None
    lexical_score: float | None = None
    vector_score: float | None = None
    vector: npt.NDArray[np.float32] | None = None


def fuse_reference(
    lexical: Sequence[tuple[GameMemory, float]],
    vector: Sequence[tuple[GameMemory, float]],
    options: FusionOptions,
    limit: int,
    vectors: Sequence[npt.NDArray[np.float32]] | None = None,
) -> list[FusedCandidate]:
    rows: dict[tuple[str, str], _Row] = {}
    scales = (_scale(options, 0, lexical), _scale(options, 1, vector))
    for channel, candidates in ((0, lexical), (1, vector)):
        for rank, (memory, score) in enumerate(candidates):
            key = (memory.owner_id, memory.memory_id)
            row = rows.get(key)
            if row is None:
                row = rows[key] = _Row(memory)
            elif row.memory is not memory and row.memory != memory:
                raise DerivedIndexError(
                    f"memory {memory.memory_id!r} reached fusion with two different contents"
                )
            if channel == 0:
                row.lexical_rank, row.lexical_score = rank + 1, score
            else:
                row.vector_rank, row.vector_score = rank + 1, score
                if vectors is not None:
                    row.vector = vectors[rank]
            row.score += _contribution(options, channel, rank, score, scales[channel])
    best = _best_possible(options, bool(lexical), bool(vector))
    fused = [
        FusedCandidate(
            r.memory,
            r.score,
            r.lexical_rank,
            r.vector_rank,
            r.lexical_score,
            r.vector_score,
            min(max(r.score / best, 0.0), 1.0) if best > 0 else 0.0,
            r.vector,
        )
        for r in rows.values()
    ]
    fused.sort(
        key=lambda c: (
            -c.score,
            -c.memory.importance,
            -c.memory.moment.tick,
            ordinal_key(c.memory.owner_id),
            ordinal_key(c.memory.memory_id),
        )
    )
    return fused[:limit]


def _contribution(
    options: FusionOptions,
    channel: int,
    rank: int,
    score: float,
    scale: tuple[float, float, float],
) -> float:
    weight = options.lexical_weight if channel == 0 else options.vector_weight
    if options.mode is FusionMode.RRF:
        return 1.0 / (options.rrf_k + rank + 1)
    if options.mode is FusionMode.WEIGHTED_RRF:
        return weight / (options.rrf_k + rank + 1)
    low, divisor, confidence = scale
    value = _clip(score) if channel == 1 else score
    if divisor <= 0.0:
        return 0.0
    return confidence * weight * (value - low) / divisor


# -- comparing ----------------------------------------------------------------------------


def _bits(value: float | None) -> str | None:
    return None if value is None else float(value).hex()


def _exact(candidates: list[FusedCandidate]) -> list[tuple[Any, ...]]:
    """Everything of each candidate, floats by their bits, the vector by identity."""
    return [
        (
            c.memory.owner_id,
            c.memory.memory_id,
            id(c.memory),
            _bits(c.score),
            c.lexical_rank,
            c.vector_rank,
            _bits(c.lexical_score),
            _bits(c.vector_score),
            _bits(c.relevance),
            id(c.vector) if c.vector is not None else None,
        )
        for c in candidates
    ]


def _outcome(*arguments: Any, implementation: Any) -> tuple[str, Any]:
    try:
        return ("ok", _exact(implementation(*arguments)))
    except DerivedIndexError as error:
        return ("error", str(error))


# -- random channel lists -----------------------------------------------------------------

#: Owner and memory ids whose UTF-16 order differs from their code-point order.
OWNERS = ("elda", "bram", "a\uffff", "a\U00010000", "\U0001f409")
IDS = ("m", "n", "x\uffff", "x\U00010000")


def _random_memories(make_memory: MemoryFactory, rng: random.Random, count: int) -> list[Any]:
    memories = []
    for index in range(count):
        memories.append(
            make_memory(
                f"{rng.choice(IDS)}{index // rng.choice((1, 2, 3))}",
                owner_id=rng.choice(OWNERS[: rng.randint(1, len(OWNERS))]),
                tick=rng.choice((1, 2, rng.randrange(1_000))),
                importance=rng.choice((0.5, 0.5, 0.1, rng.random())),
                text=f"text {index}",
            )
        )
    # One memory per key: the first of each key stands for it (the rest are dropped).
    unique: dict[tuple[str, str], Any] = {}
    for memory in memories:
        unique.setdefault((memory.owner_id, memory.memory_id), memory)
    return list(unique.values())


def _scores(rng: random.Random, count: int, lexical: bool) -> list[float]:
    kind = rng.random()
    if kind < 0.15:
        value = rng.choice((0.0, 1.0, 0.5, 3.25))
        return [value] * count  # all tied
    if lexical:
        values = [
            rng.choice((rng.uniform(0.0, 40.0), rng.uniform(0.0, 4.0), 2.5)) for _ in range(count)
        ]
    else:
        values = [
            rng.choice((rng.uniform(-0.3, 1.1), rng.uniform(0.6, 0.8), 0.5)) for _ in range(count)
        ]
    return sorted(values, reverse=True)


def _random_options(rng: random.Random) -> FusionOptions:
    mode = rng.choice(tuple(FusionMode))
    return FusionOptions(
        mode=mode,
        lexical_weight=rng.choice((0.5, 0.5, 0.0, 0.3, 2.0)),
        vector_weight=rng.choice((0.5, 0.5, 0.0, 0.7)),
        rrf_k=rng.choice((60, 60, 0, 1, 10)),
        normalization=rng.choice(("floor", "best_lexical", "absolute", "confidence", "confidence")),
        lexical_minimum_spread=rng.choice((8.0, 0.0)),
        vector_minimum_spread=rng.choice((1.0, 0.0, 0.3)),
        lexical_minimum_gap=rng.choice((4.0, 0.0)),
        vector_minimum_gap=rng.choice((0.2, 0.0)),
        vector_confidence_by=rng.choice(("contrast", "standing")),
        floor_candidates=rng.choice((16, 1, 2, 64)),
    )


def _random_case(make_memory: MemoryFactory, rng: random.Random) -> tuple[Any, ...]:
    pool = _random_memories(make_memory, rng, rng.choice((0, 1, 2, 5, 20, 48, 70)))
    rng.shuffle(pool)
    lexical_count = rng.randint(0, len(pool))
    vector_count = rng.randint(0, len(pool))
    lexical_memories = pool[:lexical_count]
    vector_memories = pool[len(pool) - vector_count :]
    rng.shuffle(vector_memories)
    if lexical_memories and rng.random() < 0.1:
        # The same memory twice in one channel (a backend should not, but fusion copes).
        lexical_memories.append(rng.choice(lexical_memories))
    if vector_memories and rng.random() < 0.1:
        # An equal copy of a memory (not the same object) in the other channel: accepted.
        vector_memories[0] = vector_memories[0].model_copy()
    lexical = list(zip(lexical_memories, _scores(rng, len(lexical_memories), True), strict=True))
    vector = list(zip(vector_memories, _scores(rng, len(vector_memories), False), strict=True))
    vectors = None
    if vector and rng.random() < 0.7:
        vectors = [np.full(4, index, np.float32) for index in range(len(vector))]
    limit = rng.choice((0, 1, 5, 32, 32, 200))
    return lexical, vector, _random_options(rng), limit, vectors


@pytest.mark.parametrize("seed", range(600))
def test_fuse_equals_the_reference(make_memory: MemoryFactory, seed: int) -> None:
    rng = random.Random(seed)
    arguments = _random_case(make_memory, rng)
    assert _outcome(*arguments, implementation=fuse) == _outcome(
        *arguments, implementation=fuse_reference
    )


@pytest.mark.parametrize("seed", range(20))
def test_fuse_reports_a_key_with_two_contents_as_before(
    make_memory: MemoryFactory, seed: int
) -> None:
    rng = random.Random(seed)
    lexical, vector, options, limit, vectors = _random_case(make_memory, rng)
    memory = make_memory("clash", owner_id="elda", text="one")
    other = make_memory("clash", owner_id="elda", text="two")
    lexical = [*lexical, (memory, 0.5)]
    vector = [(other, 0.5), *vector]
    vectors = None if vectors is None else [np.zeros(4, np.float32), *vectors]
    arguments = (lexical, vector, options, limit, vectors)
    found = _outcome(*arguments, implementation=fuse)
    assert found[0] == "error"
    assert found == _outcome(*arguments, implementation=fuse_reference)


@pytest.mark.parametrize("mode", [FusionMode.RRF, FusionMode.CONVEX])
@pytest.mark.parametrize("seed", range(20))
def test_fuse_equals_the_reference_on_benchmark_shaped_lists(
    make_memory: MemoryFactory, mode: FusionMode, seed: int
) -> None:
    """32 lexical and 32 vector candidates, 16 in both, vectors given: the recall's shape."""
    rng = random.Random(seed)
    memories = [
        make_memory(
            f"memory-{index:06d}",
            owner_id="npc-000",
            tick=rng.randrange(10_000),
            importance=round(rng.random(), 6),
        )
        for index in range(48)
    ]
    lexical = list(
        zip(
            memories[:32],
            sorted((rng.uniform(1, 20) for _ in range(32)), reverse=True),
            strict=True,
        )
    )
    vector_memories = memories[16:48]
    rng.shuffle(vector_memories)
    vector = list(
        zip(
            vector_memories,
            sorted((rng.uniform(0, 0.3) for _ in range(32)), reverse=True),
            strict=True,
        )
    )
    vectors = [np.full(4, index, np.float32) for index in range(32)]
    arguments = (lexical, vector, FusionOptions(mode=mode), 32, vectors)
    assert _outcome(*arguments, implementation=fuse) == _outcome(
        *arguments, implementation=fuse_reference
    )


@pytest.mark.parametrize("seed", range(60))
def test_fuse_equals_the_reference_with_nan(make_memory: MemoryFactory, seed: int) -> None:
    """A NaN cosine (``CONVEX`` carries it into the score) or a NaN importance (only a
    memory built without validation has one) orders as before too."""
    rng = random.Random(seed)
    lexical, vector, options, limit, vectors = _random_case(make_memory, rng)
    if seed % 2:
        vector = [(m, math.nan if rng.random() < 0.3 else s) for m, s in vector]
        options = options.model_copy(update={"mode": FusionMode.CONVEX})
    else:
        nan = {id(m): rng.random() < 0.3 for m, _ in [*lexical, *vector]}
        copies: dict[int, GameMemory] = {}

        def spoil(memory: GameMemory) -> GameMemory:
            if not nan[id(memory)]:
                return memory
            return copies.setdefault(id(memory), memory.model_copy(update={"importance": math.nan}))

        lexical = [(spoil(m), s) for m, s in lexical]
        vector = [(spoil(m), s) for m, s in vector]
        options = options.model_copy(
            update={"mode": rng.choice((FusionMode.RRF, FusionMode.CONVEX))}
        )
    arguments = (lexical, vector, options, limit, vectors)
    assert _outcome(*arguments, implementation=fuse) == _outcome(
        *arguments, implementation=fuse_reference
    )


def test_a_candidate_built_by_fusion_equals_one_built_by_its_constructor(
    make_memory: MemoryFactory,
) -> None:
    """``fuse`` builds its candidates without ``FusedCandidate.__init__``: same fields."""
    memory, other = make_memory("m-1", owner_id="elda"), make_memory("m-2", owner_id="elda")
    vector = np.ones(4, np.float32)
    fused = fuse([(memory, 3.5), (other, 1.0)], [(memory, 0.25)], FusionOptions(), 5, [vector])
    assert [candidate.memory for candidate in fused] == [memory, other]
    for candidate in fused:
        expected = FusedCandidate(**vars(candidate))
        assert candidate == expected
        assert vars(candidate) == vars(expected)
        assert list(vars(candidate)) == [field.name for field in dataclasses.fields(expected)]
        assert repr(candidate) == repr(expected)
        with pytest.raises(AttributeError):
            candidate.score = 1.0  # type: ignore[misc]
    assert fused[0].vector is vector and fused[1].vector is None


@pytest.mark.parametrize("limit", [-5, -1, 0, 3])
def test_fuse_cuts_like_the_reference_at_any_limit(make_memory: MemoryFactory, limit: int) -> None:
    memories = [make_memory(f"m-{index}", owner_id="elda", tick=index) for index in range(8)]
    lexical = [(memory, 1.0) for memory in memories[:4]]  # all tied
    vector = [(memory, 0.5) for memory in memories[4:]]
    arguments = (lexical, vector, FusionOptions(mode=FusionMode.RRF), limit, None)
    assert _outcome(*arguments, implementation=fuse) == _outcome(
        *arguments, implementation=fuse_reference
    )
