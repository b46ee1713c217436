"""The demo's embedding models: the default model (prepared on first use) and a changed one.

The terminal demo runs on the embedded default: the file store in a local folder and the
prepared all-MiniLM-L6-v2. :func:`ensure_default_model` prepares it when it is missing
(``prepare_default_model`` with a progress callback) and says why when that fails, so the
demo can fall back to lexical recall with a clear notice.

The model-change step needs a second, *different* embedding identity over the same save.
:func:`open_changed_model` re-opens the save with the same default model told to read at
most ``maximum_tokens`` tokens per text: a different preprocessing, so a different
identity, so the store reports ``REBUILD_REQUIRED`` until the index is rebuilt. With the
``hashing`` model (tests), the changed model is the hashing provider of another version.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.provider import EmbeddingProvider
from game_memory.errors import InvalidArgumentError
from game_memory.memory import VectorMemoryStore
from game_memory.opening import open_memory

__all__ = ["Preparation", "ensure_default_model", "open_changed_model"]

PrepareProgress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Preparation:
    """How getting the default model went.

    Attributes:
        ready: The model is prepared (now or before).
        prepared_now: It was prepared by this call (downloaded and built).
        problem: Why it is not ready (``None`` when it is).
        directory: Where it is (or would be).
    """

    ready: bool
    prepared_now: bool
    problem: str | None
    directory: Path


def ensure_default_model(
    home: Path | None = None, progress: PrepareProgress | None = None, name: str = "default"
) -> Preparation:
    """Make sure a named model (the default one) is prepared in ``home``; prepare it if not.

    Never raises for a failed preparation (offline, disk full): the demo then runs on
    lexical recall and shows :attr:`Preparation.problem`.

    Args:
        home: The model cache folder (default ``$GAME_MEMORY_HOME`` or the user cache).
        progress: Receives ``(stage, done, total)`` while the model is prepared.
    """
    from game_memory import onnx
    from game_memory.onnx.named_models import named_model_directory

    directory = named_model_directory(name, home)
    if directory.is_dir() and not onnx.prepared_model_problems(directory):
        return Preparation(True, False, None, directory)
    try:
        if name == "default":
            onnx.prepare_default_model(home, progress=progress)
        else:
            onnx.prepare_named_model(name, home, progress=progress)
    except onnx.ModelPreparationError as exc:
        return Preparation(False, False, f"{exc.stage} failed: {exc}", directory)
    return Preparation(True, True, None, directory)


async def open_changed_model(
    save_dir: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    model: str,
    maximum_tokens: int,
    home: Path | None = None,
) -> VectorMemoryStore:
    """Open the save with a changed model: another embedding identity than ``model``'s.

    Args:
        save_dir: The save folder (already closed by its previous owner).
        index_dir: The index folder beside it.
        model: The model the save was opened with: ``"default"`` (the changed model is
            the default model reading at most ``maximum_tokens`` tokens per text) or
            ``"hashing"`` (the changed model is the hashing provider version ``v2``).
        maximum_tokens: The changed default model's token limit.
        home: The model cache folder of the default model.

    Raises:
        EmbeddingUnavailableError: The default model cannot be loaded.
        InvalidArgumentError: ``model`` is neither ``"default"`` nor ``"hashing"``.
    """
    provider: EmbeddingProvider
    if model == "hashing":
        provider = HashingEmbeddingProvider(version="v2")
    elif model in ("default", "multilingual"):
        from game_memory import onnx

        provider = await onnx.load_named_provider(model, home, maximum_tokens=maximum_tokens)
    else:
        raise InvalidArgumentError(
            f"the demo changes the default, multilingual or hashing model, not {model!r}"
        )
    return await open_memory(save_dir, index=index_dir, model=provider)
