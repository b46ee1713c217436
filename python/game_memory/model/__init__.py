"""The plain records every layer shares: moments, memories, queries, results and metrics.

Everything here is immutable and validated on construction; nothing reads the wall clock
or touches a file. Layers above import these records instead of redefining them.
"""

from game_memory.model.diagnostics import DiagnosticSeverity, DiagnosticSink, MemoryVectorDiagnostic
from game_memory.model.fields import (
    MAXIMUM_ID_CHARACTERS,
    MAXIMUM_PAYLOAD_DEPTH,
    MAXIMUM_QUERY_LIMIT,
    MAXIMUM_SNAPSHOT_MEMORIES,
    assemble_validated,
    check_bounded_id,
    ordinal_key,
)
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.model.memory import GameMemory, GameMemoryKind, GameMoment
from game_memory.model.memory_ids import content_memory_id, derive_memory_id
from game_memory.model.query import GameMemoryQuery, memories_match_query, memory_matches_query
from game_memory.model.results import (
    CompactionReport,
    MigrationReport,
    RecallHit,
    RecallResult,
    StoreCheckReport,
)
from game_memory.model.search import (
    GameMemorySearchSnapshot,
    GameMemorySearchStage,
    GameMemorySearchStageKind,
)
from game_memory.model.status import VectorMemoryState, VectorMemoryStatus

__all__ = [
    "MAXIMUM_ID_CHARACTERS",
    "MAXIMUM_PAYLOAD_DEPTH",
    "MAXIMUM_QUERY_LIMIT",
    "MAXIMUM_SNAPSHOT_MEMORIES",
    "CompactionReport",
    "DiagnosticSeverity",
    "DiagnosticSink",
    "GameMemory",
    "GameMemoryKind",
    "GameMemoryQuery",
    "GameMemorySearchSnapshot",
    "GameMemorySearchStage",
    "GameMemorySearchStageKind",
    "GameMoment",
    "MemoryEmbeddingIdentity",
    "MemoryVectorDiagnostic",
    "MigrationReport",
    "RecallHit",
    "RecallResult",
    "StoreCheckReport",
    "VectorMemoryState",
    "VectorMemoryStatus",
    "assemble_validated",
    "check_bounded_id",
    "content_memory_id",
    "derive_memory_id",
    "memories_match_query",
    "memory_matches_query",
    "ordinal_key",
]
