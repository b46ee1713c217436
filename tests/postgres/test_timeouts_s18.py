"""PostgreSQL faults an audit found unbounded or misreported: a call on a connection whose
server stopped answering, a lock held by a stalled peer, the migration's lock, and a server
at its connection limit (docs/postgres.md, "When the database stops answering")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from game_memory import GameMemory, StoreBusyError
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex
from game_memory.postgres.connection import (
    ConnectionPool,
    DatabaseUnreachableError,
    IndexDatabaseUnreachableError,
    translate,
)
from postgres.server import wait_until_gone

MemoryFactory = Callable[..., GameMemory]
Reader = Callable[[Callable[[psycopg.Connection[Any]], Any]], Awaitable[Any]]

#: What a connection's settings are read back as: libpq's keywords, then server settings.
_KEYWORDS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count")
_SERVER = ("lock_timeout", "idle_in_transaction_session_timeout", "synchronous_commit")


def _settings(connection: psycopg.Connection[Any]) -> dict[str, str]:
    """The time bounds in effect on ``connection``."""
    given = connection.info.get_parameters()
    found = {name: given.get(name, "") for name in (*_KEYWORDS, "tcp_user_timeout")}
    for name in _SERVER:
        row = connection.execute(f"SHOW {name}").fetchone()
        found[name] = str(row[0]) if row is not None else ""
    return found


def _option(url: str, setting: str) -> str:
    """``url`` (a test schema's, whose query ends with ``options``) with one more ``-c``."""
    return f"{url}%20-c{quote(setting, safe='')}"


def _readers(store: PostgresGameMemoryStore, index: PostgresVectorIndex) -> tuple[Reader, Reader]:
    """Run a function on a pooled connection of the store, and of the index."""

    def of_store(function: Callable[[psycopg.Connection[Any]], Any]) -> Awaitable[Any]:
        return store._run(lambda: store._call("reading settings", function))

    def of_index(function: Callable[[psycopg.Connection[Any]], Any]) -> Awaitable[Any]:
        return asyncio.to_thread(index._call, "reading settings", function)

    return of_store, of_index


# -- the bounds are set, and an operator's own value wins ------------------------------------


async def test_a_stores_and_an_indexs_connections_are_bounded_in_time(database: str) -> None:
    """No keepalive (libpq waits 2 h for a dead peer), no lock_timeout and no
    idle_in_transaction_session_timeout were set: a dead or stalled peer blocked forever."""
    store, index = PostgresGameMemoryStore(database), PostgresVectorIndex(database)
    try:
        for read in _readers(store, index):
            assert await read(_settings) == {
                "keepalives": "1",
                "keepalives_idle": "15",  # the default timeout, 30 s: about 30 s in all
                "keepalives_interval": "5",
                "keepalives_count": "3",
                "tcp_user_timeout": "30000",
                "lock_timeout": "30s",
                "idle_in_transaction_session_timeout": "2min",
                "synchronous_commit": "on",
            }
    finally:
        await store.aclose()
        await index.aclose()


async def test_a_urls_own_values_win(database: str) -> None:
    url = _option(database, "lock_timeout=7s")
    url = _option(url, "idle_in_transaction_session_timeout=0")
    url += "&keepalives_idle=99&tcp_user_timeout=12345"
    store, index = PostgresGameMemoryStore(url), PostgresVectorIndex(url)
    try:
        for read in _readers(store, index):
            found = await read(_settings)
            assert found["keepalives_idle"] == "99" and found["tcp_user_timeout"] == "12345"
            assert found["keepalives_interval"] == "5"  # not in the URL: the store's own
            assert found["lock_timeout"] == "7s"
            assert found["idle_in_transaction_session_timeout"] == "0"
    finally:
        await store.aclose()
        await index.aclose()


@contextlib.contextmanager
def _role(server: str, *clauses: str) -> Iterator[str]:
    """A new non-superuser login role (``clauses`` are run as ``ALTER ROLE name ...``);
    yields the URL of the test database as that role. Dropped afterwards."""
    name = f"s18_{uuid.uuid4().hex[:12]}"
    password = uuid.uuid4().hex
    role = psycopg.sql.Identifier(name)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(
            psycopg.sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER PASSWORD {}").format(
                role, psycopg.sql.Literal(password)
            )
        )
        for clause in clauses:
            admin.execute(psycopg.sql.SQL("ALTER ROLE {} ").format(role) + psycopg.sql.SQL(clause))
    info = conninfo_to_dict(server)
    try:
        yield f"postgresql://{name}:{password}@{info['host']}:{info['port']}/{info['dbname']}"
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP ROLE {}").format(role))


def test_a_value_the_role_sets_wins(postgres_server: str) -> None:
    with _role(postgres_server, "SET lock_timeout = '9s'") as url:
        pool = ConnectionPool(url, size=1, timeout=30)
        try:
            with pool.connection() as connection:
                found = _settings(connection)
        finally:
            pool.close()
    assert found["lock_timeout"] == "9s"
    assert found["idle_in_transaction_session_timeout"] == "2min"  # the role left it


# -- a lock held by a stalled peer -----------------------------------------------------------


async def test_a_lock_a_stalled_peer_holds_ends_in_store_busy(
    database: str, make_memory: MemoryFactory
) -> None:
    """A peer stalled inside its transaction (SIGSTOP, a host gone) blocked every writer of
    that NPC with no error; the file store's lock says "busy, retry later"."""
    session = f"s18-{uuid.uuid4().hex}"
    store = PostgresGameMemoryStore(database, timeout=2)
    try:
        assert await store.append(make_memory("m1", session_id=session, owner_id="npc"))
        with psycopg.connect(database) as peer:  # a transaction opens, and stays open
            peer.execute(
                "SELECT 1 FROM game_memory_partitions WHERE session_id = %s FOR UPDATE",
                (session,),
            )
            with pytest.raises(StoreBusyError) as raised:
                await asyncio.wait_for(
                    store.append(make_memory("m2", session_id=session, owner_id="npc")), 20
                )
            peer.rollback()
        assert "lock timeout" in str(raised.value) and "retry later" in str(raised.value)
        assert await store.append(make_memory("m2", session_id=session, owner_id="npc"))
    finally:
        await store.aclose()


async def test_the_migrations_lock_held_elsewhere_ends_in_store_busy(database: str) -> None:
    """A process stalled in its migration blocked every new process with no error."""
    with psycopg.connect(database, autocommit=True) as setup:  # a schema at version 1
        setup.execute(
            "CREATE TABLE game_memory_schema (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        setup.execute("INSERT INTO game_memory_schema (version, name) VALUES (1, 'old')")
    store = PostgresGameMemoryStore(database, timeout=1)
    try:
        with psycopg.connect(database) as peer:
            # schema.py's lock key; advisory locks are per database: held for a second only
            peer.execute("SELECT pg_advisory_xact_lock(hashtext('game-memory schema'))")
            with pytest.raises(StoreBusyError) as raised:
                await asyncio.wait_for(store.count(), 20)
            peer.rollback()
        assert "bringing the schema" in str(raised.value) and "retry later" in str(raised.value)
    finally:
        await store.aclose()


def test_a_transaction_the_server_ended_for_idling_reads_as_a_lost_connection(
    database: str, postgres_server: str
) -> None:
    """SQLSTATE 25P03 (idle_in_transaction_session_timeout) read as a plain failure."""
    url = _option(database, "idle_in_transaction_session_timeout=100")
    with psycopg.connect(url) as raw:
        raw.execute("SELECT 1")
        pid = raw.info.backend_pid
        wait_until_gone(postgres_server, pid)
        with pytest.raises(psycopg.Error) as raised:
            raw.execute("SELECT 1")
    error = translate(raised.value, "erasing memories", "the database")
    assert isinstance(error, DatabaseUnreachableError), error
    assert "retry" in str(error)


# -- the server's connection limit -----------------------------------------------------------


async def test_a_server_at_its_connection_limit_is_busy_not_unreachable(
    postgres_server: str,
) -> None:
    """ "too many connections" was DatabaseUnreachableError: "check that the server is running
    and the URL is right" (the bridge's -32006, storage corrupt)."""
    with _role(postgres_server, "CONNECTION LIMIT 1") as url:
        store = PostgresGameMemoryStore(url, timeout=5)
        index = PostgresVectorIndex(url, timeout=5)
        try:
            with psycopg.connect(url):  # another process holds the role's one connection
                with pytest.raises(StoreBusyError) as raised:
                    await store.count()
                with pytest.raises(StoreBusyError) as index_raised:
                    await asyncio.to_thread(index.verify, "session", repair=False)
        finally:
            await store.aclose()
            await index.aclose()
    message = str(raised.value)
    assert "too many connections" in message and "max_connections" in message
    assert "CONNECTION LIMIT" in message and "8 per process" in message
    assert "vector index opens up to 4" in str(index_raised.value)


# -- a server that stopped answering, met by a close -----------------------------------------


class _FreezingProxy:
    """A TCP proxy to the test server that can freeze: both sockets stay open and its kernel
    still acknowledges what the client sends, but nothing is forwarded any more: what a
    client sees of a frozen server (SIGSTOP, a paused VM, a stuck proxy)."""

    def __init__(self, url: str) -> None:
        info = conninfo_to_dict(url)
        self._target = (str(info["host"]), int(str(info["port"])))
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = url.replace(f"@{info['host']}:{info['port']}/", f"@127.0.0.1:{port}/", 1)
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopped = False
        self.held = threading.Event()  # bytes arrived while frozen
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def freeze(self) -> None:
        self._flowing.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            self._sockets += [client, server]
            for source, target in ((client, server), (server, client)):
                thread = threading.Thread(target=self._pump, args=(source, target), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                return
            if not self._flowing.is_set():
                self.held.set()
            self._flowing.wait()
            if self._stopped:
                return
            try:
                target.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        """Stop, closing every socket (which ends any call still blocked on one);
        idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes its accept()
        self._listener.close()
        for each in self._sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()
        for thread in self._threads:
            thread.join(10)


@pytest.fixture
def proxy(database: str) -> Iterator[_FreezingProxy]:
    frozen = _FreezingProxy(database)
    try:
        yield frozen
    finally:
        frozen.close()


async def _until_held(proxy: _FreezingProxy) -> None:
    """Wait until a call's bytes reached the frozen proxy (the call is then blocked)."""
    assert await asyncio.to_thread(proxy.held.wait, 10)


async def test_aclose_stops_waiting_for_a_call_stuck_on_a_frozen_server(
    proxy: _FreezingProxy, make_memory: MemoryFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's close waited for its threads without bound, and with it the sidecar's
    stop: a call stuck on a frozen server held up the process forever."""
    session = f"s18-{uuid.uuid4().hex}"
    store = PostgresGameMemoryStore(proxy.url, timeout=1)
    try:
        assert await store.append(make_memory("m1", session_id=session))
        proxy.freeze()
        stuck = asyncio.ensure_future(store.append(make_memory("m2", session_id=session)))
        await _until_held(proxy)
        with caplog.at_level(logging.WARNING, logger="game_memory.postgres.connection"):
            await asyncio.wait_for(store.aclose(), 20)
        with pytest.raises(DatabaseUnreachableError):
            await asyncio.wait_for(stuck, 10)
        assert store.where in caplog.text and "cutting" in caplog.text
    finally:
        proxy.close()  # ends a call still stuck, so that a failure ends the test
        await asyncio.wait_for(store.aclose(), 20)


async def test_an_indexs_close_cuts_a_call_stuck_on_a_frozen_server(
    proxy: _FreezingProxy,
) -> None:
    index = PostgresVectorIndex(proxy.url, timeout=1)
    try:
        assert await asyncio.to_thread(index.verify, "session", repair=False) == []
        proxy.freeze()
        stuck = asyncio.ensure_future(asyncio.to_thread(index.verify, "session", repair=False))
        await _until_held(proxy)
        await asyncio.wait_for(index.aclose(), 20)
        with pytest.raises(IndexDatabaseUnreachableError):
            await asyncio.wait_for(stuck, 10)
    finally:
        proxy.close()  # ends a call still stuck, so that a failure ends the test
        await asyncio.wait_for(index.aclose(), 20)
