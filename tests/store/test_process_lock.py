"""The writer lock (``durable/lock.py``): one holder across threads and processes, with
the operating system's lock of the platform, and a plain thread lock where it has none."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from game_memory import StoreBusyError
from game_memory.durable import lock as lock_module
from game_memory.durable.lock import ProcessLock


def test_another_process_cannot_take_a_held_lock(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    held = ProcessLock(path, timeout=1.0)
    held.acquire()
    try:
        probe = textwrap.dedent(
            f"""
            from pathlib import Path
            from game_memory.durable.lock import ProcessLock
            print(ProcessLock(Path({str(path)!r}), timeout=0.1).try_acquire())
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "False"
        with pytest.raises(StoreBusyError, match="locked by another writer"):
            ProcessLock(path, timeout=0.1).acquire()  # another descriptor, this process
    finally:
        held.release()
    again = ProcessLock(path, timeout=0.1)
    assert again.try_acquire()
    again.release()


def test_without_file_locks_the_lock_orders_threads_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A platform with neither ``fcntl`` nor ``msvcrt``: processes are not excluded, which
    is logged once; this process's threads still are."""
    monkeypatch.setattr(lock_module, "fcntl", None)
    monkeypatch.setattr(lock_module, "msvcrt", None)
    monkeypatch.setattr(lock_module, "_WARNED", [])
    caplog.set_level(logging.WARNING, logger="game_memory.durable.lock")
    first = ProcessLock(tmp_path / "lock", timeout=0.1)
    first.acquire()
    assert not first.try_acquire()  # the same object: its thread lock is held
    first.release()
    second = ProcessLock(tmp_path / "lock", timeout=0.1)
    second.acquire()
    second.release()
    warnings = [r for r in caplog.records if "no file locks on this platform" in r.getMessage()]
    assert len(warnings) == 1
