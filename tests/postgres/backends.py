"""The PostgreSQL entries of the conformance suite's backend registry.

``tests/conformance/conftest.py`` registers ``STORE_BACKENDS["postgres"] = postgres_store``
and ``INDEX_BACKENDS["postgres"] = postgres_index``: each factory takes the test's
``tmp_path`` and returns an opener whose names map to schemas of the test server
(``server.named_schema``), so opening a name again opens the same tables, as reopening a
folder does for the file backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from postgres.server import named_schema

__all__ = ["postgres_index", "postgres_store"]


def postgres_store(tmp_path: Path) -> Any:
    """``open_store(save="save", **options)`` on PostgreSQL."""

    def open_store(save: str = "save", **options: Any) -> PostgresGameMemoryStore:
        return PostgresGameMemoryStore(named_schema(str(tmp_path), f"store:{save}"), **options)

    return open_store


def postgres_index(tmp_path: Path) -> Any:
    """``open_index(name="index", **options)`` on PostgreSQL."""

    def open_index(name: str = "index", **options: Any) -> PostgresVectorIndex:
        return PostgresVectorIndex(named_schema(str(tmp_path), f"index:{name}"), **options)

    return open_index
