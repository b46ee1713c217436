"""The synchronous half of an operation: texts in, unit vectors out, on a worker thread.

In order: tokenize every text (checking each stays within ``maximum_tokens``), plan batches
greedily, and per batch right-pad, check the tensor estimate against
``maximum_tensor_bytes`` *before* running, run the model, check the output's shape and
type, pool and normalise. Between steps it checks the operation's :class:`RunControl`
and stops with :class:`Terminated` once the operation was cancelled.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from game_memory.onnx.batching import estimate_tensor_bytes, pad_batch, plan_batches
from game_memory.onnx.errors import OnnxEmbeddingError, OnnxFailureKind, onnx_error
from game_memory.onnx.limits import EngineLimits
from game_memory.onnx.pooling import Pooling, pool
from game_memory.onnx.tokens import BatchInference, RunControl, TextTokenizer, TokenizedText

__all__ = ["EmbeddingPipeline", "OperationStats", "Terminated", "Vector", "milliseconds_since"]

Vector = npt.NDArray[np.float32]


@dataclass(slots=True)
class OperationStats:
    """Counters of one operation; the worker thread writes, the loop reads at the end."""

    text_count: int = 0
    queue_milliseconds: float = 0.0
    tokenization_milliseconds: float = 0.0
    inference_milliseconds: float = 0.0
    batch_count: int = 0
    largest_batch: int = 0
    token_count: int = 0
    truncated_count: int = 0


class Terminated(Exception):
    """The worker noticed its operation was cancelled; the caller already reported why."""


def milliseconds_since(since: float) -> float:
    """Wall-clock milliseconds since ``time.perf_counter()`` returned ``since`` (>= 0)."""
    return max(0.0, (time.perf_counter() - since) * 1000.0)


@dataclass(frozen=True, slots=True)
class EmbeddingPipeline:
    """Tokenizer, model and pooling under the engine's limits; thread-safe, stateless."""

    limits: EngineLimits
    tokenizer: TextTokenizer
    inference: BatchInference
    pooling: Pooling

    def run(
        self,
        texts: Sequence[str],
        control: RunControl,
        stats: OperationStats,
        prefix: str = "",
    ) -> list[Vector]:
        """Embed ``texts`` in order, each after ``prefix``, filling ``stats``.

        Raises:
            OnnxEmbeddingError: ``TOKENIZATION``, ``INVALID_CONFIGURATION`` (tensor
                estimate), ``INFERENCE`` (including any unexpected error) or
                ``INVALID_OUTPUT``.
            Terminated: ``control`` was cancelled.
        """
        try:
            tokenized = self._tokenize(texts, prefix, control, stats)
            return self._infer(tokenized, control, stats)
        except (OnnxEmbeddingError, Terminated):
            raise
        except Exception as exc:
            if control.cancelled:
                raise Terminated from exc
            raise onnx_error(
                OnnxFailureKind.INFERENCE, f"embedding failed unexpectedly: {exc!r}"
            ) from exc

    def _tokenize(
        self, texts: Sequence[str], prefix: str, control: RunControl, stats: OperationStats
    ) -> list[TokenizedText]:
        started = time.perf_counter()
        limit = self.limits.maximum_tokens
        tokenized = []
        try:
            for text in texts:
                if control.cancelled:
                    raise Terminated
                try:
                    item = self.tokenizer.tokenize(prefix + text if prefix else text)
                except OnnxEmbeddingError:
                    raise
                except Exception as exc:
                    raise onnx_error(
                        OnnxFailureKind.TOKENIZATION, f"the tokenizer failed: {exc!r}"
                    ) from exc
                if not 1 <= len(item.ids) <= limit:
                    raise onnx_error(
                        OnnxFailureKind.TOKENIZATION,
                        f"the tokenizer returned {len(item.ids)} ids; expected 1..{limit}",
                    )
                tokenized.append(item)
                stats.token_count += len(item.ids)
                stats.truncated_count += item.truncated
        finally:
            stats.tokenization_milliseconds = milliseconds_since(started)
        if stats.token_count > self.limits.maximum_texts_per_call * limit:
            raise onnx_error(
                OnnxFailureKind.INVALID_CONFIGURATION,
                f"the call has {stats.token_count} tokens, more than maximum_texts_per_call x "
                "maximum_tokens",
            )
        return tokenized

    def _infer(
        self, tokenized: list[TokenizedText], control: RunControl, stats: OperationStats
    ) -> list[Vector]:
        limits = self.limits
        hidden_size = self.inference.hidden_size
        batches = plan_batches(
            [len(item.ids) for item in tokenized],
            limits.maximum_batch_size,
            limits.maximum_batch_tokens,
        )
        vectors: list[Vector] = []
        started = time.perf_counter()
        try:
            for batch in batches:
                if control.cancelled:
                    raise Terminated
                input_ids, attention_mask = pad_batch(
                    [tokenized[index].ids for index in batch], self.tokenizer.pad_id
                )
                size, sequence = input_ids.shape
                estimate = estimate_tensor_bytes(size, sequence, hidden_size)
                if estimate > limits.maximum_tensor_bytes:
                    raise onnx_error(
                        OnnxFailureKind.INVALID_CONFIGURATION,
                        f"a batch of {size} x {sequence} tokens needs about {estimate} bytes, "
                        f"more than maximum_tensor_bytes={limits.maximum_tensor_bytes}; lower "
                        "maximum_batch_size or maximum_batch_tokens",
                    )
                hidden = self.inference.run(input_ids, attention_mask, control)
                if control.cancelled:
                    raise Terminated
                if (
                    not isinstance(hidden, np.ndarray)
                    or hidden.shape != (size, sequence, hidden_size)
                    or hidden.dtype != np.float32
                ):
                    shape = getattr(hidden, "shape", None)
                    raise onnx_error(
                        OnnxFailureKind.INVALID_OUTPUT,
                        f"the model returned last_hidden_state of shape {shape}; expected "
                        f"float32 {(size, sequence, hidden_size)}",
                    )
                vectors.extend(pool(hidden, attention_mask, self.pooling))
                stats.batch_count += 1
                stats.largest_batch = max(stats.largest_batch, size)
        finally:
            stats.inference_milliseconds = milliseconds_since(started)
        if len(vectors) != len(tokenized):
            raise onnx_error(
                OnnxFailureKind.INVALID_OUTPUT,
                f"the model returned {len(vectors)} vectors for {len(tokenized)} texts",
            )
        return vectors
