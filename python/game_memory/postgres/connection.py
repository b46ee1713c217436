"""Connections to one PostgreSQL database: a small pool, settings, and error translation.

Every connection is in autocommit mode with ``synchronous_commit`` forced ``on`` (whatever
the server or role default), so a statement that returns has its commit flushed to the
write-ahead log: one statement is one durable transaction. Multi-statement work opens an
explicit transaction (:meth:`ConnectionPool.transaction`).

The pool is deliberately small and synchronous: the store and the index run their blocking
calls in their own threads, each borrowing a connection for one call. A connection that
failed (the server restarted, the network dropped) is discarded, so the next call opens a
fresh one, and so is every idle one (a lost connection means a restarted server or a dropped
network, which they went through too): after a restart one call fails, not one per pooled
connection. The same holds across the pools of one process on one database (a front door's
store and index each have one): a lost connection seen by one makes the others drop the
idle connections they had before it (:data:`_LOSSES`), so a restart fails one call of the
process, not a store call and then an index write. psycopg's errors never escape this
package: :func:`translate` maps them to the project's error tree and never puts the password
of a URL in a message.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from game_memory.errors import (
    GameMemoryError,
    InvalidArgumentError,
    PersistenceError,
    StoreBusyError,
)

__all__ = [
    "ConnectionPool",
    "describe_database",
    "is_database_url",
    "translate",
]

_SCHEMES = ("postgresql://", "postgres://")
_APPLICATION = "game-memory"


#: Lost connections seen by this process's pools, per database (``describe_database``):
#: a pool whose count is behind drops its idle connections before handing one out.
_LOSSES: dict[str, int] = {}
_LOSSES_LOCK = threading.Lock()


def is_database_url(value: object) -> bool:
    """Whether ``value`` is a ``postgresql://`` (or ``postgres://``) connection URL."""
    return isinstance(value, str) and value.lower().startswith(_SCHEMES)


def describe_database(url: str) -> str:
    """``host:port/dbname`` of a connection URL: what a message may show (no password)."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the PostgreSQL database (an unreadable URL)"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    name = parts.get("dbname") or parts.get("user") or "postgres"
    return f"PostgreSQL database {name} on {host}:{port}"


def translate(
    exc: Exception,
    what: str,
    where: str,
    *,
    error: type[GameMemoryError] = PersistenceError,
) -> GameMemoryError:
    """The project's error for a psycopg error raised while doing ``what`` at ``where``.

    Lock and statement timeouts, serialization failures and deadlocks are
    :class:`StoreBusyError` (retry later); data PostgreSQL refuses, or that is past one of
    its limits (ids too long for a key index entry), is :class:`InvalidArgumentError`;
    anything else (a lost connection, missing privileges, a full disk, a damaged table) is
    ``error`` (``PersistenceError`` for the save, ``DerivedIndexError`` for the vector
    index). Only a lost or refused connection is worded as one.
    """
    if isinstance(exc, GameMemoryError):
        return exc
    detail = _first_line(exc)
    if isinstance(
        exc,
        pg_errors.LockNotAvailable
        | pg_errors.QueryCanceled
        | pg_errors.SerializationFailure
        | pg_errors.DeadlockDetected,
    ):
        return StoreBusyError(f"{where} was busy while {what} ({detail}); retry later")
    if isinstance(exc, pg_errors.DataError | pg_errors.CharacterNotInRepertoire):
        return InvalidArgumentError(f"{where} refused the data while {what}: {detail}")
    if isinstance(exc, pg_errors.ProgramLimitExceeded):
        return InvalidArgumentError(
            f"{where} refused the data while {what}: it is past a limit of PostgreSQL "
            f"({detail}). A memory's session, owner and memory ids together must fit one "
            "key entry (about 2,700 bytes of UTF-8, see docs/postgres.md): use shorter ids"
        )
    if isinstance(exc, psycopg.OperationalError) and _lost_connection(exc):
        return error(
            f"could not reach {where} while {what} ({detail}); check that the server is "
            "running and the URL is right, then retry"
        )
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return error(
            f"the database role may not do this in {where} while {what} ({detail}); grant it "
            "the privileges docs/postgres.md lists"
        )
    return error(f"{where} failed while {what}: {detail}")


#: SQLSTATEs of a connection that failed or was shut down (class 08; admin or crash
#: shutdown, the server starting): psycopg raises them as ``OperationalError``, like a
#: full disk or a statement past a limit, which are no reason to check the server or URL.
_DISCONNECTED = ("57P01", "57P02", "57P03")


def _lost_connection(exc: psycopg.Error) -> bool:
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _DISCONNECTED


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class ConnectionPool:
    """Up to ``size`` connections to one database, opened on demand, reused LIFO.

    Args:
        url: A ``postgresql://`` URL (libpq's URI syntax; ``options=-csearch_path%3D...``
            selects a schema).
        size: Most connections open at once; a caller beyond it waits up to ``timeout``.
        timeout: Seconds to wait for a free connection (then ``StoreBusyError``) and to
            connect.
        configure: Called with each new connection (after the session settings), for
            type registration.
        error: The error class connection failures become.
    """

    def __init__(
        self,
        url: str,
        *,
        size: int,
        timeout: float,
        configure: Callable[[psycopg.Connection[Any]], None] | None = None,
        error: type[GameMemoryError] = PersistenceError,
    ) -> None:
        if not is_database_url(url):
            raise InvalidArgumentError("a PostgreSQL store needs a postgresql:// URL")
        self.url = url
        self.where = describe_database(url)
        self._size = size
        self._timeout = timeout
        self._configure = configure
        self._error = error
        self._idle: list[psycopg.Connection[Any]] = []
        self._losses_seen = _LOSSES.get(self.where, 0)
        self._open = 0
        self._closed = False
        self._condition = threading.Condition()

    def _connect(self, *, configure: bool = True) -> psycopg.Connection[Any]:
        try:
            connection = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, round(self._timeout)),
                application_name=_APPLICATION,
            )
        except psycopg.Error as exc:
            raise translate(exc, "connecting", self.where, error=self._error) from exc
        try:
            # Whatever the server's or the role's default: a commit returns once durable.
            connection.execute("SET synchronous_commit = on")
            if configure and self._configure is not None:
                self._configure(connection)
        except BaseException as exc:
            connection.close()
            if isinstance(exc, psycopg.Error):
                raise translate(exc, "connecting", self.where, error=self._error) from exc
            raise
        return connection

    def _acquire(self) -> psycopg.Connection[Any]:
        with self._condition:
            while True:
                if self._closed:
                    raise self._error(f"the connections to {self.where} are closed")
                if self._idle and self._lost_since_idle():
                    stale, self._idle = self._idle, []  # another pool saw the server go
                    self._open -= len(stale)
                    for lost in stale:
                        with contextlib.suppress(psycopg.Error):
                            lost.close()
                if self._idle:
                    return self._idle.pop()
                if self._open < self._size:
                    self._open += 1
                    break
                if not self._condition.wait(self._timeout):
                    raise StoreBusyError(
                        f"all {self._size} connections to {self.where} stayed busy for "
                        f"{self._timeout:g} s; retry later"
                    )
        try:
            return self._connect()
        except BaseException:
            with self._condition:
                self._open -= 1
                self._condition.notify()
            raise

    def _lost_since_idle(self) -> bool:
        """Whether a pool of this process lost a connection to this database since the
        idle connections were last checked (under ``_condition``)."""
        losses = _LOSSES.get(self.where, 0)
        if losses == self._losses_seen:
            return False
        self._losses_seen = losses
        return True

    def _release(self, connection: psycopg.Connection[Any]) -> None:
        healthy = not connection.closed and not connection.broken
        if healthy and connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            healthy = False  # never hand out a connection inside a transaction
        stale: list[psycopg.Connection[Any]] = []
        with self._condition:
            if healthy and not self._closed:
                self._idle.append(connection)
                self._condition.notify()
                return
            if connection.broken:
                with _LOSSES_LOCK:  # tell the process's other pools on this database
                    _LOSSES[self.where] = _LOSSES.get(self.where, 0) + 1
                    self._losses_seen = _LOSSES[self.where]
                # The connection was lost: the server restarted, failed over, or the network
                # dropped, which the idle ones went through too. Drop them, so that one call
                # fails rather than one per pooled connection.
                stale, self._idle = self._idle, []
            self._open -= 1 + len(stale)
            self._condition.notify_all()
        for lost in (connection, *stale):
            with contextlib.suppress(psycopg.Error):
                lost.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection (autocommit) for one call."""
        connection = self._acquire()
        try:
            yield connection
        finally:
            self._release(connection)

    @contextlib.contextmanager
    def direct(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection of its own (not pooled, not configured): for the schema migration,
        which must run before ``configure`` can register the extension's types."""
        if self._closed:
            raise self._error(f"the connections to {self.where} are closed")
        connection = self._connect(configure=False)
        try:
            yield connection
        finally:
            with contextlib.suppress(psycopg.Error):
                connection.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection inside one transaction: committed on exit, rolled back on error."""
        with self.connection() as connection, connection.transaction():
            yield connection

    def close(self) -> None:
        """Close every idle connection and refuse new calls; idempotent."""
        with self._condition:
            self._closed = True
            idle, self._idle = self._idle, []
            self._condition.notify_all()
        for connection in idle:
            with contextlib.suppress(psycopg.Error):
                connection.close()
