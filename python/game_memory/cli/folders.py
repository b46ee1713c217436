"""The folders a command is given: checked before anything opens them, and found when omitted.

A path that exists but is a file where a folder is expected is refused here with one line
(the stores refuse it too, this only says it earlier and names the option). When
``--index-dir`` is omitted the index is the save's sibling ``<save>.index``; a save laid
out as ``game-memory demo --data DIR`` lays it out (``DIR/save`` beside ``DIR/index``) is
recognised, so the commands the demo prints work without ``--index-dir``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from game_memory.errors import InvalidArgumentError
from game_memory.opening import default_index_dir

__all__ = ["folder_problem", "index_folder", "is_new_save", "output_problem"]

_INDEX_DATA = ".game-memory-index"
_SAVE_DATA = ".game-memory"


def folder_problem(
    path: str | os.PathLike[str] | None,
    option: str,
    *,
    advice: str = "give the folder that holds it",
    what: str = "a folder",
) -> str | None:
    """Why ``path`` (given as ``option``) cannot be a folder, or ``None`` if it can.

    A missing path is fine here (a command that writes creates it; one that reads says
    so when it opens it); a link is left to the stores, which refuse it by name. ``what``
    names the folder expected and ``advice`` what to give instead of a file, because
    "File exists" or "does not exist" from further down would name the wrong problem.
    """
    if path is None:
        return None
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return f"{option} {path}: a part of that path is a file, not a folder"
    except OSError as exc:
        return f"{option} {path} cannot be inspected: {exc.strerror or exc}"
    if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode):
        return None
    return f"{option} {path} is a file, not {what}; {advice}"


def output_problem(output: str) -> str | None:
    """Why ``--output`` (bundle, addon) cannot be written into, or ``None`` if it can."""
    return folder_problem(
        os.path.expanduser(output), "--output", advice="give a folder to write into"
    )


def index_folder(save: str, index: str | None) -> tuple[Path | None, str | None]:
    """The index folder to use and, when it was found rather than given, a notice.

    Returns ``(None, None)`` for the default sibling folder (``open_memory`` picks it).
    """
    if index is not None:
        return Path(index), None
    try:
        sibling = default_index_dir(save)
    except InvalidArgumentError:  # a save at a root: open_memory says so when it needs one
        return None, None
    if os.path.lexists(sibling):
        return None, None
    folder = Path(os.path.abspath(save))
    demo = folder.parent / "index"
    if folder.name == "save" and os.path.isdir(demo / _INDEX_DATA):
        return demo, (
            f"using the index {demo} beside the save (the layout of 'game-memory demo --data'); "
            "give --index-dir to choose another"
        )
    return None, None


def is_new_save(save: str) -> bool:
    """Whether ``save`` holds no store yet (a command that writes would create one)."""
    return not os.path.lexists(os.path.join(save, _SAVE_DATA))
