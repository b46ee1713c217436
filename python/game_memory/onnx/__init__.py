"""In-process embeddings through onnxruntime: no network, no model server, no download at run time.

Two providers share one bounded inference engine (:class:`OnnxInferenceEngine`):

- :class:`BgeM3OnnxEmbeddingProvider`, the reference design's multilingual model (CLS
  pooling, 1,024 wide), from a folder the host supplies;
- :class:`SentenceEncoderOnnxEmbeddingProvider` (:class:`MiniLmOnnxEmbeddingProvider` for
  the default all-MiniLM-L6-v2, mean pooling, 384 wide), from a folder that
  ``game-memory models prepare`` (:func:`prepare_default_model`) builds from a pinned PyPI
  wheel.

Every failure is an :class:`OnnxEmbeddingError` with an :class:`OnnxFailureKind`; see
``docs/embeddings.md`` for the options, limits and failure kinds.
"""

from game_memory.onnx.bge_m3 import BgeM3OnnxEmbeddingProvider
from game_memory.onnx.engine import OnnxInferenceEngine
from game_memory.onnx.errors import (
    ModelPreparationError,
    OnnxEmbeddingBusyError,
    OnnxEmbeddingError,
    OnnxEmbeddingTimeoutError,
    OnnxFailureKind,
)
from game_memory.onnx.loading import load_default_provider, load_provider_from_directory
from game_memory.onnx.metrics import MetricsSink, OnnxEmbeddingOperationMetrics, OnnxOperation
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.options import (
    BgeM3OnnxEmbeddingOptions,
    OnnxProviderOptions,
    SentenceEncoderOnnxEmbeddingOptions,
)
from game_memory.onnx.prepare import (
    default_model_directory,
    prepare_default_model,
    prepare_wheel_model,
    prepared_model_problems,
)
from game_memory.onnx.prepared_manifest import PreparedFile, PreparedModelManifest
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.sentence_encoder import (
    MiniLmOnnxEmbeddingProvider,
    SentenceEncoderOnnxEmbeddingProvider,
)
from game_memory.onnx.sentence_encoder_build import build_sentence_encoder_folder
from game_memory.onnx.wheel_source import WheelModelSource

__all__ = [
    "BgeM3OnnxEmbeddingOptions",
    "BgeM3OnnxEmbeddingProvider",
    "MetricsSink",
    "MiniLmOnnxEmbeddingProvider",
    "ModelPreparationError",
    "OnnxEmbeddingBusyError",
    "OnnxEmbeddingError",
    "OnnxEmbeddingOperationMetrics",
    "OnnxEmbeddingProviderBase",
    "OnnxEmbeddingTimeoutError",
    "OnnxFailureKind",
    "OnnxInferenceEngine",
    "OnnxOperation",
    "OnnxProviderOptions",
    "PreparedFile",
    "PreparedModelManifest",
    "SentenceEncoderOnnxEmbeddingOptions",
    "SentenceEncoderOnnxEmbeddingProvider",
    "WheelModelSource",
    "build_sentence_encoder_folder",
    "default_model_directory",
    "default_model_home",
    "load_default_provider",
    "load_provider_from_directory",
    "prepare_default_model",
    "prepare_wheel_model",
    "prepared_model_problems",
]
