"""The one error tree of game-memory.

Every failure a caller can see is a :class:`GameMemoryError`; errors from the libraries
underneath (``OSError``, ``json``, pydantic, onnxruntime) are translated where they arise
and chained with ``raise ... from``. The classes exist because a caller handles each of
them differently::

    GameMemoryError
    ├── InvalidArgumentError (also ValueError)  bad input: fix the call, nothing changed
    ├── PersistenceError                        authoritative save corrupt or unsafe: fail closed
    ├── MemoryConflictError                     an id reused for different content
    ├── MemoryNotFoundError                     no memory with that id in that partition
    ├── CapacityExceededError                   a configured bound reached (names the bound)
    ├── DerivedIndexError                       derived vector index corrupt: rebuild it
    ├── StoreBusyError                          a lock or queue is held too long: retry later
    ├── StoreClosedError                        used after ``aclose()``
    └── EmbeddingUnavailableError               the embedding provider failed
        ├── EmbeddingTimeoutError               ... or missed its deadline
        └── OnnxEmbeddingError (game_memory.onnx, with a ``kind``)

A message says what happened, names the file, id or bound involved, and says what to do.
"""

from __future__ import annotations

__all__ = [
    "CapacityExceededError",
    "DerivedIndexError",
    "EmbeddingTimeoutError",
    "EmbeddingUnavailableError",
    "GameMemoryError",
    "InvalidArgumentError",
    "MemoryConflictError",
    "MemoryNotFoundError",
    "PersistenceError",
    "StoreBusyError",
    "StoreClosedError",
]


class GameMemoryError(Exception):
    """Base class of every error game-memory raises on purpose."""


class InvalidArgumentError(GameMemoryError, ValueError):
    """An argument is outside its documented bounds; nothing was read or written."""


class PersistenceError(GameMemoryError):
    """The authoritative store is corrupt, unsafe (a symbolic link) or unreadable.

    The store fails closed: nothing is guessed or repaired silently. Restore the save
    from a backup, or run ``FileGameMemoryStore.check(fix=True)`` for the documented
    repairs (torn tails and pending journal records only).
    """


class MemoryConflictError(GameMemoryError):
    """A memory id already exists in its partition with different content.

    Appending the same content again is a no-op; reusing an id for other content is
    refused and changes nothing. Choose a new id (or ``derive_memory_id``).
    """


class MemoryNotFoundError(GameMemoryError):
    """A call names a memory that its session and owner do not hold (``forget``, a source of
    ``consolidate``); nothing changed. Check the ids (``enumerate`` lists them)."""


class CapacityExceededError(GameMemoryError):
    """A configured bound was reached. ``bound`` names the option or limit involved."""

    def __init__(self, message: str, *, bound: str) -> None:
        super().__init__(message)
        self.bound = bound


class DerivedIndexError(GameMemoryError):
    """The derived vector index is corrupt or disagrees with the authoritative save.

    The save is never touched because of it. Delete the index folder or run
    ``VectorMemoryStore.rebuild(session_id, force=True)``.
    """


class StoreBusyError(GameMemoryError):
    """A cross-process lock or a bounded queue could not be had in time; retry later."""


class StoreClosedError(GameMemoryError):
    """The object was used after ``aclose()``; create a new one."""


class EmbeddingUnavailableError(GameMemoryError):
    """The embedding provider failed; lexical recall still works."""


class EmbeddingTimeoutError(EmbeddingUnavailableError):
    """The embedding provider (or the queue in front of it) missed its deadline."""
