"""In-process embeddings through onnxruntime: no network, no model server, no download at run time.

Two providers share one bounded inference engine (:mod:`game_memory.onnx.engine`):

- :class:`BgeM3OnnxEmbeddingProvider`, the reference design's multilingual model, from a
  folder the host supplies;
- :class:`SentenceEncoderOnnxEmbeddingProvider` (:class:`MiniLmOnnxEmbeddingProvider` for
  the default all-MiniLM-L6-v2), from a folder ``game-memory models prepare`` builds.

Every failure is an :class:`OnnxEmbeddingError` with an :class:`OnnxFailureKind`.
"""

from game_memory.onnx.bge_m3 import BgeM3OnnxEmbeddingProvider
from game_memory.onnx.errors import (
    ModelPreparationError,
    OnnxEmbeddingBusyError,
    OnnxEmbeddingError,
    OnnxEmbeddingTimeoutError,
    OnnxFailureKind,
)
from game_memory.onnx.metrics import MetricsSink, OnnxEmbeddingOperationMetrics, OnnxOperation
from game_memory.onnx.options import (
    BgeM3OnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingOptions,
)

__all__ = [
    "BgeM3OnnxEmbeddingOptions",
    "BgeM3OnnxEmbeddingProvider",
    "MetricsSink",
    "ModelPreparationError",
    "OnnxEmbeddingBusyError",
    "OnnxEmbeddingError",
    "OnnxEmbeddingOperationMetrics",
    "OnnxEmbeddingTimeoutError",
    "OnnxFailureKind",
    "OnnxOperation",
    "SentenceEncoderOnnxEmbeddingOptions",
]
