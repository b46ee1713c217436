"""A large matrix-vector product is shared with a helper thread, and changes no score.

:func:`game_memory.recall.product.product` cuts a product at an aligned block boundary and
has a helper thread multiply the first part; these tests pin that the scores are bit for
bit the whole product's (single-threaded BLAS, in a fresh interpreter: BLAS reads its
thread count when numpy loads), that a busy or shut-down helper is never waited for idly,
and when the product is shared at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from game_memory.recall import product as product_module
from game_memory.recall.product import blas_is_single_threaded, product
from support.blas import run_with_one_blas_thread

BLOCK = 256

_BIT_IDENTITY = """
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import game_memory.recall.product as P
from game_memory.recall.vectors import SCORING_BLOCK_ROWS as B, score_rows, score_span
assert P._SINGLE, "the product is shared only with a single-threaded BLAS"
P.SPLIT_VALUES = 1  # share every product that can be cut
rng = np.random.default_rng(20261205)
checked = 0
with ThreadPoolExecutor(2) as helper:
    for dimensions in (1, 64, 384, 385):
        for count in (2 * B, 2 * B + 1, 3 * B - 1, 4_097, 10_000):
            matrix = rng.standard_normal((count, dimensions)).astype(np.float32)
            query = rng.standard_normal(dimensions).astype(np.float32)
            whole = matrix @ query
            # Runs start on a block and end on one or at the last row (score_rows's runs).
            for begin, end in ((0, count), (B, count), (0, 2 * B), (B, count // B * B)):
                shared = P.product(matrix, query, begin, end, B, helper)
                assert np.array_equal(shared.view(np.int32), whole[begin:end].view(np.int32))
                checked += 1
            for start, stop in ((0, count), (3, count - 2), (B + 1, count)):
                scores = score_span(matrix, query, start, stop, helper)
                assert np.array_equal(scores.view(np.int32), whole[start:stop].view(np.int32))
                checked += 1
            rows = np.flatnonzero(rng.random(count) < 0.3).astype(np.int64)
            scores = score_rows(matrix, query, rows, helper)
            assert np.array_equal(scores.view(np.int32), whole[rows].view(np.int32))
            checked += 1
print(checked)
"""


def test_a_shared_product_is_bit_identical_to_one_product() -> None:
    checked = run_with_one_blas_thread(_BIT_IDENTITY)
    assert int(checked) == 4 * 5 * (4 + 3 + 1)  # dimensions × counts × checks


@pytest.mark.parametrize(
    ("environment", "single"),
    [
        ({}, False),  # unset: OpenBLAS runs a thread per core
        ({"OPENBLAS_NUM_THREADS": "1"}, True),
        ({"OPENBLAS_NUM_THREADS": " 1 "}, True),
        ({"OPENBLAS_NUM_THREADS": "2"}, False),
        ({"OMP_NUM_THREADS": "1"}, True),
        ({"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "1"}, False),  # the first decides
        ({"GOTO_NUM_THREADS": "1", "OMP_NUM_THREADS": "3"}, True),
        ({"OPENBLAS_NUM_THREADS": ""}, False),
    ],
)
def test_the_blas_thread_count_is_read_as_openblas_reads_it(
    environment: dict[str, str], single: bool
) -> None:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert blas_is_single_threaded(environment) is (single and (cores or 1) >= 2)


class _Recording(Executor):
    """An executor that runs what it is given on its own thread, and counts it."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(1)
        self.jobs = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.jobs += 1
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait, cancel_futures=cancel_futures)


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Share every product that can be cut, whatever this process's BLAS runs."""
    monkeypatch.setattr(product_module, "_SINGLE", True)
    monkeypatch.setattr(product_module, "SPLIT_VALUES", 1)
    yield


def _matrix(count: int, dimensions: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(count)
    matrix = rng.standard_normal((count, dimensions)).astype(np.float32)
    return matrix, rng.standard_normal(dimensions).astype(np.float32)


def test_the_helper_multiplies_the_first_part(shared: None) -> None:
    matrix, query = _matrix(4 * BLOCK)
    helper = _Recording()
    scores = product(matrix, query, 0, 4 * BLOCK, BLOCK, helper)
    assert helper.jobs == 1
    np.testing.assert_allclose(scores, matrix @ query, rtol=1e-5, atol=1e-5)
    helper.shutdown()


@pytest.mark.parametrize(
    ("begin", "end", "why"),
    [
        (0, BLOCK, "one block: nowhere to cut"),
        (3, 4 * BLOCK, "not starting on a block"),
        (0, 2 * BLOCK - 1, "the middle falls in the first block: no cut after row 0"),
    ],
)
def test_a_product_that_cannot_be_cut_is_not_shared(
    shared: None, begin: int, end: int, why: str
) -> None:
    matrix, query = _matrix(4 * BLOCK)
    helper = _Recording()
    scores = product(matrix, query, begin, end, BLOCK, helper)
    np.testing.assert_allclose(scores, matrix[begin:end] @ query, rtol=1e-5, atol=1e-5)
    assert helper.jobs == 0, why
    helper.shutdown()


def test_small_products_and_threaded_blas_are_not_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix, query = _matrix(4 * BLOCK)
    helper = _Recording()
    monkeypatch.setattr(product_module, "_SINGLE", True)
    product(matrix, query, 0, 4 * BLOCK, BLOCK, helper)  # below SPLIT_VALUES
    monkeypatch.setattr(product_module, "SPLIT_VALUES", 1)
    monkeypatch.setattr(product_module, "_SINGLE", False)
    product(matrix, query, 0, 4 * BLOCK, BLOCK, helper)  # a threaded BLAS splits it itself
    product(matrix.astype(np.float64), query, 0, 4 * BLOCK, BLOCK, helper)
    assert helper.jobs == 0
    helper.shutdown()


def test_a_busy_helper_is_not_waited_for(shared: None) -> None:
    """Its pool busy with other work, the job is withdrawn and the caller does it."""
    matrix, query = _matrix(4 * BLOCK)
    helper = ThreadPoolExecutor(1)
    release = threading.Event()
    helper.submit(release.wait)  # the only thread is busy until released
    try:
        scores = product(matrix, query, 0, 4 * BLOCK, BLOCK, helper)
        np.testing.assert_allclose(scores, matrix @ query, rtol=1e-5, atol=1e-5)
    finally:
        release.set()
        helper.shutdown()


def test_a_shut_down_helper_leaves_one_product(shared: None) -> None:
    matrix, query = _matrix(4 * BLOCK)
    helper = ThreadPoolExecutor(1)
    helper.shutdown()
    scores = product(matrix, query, 0, 4 * BLOCK, BLOCK, helper)
    np.testing.assert_allclose(scores, matrix @ query, rtol=1e-5, atol=1e-5)
