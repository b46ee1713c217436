"""game-memory: long-term memory for game NPCs.

The authoritative save is the truth; the vector index is derived from it and disposable;
recall fuses lexical and semantic search and reranks on *game* time. Everything public is
importable from here (and the in-process ONNX providers from ``game_memory.onnx``).
"""

import contextlib as _contextlib

from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.embedding.projector import MemoryTextProjector
from game_memory.embedding.provider import EmbeddingProvider, EmbeddingVector
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
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.lifecycle import RuntimeMemoryLifecycle
from game_memory.memory import VectorMemoryStore
from game_memory.model import (
    GameMemory,
    GameMemoryKind,
    GameMemoryQuery,
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
    GameMoment,
    memory_matches_query,
)
from game_memory.model.diagnostics import DiagnosticSeverity, MemoryVectorDiagnostic
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.model.memory_ids import derive_memory_id
from game_memory.model.results import RecallHit, RecallResult
from game_memory.model.status import VectorMemoryState, VectorMemoryStatus
from game_memory.recall.fusion import FusionMode, FusionOptions
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.recall.reranker import GameAwareMemoryReranker, GameAwareMemoryRerankerOptions
from game_memory.store.check import StoreCheckReport
from game_memory.store.file_store import FileGameMemoryStore
from game_memory.store.migration import FileGameMemoryMigrationResult
from game_memory.store.protocol import GameMemoryStore

__version__ = "0.1.0"

__all__ = [
    "CapacityExceededError",
    "DerivedIndexError",
    "DiagnosticSeverity",
    "EmbeddingProvider",
    "EmbeddingTimeoutError",
    "EmbeddingUnavailableError",
    "EmbeddingVector",
    "FileGameMemoryMigrationResult",
    "FileGameMemoryStore",
    "FileVectorMemoryIndex",
    "FusionMode",
    "FusionOptions",
    "GameAwareMemoryReranker",
    "GameAwareMemoryRerankerOptions",
    "GameMemory",
    "GameMemoryError",
    "GameMemoryKind",
    "GameMemoryQuery",
    "GameMemorySearchSnapshot",
    "GameMemorySearchStage",
    "GameMemorySearchStageKind",
    "GameMemoryStore",
    "GameMoment",
    "HashingEmbeddingProvider",
    "InvalidArgumentError",
    "MemoryConflictError",
    "MemoryEmbeddingIdentity",
    "MemoryTextProjector",
    "MemoryVectorDiagnostic",
    "PersistenceError",
    "RecallHit",
    "RecallResult",
    "RuntimeMemoryLifecycle",
    "StoreBusyError",
    "StoreCheckReport",
    "StoreClosedError",
    "VectorMemoryState",
    "VectorMemoryStatus",
    "VectorMemoryStore",
    "VectorMemoryStoreOptions",
    "derive_memory_id",
    "memory_matches_query",
]

# Show the public path in reprs and tracebacks (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        with _contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = "game_memory"
del _name, _obj
