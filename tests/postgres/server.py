"""The PostgreSQL server the PostgreSQL tests use, and one fresh schema per test.

CI (``.ci/run``) starts a real PostgreSQL + pgvector with ``.ci/postgres.sh start`` and
exports its URL as ``GAME_MEMORY_TEST_DATABASE``. Run locally without it, the session
starts the same server through the same script and stops it at the end. On CI
(``CI=true``) a missing variable fails the tests instead: they never skip there.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

__all__ = [
    "DATABASE_VARIABLE",
    "named_schema",
    "schema_url",
    "server_url",
    "shared_server_url",
    "temporary_database",
    "temporary_schema",
]

DATABASE_VARIABLE = "GAME_MEMORY_TEST_DATABASE"
_SCRIPT = Path(__file__).resolve().parents[2] / ".ci" / "postgres.sh"
_EXPORT = re.compile(r"^export (GAME_MEMORY_TEST_[A-Z_]+)=(\S+)$")


@contextmanager
def server_url() -> Iterator[str]:
    """The URL of the test server: ``$GAME_MEMORY_TEST_DATABASE``, or one started here.

    Raises:
        RuntimeError: on CI without the variable, or when the server cannot start.
    """
    url = os.environ.get(DATABASE_VARIABLE)
    if url:
        yield url
        return
    if os.environ.get("CI", "").lower() == "true":
        raise RuntimeError(
            f"{DATABASE_VARIABLE} is not set: on CI, .ci/run starts PostgreSQL with "
            ".ci/postgres.sh start and exports it; the PostgreSQL tests do not skip"
        )
    started = subprocess.run(
        ["bash", str(_SCRIPT), "start"], capture_output=True, text=True, check=False, timeout=300
    )
    if started.returncode != 0:
        raise RuntimeError(f".ci/postgres.sh start failed:\n{started.stderr}")
    values = dict(
        match.groups() for line in started.stdout.splitlines() if (match := _EXPORT.match(line))
    )
    try:
        yield values[DATABASE_VARIABLE]
    finally:
        subprocess.run(
            ["bash", str(_SCRIPT), "stop", values["GAME_MEMORY_TEST_POSTGRES_DIR"]],
            capture_output=True,
            check=False,
            timeout=120,
        )


def schema_url(url: str, schema: str) -> str:
    """``url`` with its ``search_path`` set to ``schema`` (then ``public``, for pgvector)."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema},public"


@contextmanager
def temporary_schema(url: str, prefix: str = "t") -> Iterator[str]:
    """A new empty schema in the test database (dropped afterwards); yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
    try:
        yield schema_url(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@contextmanager
def temporary_database(url: str, prefix: str = "gm_t") -> Iterator[str]:
    """A new database on the test server (dropped afterwards, its sessions ended), with
    pgvector in ``public``; yields its URL, with the server's default ``search_path``
    (``"$user", public``).

    For a test that needs ``public`` to hold a save: the shared test database's ``public``
    must stay empty, since :func:`temporary_schema`'s URLs put it second on their path.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    try:
        created = urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
        with psycopg.connect(created, autocommit=True) as connection:
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        yield created
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_shared: dict[str, object] = {}
_shared_lock = threading.Lock()


def shared_server_url() -> str:
    """The test server's URL for code without fixtures (the conformance registry's
    factories): started once per process when needed, stopped, with the schemas
    :func:`named_schema` made, when the process exits."""
    with _shared_lock:
        if "url" not in _shared:
            context = server_url()
            _shared["url"] = context.__enter__()
            _shared["schemas"] = []
            atexit.register(_stop_shared, context)
        return str(_shared["url"])


def _stop_shared(context: contextlib.AbstractContextManager[str]) -> None:
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(str(_shared["url"]), autocommit=True) as connection,
    ):
        for name in _shared["schemas"]:  # type: ignore[attr-defined]
            connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    context.__exit__(None, None, None)


def named_schema(owner: str, name: str) -> str:
    """The URL of the schema named by ``owner`` (a test's folder) and ``name``, made on
    first use: the same pair gives the same tables, another pair empty ones."""
    url = shared_server_url()
    schema = "c_" + hashlib.sha256(f"{owner}\n{name}".encode()).hexdigest()[:20]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    with _shared_lock:
        _shared["schemas"].append(schema)  # type: ignore[attr-defined]
    return schema_url(url, schema)


def wait_until_gone(admin_url: str, pid: int) -> None:
    """Wait until the server has ended backend ``pid`` (its goodbye is then sent)."""
    with psycopg.connect(admin_url, autocommit=True) as admin:
        for _ in range(500):
            row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
            found = row.fetchone()
            if found is not None and found[0] == 0:
                return
            threading.Event().wait(0.02)
    raise AssertionError(f"backend {pid} is still there")
