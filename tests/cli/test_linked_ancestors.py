"""Commands that open the save without the front door follow the links above it too.

``open_memory`` follows the links above a save folder that root or the user own (every
Mac's ``/tmp`` and ``/var`` are links into ``/private``), but ``check``, ``forget``,
``erase`` and ``compact`` opened the stores themselves, so on a Mac ``check --save-dir
/tmp/save`` still said "refusing to use ...: /tmp is a symbolic link".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from game_memory.cli import main

MOMENT = ["--timeline", "main", "--tick", "5"]


@pytest.fixture
def linked_save(save: Path, tmp_path: Path) -> Path:
    """The save, seen through a link above it (``tmp/private/save`` as ``tmp/var/save``)."""
    real = tmp_path / "private"
    real.mkdir()
    shutil.move(save, real / "save")
    index = save.with_name("save.index")
    if index.exists():
        shutil.move(index, real / "save.index")
    (tmp_path / "var").symlink_to(real)
    return tmp_path / "var" / "save"


@pytest.mark.parametrize(
    "argv",
    [
        ["check"],
        ["compact"],
        ["forget", "--session", "slot", "--owner", "mira", "--memory", "m1", *MOMENT],
        ["erase", "--session", "slot", "--owner", "mira", "--memory", "m1"],
        ["search", "--session", "slot", "--model", "lexical", "--text", "thief"],
        ["status", "--session", "slot", "--model", "hashing"],
    ],
    ids=lambda argv: argv[0],
)
def test_a_command_opens_a_save_under_a_linked_folder(
    linked_save: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([argv[0], "--save-dir", str(linked_save), *argv[1:]])
    out, err = capsys.readouterr()
    assert code == 0, (out, err)
    assert "symbolic link" not in err


def test_a_save_folder_that_is_itself_a_link_is_still_refused(
    save: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    link = tmp_path / "elsewhere"
    link.symlink_to(save)
    code = main(["check", "--save-dir", str(link)])
    _out, err = capsys.readouterr()
    assert code == 1 and "symbolic link" in err
