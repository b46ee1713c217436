"""A status taken while the game remembers counts no orphans, on PostgreSQL (audit s18,
multiprocess F1: there ``status`` read ``degraded`` almost every time another server
appended, and ``game-memory rebuild --database`` exited 1 in two runs of five).

The behaviour tests of ``tests/memory/test_status_race_s18.py`` run here on
``VectorMemoryStore(PostgresGameMemoryStore, PostgresVectorIndex, provider)`` (this
folder's ``make_vector_store``); without a server they fail (``server.py``), never skip.
"""

from __future__ import annotations

from pathlib import Path

from game_memory import VectorMemoryState
from memory.test_status_race_s18 import (
    statuses_beside_another_process,
    test_a_memory_saved_between_the_save_read_and_the_index_read_is_no_orphan,
    test_a_rebuild_ends_ready_when_a_memory_is_saved_during_its_final_status,
    test_a_true_orphan_is_still_counted_beside_a_memory_saved_meanwhile,
    test_statuses_taken_while_tasks_append_count_no_orphans,
)

__all__ = [
    "test_a_memory_saved_between_the_save_read_and_the_index_read_is_no_orphan",
    "test_a_rebuild_ends_ready_when_a_memory_is_saved_during_its_final_status",
    "test_a_true_orphan_is_still_counted_beside_a_memory_saved_meanwhile",
    "test_statuses_taken_while_another_server_appends_count_no_orphans",
    "test_statuses_taken_while_tasks_append_count_no_orphans",
]


async def test_statuses_taken_while_another_server_appends_count_no_orphans(
    database: str, tmp_path: Path
) -> None:
    """Another process (a second sidecar, a game) appends to the database's save while this
    one asks for the status again and again."""
    statuses, final = await statuses_beside_another_process(database, tmp_path / "stop")
    assert [s.orphan_entries for s in statuses if s.orphan_entries] == []
    assert (final.state, final.orphan_entries, final.pending_entries) == (
        VectorMemoryState.READY,
        0,
        0,
    )
