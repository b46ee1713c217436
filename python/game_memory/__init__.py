"""game-memory: long-term memory for game NPCs.

The authoritative save is the truth; the vector index is derived from it and disposable;
recall fuses lexical and semantic search and reranks on *game* time. Everything public is
importable from here (and the in-process ONNX providers from ``game_memory.onnx``).
"""

from game_memory.errors import (
    CapacityExceededError,
    DerivedIndexError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    GameMemoryError,
    InvalidArgumentError,
    MemoryConflictError,
    PersistenceError,
    StoreBusyError,
    StoreClosedError,
)
from game_memory.model import (
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    derive_memory_id,
    memory_matches_query,
)
from game_memory.vector.hashing import HashingEmbeddingProvider
from game_memory.vector.identity import MemoryEmbeddingIdentity
from game_memory.vector.provider import EmbeddingProvider, EmbeddingVector

__version__ = "0.1.0"

__all__ = [
    "CapacityExceededError",
    "DerivedIndexError",
    "EmbeddingProvider",
    "EmbeddingTimeoutError",
    "EmbeddingUnavailableError",
    "EmbeddingVector",
    "GameMemory",
    "GameMemoryError",
    "GameMemoryKind",
    "GameMemoryQuery",
    "GameMemorySearchSnapshot",
    "GameMemorySearchStage",
    "GameMemorySearchStageKind",
    "GameMoment",
    "HashingEmbeddingProvider",
    "InvalidArgumentError",
    "MemoryConflictError",
    "MemoryEmbeddingIdentity",
    "PersistenceError",
    "StoreBusyError",
    "StoreClosedError",
    "derive_memory_id",
    "memory_matches_query",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and not isinstance(_obj, str):
        try:
            _obj.__module__ = "game_memory"
        except (AttributeError, TypeError):
            pass
del _name, _obj
