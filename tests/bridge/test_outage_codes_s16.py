"""A database outage over the bridge: ``data.reason`` ``"unreachable"``, not bare damage.

It was ``-32006`` "storage corrupt" without ``data.reason``, whose documented advice (run
``game-memory check``, restore from a backup) cannot help a server that is down.
"""

from __future__ import annotations

import pytest

from game_memory.bridge.codes import ErrorCode, error_from_exception
from game_memory.errors import PersistenceError

pytest.importorskip("psycopg")

from game_memory.postgres import PostgresGameMemoryStore
from game_memory.postgres.connection import (
    DatabaseUnreachableError,
    IndexDatabaseUnreachableError,
)


async def test_an_unreachable_database_is_sent_with_reason_unreachable() -> None:
    store = PostgresGameMemoryStore("postgresql://u:secret-word@127.0.0.1:1/nowhere", timeout=2)
    try:
        with pytest.raises(PersistenceError) as raised:
            await store.count()
    finally:
        await store.aclose()
    rpc = error_from_exception(raised.value, "memory.status")
    assert rpc.code is ErrorCode.STORAGE_CORRUPT  # the code stays; data.reason tells
    assert rpc.data == {"kind": "DatabaseUnreachableError", "reason": "unreachable"}
    assert "could not reach" in rpc.message and "retry" in rpc.message
    assert "secret-word" not in rpc.message
    for remedy in ("check --fix", "restore", "accept-loss"):
        assert remedy not in rpc.message


def test_an_unreachable_index_database_keeps_its_code_and_says_unreachable() -> None:
    error = IndexDatabaseUnreachableError("could not reach the vector index in ...; retry")
    rpc = error_from_exception(error, "memory.rebuild")
    assert rpc.code is ErrorCode.REBUILD_REQUIRED
    assert rpc.data == {"kind": "IndexDatabaseUnreachableError", "reason": "unreachable"}


def test_a_reason_an_error_class_carries_is_passed_on() -> None:
    """Any backend's error marks a failure that is not damage with a ``reason``."""

    class LocksUnsupported(PersistenceError):
        reason = "no_file_locks"

    assert error_from_exception(LocksUnsupported("could not lock")).data == {
        "kind": "LocksUnsupported",
        "reason": "no_file_locks",
    }
    assert error_from_exception(DatabaseUnreachableError("x")).data == {
        "kind": "DatabaseUnreachableError",
        "reason": "unreachable",
    }
    assert error_from_exception(PersistenceError("damaged")).data == {"kind": "PersistenceError"}


def test_a_file_system_without_locks_and_a_server_out_of_descriptors_carry_their_reason() -> None:
    import errno
    from pathlib import Path

    from game_memory.bridge.codes import error_from_exception
    from game_memory.durable.lock import _lock_refused
    from game_memory.store.descriptors import descriptors_exhausted

    no_locks = _lock_refused(OSError(errno.ENOLCK, "No locks available"), Path("/s/lock"))
    out = descriptors_exhausted("/s/p.log", OSError(errno.EMFILE, "Too many open files"))
    for error, reason in ((no_locks, "no_file_locks"), (out, "too_many_open_files")):
        rpc = error_from_exception(error)
        assert rpc.code == -32006 and rpc.data is not None
        assert rpc.data["reason"] == reason
