"""Load a model off the event loop under a deadline, emitting one ``MODEL_LOAD`` record."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from game_memory.onnx.errors import OnnxEmbeddingError, OnnxFailureKind, onnx_error
from game_memory.onnx.metrics import (
    MetricsSink,
    OnnxEmbeddingOperationMetrics,
    OnnxOperation,
    publish_metrics,
)

__all__ = ["load_off_loop"]

T = TypeVar("T")


async def load_off_loop(
    load: Callable[[Callable[[], bool]], T],
    *,
    timeout: float,
    dispose: Callable[[T], None],
    metrics: MetricsSink | None,
) -> T:
    """Run ``load(cancelled)`` on a worker thread and return what it built.

    ``load`` should poll ``cancelled()`` between steps. If the deadline passes or the
    caller cancels, the caller is answered at once and whatever ``load`` builds later is
    handed to ``dispose``.

    Raises:
        OnnxEmbeddingError: ``TIMEOUT`` after ``timeout`` seconds; the kind ``load``
            raised; ``UNSUPPORTED_MODEL`` for any other exception of ``load``.
        asyncio.CancelledError: The caller cancelled.
    """
    started = time.perf_counter()
    failure: OnnxFailureKind | None = None
    abandoned = threading.Event()

    def guarded() -> T:
        try:
            return load(abandoned.is_set)
        except OnnxEmbeddingError:
            raise
        except Exception as exc:
            raise onnx_error(
                OnnxFailureKind.UNSUPPORTED_MODEL, f"the model could not be loaded: {exc!r}"
            ) from exc

    def dispose_late(future: asyncio.Future[T]) -> None:
        if not future.cancelled() and future.exception() is None:
            dispose(future.result())

    future = asyncio.get_running_loop().run_in_executor(None, guarded)
    try:
        try:
            done, _ = await asyncio.wait((future,), timeout=timeout)
        except asyncio.CancelledError:
            abandoned.set()
            future.add_done_callback(dispose_late)
            raise
        if not done:
            abandoned.set()
            future.add_done_callback(dispose_late)
            raise onnx_error(
                OnnxFailureKind.TIMEOUT,
                f"loading the model took longer than load_timeout={timeout}s",
            )
        return future.result()
    except OnnxEmbeddingError as exc:
        failure = exc.kind
        raise
    except asyncio.CancelledError:
        failure = OnnxFailureKind.CANCELLED
        raise
    finally:
        publish_metrics(
            metrics,
            OnnxEmbeddingOperationMetrics(
                operation=OnnxOperation.MODEL_LOAD,
                failure=failure,
                total_milliseconds=max(0.0, (time.perf_counter() - started) * 1000.0),
                succeeded=failure is None,
            ),
        )
