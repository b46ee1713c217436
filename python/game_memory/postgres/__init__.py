"""game-memory on PostgreSQL + pgvector: the save and the vector index of a shared world.

Install with ``pip install 'game-memory[postgres]'``. The two backends implement the same
protocols as the file backend (:class:`~game_memory.GameMemoryStore` and
:class:`~game_memory.VectorIndex`), so recall, rebuild, the bridge and the CLI work
unchanged; ``open_memory("postgresql://...")`` and ``--database postgresql://...`` open
them. Every table and query is keyed by ``session_id`` first (Citus' distribution column).
See ``docs/postgres.md``.
"""

from game_memory.postgres.index import PostgresVectorIndex
from game_memory.postgres.store import PostgresGameMemoryStore

__all__ = ["PostgresGameMemoryStore", "PostgresVectorIndex"]
