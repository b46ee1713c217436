"""The PostgreSQL schema of the save and the vector index, versioned, with its migration runner.

Every table is keyed by ``session_id`` first: it is the distribution column on Citus, every
primary key and unique constraint starts with it, and every query the backends send filters
on one session, so on a distributed cluster each call is routed to one shard and the tables
are colocated by session. Tables (in the first schema of the connection's ``search_path``)::

    game_memory_schema            the migrations applied (version, name, when)
    game_memory_partitions        one row per owner partition of the save: its next position
                                  and its generation (moved on by every forget and erase)
    game_memory_memories          the authoritative memories (canonical JSON + its SHA-256)
    game_memory_retractions       the retractions of memories (forget), one row per moment
    game_memory_identities        embedding identities and their codes (a reference table)
    game_memory_index_partitions  one row per index partition: generation and change counter
    game_memory_index_entries     the derived vectors (pgvector), one row per memory

The runner (:func:`migrate_schema`) is idempotent and safe to run from many processes at
once: it takes a transaction-scoped advisory lock, applies the missing migrations in order
in that one transaction (DDL is transactional in PostgreSQL), and refuses a database whose
schema is newer than this release knows. On a Citus coordinator it then distributes the
tables (see ``docs/postgres.md``; not exercised by the test suite, which has no Citus).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from game_memory.errors import PersistenceError

__all__ = [
    "CITUS_DISTRIBUTION",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Migration",
    "check_schema",
    "migrate_schema",
]


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: its version, a name, and the statements that apply it."""

    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "save and vector index",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            """CREATE TABLE game_memory_partitions (
                session_id text COLLATE "C" NOT NULL,
                owner_id text COLLATE "C" NOT NULL,
                next_seq bigint NOT NULL,
                PRIMARY KEY (session_id, owner_id)
            )""",
            """CREATE TABLE game_memory_memories (
                session_id text COLLATE "C" NOT NULL,
                owner_id text COLLATE "C" NOT NULL,
                memory_id text COLLATE "C" NOT NULL,
                seq bigint NOT NULL,
                digest bytea NOT NULL,
                document bytea NOT NULL,
                PRIMARY KEY (session_id, owner_id, memory_id),
                UNIQUE (session_id, owner_id, seq)
            )""",
            """CREATE TABLE game_memory_identities (
                code integer PRIMARY KEY,
                name text COLLATE "C" NOT NULL UNIQUE,
                dimensions integer NOT NULL
            )""",
            """CREATE TABLE game_memory_index_partitions (
                session_id text COLLATE "C" NOT NULL,
                owner_id text COLLATE "C" NOT NULL,
                generation bigint NOT NULL,
                changes bigint NOT NULL,
                entries bigint NOT NULL,
                PRIMARY KEY (session_id, owner_id)
            )""",
            """CREATE TABLE game_memory_index_entries (
                session_id text COLLATE "C" NOT NULL,
                owner_id text COLLATE "C" NOT NULL,
                memory_hash bytea NOT NULL,
                change bigint NOT NULL,
                state smallint NOT NULL,
                identity integer,
                digest bytea NOT NULL,
                code text COLLATE "C" NOT NULL,
                embedding vector,
                PRIMARY KEY (session_id, owner_id, memory_hash)
            )""",
            """CREATE INDEX game_memory_index_entries_change
                ON game_memory_index_entries (session_id, owner_id, change)""",
        ),
    ),
    Migration(
        2,
        "retractions and partition generations (forget, erase)",
        (
            """ALTER TABLE game_memory_partitions
                ADD COLUMN generation bigint NOT NULL DEFAULT 0""",
            """CREATE TABLE game_memory_retractions (
                session_id text COLLATE "C" NOT NULL,
                owner_id text COLLATE "C" NOT NULL,
                memory_id text COLLATE "C" NOT NULL,
                timeline_id text COLLATE "C" NOT NULL,
                tick bigint NOT NULL,
                moment bytea NOT NULL,
                PRIMARY KEY (session_id, owner_id, memory_id, timeline_id, tick)
            )""",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1].version

#: What a Citus coordinator runs after the migrations (each call is skipped when done).
CITUS_DISTRIBUTION: tuple[tuple[str, str], ...] = (
    (
        "game_memory_partitions",
        "SELECT create_distributed_table('game_memory_partitions', 'session_id')",
    ),
    (
        "game_memory_memories",
        "SELECT create_distributed_table('game_memory_memories', "
        "'session_id', colocate_with => 'game_memory_partitions')",
    ),
    (
        "game_memory_index_partitions",
        "SELECT create_distributed_table("
        "'game_memory_index_partitions', 'session_id', colocate_with => 'game_memory_partitions')",
    ),
    (
        "game_memory_index_entries",
        "SELECT create_distributed_table('game_memory_index_entries', "
        "'session_id', colocate_with => 'game_memory_partitions')",
    ),
    ("game_memory_identities", "SELECT create_reference_table('game_memory_identities')"),
    (
        "game_memory_retractions",
        "SELECT create_distributed_table('game_memory_retractions', "
        "'session_id', colocate_with => 'game_memory_partitions')",
    ),
)

_LOCK_KEY = "game-memory schema"


def _current_version(connection: psycopg.Connection[Any]) -> int | None:
    found = connection.execute("SELECT to_regclass('game_memory_schema')").fetchone()
    if found is None or found[0] is None:
        return None
    row = connection.execute("SELECT max(version) FROM game_memory_schema").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _check_not_newer(version: int | None, where: str) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise PersistenceError(
            f"{where} holds game-memory schema version {version}; this release knows versions up "
            f"to {SCHEMA_VERSION}. Upgrade game-memory to open it."
        )


def check_schema(connection: psycopg.Connection[Any], where: str) -> None:
    """Refuse a database whose schema is not exactly :data:`SCHEMA_VERSION` (no changes).

    Raises:
        PersistenceError: the schema is missing, older or newer.
    """
    version = _current_version(connection)
    _check_not_newer(version, where)
    if version != SCHEMA_VERSION:
        raise PersistenceError(
            f"{where} holds game-memory schema version {version or 'none'}, not "
            f"{SCHEMA_VERSION}; bring it up to date once: 'game-memory migrate --database URL' "
            "from the command line, or open it with migrate=True (the default) from Python"
        )


def migrate_schema(connection: psycopg.Connection[Any], where: str) -> list[int]:
    """Bring the database's schema to :data:`SCHEMA_VERSION`; return the versions applied.

    Idempotent, and safe from concurrent processes (an advisory lock serializes runners;
    one that waited finds nothing left to do). Runs in its own transaction on
    ``connection`` (which must be idle, in autocommit mode).

    Raises:
        PersistenceError: the schema is newer than this release, or the database is not UTF-8.
        psycopg.Error: the database refused a statement (the caller translates it).
    """
    encoding = connection.execute("SHOW server_encoding").fetchone()
    if encoding is None or str(encoding[0]).upper() not in ("UTF8", "UTF-8"):
        raise PersistenceError(
            f"{where} uses the encoding {encoding[0] if encoding else '?'}; game-memory needs a "
            "UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
        )
    version = _current_version(connection)
    _check_not_newer(version, where)
    if version == SCHEMA_VERSION:
        return []
    applied: list[int] = []
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_LOCK_KEY,))
        connection.execute(
            """CREATE TABLE IF NOT EXISTS game_memory_schema (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"""
        )
        version = _current_version(connection)
        _check_not_newer(version, where)
        for migration in MIGRATIONS:
            if version is not None and migration.version <= version:
                continue
            for statement in migration.statements:
                connection.execute(statement)
            connection.execute(
                "INSERT INTO game_memory_schema (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration.version)
    if applied:
        _distribute_on_citus(connection)
    return applied


def _distribute_on_citus(connection: psycopg.Connection[Any]) -> None:
    """On a Citus coordinator, distribute the tables by session (colocated); else nothing."""
    citus = connection.execute("SELECT 1 FROM pg_extension WHERE extname = 'citus'").fetchone()
    if citus is None:
        return
    for table, statement in CITUS_DISTRIBUTION:
        done = connection.execute(
            "SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass(%s)", (table,)
        ).fetchone()
        if done is None:
            connection.execute(statement)
