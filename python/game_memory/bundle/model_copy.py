"""Put the embedding model a bundle carries into it: prepared, checked, and only what runs.

``--model default`` prepares all-MiniLM-L6-v2 (``game_memory.onnx.prepare_default_model``,
a no-op when it is already prepared) and copies it; ``--model PATH`` copies that model
folder; ``--model lexical`` copies nothing. A prepared folder (one with
``game-memory-model.json``) is copied file by file from its manifest, each file hashed as
it is copied and compared with the manifest, so a damaged model never ships; its fp32 graph
(``onnx/model.onnx``, 90 MB of the default model's 114 MB) is left out, because the sidecar
loads the INT8 graph (the providers' default precision), and the copied manifest lists only
the files copied, so the bundled folder is itself complete and intact. Any other model
folder (BGE-M3) is copied whole.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from game_memory.bundle.layout import MODELS_FOLDER, BundleError, ModelKind
from game_memory.onnx.build.prepare import prepare_named_model
from game_memory.onnx.errors import ModelPreparationError, OnnxEmbeddingError
from game_memory.onnx.named_models import MODEL_NAMES, named_model_directory
from game_memory.onnx.prepared_manifest import MANIFEST_NAME, PreparedModelManifest

__all__ = ["FP32_GRAPH", "ModelChoice", "copy_model", "resolve_model_choice"]

#: The full-precision graph of a prepared folder, which the sidecar does not load.
FP32_GRAPH = "onnx/model.onnx"
_INT8_GRAPH = "onnx/model_int8.onnx"
_CHUNK = 1_048_576

ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class ModelChoice:
    """The model ``--model`` asked for, resolved to a folder.

    Attributes:
        kind: ``default``, ``folder`` or ``lexical``.
        source: The model folder to copy, or ``None`` for ``lexical``.
    """

    kind: ModelKind
    source: Path | None


def resolve_model_choice(
    model: str, home: Path | None = None, *, progress: ProgressCallback | None = None
) -> ModelChoice:
    """Resolve ``--model default|multilingual|lexical|PATH``; prepare a named model if needed.

    A named model becomes the bundle's default model: the bundled sidecar's
    ``--model default`` loads it.

    Raises:
        BundleError: The default model cannot be prepared (offline, say), or ``PATH`` is not
            a model folder.
    """
    if model == "lexical":
        return ModelChoice("lexical", None)
    if model in MODEL_NAMES:
        try:
            return ModelChoice("default", prepare_named_model(model, home, progress=progress))
        except (OnnxEmbeddingError, ModelPreparationError) as exc:  # offline, a bad home
            raise BundleError(
                f"cannot prepare the {model} model in {named_model_directory(model, home)}: "
                f"{exc}; bundle with --model lexical to ship without one"
            ) from exc
    source = Path(model).expanduser().resolve()
    if not source.is_dir():
        problem = "is not a folder" if source.exists() else "does not exist"
        raise BundleError(f"the model folder {source} {problem}")
    if (
        not (source / MANIFEST_NAME).is_file()
        and not (source / "sentencepiece.bpe.model").is_file()
    ):
        raise BundleError(
            f"{source} is neither a prepared model folder ({MANIFEST_NAME}) nor a BGE-M3 folder "
            "(sentencepiece.bpe.model); pass a folder that 'game-memory serve --model PATH' loads"
        )
    return ModelChoice("folder", source)


def copy_model(choice: ModelChoice, bundle: Path) -> tuple[str | None, int]:
    """Copy the chosen model into ``bundle/models/<name>``.

    Returns:
        The model folder relative to the bundle (``None`` for lexical) and its size in bytes.

    Raises:
        BundleError: A file differs from its manifest, or cannot be read or written.
    """
    if choice.source is None:
        return None, 0
    relative = f"{MODELS_FOLDER}/{choice.source.name}"
    target = bundle / MODELS_FOLDER / choice.source.name
    try:
        target.mkdir(parents=True)
        if (choice.source / MANIFEST_NAME).is_file():
            _copy_prepared(choice.source, target)
        else:
            shutil.copytree(
                choice.source,
                target,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns(".*", "__pycache__"),
            )
    except OSError as exc:
        raise BundleError(
            f"cannot copy the model {choice.source} into {target}: {exc.strerror or exc}"
        ) from exc
    size = sum(path.stat().st_size for path in target.rglob("*") if path.is_file())
    return relative, size


def _copy_prepared(source: Path, target: Path) -> None:
    try:
        manifest = PreparedModelManifest.read(source)
    except OnnxEmbeddingError as exc:
        raise BundleError(f"cannot bundle the model in {source}: {exc}") from exc
    paths = {entry.path for entry in manifest.files}
    keep = tuple(
        entry for entry in manifest.files if not (entry.path == FP32_GRAPH and _INT8_GRAPH in paths)
    )
    for entry in keep:
        destination = target.joinpath(*entry.path.split("/"))
        destination.parent.mkdir(parents=True, exist_ok=True)
        size, digest = _copy_hashed(source.joinpath(*entry.path.split("/")), destination)
        if size != entry.bytes or digest != entry.sha256:
            raise BundleError(
                f"the model file {source / entry.path} differs from its manifest ({size} bytes, "
                f"sha256 {digest[:16]}..., expected {entry.bytes} bytes, {entry.sha256[:16]}...); "
                "run 'game-memory models prepare --force' and bundle again"
            )
    manifest.model_copy(update={"files": keep}).write(target)


def _copy_hashed(source: Path, destination: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with source.open("rb") as reader, destination.open("wb") as writer:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
            size += len(chunk)
    return size, digest.hexdigest()
