"""Verify a model folder's files: inside the folder, present, bounded, and hashing as expected.

Nothing here trusts the folder: each file is resolved (symbolic links included) and must
stay inside it, its size must be within a bound and equal any size the host supplied, and
its SHA-256 (read in 1 MiB chunks) must equal any hash the host supplied.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.strict_json import nests_deeper_than

__all__ = [
    "ModelFileManifest",
    "ModelFileRecord",
    "model_id_problem",
    "probed",
    "read_json_document",
    "sha256_file",
    "verify_model_files",
]

_CHUNK = 1 << 20
_MAXIMUM_JSON_DEPTH = 32


@dataclass(frozen=True, slots=True)
class ModelFileRecord:
    """One verified file: its path relative to the folder (``/``-separated), size and hash."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ModelFileManifest:
    """The verified files of one model folder, in verification order."""

    directory: Path
    files: tuple[ModelFileRecord, ...]

    def record(self, path: str) -> ModelFileRecord:
        """The record of ``path``; raises ``KeyError`` if it was not verified."""
        for record in self.files:
            if record.path == path:
                return record
        raise KeyError(path)

    def absolute(self, path: str) -> Path:
        """The absolute location of a verified file."""
        return self.directory / self.record(path).path


def sha256_file(path: Path, cancelled: Callable[[], bool] | None = None) -> str:
    """Hash a whole file in 1 MiB chunks; stop early (``CANCELLED``) when ``cancelled()``.

    Raises:
        OSError: The file cannot be read (callers translate it).
        OnnxEmbeddingError: ``CANCELLED`` when ``cancelled`` turned true mid-way.
    """
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            if cancelled is not None and cancelled():
                raise onnx_error(OnnxFailureKind.CANCELLED, f"hashing {path} was cancelled")
            digest.update(chunk)
    return digest.hexdigest()


def probed(path: Path, test: Callable[[Path], bool]) -> bool:
    """``test(path)`` (``Path.is_file``, ``is_dir``, ``exists``), where a folder the process
    may not enter raises ``OnnxEmbeddingError(MODEL_INTEGRITY)`` naming the path: Python
    3.11's ``Path`` tests raise ``PermissionError`` there instead of answering, which no
    caller of a loader expects (a game falls back to lexical mode on the error)."""
    try:
        return test(path)
    except OSError as exc:
        raise onnx_error(
            OnnxFailureKind.MODEL_INTEGRITY,
            f"{path} cannot be read ({exc.strerror or exc}); give the process read access "
            "to the model folder",
        ) from exc


def inside_folder(directory: Path, candidate: Path) -> bool:
    """Whether ``candidate`` (resolved) is ``directory`` (resolved) or lies below it."""
    root = os.path.normcase(str(directory))
    target = os.path.normcase(str(candidate))
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def model_id_problem(model_id: object) -> str | None:
    """Why ``model_id`` (read from a model folder) cannot name the model of an embedding
    identity; ``None`` when it can.

    The identity's own validation decides (a non-blank string of at most 512 characters,
    no control characters), so that a folder is refused while its files are read, with a
    message its caller completes with the file and field, and never after the model is
    loaded, as a raw ``ValidationError``.

    Returns:
        The reason, phrased to follow the field's name (``"must not contain control
        characters"``), or ``None``.
    """
    try:
        MemoryEmbeddingIdentity.model_validate(
            {"provider_id": "check", "model_id": model_id, "version": "check", "dimensions": 1}
        )
    except ValidationError as exc:
        return str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
    return None


def verify_model_files(
    directory: Path,
    files: Sequence[tuple[str, int]],
    *,
    expected_file_bytes: Mapping[str, int] | None = None,
    expected_sha256: Mapping[str, str] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> ModelFileManifest:
    """Check each ``(relative path, maximum bytes)`` of ``directory`` in order.

    Args:
        directory: The model folder; it must exist.
        files: The files to check and the largest size each may have.
        expected_file_bytes: Sizes the host requires, by relative path.
        expected_sha256: Lower-case SHA-256 digests the host requires, by relative path.
        cancelled: Polled between chunks while hashing.

    Returns:
        The manifest of every file, with its size and SHA-256.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` if the folder is missing or a file
            resolves outside it; ``MISSING_MODEL_FILE`` if a file is absent;
            ``MODEL_INTEGRITY`` for an empty, oversized, unreadable or mismatching file.
    """
    try:
        root = directory.resolve(strict=True)
    except OSError as exc:
        raise onnx_error(
            OnnxFailureKind.INVALID_CONFIGURATION,
            f"the model folder {directory} does not exist; point model_directory at it",
        ) from exc
    if not probed(root, Path.is_dir):
        raise onnx_error(
            OnnxFailureKind.INVALID_CONFIGURATION, f"the model folder {directory} is not a folder"
        )
    expected_file_bytes = expected_file_bytes or {}
    expected_sha256 = expected_sha256 or {}
    records = []
    for relative, maximum in files:
        location = (root / relative).resolve()
        if not inside_folder(root, location):
            raise onnx_error(
                OnnxFailureKind.INVALID_CONFIGURATION,
                f"the model file {relative} resolves to {location}, outside {root}; "
                "model files must live inside the model folder",
            )
        if not probed(location, Path.exists):
            raise onnx_error(
                OnnxFailureKind.MISSING_MODEL_FILE,
                f"the model file {relative} is missing from {root}",
            )
        try:
            if not location.is_file():
                raise onnx_error(
                    OnnxFailureKind.MODEL_INTEGRITY, f"the model file {location} is not a file"
                )
            size = location.stat().st_size
            if size < 1 or size > maximum:
                raise onnx_error(
                    OnnxFailureKind.MODEL_INTEGRITY,
                    f"the model file {location} has {size} bytes; it must have 1..{maximum}",
                )
            wanted = expected_file_bytes.get(relative)
            if wanted is not None and wanted != size:
                raise onnx_error(
                    OnnxFailureKind.MODEL_INTEGRITY,
                    f"the model file {location} has {size} bytes, not the expected {wanted}",
                )
            digest = sha256_file(location, cancelled)
        except OSError as exc:
            raise onnx_error(
                OnnxFailureKind.MODEL_INTEGRITY, f"cannot read the model file {location}: {exc}"
            ) from exc
        wanted_digest = expected_sha256.get(relative)
        if wanted_digest is not None and wanted_digest != digest:
            raise onnx_error(
                OnnxFailureKind.MODEL_INTEGRITY,
                f"the model file {location} has SHA-256 {digest}, not the expected "
                f"{wanted_digest}; replace it with the intended file",
            )
        records.append(ModelFileRecord(path=relative, size=size, sha256=digest))
    return ModelFileManifest(directory=root, files=tuple(records))


def read_json_document(path: Path, maximum_bytes: int) -> dict[str, Any]:
    """Read a JSON object of at most ``maximum_bytes`` bytes and nesting depth 32.

    Raises:
        OnnxEmbeddingError: ``MODEL_INTEGRITY`` if it is unreadable, too large, not
            UTF-8 JSON, too deep, or not an object.
    """
    try:
        with path.open("rb") as handle:
            raw = handle.read(maximum_bytes + 1)
    except OSError as exc:
        raise onnx_error(OnnxFailureKind.MODEL_INTEGRITY, f"cannot read {path}: {exc}") from exc
    if len(raw) > maximum_bytes:
        raise onnx_error(
            OnnxFailureKind.MODEL_INTEGRITY, f"{path} is larger than {maximum_bytes} bytes"
        )
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise onnx_error(
            OnnxFailureKind.MODEL_INTEGRITY, f"{path} is not valid UTF-8 JSON: {exc}"
        ) from exc
    if nests_deeper_than(document, _MAXIMUM_JSON_DEPTH):
        raise onnx_error(
            OnnxFailureKind.MODEL_INTEGRITY,
            f"{path} nests deeper than {_MAXIMUM_JSON_DEPTH} levels",
        )
    if not isinstance(document, dict):
        raise onnx_error(OnnxFailureKind.MODEL_INTEGRITY, f"{path} is not a JSON object")
    return document
