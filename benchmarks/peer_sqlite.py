"""The peer of ``npc_workload.py``: NPC memories in SQLite + sqlite-vec + FTS5, done honestly.

What a game developer would build with the usual parts (one database file):

* ``memories``: one row per memory (``id`` the integer rowid, ``memory_id``, ``owner``,
  ``tick``, ``importance``, ``text``, ``payload``), with an index on ``(owner, tick)``;
* ``memories_fts``: an FTS5 index over ``text`` with ``memories`` as its external content
  (the text is stored once); ranked with FTS5's built-in ``bm25()``;
* ``memories_vec``: a sqlite-vec ``vec0`` table (``owner`` a partition key, so the KNN of
  one NPC scans only that NPC's chunks; ``tick`` a metadata column, so the "at or before"
  filter runs inside the KNN, not after it) holding the float32 vector. The distance is L2:
  on unit vectors it ranks exactly as cosine similarity and measured 1.5× faster here.

A recall filters **both** channels to one NPC and to ticks at or before a moment, takes
``candidates`` from each (FTS5 ``bm25`` ORDER BY with LIMIT; sqlite-vec ``k``), fuses them
with reciprocal-rank fusion (``Σ 1/(60 + rank)``, the simple fusion game-memory runs in
the benchmark too), and reads the top ``limit`` rows. The lexical query is the query's
words OR-ed (a memory needs one of them), as game-memory's BM25 does.

Durability: WAL with ``synchronous=FULL``: every commit fsyncs the WAL before it returns,
so an acknowledged append survives a power cut as well as ``kill -9`` (``NORMAL`` in WAL
survives ``kill -9`` but may lose the last commits on a power cut; game-memory fsyncs each
append, so FULL is the comparable setting). ``pysqlite3`` (``pysqlite3-binary``) supplies
an SQLite that loads extensions; the system Python's ``sqlite3`` may not.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PeerMemory", "PeerStore", "fts_query", "versions"]

RRF_K = 60
_WORD = re.compile(r"\w+")

_SCHEMA = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY,
    memory_id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    tick INTEGER NOT NULL,
    importance REAL NOT NULL,
    text TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX memories_owner_tick ON memories(owner, tick);
CREATE VIRTUAL TABLE memories_fts USING fts5(text, content='memories', content_rowid='id');
CREATE VIRTUAL TABLE memories_vec USING vec0(
    id INTEGER PRIMARY KEY,
    owner TEXT PARTITION KEY,
    tick INTEGER,
    embedding FLOAT[{dimensions}] distance_metric=l2
);
"""

_LEXICAL = """
SELECT m.id FROM memories_fts CROSS JOIN memories AS m ON m.id = memories_fts.rowid
WHERE memories_fts MATCH ? AND m.owner = ? AND m.tick <= ?
ORDER BY bm25(memories_fts) LIMIT ?
"""

_VECTOR = """
SELECT id FROM memories_vec
WHERE embedding MATCH ? AND k = ? AND owner = ? AND tick <= ?
ORDER BY distance
"""


@dataclass(frozen=True, slots=True)
class PeerMemory:
    """One memory as the peer stores it; ``vector`` is float32 bytes."""

    memory_id: str
    owner: str
    tick: int
    importance: float
    text: str
    payload: str
    vector: bytes


def _driver() -> Any:
    """The DB-API module of an SQLite that loads extensions (pysqlite3, else sqlite3)."""
    try:
        import pysqlite3.dbapi2 as driver  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:  # pragma: no cover - depends on the platform's wheels
        import sqlite3 as driver
    return driver


def versions() -> dict[str, str]:
    """The SQLite and sqlite-vec versions the peer runs on."""
    import sqlite_vec  # type: ignore[import-untyped, unused-ignore]

    driver = _driver()
    connection = driver.connect(":memory:")
    try:
        connection.enable_load_extension(True)
        sqlite_vec.load(connection)
        (vec_version,) = connection.execute("SELECT vec_version()").fetchone()
    finally:
        connection.close()
    return {
        "sqlite": str(driver.sqlite_version),
        "sqlite_driver": driver.__name__,
        "sqlite_vec": str(vec_version),
    }


def fts_query(text: str) -> str:
    """The FTS5 MATCH expression of a query: its distinct words, each quoted, OR-ed."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(text)))
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in words)


class PeerStore:
    """One SQLite database file holding every NPC's memories (see the module docstring)."""

    def __init__(self, path: Path, dimensions: int, *, create: bool = False) -> None:
        import sqlite_vec

        driver = _driver()
        if not create and not path.is_file():
            raise FileNotFoundError(f"no peer database at {path}")
        self.path = path
        self.dimensions = dimensions
        # isolation_level=None: autocommit; every transaction below is explicit.
        self._db = driver.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.enable_load_extension(True)
        sqlite_vec.load(self._db)
        self._db.enable_load_extension(False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if create:
            self._db.executescript(_SCHEMA.format(dimensions=dimensions))

    def close(self) -> None:
        """Checkpoint the WAL into the database file and close."""
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()

    def _insert(self, memories: Iterable[PeerMemory]) -> None:
        rows = list(memories)
        cursor = self._db.cursor()
        first = int(cursor.execute("SELECT coalesce(max(id), 0) + 1 FROM memories").fetchone()[0])
        ids = range(first, first + len(rows))
        cursor.executemany(
            "INSERT INTO memories(id, memory_id, owner, tick, importance, text, payload) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (rowid, m.memory_id, m.owner, m.tick, m.importance, m.text, m.payload)
                for rowid, m in zip(ids, rows, strict=True)
            ],
        )
        cursor.executemany(
            "INSERT INTO memories_fts(rowid, text) VALUES (?, ?)",
            [(rowid, m.text) for rowid, m in zip(ids, rows, strict=True)],
        )
        cursor.executemany(
            "INSERT INTO memories_vec(id, owner, tick, embedding) VALUES (?, ?, ?, ?)",
            [(rowid, m.owner, m.tick, m.vector) for rowid, m in zip(ids, rows, strict=True)],
        )

    def append_many(self, memories: Sequence[PeerMemory]) -> None:
        """Insert ``memories`` in one durable transaction (all or nothing)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._insert(memories)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def append(self, memory: PeerMemory) -> None:
        """Insert one memory durably (its own transaction: one WAL fsync at commit)."""
        self.append_many([memory])

    def channels(
        self, owner: str, text: str, vector: bytes, at_or_before: int, candidates: int
    ) -> tuple[list[int], list[int]]:
        """The lexical and vector candidate rowids, best first, both filtered alike."""
        match = fts_query(text)
        lexical = (
            [row[0] for row in self._db.execute(_LEXICAL, (match, owner, at_or_before, candidates))]
            if match
            else []
        )
        vectors = [
            row[0] for row in self._db.execute(_VECTOR, (vector, candidates, owner, at_or_before))
        ]
        return lexical, vectors

    def recall(
        self,
        owner: str,
        text: str,
        vector: bytes,
        at_or_before: int,
        *,
        limit: int = 8,
        candidates: int = 32,
    ) -> list[tuple[str, int, str]]:
        """Hybrid recall: ``(memory_id, tick, text)`` of the top ``limit``, RRF-fused."""
        lexical, vectors = self.channels(owner, text, vector, at_or_before, candidates)
        fused: dict[int, float] = {}
        for ranking in (lexical, vectors):
            for rank, rowid in enumerate(ranking, start=1):
                fused[rowid] = fused.get(rowid, 0.0) + 1.0 / (RRF_K + rank)
        best = sorted(fused, key=lambda rowid: (-fused[rowid], rowid))[:limit]
        if not best:
            return []
        marks = ",".join("?" * len(best))
        rows = {
            row[0]: row[1:]
            for row in self._db.execute(
                f"SELECT id, memory_id, tick, text, owner FROM memories WHERE id IN ({marks})",
                best,
            )
        }
        if any(rows[r][3] != owner or rows[r][1] > at_or_before for r in best):
            raise RuntimeError("the peer returned a memory outside the query's filter")
        return [(rows[r][0], rows[r][1], rows[r][2]) for r in best]

    def owner_vectors(self, owner: str, at_or_before: int) -> tuple[list[int], list[bytes]]:
        """Every visible vector of one NPC (for the exactness self-check), in rowid order."""
        rows = self._db.execute(
            "SELECT id, embedding FROM memories_vec WHERE owner = ? AND tick <= ? ORDER BY id",
            (owner, at_or_before),
        ).fetchall()
        return [row[0] for row in rows], [row[1] for row in rows]
