"""Sentence vectors from ``last_hidden_state``: CLS or masked-mean pooling, then L2 norm."""

from __future__ import annotations

import enum
import math

import numpy as np
import numpy.typing as npt

from game_memory.onnx.errors import OnnxFailureKind, onnx_error

__all__ = ["Pooling", "l2_normalize", "pool"]


class Pooling(enum.Enum):
    """How token states become one vector."""

    #: The state of the first token (``<s>`` / ``[CLS]``): BGE-M3's dense vector.
    CLS = "cls"
    #: The mean of the states of real tokens (mask 1): sentence-transformers' default.
    MEAN = "mean"


def pool(
    hidden: npt.NDArray[np.float32],
    attention_mask: npt.NDArray[np.int64],
    method: Pooling,
) -> npt.NDArray[np.float32]:
    """Pool [batch, seq, hidden] states into [batch, hidden] unit vectors (float32).

    Raises:
        OnnxEmbeddingError: ``INVALID_OUTPUT`` if a vector is not finite or is zero.
    """
    if method is Pooling.CLS:
        pooled = hidden[:, 0, :].astype(np.float64)
    elif attention_mask.all():
        # No padding (always so for a single text): a plain mean. Each numpy call costs
        # ~10 µs right after a run (cold caches), so the common case takes one call.
        pooled = hidden.mean(axis=1, dtype=np.float64)
    else:
        # A [batch, 1, seq] x [batch, seq, hidden] product sums the real tokens' states
        # without materialising a masked copy of the whole tensor.
        mask = attention_mask.astype(hidden.dtype)[:, None, :]
        sums = np.matmul(mask, hidden)[:, 0, :].astype(np.float64)
        counts = np.maximum(attention_mask.sum(axis=1, dtype=np.float64), 1.0)
        pooled = sums / counts[:, None]
    return l2_normalize(pooled)


def l2_normalize(vectors: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    """Scale each row to unit length in float64, then store it as float32.

    Raises:
        OnnxEmbeddingError: ``INVALID_OUTPUT`` if a row is not finite or has norm 0.
    """
    # NaN or infinite elements make their row's sum of squares NaN or infinite (float32
    # inputs cannot overflow it in float64); a NaN minimum fails the comparison too.
    squared = np.einsum("ij,ij->i", vectors, vectors)
    if not (float(squared.min()) > 0.0 and float(squared.max()) < math.inf):
        raise onnx_error(
            OnnxFailureKind.INVALID_OUTPUT,
            "the model produced a non-finite or zero embedding; the model file may be damaged",
        )
    normalized: npt.NDArray[np.float32] = (vectors / np.sqrt(squared)[:, None]).astype(np.float32)
    return normalized
