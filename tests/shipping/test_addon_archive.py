"""``game-memory addon``: the Asset Library zip holds the addon folder and nothing else."""

from __future__ import annotations

import importlib.metadata
import io
import os
import shutil
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from game_memory.bundle.addon_archive import (
    ADDON_PREFIX,
    checkout_addon_folder,
    write_addon_archive,
)
from game_memory.bundle.layout import BundleError
from game_memory.cli import main

REPOSITORY = Path(__file__).resolve().parents[2]
ADDON = REPOSITORY / "godot_addon" / "addons" / "game_memory"


def test_the_archive_holds_exactly_the_addon_files(tmp_path: Path) -> None:
    archive = write_addon_archive(tmp_path)
    version = importlib.metadata.version("game-memory")
    assert archive.path == tmp_path / f"game-memory-addon-{version}.zip"
    expected = sorted(
        ADDON_PREFIX + path.relative_to(ADDON).as_posix()
        for path in ADDON.rglob("*")
        if path.is_file()
    )
    with zipfile.ZipFile(archive.path) as opened:
        assert opened.namelist() == expected == list(archive.files)
        assert opened.testzip() is None
        for name in expected:
            assert opened.read(name) == (ADDON / name.removeprefix(ADDON_PREFIX)).read_bytes()
        assert f'version="{version}"' in opened.read(ADDON_PREFIX + "plugin.cfg").decode()


def test_the_archive_is_deterministic(tmp_path: Path) -> None:
    first = write_addon_archive(tmp_path / "a").path.read_bytes()
    second = write_addon_archive(tmp_path / "b").path.read_bytes()
    assert first == second


def test_the_default_source_is_this_checkouts_addon() -> None:
    assert checkout_addon_folder() == ADDON


def test_hidden_files_and_editor_caches_are_left_out(tmp_path: Path) -> None:
    source = tmp_path / "game_memory"
    shutil.copytree(ADDON, source)
    (source / ".DS_Store").write_bytes(b"finder")
    (source / ".godot").mkdir()
    (source / ".godot" / "cache.bin").write_bytes(b"cache")
    names = write_addon_archive(tmp_path / "out", source).files
    assert not [name for name in names if "/." in name]
    assert ADDON_PREFIX + "game_memory.gd" in names


def test_an_addon_whose_version_differs_from_the_package_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "game_memory"
    shutil.copytree(ADDON, source)
    config = source / "plugin.cfg"
    config.write_text(
        config.read_text(encoding="utf-8").replace('version="', 'version="9.'), encoding="utf-8"
    )
    with pytest.raises(BundleError, match="released together"):
        write_addon_archive(tmp_path / "out", source)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_the_command_prints_the_archive_and_fails_cleanly_on_a_wrong_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["addon", "--output", str(tmp_path)]) == 0
    assert "game-memory-addon-" in capsys.readouterr().out
    assert main(["addon", "--output", str(tmp_path), "--source", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "has no plugin.cfg" in error and "Traceback" not in error


def test_a_git_archive_of_the_repository_holds_only_the_addon() -> None:
    """What an Asset Library download is: ``git archive`` with .gitattributes' export-ignore."""
    git = shutil.which("git")
    assert git, "git is needed to check the repository's export-ignore attributes"
    listing = subprocess.run(
        [git, "archive", "--worktree-attributes", "--format=tar", "HEAD"],
        cwd=REPOSITORY,
        capture_output=True,
        check=True,
        timeout=120,
    )
    with tarfile.open(fileobj=io.BytesIO(listing.stdout)) as archive:
        files = sorted(member.name for member in archive.getmembers() if member.isfile())
    tracked = subprocess.run(
        [git, "ls-tree", "-r", "--name-only", "HEAD", "godot_addon/addons/game_memory"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert files == sorted(tracked)
    assert "godot_addon/addons/game_memory/plugin.cfg" in files


@pytest.mark.parametrize(
    ("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)], ids=["umask-022", "umask-027"]
)
def test_the_archive_is_readable_as_the_umask_allows_not_only_by_its_builder(
    tmp_path: Path, umask: int, mode: int
) -> None:
    """A release zip is uploaded, served or copied by other users (a CI runner, a web
    server, a shared dist folder); it gets the mode any new file gets, not the private
    0600 of the temporary file it was written to."""
    previous = os.umask(umask)
    try:
        archive = write_addon_archive(tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(archive.path.stat().st_mode) == mode
