"""``reranker._versions`` gives exactly the pairs of the implementation it replaced.

``_versions_reference`` below is ``_versions`` as it stood before it was made cheaper (a
full incidence product of every involved candidate's words, the standing threshold always
computed), kept verbatim with the helpers it called. The tests compare the two on seeded
random candidate lists (counts 0..40, with and without vectors, belief keys, equal ticks,
several owners and timelines, shared words, thresholds met exactly) and, when present, on
inputs captured from the NPC benchmark: the same pairs in the same order, every time.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import GameAwareMemoryRerankerOptions, GameMemory
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.reranker import _versions
from game_memory.store.tokenizer import tokenize
from support.vectors import MemoryFactory

# -- the reference: _versions and its helpers as they were -------------------------------


def _words_reference(memory: GameMemory) -> npt.NDArray[np.int64]:
    return _text_words_reference(memory.searchable_text or memory.payload_json)


@functools.lru_cache(maxsize=4_096)
def _text_words_reference(text: str) -> npt.NDArray[np.int64]:
    words = np.array(sorted({hash(token) for token in tokenize(text)}), np.int64)
    words.flags.writeable = False
    return words


@functools.lru_cache(maxsize=512)
def _upper_indices_reference(size: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    return np.triu_indices(size, 1)


def _versions_reference(
    candidates: Sequence[FusedCandidate], options: GameAwareMemoryRerankerOptions
) -> list[tuple[int, int]]:
    first = candidates[: options.supersession_candidates]
    n = len(first)
    codes: dict[tuple[str, str], int] = {}
    ticks_of: list[int] = []
    group_of: list[int] = []
    rows_of: list[int] = []
    vectors: list[npt.NDArray[np.float32]] = []
    for index, candidate in enumerate(first):
        memory = candidate.memory
        ticks_of.append(memory.moment.tick)
        if memory.belief_key is None:
            key = (memory.owner_id, memory.moment.timeline_id)
            group_of.append(codes.setdefault(key, len(codes)))
        else:
            group_of.append(-1 - index)
        if candidate.vector is not None:
            rows_of.append(index)
            vectors.append(np.asarray(candidate.vector, np.float32))
    ticks = np.array(ticks_of, np.int64)
    group = np.array(group_of, np.int64)
    ordered = (ticks[None, :] > ticks[:, None]) & (group[None, :] == group[:, None])
    if not ordered.any():
        return []
    alike = np.zeros((n, n), dtype=np.bool_)
    pending = ordered
    if len(rows_of) > 1:
        stacked = np.array(vectors, np.float32)
        gram = (stacked @ stacked.T).astype(np.float64)
        needed = options.supersession_similarity
        count = len(rows_of) * (len(rows_of) - 1) // 2
        if 0.0 < options.supersession_standing <= math.sqrt(count - 1):
            upper = gram[_upper_indices_reference(len(rows_of))]
            needed = max(needed, float(upper.mean() + options.supersession_standing * upper.std()))
        if len(rows_of) == n:
            alike = gram >= needed
            pending = None
        else:
            rows = np.array(rows_of, np.int64)
            block = np.ix_(rows, rows)
            alike[block] = gram >= needed
            pending = ordered.copy()
            pending[block] = False
    if pending is not None and pending.any():
        involved = np.flatnonzero(pending.any(axis=0) | pending.any(axis=1))
        held = [_words_reference(first[int(i)].memory) for i in involved]
        lengths = np.array([len(words) for words in held], np.int64)
        distinct, column = np.unique(np.concatenate(held), return_inverse=True)
        incidence = np.zeros((len(involved), max(len(distinct), 1)), np.float64)
        incidence[np.repeat(np.arange(len(involved)), lengths), column] = 1.0
        shared = incidence @ incidence.T
        sizes = incidence.sum(axis=1)
        union = sizes[:, None] + sizes[None, :] - shared
        overlap = np.divide(shared, union, out=np.zeros_like(shared), where=union > 0)
        block = np.ix_(involved, involved)
        alike[block] |= pending[block] & (overlap >= options.supersession_similarity)
    older, newer = np.nonzero(ordered & alike)
    order = np.lexsort((newer, older, ticks[older]))
    return [(int(older[i]), int(newer[i])) for i in order]


# -- random candidate lists --------------------------------------------------------------

#: A small vocabulary, so texts share words and overlaps land on simple fractions (1/2,
#: 1/3, 2/5 ...) that some thresholds below meet exactly.
WORDS = ("bridge", "open", "closed", "ferry", "storm", "inn", "Mira", "sold", "wolves", "ford")

#: Thresholds: the default, simple fractions overlaps meet exactly, 0 (everything of the
#: same owner and timeline is alike) and 1 (identical word sets only).
SIMILARITIES = (0.0, 0.2, 0.25, 1 / 3, 0.4, 0.45, 0.5, 2 / 3, 1.0)


def _unit(raw: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    return (raw / np.linalg.norm(raw)).astype(np.float32)


def _random_candidates(
    make_memory: MemoryFactory, rng: random.Random, count: int, vector_share: float
) -> list[FusedCandidate]:
    generator = np.random.default_rng(rng.randrange(2**32))
    dimensions = rng.choice((4, 8, 384))
    bases = generator.standard_normal((rng.randint(1, 4), dimensions))
    owners = ("elda", "bram", "\U0001f409wyrm")[: rng.randint(1, 3)]
    timelines = ("world", "dream")[: rng.randint(1, 2)]
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(6)]
    vectors: list[npt.NDArray[np.float32]] = []
    candidates = []
    for index in range(count):
        roll = rng.random()
        if roll < 0.05:
            text = None  # the payload's words: "{}" has none
        elif roll < 0.3:
            text = rng.choice(texts)  # an exact duplicate of another text
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8)))
        memory = make_memory(
            f"m{index}",
            owner_id=rng.choice(owners),
            timeline_id=rng.choice(timelines),
            tick=rng.randint(0, rng.choice((1, 3, 10, 1_000))),
            text=text,
            belief_key=rng.choice((None, None, None, None, "bridge.eastmarch")),
        )
        vector: npt.NDArray[np.float32] | None = None
        if rng.random() < vector_share:
            if vectors and rng.random() < 0.15:
                vector = rng.choice(vectors)  # the same vector twice: cosine ties
            else:
                noise = rng.choice((0.05, 0.4, 1.5))
                raw = bases[rng.randrange(len(bases))] + noise * generator.standard_normal(
                    dimensions
                )
                vector = _unit(raw)
            vectors.append(vector)
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    return candidates


def _random_options(
    rng: random.Random, candidates: list[FusedCandidate]
) -> GameAwareMemoryRerankerOptions:
    similarity = rng.choice(SIMILARITIES)
    with_vectors = [c.vector for c in candidates if c.vector is not None]
    if len(with_vectors) > 1 and rng.random() < 0.25:
        # A threshold one pair's cosine meets exactly (as the float64 of its float32 dot).
        stacked = np.array(with_vectors, np.float32)
        gram = (stacked @ stacked.T).astype(np.float64)
        a, b = rng.sample(range(len(with_vectors)), 2)
        similarity = min(max(float(gram[a, b]), 0.0), 1.0)
    return GameAwareMemoryRerankerOptions(
        supersession_similarity=similarity,
        supersession_standing=rng.choice((0.0, 0.5, 1.0, 2.0, 3.0, 100.0)),
        supersession_candidates=rng.choice((2, 5, 8, 32, 32, 512)),
    )


COUNTS = (0, 1, 2, 5, 32, 40)
VECTOR_SHARES = (0.0, 0.5, 1.0)


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("vector_share", VECTOR_SHARES)
@pytest.mark.parametrize("seed", range(25))
def test_versions_equal_the_reference(
    make_memory: MemoryFactory, count: int, vector_share: float, seed: int
) -> None:
    rng = random.Random(f"{count}/{vector_share}/{seed}")
    candidates = _random_candidates(make_memory, rng, count, vector_share)
    options = _random_options(rng, candidates)
    assert _versions(candidates, options) == _versions_reference(candidates, options)


@pytest.mark.parametrize("seed", range(300))
def test_versions_equal_the_reference_on_random_sizes(
    make_memory: MemoryFactory, seed: int
) -> None:
    rng = random.Random(seed)
    candidates = _random_candidates(make_memory, rng, rng.randint(0, 40), rng.random())
    options = _random_options(rng, candidates)
    assert _versions(candidates, options) == _versions_reference(candidates, options)


@pytest.mark.parametrize("seed", range(20))
def test_versions_equal_the_reference_with_many_versions(
    make_memory: MemoryFactory, seed: int
) -> None:
    """One owner and timeline, distinct ticks, near-identical texts and vectors: many
    pairs pass, so the order of a long result is compared too."""
    rng = random.Random(seed)
    generator = np.random.default_rng(seed)
    base = generator.standard_normal(8)
    candidates = []
    for index in range(rng.choice((5, 32, 40))):
        memory = make_memory(
            f"m{index}",
            tick=rng.randint(0, 20),
            text=" ".join(rng.sample(WORDS[:5], rng.randint(3, 5))),
        )
        vector = None
        if rng.random() < 0.5:
            vector = _unit(base + 0.1 * generator.standard_normal(8))
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    for similarity in (0.0, 0.5, 0.6, 0.75, 0.8, 1.0):
        for standing in (0.0, 1.0, 3.0):
            options = GameAwareMemoryRerankerOptions(
                supersession_similarity=similarity, supersession_standing=standing
            )
            found = _versions(candidates, options)
            assert found == _versions_reference(candidates, options)


def test_versions_take_float64_vectors_as_float32(make_memory: MemoryFactory) -> None:
    """A vector that is not float32 is cast to float32 as before."""
    rng = random.Random(7)
    generator = np.random.default_rng(7)
    base = generator.standard_normal(16)
    candidates = []
    for index in range(12):
        memory = make_memory(f"m{index}", tick=index, text=rng.choice(WORDS))
        raw = base + 0.3 * generator.standard_normal(16)
        vector = raw / np.linalg.norm(raw)  # float64
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))  # type: ignore[arg-type]
    for similarity in (0.5, 0.8, 0.9, 0.95):
        options = GameAwareMemoryRerankerOptions(supersession_similarity=similarity)
        assert _versions(candidates, options) == _versions_reference(candidates, options)


@pytest.mark.parametrize("seed", range(10))
def test_versions_equal_the_reference_on_benchmark_shaped_candidates(
    make_memory: MemoryFactory, seed: int
) -> None:
    """The captured inputs' shape, made here: 32 candidates of one NPC, 16 with 384-d
    vectors, ~12 words each from a large vocabulary plus a few common ones."""
    rng = random.Random(seed)
    generator = np.random.default_rng(seed)
    candidates = []
    for index in range(32):
        words = [f"w{rng.randrange(2_000)}" for _ in range(rng.randint(10, 13))]
        words += rng.sample(("dragon", "inn", "bridge"), rng.randint(0, 2))
        memory = make_memory(f"m{index}", tick=rng.randrange(10_000), text=" ".join(words))
        vector = _unit(generator.standard_normal(384)) if index % 2 == 0 else None
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    for similarity in (0.0, 0.05, 0.08, 0.1, 0.45):
        for standing in (0.0, 3.0):
            options = GameAwareMemoryRerankerOptions(
                supersession_similarity=similarity, supersession_standing=standing
            )
            assert _versions(candidates, options) == _versions_reference(candidates, options)
