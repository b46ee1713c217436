"""The PostgreSQL schema of the save and the vector index, versioned, with its migration runner.

Every table is keyed by ``session_id`` first: it is the distribution column on Citus, every
primary key and unique constraint starts with it, and every query the backends send filters
on one session, so on a distributed cluster each call is routed to one shard and the tables
are colocated by session. Tables (in the first schema of the connection's ``search_path``,
see "Where the tables are" below)::

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

**Where the tables are.** A save's tables are those of the first schema its connection's
``search_path`` names (a ``"$user"`` entry naming no usable schema skipped, as PostgreSQL
skips it), and only those: before anything else both functions find that schema
(:func:`_placement`), refuse a path whose first schema does not exist (PostgreSQL would
silently create the tables in the next one, often ``public``, which may hold another
save), and look the tables up in it by name, never through the path (a later schema's save
would otherwise pass for this one's: ``to_regclass`` resolves through the whole path). A
schema at a version must hold every table of that version (:attr:`Migration.creates`),
else it is refused as damaged. So, once a store or an index is ready, every table name of
its statements (unqualified, resolved through the path) resolves to that first schema:
PostgreSQL takes the first schema on the path holding a table of that name, and the save's
own schema is first and holds all of them. The statements stay unqualified (the ``vector``
type and its operators resolve through the path too, from pgvector's schema, which is often
``public``), and no session's path is pinned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from game_memory.errors import PersistenceError, StoreBusyError

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
    """One schema step: its version, a name, the statements that apply it, and the tables
    they create (which a schema at this version or later must hold)."""

    version: int
    name: str
    statements: tuple[str, ...]
    creates: tuple[str, ...] = ()


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
        (
            "game_memory_partitions",
            "game_memory_memories",
            "game_memory_identities",
            "game_memory_index_partitions",
            "game_memory_index_entries",
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
        ("game_memory_retractions",),
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


_VERSIONS_TABLE = "game_memory_schema"
#: Every table the migrations may create, the versions table included.
_TABLES = (_VERSIONS_TABLE, *(table for migration in MIGRATIONS for table in migration.creates))

#: The search_path, the schema PostgreSQL creates tables in (the first existing, usable one
#: on the path, or NULL), the role it substitutes for ``"$user"``, and which of the
#: game-memory tables that schema holds (looked up by name in it, not through the path).
_PLACEMENT = """
SELECT current_setting('search_path'), current_schema(), current_user,
    ARRAY(SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
            AND c.relname = ANY(%(tables)s::text[]))
"""


@dataclass(frozen=True, slots=True)
class _Placement:
    """The schema a save lives in (the first its ``search_path`` names) and the game-memory
    tables it holds; ``where`` names both in messages."""

    schema: str
    tables: frozenset[str]
    where: str


def _search_path_entries(setting: str) -> list[str]:
    """The schema names of a ``search_path`` setting, as PostgreSQL reads them: split at the
    commas outside double quotes; a quoted name kept as written (``""`` is one ``"``), an
    unquoted one folded to lower case; empty entries dropped."""
    entries: list[str] = []
    name: list[str] = []
    quoted = False
    was_quoted = False
    position = 0
    while position < len(setting):
        character = setting[position]
        if quoted:
            if character == '"' and setting[position + 1 : position + 2] == '"':
                name.append('"')
                position += 1
            elif character == '"':
                quoted = False
            else:
                name.append(character)
        elif character == '"':
            quoted = was_quoted = True
        elif character == ",":
            _add_entry(entries, name, was_quoted)
            name, was_quoted = [], False
        elif not character.isspace():
            name.append(character.lower())
        position += 1
    _add_entry(entries, name, was_quoted)
    return entries


def _add_entry(entries: list[str], name: list[str], quoted: bool) -> None:
    if name or quoted:
        entries.append("".join(name))


def _first_named(entries: list[str], user: str, current: str | None) -> str | None:
    """The schema the path names first, the save's schema: a ``$user`` entry counts only
    when it is the schema PostgreSQL chose (one named as the role exists and is usable),
    as PostgreSQL skips it otherwise; ``None`` when the path names nothing else."""
    for entry in entries:
        if entry == "$user":
            if current == user:
                return user
            continue
        return entry
    return None


def _identifier(name: str) -> str:
    """``name`` as SQL writes it (quoted unless a plain lower-case identifier)."""
    if name.isidentifier() and name.isascii() and name == name.lower():
        return name
    return '"' + name.replace('"', '""') + '"'


def _placement(connection: psycopg.Connection[Any], where: str) -> _Placement:
    """Where the save of ``connection`` lives: the first schema its ``search_path`` names,
    which must exist and be usable (never a later schema of the path in its place).

    Raises:
        PersistenceError: the path names no schema, or its first schema does not exist,
            is not usable by the role (no ``USAGE``), or is ``pg_temp``.
    """
    row = connection.execute(_PLACEMENT, {"tables": list(_TABLES)}).fetchone()
    assert row is not None
    setting, current, user, tables = row
    first = _first_named(_search_path_entries(str(setting)), str(user), current)
    if first is not None and first == current:
        return _Placement(first, frozenset(tables), f"{where} (schema {first!r})")
    if first is None:
        raise PersistenceError(
            f"the search_path of {where} ({setting!r}) names no schema to keep the save in: "
            "name one first in the URL (postgresql://.../db?options=-csearch_path%3Dgame,public)"
        )
    if first == "pg_temp" or first.startswith("pg_temp_"):
        raise PersistenceError(
            f"the search_path of {where} ({setting!r}) names the temporary schema first: a "
            "save cannot live in it (it ends with the connection); name the save's schema first"
        )
    found = connection.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (first,))
    if found.fetchone() is None:
        raise PersistenceError(
            f"the schema {first!r}, first on the search_path of {where}, does not exist: "
            f"create it (CREATE SCHEMA {_identifier(first)}) or correct the URL. game-memory "
            "keeps a save in the first schema of the path and never falls back to a later one "
            "(which may hold another save)"
        )
    raise PersistenceError(
        f"the schema {first!r}, first on the search_path of {where}, is not usable by the role "
        f"{user!r}: grant it (GRANT USAGE, CREATE ON SCHEMA {_identifier(first)} TO ...) or "
        "correct the URL. game-memory never falls back to a later schema of the path"
    )


def _current_version(connection: psycopg.Connection[Any], placement: _Placement) -> int | None:
    """The schema version of ``placement``'s schema (its own versions table, read by its
    qualified name), or ``None`` when it has none."""
    if _VERSIONS_TABLE not in placement.tables:
        return None
    statement = sql.SQL("SELECT max(version) FROM {}").format(
        sql.Identifier(placement.schema, _VERSIONS_TABLE)
    )
    row = connection.execute(statement).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _require_tables(placement: _Placement, version: int | None) -> None:
    """Refuse a schema at ``version`` that lacks a table of that version: a statement would
    resolve that table's name to a later schema of the path (another save's).

    Raises:
        PersistenceError: naming the tables missing.
    """
    if version is None:
        return
    wanted = {_VERSIONS_TABLE}
    for migration in MIGRATIONS:
        if migration.version <= version:
            wanted.update(migration.creates)
    missing = sorted(wanted - placement.tables)
    if missing:
        raise PersistenceError(
            f"{placement.where} holds game-memory schema version {version} but not its "
            f"table{'s' if len(missing) > 1 else ''} {', '.join(missing)}: the save is damaged; "
            "restore the schema from a backup. game-memory never uses another schema's "
            "tables in their place"
        )


def _check_not_newer(version: int | None, where: str) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise PersistenceError(
            f"{where} holds game-memory schema version {version}; this release knows versions up "
            f"to {SCHEMA_VERSION}. Upgrade game-memory to open it."
        )


def check_schema(connection: psycopg.Connection[Any], where: str) -> None:
    """Refuse a database whose schema is not exactly :data:`SCHEMA_VERSION` (no changes).

    The save's schema is the first one its ``search_path`` names (module docstring).

    Raises:
        PersistenceError: the first schema on the path is missing (or unusable), or its
            game-memory schema is missing, older, newer or lacks a table.
    """
    placement = _placement(connection, where)
    version = _current_version(connection, placement)
    _check_not_newer(version, placement.where)
    if version != SCHEMA_VERSION:
        raise PersistenceError(
            f"{placement.where} holds game-memory schema version {version or 'none'}, not "
            f"{SCHEMA_VERSION}; bring it up to date once: 'game-memory migrate --database URL' "
            "from the command line, or open it with migrate=True (the default) from Python"
        )
    _require_tables(placement, version)


def migrate_schema(connection: psycopg.Connection[Any], where: str) -> list[int]:
    """Bring the database's schema to :data:`SCHEMA_VERSION`; return the versions applied.

    The tables are made in (and looked up in) the first schema the ``search_path`` names,
    which must exist (module docstring). Idempotent, and safe from concurrent processes (an
    advisory lock serializes runners; one that waited finds nothing left to do). Runs in
    its own transaction on ``connection`` (which must be idle, in autocommit mode).

    Raises:
        PersistenceError: the first schema on the path is missing (or unusable), the
            schema is newer than this release or lacks a table of its version, or the
            database is not UTF-8.
        StoreBusyError: another process held the migration's lock past the connection's
            ``lock_timeout`` (the pool sets it to the store's ``timeout``).
        psycopg.Error: the database refused a statement (the caller translates it).
    """
    encoding = connection.execute("SHOW server_encoding").fetchone()
    if encoding is None or str(encoding[0]).upper() not in ("UTF8", "UTF-8"):
        raise PersistenceError(
            f"{where} uses the encoding {encoding[0] if encoding else '?'}; game-memory needs a "
            "UTF8 database (CREATE DATABASE ... ENCODING 'UTF8')"
        )
    placement = _placement(connection, where)
    version = _current_version(connection, placement)
    _check_not_newer(version, placement.where)
    if version == SCHEMA_VERSION:
        _require_tables(placement, version)
        return []
    applied: list[int] = []
    with connection.transaction():
        _lock_migrations(connection, where)
        connection.execute(
            """CREATE TABLE IF NOT EXISTS game_memory_schema (
                version integer PRIMARY KEY,
                name text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )"""
        )  # unqualified: made in current_schema(), the placement's schema, if not there
        placement = _placement(connection, where)  # another runner may have been first
        version = _current_version(connection, placement)
        _check_not_newer(version, placement.where)
        _require_tables(placement, version)
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


def _lock_migrations(connection: psycopg.Connection[Any], where: str) -> None:
    """Take the migration's advisory lock (transaction-scoped), waiting at most the
    connection's ``lock_timeout``.

    Raises:
        StoreBusyError: another process held it that long: it is migrating, or stalled (or
            cut off) in its migration, whose lock the server frees when it ends that
            session (``idle_in_transaction_session_timeout``, or its TCP keepalive).
    """
    try:
        connection.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_LOCK_KEY,))
    except psycopg.errors.LockNotAvailable as exc:
        raise StoreBusyError(
            f"another process has been bringing the schema of {where} up to date for "
            f"longer than lock_timeout ({exc.diag.message_primary or exc}); retry later. A "
            "process stalled in its migration keeps the lock until the server ends its "
            "session: see pg_stat_activity for the game-memory session 'idle in transaction'"
        ) from exc


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
