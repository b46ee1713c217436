"""The vectorized search for implicit versions equals a plain pair-by-pair reference.

``reranker._versions`` compares the first candidates in a few numpy calls (cosines, the
standing test, the word overlaps of pairs without two vectors, from one incidence product);
this checks it against the rule written out one pair at a time, on random candidate lists
that mix owners, timelines, belief keys, equal ticks and candidates with and without a
vector.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from game_memory import GameAwareMemoryRerankerOptions, GameMemory
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.reranker import _versions
from game_memory.store.tokenizer import tokenize
from support.vectors import MemoryFactory

WORDS = ("bridge", "open", "closed", "ferry", "storm", "inn", "Mira", "sold", "wolves", "ford")


def _reference(
    candidates: list[FusedCandidate], options: GameAwareMemoryRerankerOptions
) -> list[tuple[int, int]]:
    first = candidates[: options.supersession_candidates]
    vectored = [i for i, c in enumerate(first) if c.vector is not None]
    needed = options.supersession_similarity
    cosines = [
        float(np.float64(np.dot(first[a].vector, first[b].vector)))  # type: ignore[arg-type]
        for x, a in enumerate(vectored)
        for b in vectored[x + 1 :]
    ]
    if cosines and 0.0 < options.supersession_standing <= math.sqrt(len(cosines) - 1):
        mean = sum(cosines) / len(cosines)
        deviation = math.sqrt(sum((c - mean) ** 2 for c in cosines) / len(cosines))
        needed = max(needed, mean + options.supersession_standing * deviation)

    def words(memory: GameMemory) -> set[str]:
        return set(tokenize(memory.searchable_text or memory.payload_json))

    found = []
    for older, a in enumerate(first):
        for newer, b in enumerate(first):
            x, y = a.memory, b.memory
            if x.belief_key is not None or y.belief_key is not None:
                continue
            if (x.owner_id, x.moment.timeline_id) != (y.owner_id, y.moment.timeline_id):
                continue
            if y.moment.tick <= x.moment.tick:
                continue
            if a.vector is not None and b.vector is not None and len(vectored) > 1:
                alike = float(np.dot(a.vector, b.vector)) >= needed - 1e-9
            else:
                left, right = words(x), words(y)
                union = len(left | right)
                alike = union > 0 and len(left & right) / union >= options.supersession_similarity
            if alike:
                found.append((older, newer))
    return sorted(found, key=lambda pair: (first[pair[0]].memory.moment.tick, *pair))


@pytest.mark.parametrize("seed", range(40))
def test_versions_equal_the_pairwise_reference(make_memory: MemoryFactory, seed: int) -> None:
    rng = random.Random(seed)
    options = GameAwareMemoryRerankerOptions(
        supersession_similarity=rng.choice((0.2, 0.35, 0.45)),
        supersession_standing=rng.choice((0.0, 1.0, 3.0)),
        supersession_candidates=rng.choice((8, 32)),
    )
    # A few base directions, so some pairs are alike and most are not.
    bases = np.random.default_rng(seed).standard_normal((3, 8))
    candidates = []
    for index in range(rng.randint(2, 40)):
        memory = make_memory(
            f"m{index}",
            owner_id=rng.choice(("elda", "elda", "bram")),
            timeline_id=rng.choice(("world", "world", "dream")),
            tick=rng.randint(0, 6),
            text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))),
            belief_key=rng.choice((None, None, None, "bridge.eastmarch")),
        )
        vector = None
        if rng.random() < 0.6:
            raw = bases[rng.randrange(3)] + 0.4 * np.random.default_rng(
                seed * 100 + index
            ).standard_normal(8)
            vector = (raw / np.linalg.norm(raw)).astype(np.float32)
        candidates.append(FusedCandidate(memory, 0.5, 1, 1, 1.0, 0.5, 0.5, vector))
    found = _versions(candidates, options)
    expected = _reference(candidates, options)
    # Cosines at the threshold can round either way between float32 and float64 sums;
    # the random vectors keep every cosine well away from it in practice.
    assert found == expected
