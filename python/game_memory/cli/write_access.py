"""A command that must write, on a folder it cannot write: say so, and what to do instead.

``check`` (with or without ``--fix``: it reads one consistent state under the writer
lock), ``migrate``, ``forget``, ``erase``, ``compact`` and ``rebuild`` take the writer lock
of the save (or of the index), a file they open for writing inside the folder's data
folder. On a read-only mount, a folder of another user or a read-only copy, that open
fails, and the store says only that it "could not open the lock file ...: Read-only file
system": true, but it names neither the folder nor that the command needs write access,
nor what the user can do. The store's error (a :class:`PersistenceError` chained to the
``OSError``) is recognised here and said in full.
"""

from __future__ import annotations

from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import GameMemoryError

__all__ = ["write_access_message"]

#: The data folder each writer lock lives in, and what its parent folder is.
_LOCKED_FOLDERS = {".game-memory": "save", ".game-memory-index": "index"}
_LOCK_FILE = "lock"


def _refused_lock(error: BaseException) -> OSError | None:
    """The ``OSError`` that kept a writer lock file from opening, if that caused ``error``."""
    refused = fs.refused_access(error)
    if refused is None or not isinstance(refused.filename, str):
        return None
    lock = Path(refused.filename)
    return refused if lock.name == _LOCK_FILE and lock.parent.name in _LOCKED_FOLDERS else None


def write_access_message(error: GameMemoryError, command: str) -> str:
    """``error``'s message; when ``command`` could not take a writer lock for lack of write
    access, a message that says so and what to do.

    Args:
        error: What the command failed with.
        command: The subcommand's name (``check``, ``migrate``, ...), as the user typed it.
    """
    refused = _refused_lock(error)
    if refused is None:
        return str(error)
    lock = Path(str(refused.filename))
    kind = _LOCKED_FOLDERS[lock.parent.name]
    folder = lock.parent.parent
    why = (
        ": it reads the save under its writer lock, with or without --fix, so that it reports "
        "one consistent state, and"
        if command == "check"
        else ", and"
    )
    return (
        f"game-memory {command} needs write access to the {kind} folder {folder}{why} the "
        f"lock file {lock} cannot be opened for writing ({refused.strerror or refused}). Run "
        f"it where the {kind} folder is writable, or copy the {kind} folder somewhere "
        "writable and run it on the copy"
    )
