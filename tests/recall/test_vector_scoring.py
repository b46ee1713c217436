"""Vector scoring skips the blocks of rows a query cannot see, and changes no result.

:func:`score_rows` multiplies only the aligned blocks of rows that hold a visible row; these
tests pin that every score is bit for bit the one of the product over the whole matrix
(the implementation before the block skip), and that :func:`top_vector_candidates` returns
what a plain reference returns (same memories, order, scores and vectors), on random data
with prefixes (a query as of an earlier moment), scattered rows and ties.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import numpy.typing as npt
import pytest

from game_memory.recall.vectors import (
    _MANY_PARTS,
    SCORING_BLOCK_ROWS,
    score_rows,
    score_span,
    top_vector_candidates,
)
from support.blas import run_with_one_blas_thread
from support.joins import Part, part_of, reference_top
from support.vectors import MemoryFactory

# Bit-identity with the whole-matrix product holds for a single-threaded BLAS (a threaded
# one splits a product by its size); BLAS reads its thread count when numpy loads, so the
# check runs in a fresh interpreter.
_BIT_IDENTITY = """
import numpy as np
from game_memory.recall.vectors import SCORING_BLOCK_ROWS as B, score_rows, score_span
rng = np.random.default_rng(20261202)
checked = spanned = 0
for dimensions in (1, 3, 64, 384, 385):
    for count in (1, 2, B - 1, B, B + 1, 2 * B + 1, 3 * B - 1, 2_000, 4_097):
        matrix = rng.standard_normal((count, dimensions)).astype(np.float32)
        query = rng.standard_normal(dimensions).astype(np.float32)
        whole = matrix @ query
        cuts = [0, 1, count // 2, count - 1, count, int(rng.integers(0, count + 1))]
        wanted = [np.arange(cut) for cut in cuts]  # prefixes: ticks at or before a moment
        wanted += [np.arange(cut, count) for cut in cuts]  # suffixes
        wanted.append(np.flatnonzero(rng.random(count) < 0.01))  # scattered
        wanted.append(np.array([count - 1]))  # the last row alone
        wanted.append(rng.permutation(count)[: count // 3])  # unordered
        for rows in wanted:
            scores = score_rows(matrix, query, rows.astype(np.int64))
            assert scores.dtype == np.float32 and scores.shape == rows.shape
            assert np.array_equal(scores.view(np.int32), whole[rows].view(np.int32)), (
                dimensions, count, rows[:5], rows.size)
            checked += 1
        spans = [(0, cut) for cut in cuts] + [(cut, count) for cut in cuts]
        spans += [(start, start + 1) for start in (0, count // 2, count - 1)]
        spans.append(tuple(sorted(rng.integers(0, count + 1, 2).tolist())))
        for start, stop in spans:  # a run of rows: what a query as of a moment sees
            scores = score_span(matrix, query, start, stop)
            assert scores.dtype == np.float32 and scores.shape == (stop - start,)
            assert np.array_equal(scores.view(np.int32), whole[start:stop].view(np.int32)), (
                dimensions, count, start, stop)
            spanned += 1
print(checked, spanned)
"""


def test_scores_are_bit_identical_to_the_product_over_the_whole_matrix() -> None:
    checked = run_with_one_blas_thread(_BIT_IDENTITY)
    assert checked.split() == [str(5 * 9 * 15), str(5 * 9 * 16)]


def test_a_span_multiplies_only_its_blocks() -> None:
    block = SCORING_BLOCK_ROWS
    matrix = np.ones((4 * block, 2), dtype=np.float32)
    matrix[:block] = np.nan  # blocks the span does not reach: never multiplied
    matrix[3 * block :] = np.nan
    scores = score_span(matrix, np.ones(2, dtype=np.float32), block + 3, 3 * block)
    assert scores.size == 2 * block - 3 and bool((scores == 2.0).all())
    assert score_span(matrix, np.ones(2, np.float32), 7, 7).size == 0


def test_only_the_blocks_holding_a_wanted_row_are_multiplied() -> None:
    block = SCORING_BLOCK_ROWS
    matrix = np.ones((4 * block, 2), dtype=np.float32)
    matrix[block : 3 * block] = np.nan  # never multiplied: no wanted row in these blocks
    rows = np.array([0, block - 1, 3 * block + 5], dtype=np.int64)
    scores = score_rows(matrix, np.ones(2, dtype=np.float32), rows)
    assert scores.tolist() == [2.0, 2.0, 2.0]
    assert score_rows(matrix, np.ones(2, np.float32), np.empty(0, np.int64)).size == 0


@pytest.mark.parametrize("seed", range(6))
def test_top_candidates_equal_a_plain_reference_on_random_partitions(
    make_memory: MemoryFactory, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    dimensions = 4  # rows x dimensions stays below BLAS's threading threshold
    parts: list[Part] = []
    for owner in ("npc-a", "npc-b"):
        count = int(rng.integers(1, 5 * SCORING_BLOCK_ROWS))
        memories = [
            make_memory(
                f"{owner}-{index:05d}",
                owner_id=owner,
                tick=index if seed % 2 else int(rng.integers(0, count)),
                importance=float(rng.choice([0.0, 0.5, 1.0])),
            )
            for index in range(count)
        ]
        # Few distinct vectors, so many cosines tie and the tie-breaks decide.
        palette = rng.standard_normal((5, dimensions))
        palette /= np.linalg.norm(palette, axis=1, keepdims=True)
        matrix = palette[rng.integers(0, 5, count)].astype(np.float32)
        order = np.arange(count) if seed % 3 else rng.permutation(count)
        joined = part_of(memories, order.tolist(), matrix)
        # Rows in the memories' order: a dense join, scored as one run when the query
        # sees a prefix (odd seeds: ticks in append order) and row by row otherwise.
        assert joined.dense == bool(seed % 3) or count == 1
        ticks = np.array([memory.moment.tick for memory in memories])
        visible = ticks <= int(rng.integers(0, count + 1))  # as of an earlier moment
        if seed == 5:
            visible = rng.random(count) < 0.02  # a few scattered visible memories
        parts.append((joined, matrix, visible))
    _top_equals_the_reference(parts, rng, dimensions)


@pytest.mark.parametrize("seed", range(8))
def test_one_partition_is_ordered_by_its_scores_alone_only_when_they_differ(
    make_memory: MemoryFactory, seed: int
) -> None:
    """One NPC's recall (one partition) orders its candidates by the scores alone when the
    best ``limit`` + 1 all differ, and by the tie-breaks when two tie: the same hits and
    vectors as the plain reference either way."""
    rng = np.random.default_rng(100 + seed)
    dimensions = 4
    count = int(rng.integers(1, 3 * SCORING_BLOCK_ROWS))
    memories = [
        make_memory(
            f"m{index:05d}",
            tick=index if seed % 2 else int(rng.integers(0, count)),
            importance=float(rng.choice([0.0, 0.5, 1.0])),
        )
        for index in range(count)
    ]
    if seed % 4 < 2:  # distinct vectors: distinct cosines
        matrix = rng.standard_normal((count, dimensions))
    else:  # a few distinct vectors: many cosines tie
        palette = rng.standard_normal((3, dimensions))
        matrix = palette[rng.integers(0, 3, count)]
    matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    order = np.arange(count) if seed < 6 else rng.permutation(count)
    joined = part_of(memories, order.tolist(), matrix)
    ticks = np.array([memory.moment.tick for memory in memories])
    visible = ticks <= int(rng.integers(0, count + 1))
    query = rng.standard_normal(dimensions).astype(np.float32)
    query /= np.linalg.norm(query)
    for limit in (1, 2, 8, 32, 10_000):
        hits, vectors = top_vector_candidates([(joined, matrix, visible)], query, limit)
        found = [
            (memory.memory_id, score, vector.tolist())
            for (memory, score), vector in zip(hits, vectors, strict=True)
        ]
        assert found == reference_top([(joined, matrix, visible)], query, limit)
        assert all(not vector.flags.writeable for vector in vectors)


def _exact(row: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> float:
    return float(
        np.clip(np.float32(math.fsum(map(operator.mul, row.tolist(), query.tolist()))), -1, 1)
    )


def test_a_memory_scores_the_same_at_any_row_of_any_matrix(make_memory: MemoryFactory) -> None:
    """The score of one memory does not depend on where its row sits nor on how many rows
    the matrix holds: BLAS's product sums a row's terms in an order that depends on both
    (a row in the tail of a product differs in its last bit), which made two backends
    holding the same save in other row orders, or two memories with one vector, disagree."""
    rng = np.random.default_rng(20261206)
    dimensions = 64
    query = rng.standard_normal(dimensions).astype(np.float32)
    query /= np.linalg.norm(query)
    fillers = rng.standard_normal((40, dimensions)).astype(np.float32)
    fillers /= np.linalg.norm(fillers, axis=1, keepdims=True)
    targets = rng.standard_normal((12, dimensions)).astype(np.float32)
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    products_differed = False
    for target in targets:
        seen: set[float] = set()
        for count in range(1, 30):
            for at in {0, count // 2, count - 1}:
                matrix = np.insert(fillers[: count - 1], at, target, axis=0)
                memories = [make_memory(f"m{index:03d}") for index in range(count)]
                joined = part_of(memories, list(range(count)), matrix)
                visible = np.ones(count, dtype=np.bool_)
                hits = top_vector_candidates([(joined, matrix, visible)], query, count)[0]
                seen.add(dict((m.memory_id, s) for m, s in hits)[f"m{at:03d}"])
                products_differed |= float(np.clip((matrix @ query)[at], -1, 1)) != _exact(
                    target, query
                )
        assert seen == {_exact(target, query)}
    assert products_differed  # the product alone would have failed this test


def test_the_best_rows_are_chosen_by_their_exact_scores(make_memory: MemoryFactory) -> None:
    """Near-identical memories (one text saved many times, say) whose cosines differ by
    less than the product's rounding: the ``limit`` returned are the ``limit`` best by
    exact score, ties broken by the memory order, whatever the product's own order."""
    rng = np.random.default_rng(7)
    dimensions = 384
    base = rng.standard_normal(dimensions)
    misordered = 0
    for trial in range(20):
        count = 300
        matrix = (base + rng.standard_normal((count, dimensions)) * 3e-7).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        query = (base + rng.standard_normal(dimensions) * 0.5).astype(np.float32)
        query /= np.linalg.norm(query)
        memories = [make_memory(f"m{index:03d}", tick=trial) for index in range(count)]
        joined = part_of(memories, list(range(count)), matrix)
        visible = np.ones(count, dtype=np.bool_)
        exact = [_exact(row, query) for row in matrix]
        expected = sorted(range(count), key=lambda index: (-exact[index], f"m{index:03d}"))
        for limit in (1, 5, 32):
            hits = top_vector_candidates([(joined, matrix, visible)], query, limit)[0]
            assert [memory.memory_id for memory, _ in hits] == [
                f"m{index:03d}" for index in expected[:limit]
            ]
            assert [score for _, score in hits] == [exact[index] for index in expected[:limit]]
            product = np.clip(matrix @ query, -1, 1)
            by_product = sorted(range(count), key=lambda index: (-product[index], index))
            misordered += by_product[:limit] != expected[:limit]
    assert misordered  # the product's own order would have failed this test


@pytest.mark.parametrize("seed", range(4))
def test_top_candidates_over_many_npcs_equal_a_plain_reference(
    make_memory: MemoryFactory, seed: int
) -> None:
    """A session-wide recall: more partitions than ``_MANY_PARTS``, selected in one pass
    over all their scores and scored exactly in one call, as part by part."""
    rng = np.random.default_rng(900 + seed)
    dimensions = 4
    palette = rng.standard_normal((6, dimensions))
    palette /= np.linalg.norm(palette, axis=1, keepdims=True)
    parts: list[Part] = []
    for number in range(_MANY_PARTS + 37):
        owner = f"npc-{number:03d}"
        count = int(rng.integers(1, 40))
        memories = [
            make_memory(
                f"{owner}-{index:03d}",
                owner_id=owner,
                tick=index if seed % 2 else int(rng.integers(0, count)),
                importance=float(rng.choice([0.0, 0.5, 1.0])),
            )
            for index in range(count)
        ]
        if seed >= 2:  # few distinct vectors across the world: ties between NPCs
            matrix = palette[rng.integers(0, 6, count)].astype(np.float32)
        else:
            matrix = rng.standard_normal((count, dimensions))
            matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
        order = np.arange(count) if number % 3 else rng.permutation(count)
        joined = part_of(memories, order.tolist(), matrix)
        ticks = np.array([memory.moment.tick for memory in memories])
        visible = ticks <= int(rng.integers(0, count + 1))
        parts.append((joined, matrix, visible))
    _top_equals_the_reference(parts, rng, dimensions)


def _top_equals_the_reference(parts: list[Part], rng: np.random.Generator, dimensions: int) -> None:
    """For a random unit query, the candidates at limits 1, 8, 32 and 10,000 are the plain
    reference's (memories, order, scores and vectors)."""
    query = rng.standard_normal(dimensions).astype(np.float32)
    query /= np.linalg.norm(query)
    for limit in (1, 8, 32, 10_000):
        hits, vectors = top_vector_candidates(parts, query, limit)
        found = [
            (memory.memory_id, score, vector.tolist())
            for (memory, score), vector in zip(hits, vectors, strict=True)
        ]
        assert found == reference_top(parts, query, limit)
