"""Greedy, order-preserving batching and right padding of token id lists."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["estimate_tensor_bytes", "pad_batch", "plan_batches"]


def plan_batches(
    lengths: Sequence[int], maximum_batch_size: int, maximum_batch_tokens: int
) -> list[range]:
    """Split texts, in order, into consecutive batches.

    A batch starts with the next text (always admitted, whatever its length) and takes
    further texts while it has fewer than ``maximum_batch_size`` and the next text's
    tokens still fit under ``maximum_batch_tokens``. With batch size 2, batch tokens 12
    and lengths 3, 3, 5 the batches are ``[0, 1]`` and ``[2]``.

    Returns:
        Index ranges covering ``range(len(lengths))`` in order.
    """
    batches: list[range] = []
    start = 0
    count = len(lengths)
    while start < count:
        stop = start + 1
        tokens = lengths[start]
        while (
            stop < count
            and stop - start < maximum_batch_size
            and tokens + lengths[stop] <= maximum_batch_tokens
        ):
            tokens += lengths[stop]
            stop += 1
        batches.append(range(start, stop))
        start = stop
    return batches


def pad_batch(
    batch: Sequence[Sequence[int]], pad_id: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Right-pad id lists to the longest with ``pad_id``.

    Returns:
        ``input_ids`` and ``attention_mask`` ([batch, longest] int64; the mask is 1 on
        real tokens and 0 on padding).
    """
    longest = max(len(ids) for ids in batch)
    if all(len(ids) == longest for ids in batch):
        # Nothing to pad (always so for a single text): two numpy calls instead of 2 + 2n.
        input_ids = np.array(batch, dtype=np.int64)
        return input_ids, np.ones_like(input_ids)
    input_ids = np.full((len(batch), longest), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(batch), longest), dtype=np.int64)
    for row, ids in enumerate(batch):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return input_ids, attention_mask


def estimate_tensor_bytes(batch_size: int, sequence_length: int, hidden_size: int) -> int:
    """Bytes of a run's int64 inputs (three) and float32 output: ``b*s*(3*8 + h*4)``."""
    return batch_size * sequence_length * (3 * 8 + hidden_size * 4)
