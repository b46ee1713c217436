"""One structured record per provider operation, and the sink that receives it.

A record holds timings and counts only, never text, so a sink may log or export it
freely. A sink that raises is ignored: metrics never change a result.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from game_memory.onnx.errors import OnnxFailureKind

__all__ = [
    "MetricsSink",
    "OnnxEmbeddingOperationMetrics",
    "OnnxOperation",
    "publish_metrics",
]


class OnnxOperation(enum.Enum):
    """Which provider operation a metrics record describes."""

    MODEL_LOAD = "model_load"
    QUERY = "query"
    DOCUMENTS = "documents"


@dataclass(frozen=True, slots=True)
class OnnxEmbeddingOperationMetrics:
    """What one operation cost; emitted once per attempt, successful or not.

    A model load fills only ``total_milliseconds``. Times are wall-clock milliseconds
    (finite, >= 0); counts are >= 0 and ``truncated_text_count <= text_count``.

    Attributes:
        operation: Model load, query or documents.
        failure: Why it failed, or ``None`` on success.
        total_milliseconds: From the call to its return.
        queue_milliseconds: Waiting for an inference slot.
        tokenization_milliseconds: Turning texts into token ids.
        inference_milliseconds: Inside onnxruntime, summed over batches.
        text_count: Texts in the call.
        inference_batch_count: Batches run.
        maximum_inference_batch_size: Texts in the largest batch.
        token_count: Token ids, special tokens included, before padding.
        truncated_text_count: Texts cut to ``maximum_tokens``.
        succeeded: ``failure is None``.
    """

    operation: OnnxOperation
    failure: OnnxFailureKind | None
    total_milliseconds: float
    queue_milliseconds: float = 0.0
    tokenization_milliseconds: float = 0.0
    inference_milliseconds: float = 0.0
    text_count: int = 0
    inference_batch_count: int = 0
    maximum_inference_batch_size: int = 0
    token_count: int = 0
    truncated_text_count: int = 0
    succeeded: bool = False

    def __post_init__(self) -> None:
        for name in (
            "total_milliseconds",
            "queue_milliseconds",
            "tokenization_milliseconds",
            "inference_milliseconds",
        ):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0, not {value!r}")
        for name in (
            "text_count",
            "inference_batch_count",
            "maximum_inference_batch_size",
            "token_count",
            "truncated_text_count",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.truncated_text_count > self.text_count:
            raise ValueError("truncated_text_count cannot exceed text_count")
        if self.succeeded != (self.failure is None):
            raise ValueError("succeeded must be True exactly when failure is None")


#: Receives every record, on the event loop thread; must return quickly.
MetricsSink = Callable[[OnnxEmbeddingOperationMetrics], None]


def publish_metrics(sink: MetricsSink | None, record: OnnxEmbeddingOperationMetrics) -> None:
    """Hand ``record`` to ``sink``, swallowing anything the sink raises.

    A broken sink must never turn a successful embedding into a failure, nor replace the
    real failure of a failed one.
    """
    if sink is None:
        return
    try:
        sink(record)
    except Exception:
        # A sink's failure is deliberately not ours to report.
        return
