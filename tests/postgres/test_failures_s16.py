"""PostgreSQL failures an audit found misreported: a URL's password in messages, a mistyped
``--save-dir`` copied as an empty save, idle connections the server closed, statement
timeouts told to retry, and outages that did not say they were outages."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import errors as pg_errors

from game_memory import (
    CapacityExceededError,
    FileGameMemoryStore,
    GameMemory,
    GameMemoryQuery,
    InvalidArgumentError,
    PersistenceError,
    StoreBusyError,
    open_memory,
)
from game_memory.cli import main
from game_memory.errors import DerivedIndexError
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from game_memory.postgres import connection as pool_module
from game_memory.postgres.connection import (
    ConnectionPool,
    DatabaseUnreachableError,
    IndexDatabaseUnreachableError,
    describe_database,
    translate,
)
from game_memory.postgres.copy import copy_save
from postgres.server import wait_until_gone

MemoryFactory = Callable[..., GameMemory]

#: (URL, what of the password must never be shown): a password with an unencoded '%',
#: '/' or '@', which libpq misreads (the auditor's cases).
MISREAD_URLS = [
    ("postgresql://game:50%off-Pw@127.0.0.1:36397/audit_1", ["50%off-Pw", "off-Pw"]),
    ("postgresql://game:S3cret%Pw-xyz@127.0.0.1:36397/audit_1", ["S3cret", "Pw-xyz"]),
    ("postgresql://game:S3cret/Pw-xyz@127.0.0.1:36397/audit_1", ["S3cret", "Pw-xyz"]),
    ("postgresql://game:S3cret@Pw-xyz@127.0.0.1:36397/audit_1", ["S3cret", "Pw-xyz"]),
    ("postgresql://game:1234/5678@127.0.0.1:36397/audit_1", ["1234", "5678"]),
]


def _option(url: str, setting: str) -> str:
    """``url`` (a test schema's, which has ``options``) with one more ``-c`` setting."""
    return f"{url}%20-c{quote(setting, safe='')}"


# -- 1. no part of a password in any message ---------------------------------------------


@pytest.mark.parametrize(("url", "secrets"), MISREAD_URLS)
async def test_a_url_libpq_would_misread_is_refused_without_its_password(
    url: str, secrets: list[str]
) -> None:
    """An unencoded '%' made libpq's parse error quote the password; an unencoded '/' or
    '@' put parts of it in the host, port or database a message shows."""
    for opening in (
        lambda: PostgresGameMemoryStore(url),
        lambda: PostgresVectorIndex(url),
    ):
        with pytest.raises(InvalidArgumentError) as raised:
            opening()
        message = str(raised.value)
        assert "Percent-encode" in message and "%40" in message
        for secret in secrets:
            assert secret not in message, message
    with pytest.raises(InvalidArgumentError) as raised:
        await open_memory(url, model="lexical")
    assert all(secret not in str(raised.value) for secret in secrets)
    assert all(secret not in describe_database(url) for secret in secrets)


def test_the_cli_refuses_such_a_url_without_its_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, secrets = MISREAD_URLS[0]
    assert main(["status", "--database", url, "--model", "lexical", "--session", "s"]) == 1
    captured = capsys.readouterr()
    assert "Percent-encode" in captured.err
    assert all(secret not in captured.out + captured.err for secret in secrets)


def test_a_misread_url_is_named_by_its_host_only_when_that_is_unambiguous() -> None:
    assert describe_database(MISREAD_URLS[0][0]) == (
        "the PostgreSQL database on 127.0.0.1:36397 (its URL is unreadable)"
    )
    assert describe_database(MISREAD_URLS[3][0]) == "the PostgreSQL database at an unreadable URL"
    fine = "postgresql://game:a:b?c@db.internal:5433/world"  # ':' and '?' libpq reads right
    assert describe_database(fine) == "PostgreSQL database world on db.internal:5433"


@pytest.fixture
def special_role(postgres_server: str) -> Iterator[tuple[str, str]]:
    """A login role whose password holds every character the advice names: (name, password)."""
    name = f"s16_{uuid.uuid4().hex[:12]}"
    password = "50%off/S3c@ret:x?y#z"
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                psycopg.sql.Identifier(name), psycopg.sql.Literal(password)
            )
        )
    try:
        yield name, password
    finally:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(name)))


def test_the_advice_works_a_percent_encoded_password_connects(
    postgres_server: str, special_role: tuple[str, str]
) -> None:
    name, password = special_role
    info = psycopg.conninfo.conninfo_to_dict(postgres_server)
    url = (
        f"postgresql://{name}:{quote(password, safe='')}@{info['host']}:{info['port']}/"
        f"{info['dbname']}"
    )
    pool = ConnectionPool(url, size=1, timeout=5)
    try:
        with pool.connection() as connection:
            row = connection.execute("SELECT current_user").fetchone()
        assert row == (name,)
    finally:
        pool.close()


# -- 2. migrate --to-database of a folder without a save -----------------------------------


def _tables(database: str) -> int:
    with psycopg.connect(database, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_migrate_to_database_of_a_mistyped_save_dir_creates_nothing(
    database: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It created <typo>/.game-memory/, copied 0 memories and exited 0."""
    typo = tmp_path / "slot-1-typo"
    assert main(["migrate", "--to-database", database, "--save-dir", str(typo)]) == 1
    captured = capsys.readouterr()
    assert f"there is no save at {typo}" in captured.err
    assert "copied" not in captured.out and "copying" not in captured.out
    assert not typo.exists()
    assert _tables(database) == 0  # nor was the database touched


async def test_copying_a_folder_without_a_save_is_refused_and_leaves_it_as_it_was(
    database: str, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    store = PostgresGameMemoryStore(database)
    try:
        with pytest.raises(PersistenceError, match="holds no game-memory save"):
            await copy_save(empty, store)
        with pytest.raises(PersistenceError, match="there is no save at"):
            await copy_save(tmp_path / "missing", store)
    finally:
        await store.aclose()
    assert list(empty.iterdir()) == []
    assert not (tmp_path / "missing").exists()


async def test_an_existing_save_is_still_copied(
    database: str, tmp_path: Path, make_memory: MemoryFactory
) -> None:
    save = FileGameMemoryStore(tmp_path / "save")
    try:
        await save.append(make_memory("m1"))
    finally:
        await save.aclose()
    store = PostgresGameMemoryStore(database)
    try:
        report = await copy_save(tmp_path / "save", store)
        assert (report.read, report.added) == (1, 1)
    finally:
        await store.aclose()


# -- 3. connections the server closed while idle --------------------------------------------


async def test_connections_the_server_closes_when_idle_are_replaced_not_failed(
    database: str, postgres_server: str, make_memory: MemoryFactory
) -> None:
    """idle_session_timeout: the first call after every idle period failed with
    "terminating connection due to idle-session timeout"."""
    store = PostgresGameMemoryStore(_option(database, "idle_session_timeout=200"))
    try:
        for number in range(3):
            assert await store.append(make_memory(f"m{number}"))
            pid = await store._run(lambda: store._call("", lambda c: c.info.backend_pid))
            wait_until_gone(postgres_server, pid)  # the server closed it for being idle
        assert await store.count() == 3
    finally:
        await store.aclose()


def test_a_connection_an_administrator_ended_while_idle_is_replaced(
    database: str, postgres_server: str
) -> None:
    pool = ConnectionPool(database, size=2, timeout=5)
    try:
        with pool.connection() as connection:
            pid = connection.info.backend_pid
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until_gone(postgres_server, pid)
        with pool.connection() as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
            assert connection.info.backend_pid != pid
    finally:
        pool.close()


def test_a_healthy_idle_connection_is_reused(database: str) -> None:
    """The check on checkout must not take a live connection for a closed one."""
    pool = ConnectionPool(database, size=2, timeout=5)
    try:
        pids = set()
        for _ in range(5):
            with pool.connection() as connection:
                connection.execute("SELECT 1")
                pids.add(connection.info.backend_pid)
        assert len(pids) == 1
    finally:
        pool.close()


def test_an_idle_session_timeout_met_by_a_statement_reads_as_a_lost_connection(
    database: str,
) -> None:
    """SQLSTATE 57P05 was not counted as a disconnection, so not worded as one."""
    with psycopg.connect(_option(database, "idle_session_timeout=100"), autocommit=True) as raw:
        pid = raw.info.backend_pid
        wait_until_gone(database, pid)
        with pytest.raises(psycopg.OperationalError) as raised:
            raw.execute("SELECT 1")
    assert raised.value.sqlstate == "57P05"
    error = translate(raised.value, "appending a memory", "the database")
    assert isinstance(error, DatabaseUnreachableError)
    assert "could not reach the database" in str(error) and "retry" in str(error)
    index_error = translate(raised.value, "reading vectors", "the index", error=DerivedIndexError)
    assert isinstance(index_error, IndexDatabaseUnreachableError)


def test_when_the_check_cannot_see_a_loss_one_call_fails_and_the_rest_reconnect(
    database: str, postgres_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loss the check cannot see (a network that dropped silently, simulated by a check
    that sees nothing): the call that meets it fails, the idle connections of this pool
    and of the process's other pools on the database are dropped, the next calls connect."""
    monkeypatch.setattr(pool_module, "_readable", lambda fd: False)
    pool = ConnectionPool(database, size=4, timeout=5)
    other = ConnectionPool(database, size=2, timeout=5)
    try:
        with contextlib.ExitStack() as stack:
            borrowed = [stack.enter_context(pool.connection()) for _ in range(4)]
            borrowed.append(stack.enter_context(other.connection()))
            pids = [connection.info.backend_pid for connection in borrowed]
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
        for pid in pids:
            wait_until_gone(postgres_server, pid)
        with pytest.raises(psycopg.OperationalError), pool.connection() as connection:
            connection.execute("SELECT 1")
        for each in (pool, pool, other):
            with each.connection() as connection:
                assert connection.execute("SELECT 1").fetchone() == (1,)
                assert connection.info.backend_pid not in pids
    finally:
        pool.close()
        other.close()


# -- 4. a statement timeout is no "busy, retry later" --------------------------------------


def test_a_statement_timeout_names_the_setting_and_is_no_retry_later(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as raw:
        raw.execute("SET statement_timeout = 50")
        with pytest.raises(pg_errors.QueryCanceled) as raised:
            raw.execute("SELECT pg_sleep(5)")
    error = translate(raised.value, "reading a snapshot", "the database")
    assert isinstance(error, CapacityExceededError) and error.bound == "statement_timeout"
    assert "statement_timeout" in str(error) and "one NPC" in str(error)
    assert "retry later" not in str(error)


def test_a_lock_timeout_and_a_canceled_statement_stay_busy() -> None:
    for exc in (
        pg_errors.LockNotAvailable("canceling statement due to lock timeout"),
        pg_errors.QueryCanceled("canceling statement due to user request"),
    ):
        error = translate(exc, "appending a memory", "the database")
        assert isinstance(error, StoreBusyError) and "retry later" in str(error)


async def test_a_session_wide_recall_past_statement_timeout_says_so(
    database: str, make_memory: MemoryFactory
) -> None:
    """scale_recall.py: every session-wide recall of a large save ran past a 100 ms
    statement_timeout and was told "busy ... retry later"; retrying never helped. A table
    lock held elsewhere makes the snapshot read outlast the timeout here."""
    memory = await open_memory(_option(database, "statement_timeout=300"), model="lexical")
    try:
        await memory.append(make_memory("m1", text="the dragon"))
        with psycopg.connect(database) as holder:
            holder.execute("LOCK TABLE game_memory_memories IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(CapacityExceededError) as raised:
                await memory.recall(GameMemoryQuery(session_id="session", limit=3, text="x"))
            holder.rollback()
        assert raised.value.bound == "statement_timeout"
        assert "statement_timeout" in str(raised.value)
    finally:
        await memory.aclose()


# -- 5. an outage says it is one ------------------------------------------------------------


async def test_an_unreachable_database_is_a_persistence_error_marked_unreachable() -> None:
    store = PostgresGameMemoryStore("postgresql://u:secret-word@127.0.0.1:1/nowhere", timeout=2)
    index = PostgresVectorIndex("postgresql://u:secret-word@127.0.0.1:1/nowhere", timeout=2)
    try:
        with pytest.raises(PersistenceError) as raised:
            await store.count()
        assert isinstance(raised.value, DatabaseUnreachableError)
        assert raised.value.reason == "unreachable"
        with pytest.raises(DerivedIndexError) as index_raised:
            await asyncio.to_thread(index.verify, "session", repair=False)
        assert isinstance(index_raised.value, IndexDatabaseUnreachableError)
        assert index_raised.value.reason == "unreachable"
    finally:
        await store.aclose()
        await index.aclose()
