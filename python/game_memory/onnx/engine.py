"""The bounded inference engine both ONNX providers run on.

One engine owns one model. It admits a bounded number of operations, runs a bounded number
at once on its own worker threads (never on the event loop), batches texts greedily in
order, checks every run's tensor size before starting it, terminates onnxruntime when an
operation is cancelled or late, and emits one metrics record per operation.

Life of an operation, in order (the order is the contract):

1. closed? -> ``CLOSED``; a text too long or holding NUL -> ``INVALID_CONFIGURATION``;
2. take an admission ticket without waiting; none left -> ``QUEUE_FULL`` (nothing started);
3. wait up to ``queue_timeout`` for an inference slot -> ``QUEUE_TIMEOUT``;
4. on a worker thread, under ``inference_timeout`` -> ``TIMEOUT``: tokenize, plan batches,
   check every batch's tensor estimate, and per batch pad, run, check the output, pool,
   normalize; ``batch_threads`` batches at a time (the worker and the engine's helper
   threads), one after another when 1.

A caller's cancellation (``task.cancel()``) propagates as ``asyncio.CancelledError``; the
engine's ``aclose()`` fails waiting and running operations with ``CANCELLED``. Either way
the onnxruntime run is told to terminate, and the inference slot is only freed when the
worker thread really ends, so abandoned runs can never pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from game_memory.errors import InvalidArgumentError
from game_memory.onnx.errors import OnnxEmbeddingError, OnnxFailureKind, onnx_error
from game_memory.onnx.limits import EngineLimits
from game_memory.onnx.metrics import (
    MetricsSink,
    OnnxEmbeddingOperationMetrics,
    OnnxOperation,
    publish_metrics,
)
from game_memory.onnx.pipeline import (
    EmbeddingPipeline,
    OperationStats,
    Terminated,
    Vector,
    milliseconds_since,
)
from game_memory.onnx.pooling import Pooling
from game_memory.onnx.tokens import BatchInference, RunControl, TextTokenizer

__all__ = ["OnnxInferenceEngine"]


class _State(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"


class OnnxInferenceEngine:
    """Run a tokenizer and a model within bounds; see the module docstring for the contract.

    Args:
        limits: The validated bounds.
        tokenizer: Turns texts into ids (called on worker threads).
        inference: Runs padded batches (called on worker threads).
        pooling: CLS or masked mean.
        metrics: Receives one record per operation; may be ``None``.
    """

    def __init__(
        self,
        limits: EngineLimits,
        tokenizer: TextTokenizer,
        inference: BatchInference,
        pooling: Pooling,
        metrics: MetricsSink | None = None,
    ) -> None:
        self._limits = limits
        self._tokenizer = tokenizer
        self._inference = inference
        self._metrics = metrics
        # Threads that run an operation's batches beside its worker (``batch_threads``).
        self._helpers = (
            ThreadPoolExecutor(
                max_workers=limits.batch_threads - 1, thread_name_prefix="game-memory-onnx-batch"
            )
            if limits.batch_threads > 1
            else None
        )
        self._pipeline = EmbeddingPipeline(limits, tokenizer, inference, pooling, self._helpers)
        self._executor = ThreadPoolExecutor(
            max_workers=limits.maximum_concurrent_inferences,
            thread_name_prefix="game-memory-onnx",
        )
        self._tickets = limits.maximum_concurrent_inferences + limits.maximum_queued_operations
        self._slots = asyncio.Semaphore(limits.maximum_concurrent_inferences)
        # Operations whose worker has not ended yet: control -> the future their caller awaits.
        self._active: dict[RunControl, asyncio.Future[list[Vector]]] = {}
        self._idle: asyncio.Event | None = None
        self._closing: asyncio.Future[None] | None = None
        self._state = _State.OPEN

    @property
    def limits(self) -> EngineLimits:
        """The bounds this engine enforces."""
        return self._limits

    @property
    def tokenizer(self) -> TextTokenizer:
        """The tokenizer (for diagnostics and benchmarks)."""
        return self._tokenizer

    @property
    def inference(self) -> BatchInference:
        """The model runner (for diagnostics and benchmarks)."""
        return self._inference

    @property
    def closed(self) -> bool:
        """Whether ``aclose()`` has been called."""
        return self._state is not _State.OPEN

    async def embed(
        self, texts: Sequence[str], operation: OnnxOperation, *, prefix: str = ""
    ) -> list[Vector]:
        """Embed ``texts`` into unit float32 vectors, one per text, in order.

        Safe to call concurrently from one event loop. Emits exactly one metrics record.
        ``prefix`` is put before each text when it is tokenized (e5's ``query: ``); the
        text's own length is what ``maximum_characters_per_text`` bounds.

        Raises:
            InvalidArgumentError: ``texts`` is empty, too long, or holds a non-string.
            OnnxEmbeddingError: With the kind of the failure (module docstring).
            asyncio.CancelledError: The caller cancelled; the run was terminated.
        """
        self._check_arguments(texts)
        started = time.perf_counter()
        stats = OperationStats(text_count=len(texts))
        failure: OnnxFailureKind | None = None
        try:
            return await self._admit_and_run(texts, prefix, stats)
        except OnnxEmbeddingError as exc:
            failure = exc.kind
            raise
        except asyncio.CancelledError:
            failure = OnnxFailureKind.CANCELLED
            raise
        finally:
            if self._metrics is not None:
                self._publish(operation, failure, started, stats)

    def _publish(
        self,
        operation: OnnxOperation,
        failure: OnnxFailureKind | None,
        started: float,
        stats: OperationStats,
    ) -> None:
        # Only called when a sink listens: building a record is not free on the query path.
        publish_metrics(
            self._metrics,
            OnnxEmbeddingOperationMetrics(
                operation=operation,
                failure=failure,
                total_milliseconds=milliseconds_since(started),
                queue_milliseconds=stats.queue_milliseconds,
                tokenization_milliseconds=stats.tokenization_milliseconds,
                inference_milliseconds=stats.inference_milliseconds,
                text_count=stats.text_count,
                inference_batch_count=stats.batch_count,
                maximum_inference_batch_size=stats.largest_batch,
                token_count=stats.token_count,
                truncated_text_count=min(stats.truncated_count, stats.text_count),
                succeeded=failure is None,
            ),
        )

    async def aclose(self) -> None:
        """Cancel waiting and running operations, wait for their threads, release the model.

        Idempotent and safe to call concurrently; every call returns once the model is
        released. Operations cut short fail with ``CANCELLED``; later calls with ``CLOSED``.
        If the model ignores termination, this waits for its run to end.
        """
        if self._state is _State.CLOSED:
            return
        if self._state is _State.OPEN:
            self._state = _State.CLOSING
            closing = self._closing_future()
            if not closing.done():
                closing.set_result(None)
            for control, outcome in list(self._active.items()):
                if not outcome.done():
                    outcome.set_exception(
                        onnx_error(
                            OnnxFailureKind.CANCELLED,
                            "the ONNX embedding provider was closed while the operation ran",
                        )
                    )
                control.cancel()
        while self._active:
            if self._idle is None:
                self._idle = asyncio.Event()
            self._idle.clear()
            await self._idle.wait()
        if self._state is _State.CLOSING:
            self._state = _State.CLOSED
            self._executor.shutdown(wait=False)
            if self._helpers is not None:  # idle: every operation's runs have ended
                self._helpers.shutdown(wait=False)
            self._inference.close()

    def _check_arguments(self, texts: Sequence[str]) -> None:
        if isinstance(texts, str) or not isinstance(texts, Sequence):
            raise InvalidArgumentError("texts must be a sequence of strings")
        if not texts:
            raise InvalidArgumentError("texts must hold at least one text")
        if len(texts) > self._limits.maximum_texts_per_call:
            raise InvalidArgumentError(
                f"{len(texts)} texts exceed maximum_texts_per_call="
                f"{self._limits.maximum_texts_per_call}; split the call"
            )
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidArgumentError(f"text {index} is {type(text).__name__}, not str")

    def _check_texts(self, texts: Sequence[str]) -> None:
        limit = self._limits.maximum_characters_per_text
        for index, text in enumerate(texts):
            if len(text) > limit:
                raise onnx_error(
                    OnnxFailureKind.INVALID_CONFIGURATION,
                    f"text {index} has {len(text)} characters; maximum_characters_per_text "
                    f"is {limit}",
                )
            if "\0" in text:
                raise onnx_error(
                    OnnxFailureKind.INVALID_CONFIGURATION, f"text {index} contains a NUL character"
                )

    async def _admit_and_run(
        self, texts: Sequence[str], prefix: str, stats: OperationStats
    ) -> list[Vector]:
        if self._state is not _State.OPEN:
            raise onnx_error(
                OnnxFailureKind.CLOSED, "the ONNX embedding provider is closed; create a new one"
            )
        self._check_texts(texts)
        if self._tickets <= 0:
            limits = self._limits
            raise onnx_error(
                OnnxFailureKind.QUEUE_FULL,
                f"the embedding queue is full ({limits.maximum_concurrent_inferences} running, "
                f"{limits.maximum_queued_operations} queued); retry later",
            )
        self._tickets -= 1
        try:
            queued = time.perf_counter()
            await self._acquire_slot()
            stats.queue_milliseconds = milliseconds_since(queued)
            if self._state is not _State.OPEN:
                self._slots.release()
                raise onnx_error(
                    OnnxFailureKind.CANCELLED,
                    "the ONNX embedding provider was closed while the operation waited",
                )
            return await self._run(texts, prefix, stats)
        finally:
            self._tickets += 1

    def _closing_future(self) -> asyncio.Future[None]:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
        return self._closing

    async def _acquire_slot(self) -> None:
        slots = self._slots
        if not slots.locked():
            # A free slot and no one waiting: acquire() returns without suspending.
            await slots.acquire()
            return
        closing = self._closing_future()
        acquire = asyncio.get_running_loop().create_task(slots.acquire())
        try:
            done, _ = await asyncio.wait(
                (acquire, closing),
                timeout=self._limits.queue_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            self._abandon(acquire)
            raise
        if acquire in done:
            return
        self._abandon(acquire)
        if closing.done():
            raise onnx_error(
                OnnxFailureKind.CANCELLED,
                "the ONNX embedding provider was closed while the operation waited",
            )
        raise onnx_error(
            OnnxFailureKind.QUEUE_TIMEOUT,
            f"the operation waited queue_timeout={self._limits.queue_timeout}s for an "
            "inference slot; the provider is overloaded, retry later",
        )

    def _abandon(self, acquire: asyncio.Task[bool]) -> None:
        # If the slot was granted after all, give it back now or as soon as it is.
        def give_back(task: asyncio.Task[bool]) -> None:
            if not task.cancelled() and task.exception() is None:
                self._slots.release()

        if acquire.done():
            give_back(acquire)
        else:
            acquire.cancel()
            acquire.add_done_callback(give_back)

    async def _run(self, texts: Sequence[str], prefix: str, stats: OperationStats) -> list[Vector]:
        # The worker hands its outcome back with one call_soon_threadsafe (see _deliver),
        # which also frees the slot: a slot is held until the worker thread really ends,
        # not until the caller stops waiting, so terminated runs can never pile up.
        loop = asyncio.get_running_loop()
        control = RunControl()
        outcome: asyncio.Future[list[Vector]] = loop.create_future()
        self._active[control] = outcome
        self._executor.submit(self._work_and_deliver, loop, texts, prefix, control, stats, outcome)
        deadline = loop.call_later(
            self._limits.inference_timeout, self._expire, control, outcome, len(texts)
        )
        try:
            return await outcome
        except asyncio.CancelledError:
            control.cancel()
            raise
        finally:
            deadline.cancel()

    def _expire(
        self, control: RunControl, outcome: asyncio.Future[list[Vector]], count: int
    ) -> None:
        if not outcome.done():
            outcome.set_exception(
                onnx_error(
                    OnnxFailureKind.TIMEOUT,
                    f"embedding {count} text(s) ran past inference_timeout="
                    f"{self._limits.inference_timeout}s and was terminated",
                )
            )
            control.cancel()

    def _deliver(
        self,
        control: RunControl,
        outcome: asyncio.Future[list[Vector]],
        result: list[Vector] | None,
        error: BaseException | None,
    ) -> None:
        """Runs on the loop thread once the worker has ended."""
        self._active.pop(control, None)
        self._slots.release()
        if not self._active and self._idle is not None:
            self._idle.set()
        if outcome.done():
            return  # the caller left (cancelled, timed out, closed); the result is moot
        if error is None:
            assert result is not None
            outcome.set_result(result)
        elif isinstance(error, Terminated):
            outcome.set_exception(
                onnx_error(OnnxFailureKind.CANCELLED, "the operation was terminated")
            )
        else:
            outcome.set_exception(error)

    # ---- worker thread -------------------------------------------------------------

    def _work_and_deliver(
        self,
        loop: asyncio.AbstractEventLoop,
        texts: Sequence[str],
        prefix: str,
        control: RunControl,
        stats: OperationStats,
        outcome: asyncio.Future[list[Vector]],
    ) -> None:
        result: list[Vector] | None = None
        error: BaseException | None = None
        try:
            result = self._pipeline.run(texts, control, stats, prefix)
        except BaseException as exc:  # handed to the caller on the loop thread
            error = exc
        # If the event loop is already closed, nobody is left to answer.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._deliver, control, outcome, result, error)
