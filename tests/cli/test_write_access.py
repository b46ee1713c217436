"""A command that writes, on a save folder it cannot write: it says so, and what to do.

``check`` runs under the save's writer lock even without ``--fix``; on a read-only save it
said only "could not open the lock file ...: Read-only file system". The lock file cannot
be opened on a read-only mount, which tests cannot make without privileges, so ``os.open``
refuses that one file as such a mount does (``EROFS``).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from game_memory.cli import main


@pytest.fixture
def read_only_lock(save: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make opening the save's lock file fail as on a read-only mount; return its path."""
    lock = save / ".game-memory" / "lock"
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **keywords: Any) -> int:
        if os.fspath(path) == str(lock):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(lock))
        return real_open(path, flags, *args, **keywords)

    monkeypatch.setattr(os, "open", refusing_open)
    return lock


@pytest.mark.parametrize("extra", [[], ["--fix"]])
def test_check_on_a_read_only_save_says_it_needs_write_access_and_what_to_do(
    save: Path, read_only_lock: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", "--save-dir", str(save), *extra])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"game-memory check needs write access to the save folder {save}" in err
    assert "with or without --fix" in err and str(read_only_lock) in err
    assert "Read-only file system" in err
    assert "copy the save folder somewhere writable and run it on the copy" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["compact"],
        ["erase", "--session", "slot"],
        [
            *("forget", "--session", "slot", "--owner", "mira", "--memory", "m1"),
            *("--timeline", "main", "--tick", "5"),
        ],
    ],
)
def test_other_writing_commands_on_a_read_only_save_say_it_too(
    save: Path, read_only_lock: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([argv[0], "--save-dir", str(save), *argv[1:]])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"game-memory {argv[0]} needs write access to the save folder {save}" in err
    assert "with or without --fix" not in err  # check's reason only


def test_other_persistence_errors_keep_their_own_message(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (save / ".game-memory" / "format.json").write_text("{not json")
    assert main(["check", "--save-dir", str(save)]) == 1
    assert "needs write access" not in capsys.readouterr().err
