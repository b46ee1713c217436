"""Where prepared models live: ``$GAME_MEMORY_HOME``, else a per-user cache folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["HOME_VARIABLE", "default_model_home", "models_folder"]

#: The environment variable that overrides the cache folder.
HOME_VARIABLE = "GAME_MEMORY_HOME"


def default_model_home() -> Path:
    """The folder prepared models are cached in.

    ``$GAME_MEMORY_HOME`` if set; else ``%LOCALAPPDATA%\\game-memory\\Cache`` on Windows,
    ``~/Library/Caches/game-memory`` on macOS, and ``$XDG_CACHE_HOME/game-memory``
    (default ``~/.cache/game-memory``) elsewhere. The folder need not exist yet.
    """
    configured = os.environ.get(HOME_VARIABLE, "").strip()
    if configured:
        return Path(configured).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", "").strip()
        root = Path(base) if base else Path.home() / "AppData" / "Local"
        return root / "game-memory" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "game-memory"
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(cache) if cache else Path.home() / ".cache") / "game-memory"


def models_folder(home: str | os.PathLike[str] | None = None) -> Path:
    """``<home>/models``, where each prepared model has a folder of its own (``home`` a path
    or a string, as ``open_memory`` takes it)."""
    return (Path(home) if home is not None else default_model_home()) / "models"
