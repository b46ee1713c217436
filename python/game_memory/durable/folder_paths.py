"""What a folder argument must be before anything uses it.

``os`` takes almost anything for a path and fails late: ``None``, a number or bytes raise a
raw ``TypeError`` at the first use, a NUL character a ``ValueError``, and an empty path is
``os.path.abspath("")``, the current folder, which a store would then take (and fill) as the
save or the index. Every public entry that takes a folder (``open_memory``, the file store,
the file index) checks it here first, so the error is the library's and names the
argument.
"""

from __future__ import annotations

import os
from pathlib import Path

from game_memory.errors import InvalidArgumentError

__all__ = ["folder_path", "folder_text", "refuse_nul"]

_KINDS = "a folder path (str or os.PathLike)"


def folder_text(value: object, name: str, kinds: str = _KINDS) -> str:
    """``value`` as the text of a path (``os.fspath``), refused unless it can name a folder.

    Args:
        value: The argument as given.
        name: The argument's name, for the message.
        kinds: What the argument may be, for the message (``open_memory`` also takes a
            ``postgresql://`` URL, which passes here as a text).

    Raises:
        InvalidArgumentError: ``value`` is not a ``str`` or an ``os.PathLike`` of ``str``,
            is blank, or holds a NUL character (no file system allows one in a path).
    """
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str):
        raise InvalidArgumentError(f"{name} must be {kinds}, not {type(value).__name__}")
    if not path.strip():
        raise InvalidArgumentError(
            f"{name} must name a folder, not an empty path (which would be the current "
            "folder); give the folder's path"
        )
    refuse_nul(path, name)
    return path


def folder_path(value: object, name: str, kinds: str = _KINDS) -> Path:
    """:func:`folder_text`, made absolute (``os.path.abspath``: no link is resolved)."""
    return Path(os.path.abspath(folder_text(value, name, kinds)))


def refuse_nul(path: str, name: str) -> None:
    """Raises: InvalidArgumentError: ``path`` holds a NUL character."""
    if "\0" in path:
        raise InvalidArgumentError(
            f"{name} {path!r} holds a NUL character, which no file system allows in a path"
        )
