"""game-memory: long-term memory for game NPCs.

The authoritative save is the truth; the vector index is derived from it and disposable;
recall fuses lexical and semantic search and reranks on *game* time. Open a save with
:func:`open_memory` (one front door, :class:`VectorMemoryStore`, hybrid or lexical);
backends plug in behind :class:`GameMemoryStore` and :class:`VectorIndex`. Everything public
is importable from here (and the in-process ONNX providers from ``game_memory.onnx``); the
modules below are the implementation.
"""

import contextlib as _contextlib

from game_memory import _startup

_startup.starting()  # the game-memory command: a Ctrl-C while it imports ends it quietly

try:
    from game_memory._version import __version__
    from game_memory.embedding.hashing import HashingEmbeddingProvider
    from game_memory.embedding.projector import MemoryTextProjector
    from game_memory.embedding.provider import EmbeddingProvider
    from game_memory.errors import (
        CapacityExceededError,
        DerivedIndexError,
        EmbeddingTimeoutError,
        EmbeddingUnavailableError,
        GameMemoryError,
        InvalidArgumentError,
        MemoryConflictError,
        MemoryNotFoundError,
        PersistenceError,
        StoreBusyError,
        StoreClosedError,
    )
    from game_memory.index.file_index import FileVectorMemoryIndex
    from game_memory.index.memory import InMemoryVectorIndex
    from game_memory.index.protocol import VectorIndex
    from game_memory.lifecycle import RuntimeMemoryLifecycle
    from game_memory.memory import VectorMemoryStore
    from game_memory.model import (
        CompactionReport,
        DiagnosticSeverity,
        GameMemory,
        GameMemoryKind,
        GameMemoryQuery,
        GameMemorySearchSnapshot,
        GameMemorySearchStage,
        GameMemorySearchStageKind,
        GameMoment,
        MemoryEmbeddingIdentity,
        MemoryVectorDiagnostic,
        MigrationReport,
        RecallHit,
        RecallResult,
        StoreCheckReport,
        VectorMemoryState,
        VectorMemoryStatus,
        derive_memory_id,
    )
    from game_memory.opening import open_memory
    from game_memory.recall.fusion import FusionMode, FusionOptions
    from game_memory.recall.options import VectorMemoryStoreOptions
    from game_memory.recall.reranker import GameAwareMemoryReranker, GameAwareMemoryRerankerOptions
    from game_memory.store.file_store import FileGameMemoryStore
    from game_memory.store.memory import InMemoryGameMemoryStore
    from game_memory.store.protocol import GameMemoryStore, StoreSnapshot
except KeyboardInterrupt:  # an import on another thread than the main one
    if _startup.is_the_command():
        _startup.interrupted()
    raise

__all__ = [
    "CapacityExceededError",
    "CompactionReport",
    "DerivedIndexError",
    "DiagnosticSeverity",
    "EmbeddingProvider",
    "EmbeddingTimeoutError",
    "EmbeddingUnavailableError",
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
    "InMemoryGameMemoryStore",
    "InMemoryVectorIndex",
    "InvalidArgumentError",
    "MemoryConflictError",
    "MemoryEmbeddingIdentity",
    "MemoryNotFoundError",
    "MemoryTextProjector",
    "MemoryVectorDiagnostic",
    "MigrationReport",
    "PersistenceError",
    "RecallHit",
    "RecallResult",
    "RuntimeMemoryLifecycle",
    "StoreBusyError",
    "StoreCheckReport",
    "StoreClosedError",
    "StoreSnapshot",
    "VectorIndex",
    "VectorMemoryState",
    "VectorMemoryStatus",
    "VectorMemoryStore",
    "VectorMemoryStoreOptions",
    "__version__",
    "derive_memory_id",
    "open_memory",
]

# Show the public path in reprs and tracebacks (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or callable(_obj):
        with _contextlib.suppress(AttributeError, TypeError):
            _obj.__module__ = "game_memory"
del _name, _obj
