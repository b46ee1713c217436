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
process, not a store call and then an index write. A connection the server closed while it
sat idle (``idle_session_timeout``, ``pg_terminate_backend``, a shutdown) is noticed when it
is handed out and replaced, so no call fails for it.

Every connection is also bounded in time, so no call waits forever on a database that
stopped answering (``docs/postgres.md``, "When the database stops answering"):

* TCP keepalives and ``tcp_user_timeout`` derived from the pool's ``timeout``, unless the URL
  sets them: a host that vanished or a network that dropped the connection fails the call as
  a lost connection within about ``timeout`` (libpq's default waits 2 hours or more);
* ``lock_timeout`` (the pool's ``timeout``: a lock wait becomes ``StoreBusyError``, as the
  file store's lock does) and ``idle_in_transaction_session_timeout`` (:data:`_IDLE_FACTOR`
  times it, at least a minute: the server ends a stalled peer's transaction and frees its
  locks), each only where nobody chose a value: ``pg_settings.source`` is ``default``, so a
  value from the server's configuration, ``ALTER ROLE``/``ALTER DATABASE``, the URL's
  ``options`` or ``PGOPTIONS`` is kept;
* a close that waited its grace for calls still running cuts the connections they are
  blocked on (:meth:`ConnectionPool.aclose`), so a server that froze while still
  acknowledging TCP holds up neither the close nor the process's exit.

A server that refuses a connection for its connection limit (``max_connections``, a
database's or role's ``CONNECTION LIMIT``) is :class:`StoreBusyError`, not "unreachable".

psycopg's errors never escape this package: :func:`translate` maps them to the project's
error tree. No message holds the password of a URL: a URL libpq would misread (a ``%``,
``@`` or ``/`` left unencoded in its password shifts where libpq sees the host, port and
database, and its parse errors quote the text around the fault) is refused before any
connection, named by its host alone when that is unambiguous (:func:`url_problem`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import select
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict

from game_memory.errors import (
    CapacityExceededError,
    DerivedIndexError,
    GameMemoryError,
    InvalidArgumentError,
    PersistenceError,
    StoreBusyError,
)

__all__ = [
    "ConnectionPool",
    "DatabaseUnreachableError",
    "IndexDatabaseUnreachableError",
    "describe_database",
    "is_database_url",
    "translate",
    "url_problem",
]

_SCHEMES = ("postgresql://", "postgres://")
_APPLICATION = "game-memory"

#: What to do about a URL libpq would misread.
_ENCODE_ADVICE = (
    "Percent-encode the special characters of the user name, password and database name "
    "('%' as %25, '@' as %40, '/' as %2F, ':' as %3A; in Python "
    "urllib.parse.quote(password, safe='')). The URL itself is not shown, so that its "
    "password never reaches a message"
)
#: One host with an optional numeric port, as a URL writes it: what a message may show of a
#: URL libpq would misread (it cannot hold any of the password, which ends at an ``@``).
_PLAIN_HOST = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::[0-9]{1,5})?")
#: A port (or a list of them, one per host) as libpq takes it.
_PORTS = re.compile(r"[0-9]+(?:,[0-9]*)*")
#: The quoted parts of a libpq parse error, which repeat the URL's text around the fault.
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")


_LOG = logging.getLogger(__name__)

#: ``idle_in_transaction_session_timeout`` is this many times the pool's ``timeout`` (and at
#: least :data:`_IDLE_FLOOR` seconds): no transaction of this package sits idle for more
#: than a few milliseconds between its statements (each runs a few statements back to back,
#: with no embedding or other wait inside), so only a stalled or partitioned peer meets it.
_IDLE_FACTOR: Final = 4
_IDLE_FLOOR: Final = 60.0
#: Seconds a close still waits, after cutting the connections of calls that outlived its
#: grace, for those calls to fail and their threads to end.
_AFTER_CUT: Final = 2.0
#: libpq's words for a server that refused a connection for its connection limit (SQLSTATE
#: 53300, which libpq does not report for a refused connection): ``max_connections``, a
#: database's or a role's ``CONNECTION LIMIT``, the slots reserved for superusers.
_CONNECTION_LIMIT = re.compile(
    r"too many connections|too many clients|remaining connection slots are reserved", re.I
)

#: Lost connections seen by this process's pools, per database (``describe_database``):
#: a pool whose count is behind drops its idle connections before handing one out.
_LOSSES: dict[str, int] = {}
_LOSSES_LOCK = threading.Lock()


class DatabaseUnreachableError(PersistenceError):
    """The save's database could not be reached: refused, down, restarting, or the
    connection was lost or shut down. Nothing is damaged; check the server and retry.

    ``reason`` (``"unreachable"``) is what the bridge sends as ``data.reason``.
    """

    reason: Final = "unreachable"


class IndexDatabaseUnreachableError(DerivedIndexError):
    """The vector index's database could not be reached (as
    :class:`DatabaseUnreachableError`); the index is not damaged, no rebuild is needed."""

    reason: Final = "unreachable"


def is_database_url(value: object) -> bool:
    """Whether ``value`` is a ``postgresql://`` (or ``postgres://``) connection URL."""
    return isinstance(value, str) and value.lower().startswith(_SCHEMES)


def url_problem(url: str) -> str | None:
    """Why libpq would not read ``url`` as it was meant, or ``None`` when it would.

    libpq takes a URL's user information up to its first ``@``, unless a ``/`` comes
    first: an unencoded ``/`` or ``@`` in a password moves part of the password into the
    host, the port or the database name (which messages show), and an unencoded ``%``
    makes the URL unparsable, with the text around it quoted in libpq's error. Such a URL
    cannot connect as meant anyway. The answer never quotes the URL.
    """
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        return f"libpq cannot parse it ({_redacted(exc)})"
    host = str(parts.get("host") or "")
    port = str(parts.get("port") or "")
    if "@" in host or (port and not _PORTS.fullmatch(port)) or "@" in _raw_database(url):
        return (
            "libpq would read part of it as the wrong field: an unencoded '@', '/' or ':' in "
            "the user name or password moves where it sees the host, port and database"
        )
    return None


def _redacted(exc: Exception) -> str:
    """libpq's parse error without the URL text it quotes (which may be the password)."""
    text = _first_line(exc)
    text = _QUOTED.sub("…", text).rstrip(": …").strip()
    return text or "not a valid URL"


def _raw_database(url: str) -> str:
    """The database part of ``url`` as written (after the authority, before the query),
    following libpq: the user information ends at the first ``@`` before any ``/``."""
    rest = url.partition("://")[2]
    slash, at = rest.find("/"), rest.find("@")
    if at != -1 and (slash == -1 or at < slash):
        rest = rest[at + 1 :]
    path = rest.partition("/")[2] if "/" in rest.split("?", 1)[0] else ""
    return path.split("?", 1)[0]


def describe_database(url: str) -> str:
    """``host:port/dbname`` of a connection URL: what a message may show (no password).

    A URL libpq would misread (:func:`url_problem`) is named by its host alone, and only
    when that is unambiguous (:func:`_plain_host`); else it is "an unreadable URL".
    """
    if url_problem(url) is not None:
        plain = _plain_host(url)
        if plain is None:
            return "the PostgreSQL database at an unreadable URL"
        return f"the PostgreSQL database on {plain} (its URL is unreadable)"
    parts = conninfo_to_dict(url)
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    name = parts.get("dbname") or parts.get("user") or "postgres"
    return f"PostgreSQL database {name} on {host}:{port}"


def _plain_host(url: str) -> str | None:
    """The ``host[:port]`` of a URL libpq would misread, when that is unambiguous: after
    its one ``@`` when no ``/`` comes before it (else the ``@`` may be a password's, or a
    database name's), or at the start when there is no ``@`` (then there is no password)."""
    rest = url.partition("://")[2]
    at = rest.find("@")
    if rest.count("@") > 1 or "/" in rest[: max(at, 0)]:
        return None
    host = re.split(r"[/?]", rest[at + 1 :], maxsplit=1)[0]
    return host if _PLAIN_HOST.fullmatch(host) else None


def translate(
    exc: Exception,
    what: str,
    where: str,
    *,
    error: type[GameMemoryError] = PersistenceError,
) -> GameMemoryError:
    """The project's error for a psycopg error raised while doing ``what`` at ``where``.

    Lock timeouts, serialization failures, deadlocks and a statement an administrator
    canceled are :class:`StoreBusyError` (retry later). A statement that ran past the
    server's ``statement_timeout`` is :class:`CapacityExceededError` (``bound``
    ``"statement_timeout"``): a retry would run as long, so the message says to raise it
    or to ask for less. Data PostgreSQL refuses, or that is past one of its
    limits (ids too long for a key index entry), is :class:`InvalidArgumentError`. A lost,
    refused or shut-down connection is :class:`DatabaseUnreachableError` (or
    :class:`IndexDatabaseUnreachableError` when ``error`` is ``DerivedIndexError``), worded
    as one; anything else (missing privileges, a full disk, a damaged table) is ``error``
    (``PersistenceError`` for the save, ``DerivedIndexError`` for the vector index).
    """
    if isinstance(exc, GameMemoryError):
        return exc
    detail = _first_line(exc)
    if isinstance(exc, pg_errors.QueryCanceled):
        return _canceled(detail, what, where)
    if isinstance(
        exc,
        pg_errors.LockNotAvailable | pg_errors.SerializationFailure | pg_errors.DeadlockDetected,
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
    if isinstance(exc, pg_errors.IdleInTransactionSessionTimeout):
        return _unreachable(error)(
            f"{where} ended the connection while {what} ({detail}): a transaction sat idle "
            "past idle_in_transaction_session_timeout (this process or its network stalled), "
            "so none of it was saved; retry"
        )
    if isinstance(exc, psycopg.OperationalError) and _lost_connection(exc):
        return _unreachable(error)(
            f"could not reach {where} while {what} ({detail}); check that the server is "
            "running and the URL is right, then retry"
        )
    if isinstance(exc, pg_errors.InsufficientPrivilege):
        return error(
            f"the database role may not do this in {where} while {what} ({detail}); grant it "
            "the privileges docs/postgres.md lists"
        )
    return error(f"{where} failed while {what}: {detail}")


def _canceled(detail: str, what: str, where: str) -> GameMemoryError:
    """A canceled statement (SQLSTATE 57014): PostgreSQL's ``statement_timeout``, unless
    the server says someone canceled it (``pg_cancel_backend``), which a retry may outlive.
    The library never cancels its own statements."""
    if "user request" in detail:
        return StoreBusyError(
            f"{where} canceled the statement while {what} ({detail}: an administrator or "
            "another session canceled it); retry later"
        )
    return CapacityExceededError(
        f"{where} stopped the statement while {what} ({detail}): it ran past the server's "
        "statement_timeout, and a retry runs as long (unless it was waiting for another "
        "writer's lock). Raise statement_timeout for the role or the database (or in the "
        "URL: ?options=-c%20statement_timeout%3D60s), or ask for less: recall one NPC (an "
        "owner_id) rather than a whole session",
        bound="statement_timeout",
    )


def _unreachable(error: type[GameMemoryError]) -> type[GameMemoryError]:
    """The "could not reach the database" class of the error kind ``error``."""
    if issubclass(error, DerivedIndexError):
        return IndexDatabaseUnreachableError
    if issubclass(error, PersistenceError):
        return DatabaseUnreachableError
    return error


#: SQLSTATEs of a connection that failed or was shut down (class 08; admin or crash
#: shutdown, the server starting, the session closed for being idle too long): psycopg
#: raises them as ``OperationalError``, like a full disk or a statement past a limit,
#: which are no reason to check the server or URL.
_DISCONNECTED = ("57P01", "57P02", "57P03", "57P05")


def _lost_connection(exc: psycopg.Error) -> bool:
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _DISCONNECTED


def _network_settings(url: str, timeout: float) -> dict[str, int]:
    """libpq's TCP settings that notice a dead peer within about ``timeout`` seconds, less
    those ``url`` sets itself (a URL's explicit value wins).

    Keepalive probes start after ``timeout / 2`` s of silence and give up after three
    unanswered ones ``timeout / 6`` s apart; ``tcp_user_timeout`` fails a connection whose
    sent data stays unacknowledged for ``timeout``. Both are answered by a live host's
    kernel, so a slow statement is never cut; a host that vanished or a network that
    dropped the connection is. libpq ignores them on a Unix-domain socket.
    """
    wanted = {
        "keepalives": 1,
        "keepalives_idle": max(1, round(timeout / 2)),
        "keepalives_interval": max(1, round(timeout / 6)),
        "keepalives_count": 3,
        "tcp_user_timeout": max(1_000, round(timeout * 1_000)),
    }
    given = conninfo_to_dict(url)
    return {name: value for name, value in wanted.items() if name not in given}


def _session_settings(timeout: float) -> str:
    """The statements that set up a new connection's session (one round trip).

    ``synchronous_commit`` is always forced on (durability is not the operator's to
    lower). ``lock_timeout`` (``timeout``) and ``idle_in_transaction_session_timeout``
    (:data:`_IDLE_FACTOR` times it, at least :data:`_IDLE_FLOOR` s) are set only where their
    ``pg_settings.source`` is ``default``: a value the operator chose anywhere (the server's
    configuration, ``ALTER ROLE``/``ALTER DATABASE ... SET``, the URL's ``options``,
    ``PGOPTIONS``), ``0`` included, is kept.
    """
    lock = max(1, round(timeout * 1_000))
    idle = max(round(_IDLE_FLOOR * 1_000), _IDLE_FACTOR * lock)
    return (
        "SET synchronous_commit = on; "
        "SELECT set_config(s.name, w.value, false) FROM pg_settings AS s "
        f"JOIN (VALUES ('lock_timeout', '{lock}'), "
        f"('idle_in_transaction_session_timeout', '{idle}')) AS w (name, value) "
        "ON w.name = s.name WHERE s.source = 'default'"
    )


def _over_connection_limit(exc: psycopg.Error) -> bool:
    """Whether the server refused a new connection for its connection limit."""
    return exc.sqlstate == "53300" or bool(_CONNECTION_LIMIT.search(str(exc)))


def _duplicate_socket(connection: psycopg.Connection[Any]) -> socket.socket | None:
    """A duplicate of ``connection``'s socket, to shut it down from another thread while a
    call is blocked on it (:meth:`ConnectionPool.interrupt`), or ``None`` where the system
    cannot duplicate it. Taken by the thread that holds the connection, so libpq cannot
    close (and the process reuse) the descriptor meanwhile; a duplicate is never the
    descriptor libpq closes, so shutting it down later cannot hit another socket."""
    try:
        return socket.fromfd(connection.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, ValueError, AttributeError, psycopg.Error):
        return None


async def _returned(wait: Callable[[], object], seconds: float) -> bool:
    """Whether blocking ``wait()`` returned within ``seconds``.

    It runs in a daemon thread of its own, not the event loop's executor: a wait that never
    returns (a call blocked on a server that froze) then holds up neither the loop's
    shutdown nor the process's exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            wait()
        finally:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle)

    threading.Thread(target=run, name="game-memory-pg-close", daemon=True).start()
    try:
        await asyncio.wait_for(asyncio.shield(done), seconds)
    except TimeoutError:
        return False
    return True


def _first_line(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _closed_while_idle(connection: psycopg.Connection[Any]) -> bool:
    """Whether the server closed (or is closing) an idle pooled connection.

    An idle connection in autocommit mode is owed nothing by the server, so anything to
    read on its socket is the server's goodbye (an error such as 57P05 idle-session
    timeout or 57P01 terminated by an administrator, then the end of the stream). One
    poll with no wait, no round trip. A connection it misses (the server closes it in the
    instant after) fails the one call that meets it, as a lost connection: that call is
    not retried, since its statement may have run.
    """
    if connection.closed or connection.broken:
        return True
    try:
        return _readable(connection.fileno())
    except (OSError, ValueError, psycopg.Error):
        return True


def _readable(fd: int) -> bool:
    """Whether socket ``fd`` has something to read (or was closed), without waiting.

    ``poll`` where there is one: ``select`` refuses descriptors past ``FD_SETSIZE``
    (1,024), which a busy game server's sockets can be. Windows has no ``poll``, and its
    ``select`` takes any socket.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)  # a hang-up or an error is reported too
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


class ConnectionPool:
    """Up to ``size`` connections to one database, opened on demand, reused LIFO.

    Args:
        url: A ``postgresql://`` URL (libpq's URI syntax; ``options=-csearch_path%3D...``
            selects a schema).
        size: Most connections open at once; a caller beyond it waits up to ``timeout``.
        timeout: Seconds to wait for a free connection (then ``StoreBusyError``) and to
            connect; also what bounds a lock wait (``lock_timeout``), a dead peer
            (keepalives, ``tcp_user_timeout``) and a close's grace (module docstring).
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
        problem = url_problem(url)
        if problem is not None:
            raise InvalidArgumentError(
                f"cannot use the URL of {describe_database(url)}: {problem}. {_ENCODE_ADVICE}"
            )
        self.url = url
        self.where = describe_database(url)
        self._size = size
        self._timeout = timeout
        self._configure = configure
        self._error = error
        self._network: dict[str, Any] = _network_settings(url, timeout)  # libpq keywords
        self._session = _session_settings(timeout)
        self._idle: list[psycopg.Connection[Any]] = []
        #: Connections handed out (pooled or direct), with a duplicate of each one's socket.
        self._borrowed: dict[psycopg.Connection[Any], socket.socket | None] = {}
        self._losses_seen = _LOSSES.get(self.where, 0)
        self._open = 0
        self._closed = False
        self._condition = threading.Condition()

    def _connect(self, *, configure: bool = True) -> psycopg.Connection[Any]:
        """A new connection with the session settings (module docstring) and ``configure``.

        Raises:
            StoreBusyError: the server refused it for its connection limit.
            GameMemoryError: anything else, as :func:`translate` words it.
        """
        try:
            connection = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, round(self._timeout)),
                application_name=_APPLICATION,
                **self._network,
            )
        except psycopg.ProgrammingError as exc:  # the URL; __init__ refuses what it knows
            raise self._error(
                f"could not connect to {self.where}: libpq cannot read its URL "
                f"({_redacted(exc)}). {_ENCODE_ADVICE}"
            ) from None  # the cause's text quotes the URL
        except psycopg.Error as exc:
            if _over_connection_limit(exc):
                raise self._busy_server(exc) from exc
            raise translate(exc, "connecting", self.where, error=self._error) from exc
        try:
            # synchronous_commit whatever the server's or the role's default (a commit
            # returns once durable); lock and idle-transaction bounds where none was chosen.
            connection.execute(self._session)
            if configure and self._configure is not None:
                self._configure(connection)
        except BaseException as exc:
            connection.close()
            if isinstance(exc, psycopg.Error):
                raise translate(exc, "connecting", self.where, error=self._error) from exc
            raise
        return connection

    def _busy_server(self, exc: psycopg.Error) -> StoreBusyError:
        """The error for a connection the server refused for its connection limit."""
        user = "vector index" if issubclass(self._error, DerivedIndexError) else "store"
        return StoreBusyError(
            f"{self.where} refused a new connection: its connection limit is reached "
            f"({_first_line(exc)}). Retry later; or raise the server's max_connections (or "
            "the database's or role's CONNECTION LIMIT); or open fewer connections: this "
            f"{user} opens up to {self._size} per process, and open_memory's store and "
            "vector index up to 4 each (max_connections), 8 per process on one database, "
            "one more while the schema is first checked"
        )

    def _lend(self, connection: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
        """Record ``connection`` as in use, with a duplicate of its socket (so that
        :meth:`interrupt` can cut it); called by the thread that holds it."""
        duplicate = _duplicate_socket(connection)
        with self._condition:
            self._borrowed[connection] = duplicate
        return connection

    def _unlend(self, connection: psycopg.Connection[Any]) -> None:
        """Forget that ``connection`` is in use (before anything closes it)."""
        with self._condition:
            duplicate = self._borrowed.pop(connection, None)
            self._condition.notify_all()
        if duplicate is not None:
            duplicate.close()  # a duplicate: libpq's descriptor stays open

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
                while self._idle:
                    connection = self._idle.pop()
                    if not _closed_while_idle(connection):
                        return connection
                    self._open -= 1  # the server closed it while idle: open another
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
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
        self._unlend(connection)
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
        connection = self._lend(self._acquire())
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
            yield self._lend(connection)
        finally:
            self._unlend(connection)
            with contextlib.suppress(psycopg.Error):
                connection.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """Borrow a connection inside one transaction: committed on exit, rolled back on error."""
        with self.connection() as connection, connection.transaction():
            yield connection

    def in_use(self) -> int:
        """How many connections are handed out (calls running on this pool)."""
        with self._condition:
            return len(self._borrowed)

    def _wait_unused(self) -> None:
        """Block until no connection is handed out."""
        with self._condition:
            while self._borrowed:
                self._condition.wait()

    def interrupt(self) -> int:
        """Shut down the socket of every connection in use; how many.

        For a close that stopped waiting (:meth:`aclose`) and nothing else: a call
        blocked on a server that stopped answering then fails as a lost connection (libpq
        reads the end of the stream; what it wrote may or may not have committed, as with
        any lost connection), and its thread ends. Only the sockets' duplicates are
        touched, never a descriptor libpq may have closed meanwhile.
        """
        with self._condition:
            duplicates = [d for d in self._borrowed.values() if d is not None]
            for duplicate in duplicates:
                with contextlib.suppress(OSError):
                    duplicate.shutdown(socket.SHUT_RDWR)
        return len(duplicates)

    async def aclose(self, running: Callable[[], object] | None = None) -> None:
        """Close the pool once the calls running on it end, waiting at most ``timeout`` s.

        ``running`` blocks until the owner's calls are done (a store's executor shutdown);
        by default, until no connection is in use. Calls still running after that grace are
        blocked on a server that stopped answering (a host that vanished is cut by the
        keepalives within about ``timeout``; one that froze while its kernel still
        acknowledges TCP never is): their connections are cut (:meth:`interrupt`), so they
        fail as lost connections, a warning names the database, and the close returns,
        whether or not their threads have ended :data:`_AFTER_CUT` s later.
        """
        wait = running if running is not None else self._wait_unused
        grace = self._timeout
        if (running is not None or self.in_use()) and not await _returned(wait, grace):
            _LOG.warning(
                "closing %s: %d call(s) still waited for it after %g s (did it stop "
                "answering?); cutting their connections, so they fail as lost connections",
                self.where,
                self.in_use(),
                grace,
            )
            self.interrupt()
            await _returned(wait, _AFTER_CUT)
        self.close()

    def close(self) -> None:
        """Close every idle connection and refuse new calls; idempotent."""
        with self._condition:
            self._closed = True
            idle, self._idle = self._idle, []
            self._condition.notify_all()
        for connection in idle:
            with contextlib.suppress(psycopg.Error):
                connection.close()
