"""``durable.buffers.empty_buffer``: ``np.empty``'s arrays, large ones in anonymous memory
of their own (no huge-page advice), writable and contiguous like any other."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from game_memory.durable.buffers import empty_buffer


def owner(array: np.ndarray) -> object:
    """What holds an array's memory (through views and memoryviews)."""
    held: object = array
    while isinstance(held, np.ndarray) and held.base is not None:
        held = held.base
    return held.obj if isinstance(held, memoryview) else held


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [((0,), np.int64), ((10,), np.uint8), ((5, 32), np.uint8), ((150_000, 32), np.uint8),
     ((1 << 20,), np.int64), ((3_000, 384), np.float32)],
)  # fmt: skip
def test_an_empty_buffer_is_an_array_of_its_shape_and_type(
    shape: tuple[int, ...], dtype: type
) -> None:
    array = empty_buffer(shape, dtype)
    assert array.shape == shape and array.dtype == np.dtype(dtype)
    assert array.flags.c_contiguous and array.flags.writeable
    assert isinstance(owner(array), mmap.mmap) == (array.nbytes >= 4 << 20)
    if array.size:
        array.reshape(-1)[:] = 7
        assert int(array.reshape(-1)[-1]) == 7 and int(array.sum()) == 7 * array.size
        view = array[: shape[0] // 2]
        del array
        view.reshape(-1)[:1] = 1  # a view keeps its memory alive
        assert int(view.reshape(-1)[0]) == 1
