"""A full disk over the bridge: ``-32006`` with ``data.reason`` ``"disk_full"``, not damage.

It was ``-32006`` with ``data.kind`` ``PersistenceError`` and no reason, and a message
that said only "could not write ...: No space left on device": the documented advice for
that (run ``check``, ``check --fix --accept-loss``, restore a backup) cannot help a disk
that is full. The disk is made full by failing writes to regular files (the event loop's
sockets and pipes still work).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

import pytest

from game_memory.bridge.codes import ErrorCode, error_from_exception
from game_memory.durable import fs
from game_memory.errors import DerivedIndexError, PersistenceError

from .conftest import Call

_write = os.write


def _remember(tick: int) -> dict[str, Any]:
    return {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "text": f"memory {tick} of the mill",
        "moment": {"timeline_id": "main", "tick": tick},
    }


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def write(fd: int, data: Any) -> int:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _write(fd, data)

    monkeypatch.setattr(os, "write", write)


async def test_a_remember_on_a_full_disk_says_the_disk_is_full_and_a_retry_stores_it(
    call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await call("memory.remember", _remember(1)))["result"]["created"] is True
    _full_disk(monkeypatch)
    answer = await call("memory.remember", _remember(2))
    monkeypatch.undo()  # space freed

    error = answer["error"]
    assert error["code"] == ErrorCode.STORAGE_CORRUPT
    assert error["data"] == {"kind": "DiskFullError", "reason": "disk_full"}
    message = error["message"]
    for part in ("the disk is full", "this write was not stored", "free space", "try again"):
        assert part in message
    for remedy in ("check --fix", "restore", "accept-loss"):
        assert remedy not in message

    assert (await call("memory.remember", _remember(2)))["result"]["created"] is True
    recalled = await call("memory.recall", {"session_id": "save-1", "limit": 10})
    assert len(recalled["result"]["memories"]) == 2


def _caused_by_full_disk(error: Exception) -> Exception:
    """``error`` raised from an ``ENOSPC`` (as a layer that wraps the storage's error)."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as full:
            raise error from full
    except Exception as raised:  # the one just raised
        return raised


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (PersistenceError("could not cut the torn tail of o-1.log"), ErrorCode.STORAGE_CORRUPT),
        (
            DerivedIndexError("could not write rows.bin (delete the index"),
            ErrorCode.REBUILD_REQUIRED,
        ),
    ],
)
def test_an_error_that_wraps_a_full_disk_carries_the_reason_and_says_so(
    error: Exception, code: ErrorCode
) -> None:
    rpc = error_from_exception(_caused_by_full_disk(error))
    assert rpc.code is code
    assert rpc.data == {"kind": type(error).__name__, "reason": "disk_full"}
    assert rpc.message.startswith(str(error).rstrip("."))
    assert "The cause: the disk is full (No space left on device)" in rpc.message
    assert rpc.message.endswith("free space on that disk first, then send the request again")


def test_the_storages_own_disk_full_error_is_sent_as_it_is() -> None:
    full = fs.DiskFullError("could not write l.log: the disk is full (...); free space")
    rpc = error_from_exception(full)
    assert rpc.message == str(full)
    assert rpc.data == {"kind": "DiskFullError", "reason": "disk_full"}
