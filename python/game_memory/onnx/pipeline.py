"""The synchronous half of an operation: texts in, unit vectors out, on a worker thread.

In order: tokenize every text (checking each stays within ``maximum_tokens``), plan batches
greedily, check every batch's tensor estimate against ``maximum_tensor_bytes`` *before*
any runs, then per batch right-pad, run the model, check the output's shape and type,
pool and normalise. Batches run ``batch_threads`` at a time (the worker and helper
threads each taking the next batch; one onnxruntime session runs them concurrently), in
order when 1. Between steps it checks the operation's :class:`RunControl` and stops with
:class:`Terminated` once the operation was cancelled.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor
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
    #: Threads that run an operation's batches beside its worker (``limits.batch_threads``
    #: − 1 of them, shared by the engine's operations), or ``None``: one after another.
    helpers: Executor | None = None

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
        # Every batch's tensor estimate is checked before any runs: an operation that
        # cannot run whole runs nothing.
        for batch in batches:
            size, sequence = len(batch), max(len(tokenized[index].ids) for index in batch)
            estimate = estimate_tensor_bytes(size, sequence, hidden_size)
            if estimate > limits.maximum_tensor_bytes:
                raise onnx_error(
                    OnnxFailureKind.INVALID_CONFIGURATION,
                    f"a batch of {size} x {sequence} tokens needs about {estimate} bytes, "
                    f"more than maximum_tensor_bytes={limits.maximum_tensor_bytes}; lower "
                    "maximum_batch_size or maximum_batch_tokens",
                )
        started = time.perf_counter()
        try:
            if self.helpers is None or limits.batch_threads < 2 or len(batches) < 2:
                outputs = [self._batch(tokenized, batch, control, stats) for batch in batches]
            else:
                outputs = self._shared(tokenized, batches, control, stats, self.helpers)
        finally:
            stats.inference_milliseconds = milliseconds_since(started)
        vectors = [vector for output in outputs for vector in output]
        if len(vectors) != len(tokenized):
            raise onnx_error(
                OnnxFailureKind.INVALID_OUTPUT,
                f"the model returned {len(vectors)} vectors for {len(tokenized)} texts",
            )
        return vectors

    def _batch(
        self,
        tokenized: list[TokenizedText],
        batch: Sequence[int],
        control: RunControl,
        stats: OperationStats,
    ) -> list[Vector]:
        """Run one batch (pad, run, check, pool); counted in ``stats`` once done."""
        if control.cancelled:
            raise Terminated
        hidden_size = self.inference.hidden_size
        input_ids, attention_mask = pad_batch(
            [tokenized[index].ids for index in batch], self.tokenizer.pad_id
        )
        size, sequence = input_ids.shape
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
        vectors = list(pool(hidden, attention_mask, self.pooling))
        with _STATS_LOCK:
            stats.batch_count += 1
            stats.largest_batch = max(stats.largest_batch, size)
        return vectors

    def _shared(
        self,
        tokenized: list[TokenizedText],
        batches: Sequence[Sequence[int]],
        control: RunControl,
        stats: OperationStats,
        helpers: Executor,
    ) -> list[list[Vector]]:
        """Run ``batches`` on this thread and up to ``batch_threads - 1`` helpers at once,
        each taking the next batch not taken; the outputs in batch order.

        Returns only once no helper runs a batch of this operation (a helper that starts
        later finds it over and leaves), so an operation's slot is never freed while its
        runs go on. After a failure no batch is started; the error of the earliest batch
        that failed is raised (``Terminated`` when the operation was cancelled).
        """
        outputs: list[list[Vector] | None] = [None] * len(batches)
        failures: dict[int, BaseException] = {}
        lock = threading.Condition()
        order = iter(range(len(batches)))
        running = [0]  # helpers inside ``work``
        over = [False]

        def work() -> None:
            while True:
                with lock:
                    index = None if failures or control.cancelled else next(order, None)
                if index is None:
                    return
                try:
                    outputs[index] = self._batch(tokenized, batches[index], control, stats)
                except BaseException as exc:  # re-raised on the operation's own thread
                    with lock:
                        failures[index] = exc

        def helper() -> None:
            with lock:
                if over[0]:
                    return
                running[0] += 1
            try:
                work()
            finally:
                with lock:
                    running[0] -= 1
                    lock.notify_all()

        for _ in range(min(self.limits.batch_threads, len(batches)) - 1):
            try:
                helpers.submit(helper)
            except RuntimeError:  # the engine is closing: this thread runs them all
                break
        try:
            work()
        finally:
            with lock:
                over[0] = True
                lock.wait_for(lambda: running[0] == 0)
        if failures:
            raise failures[min(failures)]
        if control.cancelled:
            raise Terminated
        return [output for output in outputs if output is not None]


#: Guards the counters of an operation's ``OperationStats`` when its batches run at once.
_STATS_LOCK = threading.Lock()
