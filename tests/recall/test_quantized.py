"""A recall's first pass over int8 copies of the rows selects, and changes no result.

:mod:`game_memory.index.quantized` promises that every row's approximate score lies within
its ``slack`` of the row's exact score (whatever the rows and query hold), so that the rows
it drops cannot reach the best ``limit``; and :func:`top_vector_candidates` with a copy
returns what it returns without one (same memories, order, scores and vectors). These tests
pin both on adversarial data, and the copy's life: made by the copier thread (giving way to
recalls), extended after appends, dropped with its matrix and beyond its budget.
"""

from __future__ import annotations

import asyncio
import gc
import math
import operator
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest

from game_memory import GameMemoryQuery, GameMoment
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.index import quantized
from game_memory.index.quantized import (
    COPY_AFTER,
    COPY_SLICE_ROWS,
    QUANTIZED_FROM_ROWS,
    STALE_ROWS,
    copy_now,
    first_pass,
    held_bytes,
)
from game_memory.recall.vectors import exact_scores, top_vector_candidates
from support.first_passes import spy_first_passes
from support.joins import Part, part_of, reference_top
from support.vectors import MemoryFactory, VectorStoreFactory

pytestmark = pytest.mark.skipif(not quantized.available(), reason="SimSIMD is a dependency")

Matrix = npt.NDArray[np.float32]


@pytest.fixture(autouse=True)
def _no_copies() -> Iterator[None]:
    quantized.forget_all()
    yield
    quantized.forget_all()


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each first pass a recall asked for answered from a copy."""
    return spy_first_passes(monkeypatch)


def _unit(rows: npt.NDArray[np.floating]) -> Matrix:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    return (rows / np.where(norms == 0, 1, norms)).astype(np.float32)


def _owned(rows: npt.NDArray[np.floating]) -> Matrix:
    """Read-only rows owning their memory, as an index hands them out."""
    matrix = np.ascontiguousarray(rows, dtype=np.float32)
    matrix.flags.writeable = False
    return matrix


def test_the_kernel_is_exact() -> None:
    """The integer dot products are exact (int32 sums), extremes included."""
    dot = quantized._DOT
    assert dot is not None
    rng = np.random.default_rng(1)
    for dimensions in (1, 3, 64, 384, 1_024, 4_097):
        rows = rng.integers(-127, 128, (50, dimensions)).astype(np.int8)
        rows[0] = 127
        rows[1] = -127
        query = rng.integers(-127, 128, dimensions).astype(np.int8)
        query[::2] = 127
        expected = rows.astype(np.int64) @ query.astype(np.int64)
        assert np.array_equal(dot(query[None, :], rows), expected.astype(np.float64))


def _hard_matrices(rng: np.random.Generator, count: int) -> Iterator[tuple[str, Matrix]]:
    """Rows that stress the bound: outliers, exact code boundaries, zeros, subnormals,
    lengths far from 1, few distinct values."""
    for dimensions in (2, 16, 384, 1_024):
        yield f"unit {dimensions}", _unit(rng.standard_normal((count, dimensions)))
    heavy = rng.standard_t(1.5, (count, 64))
    yield "heavy tails", _unit(heavy)
    spiked = rng.standard_normal((count, 64)) * 1e-3
    spiked[:, 0] = 1.0  # one value dominates: every other one rounds to code 0 or ±1
    yield "one dominant value", _unit(spiked)
    halves = (rng.integers(-254, 255, (count, 32)) + 0.5) / 254.0
    halves[:, 0] = 1.0  # a scale of exactly 1/127: values on the half-codes
    yield "values on half-codes", halves.astype(np.float32)
    mixed = _unit(rng.standard_normal((count, 48)))
    mixed[::7] = 0.0  # zero rows
    mixed[1::7] *= 1e-38  # subnormal rows
    mixed[2::7] *= 1_000.0  # long rows
    mixed[3::7] = mixed[3]  # one row many times
    yield "zeros, subnormals, long rows, repeats", mixed
    palette = _unit(rng.standard_normal((3, 24)))
    yield "three distinct rows", palette[rng.integers(0, 3, count)]


def _queries(rng: np.random.Generator, dimensions: int) -> Iterator[Matrix]:
    yield _unit(rng.standard_normal(dimensions))
    spike = np.full(dimensions, 1e-4, dtype=np.float32)
    spike[-1] = 1.0
    yield spike  # one dominant value
    yield (_unit(rng.standard_normal(dimensions)) * 1e-30).astype(np.float32)  # tiny
    yield (_unit(rng.standard_normal(dimensions)) * 50.0).astype(np.float32)  # long


def test_every_score_lies_within_its_slack_of_the_exact_one() -> None:
    rng = np.random.default_rng(20261206)
    checked = 0
    for name, matrix in _hard_matrices(rng, QUANTIZED_FROM_ROWS):
        matrix = _owned(matrix)
        assert copy_now(matrix), name
        for query in _queries(rng, matrix.shape[1]):
            found = first_pass(matrix, query, 0, matrix.shape[0], False)
            assert found is not None, name
            exact = exact_scores(matrix, query.astype(np.float64))
            np.clip(exact, -1.0, 1.0, out=exact)
            plain = np.clip(found.scores, -1.0, 1.0)
            worst = float(np.abs(plain - exact).max())
            assert worst <= found.slack, (name, worst, found.slack)
            # The exact score before exact_scores rounds it, for a few rows (fsum: exact).
            for row in rng.integers(0, matrix.shape[0], 8).tolist():
                value = math.fsum(map(operator.mul, matrix[row].tolist(), query.tolist()))
                assert abs(found.scores[row] - value) <= found.slack, (name, row)
            checked += 1
    assert checked == 9 * 4
    # Not absurdly loose: 384-dim unit rows and query, a window of a few hundredths.
    unit = _owned(_unit(rng.standard_normal((QUANTIZED_FROM_ROWS, 384))))
    assert copy_now(unit)
    found = first_pass(unit, _unit(rng.standard_normal(384)), 0, unit.shape[0], False)
    assert found is not None and 0.005 < found.slack < 0.03


def _memories_and_parts(
    make_memory: MemoryFactory, rng: np.random.Generator, seed: int
) -> tuple[list[Part], Matrix]:
    """One NPC of 4,096–6,000 memories, its rows in order (dense) or permuted, a query as
    of a moment (a prefix) or a few scattered memories visible, vectors distinct or with
    many ties."""
    count = int(rng.integers(QUANTIZED_FROM_ROWS, 6_000))
    dimensions = 24
    memories = [
        make_memory(
            f"m{index:05d}",
            tick=index if seed % 2 else int(rng.integers(0, count)),
            importance=float(rng.choice([0.0, 0.5, 1.0])),
        )
        for index in range(count)
    ]
    if seed % 3 == 2:  # few distinct vectors: many ties, the tie-breaks decide
        palette = _unit(rng.standard_normal((7, dimensions)))
        matrix = palette[rng.integers(0, 7, count)]
    else:
        matrix = _unit(rng.standard_normal((count, dimensions)))
    matrix = _owned(matrix)
    order = np.arange(count) if seed < 4 else rng.permutation(count)
    joined = part_of(memories, order.tolist(), matrix)
    ticks = np.array([memory.moment.tick for memory in memories])
    visible = ticks <= int(rng.integers(count // 2, count + 1))
    if seed == 5:
        visible = rng.random(count) < 0.4
    return [(joined, matrix, visible)], matrix


@pytest.mark.parametrize("seed", range(6))
def test_the_best_are_the_same_with_and_without_the_copy(
    make_memory: MemoryFactory, seed: int, used: list[bool]
) -> None:
    rng = np.random.default_rng(300 + seed)
    parts, matrix = _memories_and_parts(make_memory, rng, seed)
    query = _unit(rng.standard_normal(matrix.shape[1]))
    for limit in (1, 8, 32, 10_000):
        without = top_vector_candidates(parts, query, limit)
        assert copy_now(matrix)
        with_copy = top_vector_candidates(parts, query, limit)
        quantized.forget_all()

        def plain(hits: tuple[list[tuple[object, float]], list[Matrix]]) -> list[object]:
            return [
                (memory.memory_id, score, vector.tolist())  # type: ignore[attr-defined]
                for (memory, score), vector in zip(hits[0], hits[1], strict=True)
            ]

        assert plain(with_copy) == plain(without) == reference_top(parts, query, limit)
    assert used.count(True) == 4 and used.count(False) == 4  # each way, each limit


def _copied_rows(owner: Matrix) -> int:
    copy = quantized._COPIES.entry(owner, owner.ctypes.data).copy
    return 0 if copy is None else copy.rows


def _until_copied(owner: Matrix, rows: int) -> None:
    for _ in range(500):
        if _copied_rows(owner) >= rows:
            return
        time.sleep(0.01)
    raise AssertionError(f"the copier copied {_copied_rows(owner)} rows, not {rows}")


def test_rows_appended_after_the_copy_are_scored_and_the_copy_extended(
    make_memory: MemoryFactory, used: list[bool]
) -> None:
    """An owner that grows in place (the in-memory and PostgreSQL indexes' buffers): the
    copy of its first rows stays valid, up to ``STALE_ROWS`` rows after it are scored by
    the product beside it, and a copy further behind is extended by the copier."""
    rng = np.random.default_rng(11)
    dimensions, first, few, more = 16, QUANTIZED_FROM_ROWS, STALE_ROWS // 2, STALE_ROWS + 100
    owner = np.zeros((first + more, dimensions), dtype=np.float32)
    owner[:first] = _unit(rng.standard_normal((first, dimensions)))
    assert copy_now(owner[:first])
    owner[first:] = _unit(rng.standard_normal((more, dimensions)))
    owner[first + 5] = _unit(np.ones(dimensions))  # the best rows come after the copy
    owner[first + few + 7] = _unit(np.ones(dimensions))
    memories = [make_memory(f"m{index:05d}", tick=index) for index in range(first + more)]
    query = _unit(np.ones(dimensions))
    with ThreadPoolExecutor(1) as pool:
        for rows in (first + few, first + more, first + more):
            grown = owner[:rows]
            grown.flags.writeable = False
            joined = part_of(memories[:rows], list(range(rows)), grown)
            visible = np.ones(rows, dtype=np.bool_)
            expected = reference_top([(joined, grown, visible)], query, 8)
            for _ in range(COPY_AFTER):  # the extension is asked for from the COPY_AFTER-th
                hits = top_vector_candidates([(joined, grown, visible)], query, 8, pool, True)
                assert [(m.memory_id, s) for m, s in hits[0]] == [(i, s) for i, s, _ in expected]
                assert int(hits[0][0][0].memory_id[1:]) >= first  # a row after the copy
            if rows == first + more:
                _until_copied(owner, first + more)
    # A few rows behind: the copy and the product beside it; more: the product alone (the
    # copier catches up meanwhile: the next passes may use the copy again); caught up, the copy.
    assert used[:COPY_AFTER] == [True] * COPY_AFTER
    assert used[COPY_AFTER] is False
    assert used[2 * COPY_AFTER :] == [True] * COPY_AFTER


def test_a_copy_is_made_by_the_copier_in_slices_and_never_on_the_recall() -> None:
    rng = np.random.default_rng(3)
    count = COPY_SLICE_ROWS + QUANTIZED_FROM_ROWS
    matrix = _owned(_unit(rng.standard_normal((count, 8))))
    query = _unit(rng.standard_normal(8))
    for _ in range(COPY_AFTER):  # not a front door's recall: no copy
        assert first_pass(matrix, query, 0, count, False) is None
    time.sleep(0.05)
    assert held_bytes() == 0
    quantized.forget_all()
    for _ in range(COPY_AFTER - 1):  # an NPC asked once or twice is not copied
        assert first_pass(matrix, query, 0, count, True) is None
    time.sleep(0.05)
    assert held_bytes() == 0
    assert first_pass(matrix, query, 0, count, True) is None  # scheduled, not waited for
    for _ in range(500):  # two slices, two jobs: the second queued by the first
        if held_bytes() == count * (8 + 4):
            break
        time.sleep(0.01)
    assert held_bytes() == count * (8 + 4)
    assert first_pass(matrix, query, 0, count, False) is not None


def test_a_copy_gives_way_to_running_recalls(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a recall runs, the copier waits before each chunk (up to ``_MOST_WAIT``)."""
    monkeypatch.setattr(quantized, "_MOST_WAIT", 10.0)
    rng = np.random.default_rng(4)
    count = QUANTIZED_FROM_ROWS
    matrix = _owned(_unit(rng.standard_normal((count, 8))))
    query = _unit(rng.standard_normal(8))
    with quantized.recalling:
        for _ in range(COPY_AFTER):
            first_pass(matrix, query, 0, count, True)
        time.sleep(0.2)
        assert held_bytes() == 0  # waiting for the recall to end
    for _ in range(500):
        if held_bytes():
            break
        time.sleep(0.01)
    assert held_bytes() == count * (8 + 4)


def test_small_or_foreign_matrices_are_not_copied() -> None:
    rng = np.random.default_rng(5)
    small = _owned(_unit(rng.standard_normal((QUANTIZED_FROM_ROWS - 1, 8))))
    assert first_pass(small, small[0], 0, small.shape[0], False) is None
    whole = _unit(rng.standard_normal((QUANTIZED_FROM_ROWS + 10, 8)))
    assert not copy_now(whole[5:])  # not starting at its owner's row 0
    assert not copy_now(np.asfortranarray(whole))
    assert not copy_now(whole.astype(np.float64))  # type: ignore[arg-type]
    assert held_bytes() == 0
    broken = whole.copy()
    broken[7, 3] = np.nan  # no bound holds for it: never copied, scored by the product
    assert not copy_now(broken)
    assert first_pass(broken, broken[0], 0, broken.shape[0], False) is None
    assert held_bytes() == 0


def test_a_copy_goes_with_its_matrix_and_the_copies_keep_to_their_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(9)
    count, dimensions = QUANTIZED_FROM_ROWS, 8
    matrix = _owned(_unit(rng.standard_normal((count, dimensions))))
    assert copy_now(matrix)
    assert held_bytes() == count * (dimensions + 4)
    del matrix
    gc.collect()
    assert held_bytes() == 0
    monkeypatch.setattr(quantized._COPIES, "budget", 2 * count * (dimensions + 4))
    matrices = [_owned(_unit(rng.standard_normal((count, dimensions)))) for _ in range(3)]
    for matrix in matrices:
        assert copy_now(matrix)
    assert held_bytes() == 2 * count * (dimensions + 4)
    query = matrices[0][0]
    # The least recently used (the first) was dropped; the others are held.
    assert first_pass(matrices[0], query, 0, count, False) is None
    assert first_pass(matrices[2], query, 0, count, False) is not None


_WORDS = ["bridge", "storm", "market", "dragon", "river", "king", "bread", "sword", "inn"]


def _npc(make_memory: MemoryFactory, count: int) -> list[object]:
    rng = np.random.default_rng(17)
    return [
        make_memory(
            f"m{index:05d}",
            owner_id="npc",
            tick=index,
            text=" ".join(rng.choice(_WORDS, 6).tolist()) + f" note {index}",
            importance=float(rng.choice([0.0, 0.5, 1.0])),
        )
        for index in range(count)
    ]


def _questions(ticks: tuple[int, ...]) -> list[GameMemoryQuery]:
    return [
        GameMemoryQuery(
            session_id="session",
            owner_id="npc",
            text=f"{_WORDS[number % 9]} {_WORDS[(number * 5) % 9]}",
            limit=8,
            at_or_before=GameMoment(timeline_id="world", tick=tick),
        )
        for number, tick in enumerate(ticks)
    ]


async def test_a_recall_answers_the_same_with_the_copy(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the front door: an NPC of 5,000 memories, recalled as of several moments,
    before and after its rows were copied (by the copier, after the 4th recall)."""
    store = make_vector_store(HashingEmbeddingProvider())
    assert all(await store.append_many(_npc(make_memory, 5_000)))  # type: ignore[arg-type]
    asked = _questions((4_999, 4_200, 2_500, 100))

    def answers(results: list[object]) -> list[object]:
        return [
            [(h.memory.memory_id, h.vector_score, h.fused_score) for h in r.hits]  # type: ignore[attr-defined]
            for r in results
        ]

    monkeypatch.setattr(quantized, "_DOT", None)  # as on a platform without SimSIMD
    before = answers([await store.recall(query) for query in asked])
    monkeypatch.undo()
    quantized.forget_all()
    for _ in range(COPY_AFTER):  # the last one schedules the copy
        await store.recall(asked[0])
    for _ in range(200):
        if held_bytes():
            break
        await asyncio.sleep(0.01)
    assert held_bytes() > 0
    after = answers([await store.recall(query) for query in asked])
    assert after == before
    assert any(hit[1] is not None for hits in after for hit in hits)  # vectors were used


async def test_a_store_told_not_to_keeps_no_copy(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_vector_store(HashingEmbeddingProvider(), options={"int8_copies": False})
    assert all(await store.append_many(_npc(make_memory, QUANTIZED_FROM_ROWS)))  # type: ignore[arg-type]
    for query in _questions((4_000,)) * (COPY_AFTER + 2):
        assert (await store.recall(query)).hits
    await asyncio.sleep(0.2)
    assert held_bytes() == 0
