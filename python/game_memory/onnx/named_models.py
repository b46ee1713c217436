"""The models a name stands for (``default``, ``multilingual``) and where each is prepared.

A name is what a user types (``game-memory models prepare multilingual``, ``--model
multilingual``); it maps to one model id and one folder under ``<home>/models``. The
build side (``onnx/build/``) pins where each model's weights come from; this table is all
the runtime needs to find a prepared model and to say how to prepare a missing one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from game_memory.onnx.errors import OnnxFailureKind, onnx_error
from game_memory.onnx.model_home import models_folder

__all__ = ["MODEL_NAMES", "NamedModel", "named_model", "named_model_directory"]


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model that ``game-memory models prepare <name>`` builds.

    Attributes:
        name: What the user types.
        model_id: The model id of its embedding identity.
        folder_name: Its folder under ``<home>/models``.
        summary: One line for help and messages (model, languages, precision).
        download: The size of the one download preparing it needs.
    """

    name: str
    model_id: str
    folder_name: str
    summary: str
    download: str

    @property
    def prepare_command(self) -> str:
        """The command that prepares it, e.g. ``game-memory models prepare multilingual``."""
        return f"game-memory models prepare {self.name}"


_MODELS = (
    NamedModel(
        name="default",
        model_id="sentence-transformers/all-MiniLM-L6-v2",
        folder_name="all-MiniLM-L6-v2",
        summary="all-MiniLM-L6-v2, English, INT8, 384 wide",
        download="about 84 MB",
    ),
    NamedModel(
        name="multilingual",
        model_id="intfloat/multilingual-e5-small",
        folder_name="multilingual-e5-small",
        summary="multilingual-e5-small, about 100 languages, INT8, 384 wide",
        download="about 91 MB",
    ),
)

#: Every model name, the default first.
MODEL_NAMES: tuple[str, ...] = tuple(model.name for model in _MODELS)


def named_model(name: str) -> NamedModel:
    """The model ``name`` stands for.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` for an unknown name (the message
            lists the known ones).
    """
    for model in _MODELS:
        if model.name == name:
            return model
    raise onnx_error(
        OnnxFailureKind.INVALID_CONFIGURATION,
        f"there is no embedding model named {name!r}; choose one of {', '.join(MODEL_NAMES)}, "
        "or give the path of a model folder",
    )


def named_model_directory(name: str, home: str | os.PathLike[str] | None = None) -> Path:
    """The folder model ``name`` is (or will be) prepared into: ``<home>/models/<folder>``.

    Raises:
        OnnxEmbeddingError: ``INVALID_CONFIGURATION`` for an unknown name.
    """
    return models_folder(home) / named_model(name).folder_name
