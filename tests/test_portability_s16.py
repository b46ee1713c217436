"""Portability: what a player's machine has that this one does not.

* a save path under links the system made (every Mac's temporary folder: ``/var`` links to
  ``/private/var``), which the store used to refuse;
* a stdout that cannot encode every character (a Windows redirect in the ANSI code page);
* a file system without file locks (``ENOLCK``: NFS without its lock daemon);
* a save folder at the root of a file system (a Windows drive ``E:\\``);
* Windows' 260-character ``MAX_PATH``, which the extended-length form (``\\\\?\\``) lifts.
"""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import game_memory.durable.lock as lock_module
from game_memory import (
    GameMemory,
    GameMemoryError,
    GameMemoryQuery,
    GameMoment,
    InvalidArgumentError,
    PersistenceError,
    StoreBusyError,
    open_memory,
    opening,
)
from game_memory.bridge.codes import ErrorCode, error_from_exception
from game_memory.bundle.check import check_sidecar
from game_memory.cli import main
from game_memory.demo import run_demo
from game_memory.durable import fs, portable
from game_memory.durable.lock import ProcessLock


def _memory(memory_id: str = "m1", owner: str = "guard") -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id="s1",
        owner_id=owner,
        scope="npc",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=1),
        searchable_text="the bridge is guarded",
    )


def _query() -> GameMemoryQuery:
    return GameMemoryQuery(session_id="s1", text="bridge", limit=5)


@pytest.fixture
def mac_like_tmp(tmp_path: Path) -> Path:
    """``tmp/var/folders/zz/T`` where ``var`` is a link to ``private/var``, as on a Mac."""
    (tmp_path / "private" / "var" / "folders" / "zz" / "T").mkdir(parents=True)
    (tmp_path / "var").symlink_to("private/var")
    return tmp_path / "var" / "folders" / "zz" / "T"


# -- 1. links above a save ------------------------------------------------------------------


async def test_open_memory_follows_a_link_above_the_save(mac_like_tmp: Path) -> None:
    save = mac_like_tmp / "save"
    async with await open_memory(save, model="hashing") as memory:
        await memory.append(_memory())
        recalled = await memory.recall(_query())
    assert [memory.memory_id for memory in recalled.memories] == ["m1"]
    real = mac_like_tmp.parent.parent.parent.parent / "private/var/folders/zz/T"
    assert (real / "save" / ".game-memory").is_dir()
    assert (real / "save.index").is_dir()  # the default index, beside the real save


async def test_a_save_folder_that_is_itself_a_link_stays_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "save").symlink_to(tmp_path / "real")
    with pytest.raises(PersistenceError, match="symbolic link"):
        await open_memory(tmp_path / "save", model="lexical")


def test_a_link_inside_the_resolved_path_is_never_followed_silently(tmp_path: Path) -> None:
    """Only the ancestors are resolved; the folder's own name is kept, link or not."""
    (tmp_path / "real").mkdir()
    (tmp_path / "save").symlink_to(tmp_path / "real")
    assert opening.resolve_folder(tmp_path / "save") == tmp_path / "save"


@pytest.mark.skipif(not hasattr(os, "lchown") or os.geteuid() != 0, reason="needs root")
def test_a_link_above_the_save_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    planted = tmp_path / "shared"
    planted.symlink_to(tmp_path / "real")
    os.lchown(planted, 12_345, -1)
    with pytest.raises(PersistenceError, match="owned by another user"):
        opening.resolve_folder(planted / "save")


def test_resolving_follows_relative_links_dotdot_and_chains(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "up").symlink_to("a/b/..")  # -> a
    (tmp_path / "chain").symlink_to("up")
    assert fs.resolve_ancestors(tmp_path / "chain" / "b" / "save") == tmp_path / "a/b/save"
    missing = tmp_path / "chain" / "new" / "deeper" / "save"
    assert fs.resolve_ancestors(missing) == tmp_path / "a/new/deeper/save"


def test_a_loop_of_links_is_refused_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "one").symlink_to("two")
    (tmp_path / "two").symlink_to("one")
    with pytest.raises(PersistenceError, match="symbolic links on its path"):
        opening.resolve_folder(tmp_path / "one" / "save")


@pytest.fixture
def temporary_folder(mac_like_tmp: Path) -> Iterator[Path]:
    """``tempfile``'s folder pointed at the Mac-like ``TMPDIR``."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(mac_like_tmp)
    try:
        yield mac_like_tmp
    finally:
        tempfile.tempdir = saved


async def test_the_demo_runs_in_a_temporary_folder_under_a_link(temporary_folder: Path) -> None:
    report = await run_demo("lexical", None)
    assert report["model"]["mode"] == "lexical"
    assert report["steps"]


def test_the_bundle_check_runs_its_sidecar_in_a_temporary_folder_under_a_link(
    temporary_folder: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    executable = bundle / "game-memory"  # a stand-in bundle: the installed CLI, lexical
    command = f'exec {sys.executable} -m game_memory.cli "$@" --model lexical\n'
    executable.write_text(f"#!/bin/sh\n{command}")
    executable.chmod(0o755)
    checked = check_sidecar(bundle, expect_model=False, timeout=120)
    assert checked.mode == "lexical"


# -- 2. a stdout that cannot encode everything ----------------------------------------------


def _cp1252_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """Point ``sys.stdout`` at a stream set up as a Windows redirect sets it up (the ANSI
    code page, strict errors); the bytes written. Called in the test itself: pytest puts
    its own capture back between a fixture's set-up and the test."""
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="cp1252", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stream)
    return raw


@pytest.fixture
def unicode_save(tmp_path: Path) -> Path:
    async def write() -> None:
        async with await open_memory(tmp_path / "save", model="lexical") as memory:
            await memory.append(_memory("記憶-1", owner="衛兵"))

    import asyncio

    asyncio.run(write())
    return tmp_path / "save"


def test_the_demo_prints_to_a_stdout_that_cannot_encode_its_marks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp1252_stdout = _cp1252_stdout(monkeypatch)
    assert main(["demo", "--model", "lexical"]) == 0
    assert b"\\u2713" in cp1252_stdout.getvalue() or b"\\u2717" in cp1252_stdout.getvalue()


def test_the_demo_json_stays_valid_json_on_such_a_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    cp1252_stdout = _cp1252_stdout(monkeypatch)
    assert main(["demo", "--model", "lexical", "--json"]) == 0
    report = json.loads(cp1252_stdout.getvalue().decode("cp1252"))
    assert report["model"]["mode"] == "lexical"


@pytest.mark.parametrize(
    "command",
    [
        ["status", "--session", "衛兵", "--model", "lexical"],
        ["search", "--session", "s1", "--text", "bridge", "--model", "lexical"],
    ],
)
def test_status_and_search_print_non_latin_ids_to_such_a_stdout(
    monkeypatch: pytest.MonkeyPatch, unicode_save: Path, command: list[str]
) -> None:
    cp1252_stdout = _cp1252_stdout(monkeypatch)
    assert main([command[0], "--save-dir", str(unicode_save), *command[1:]]) == 0
    assert b"\\u885b\\u5175" in cp1252_stdout.getvalue()  # 衛兵, escaped


def test_the_command_sets_up_a_redirected_stdout_itself(unicode_save: Path) -> None:
    environment = {**os.environ, "PYTHONIOENCODING": "cp1252"}
    command = [sys.executable, "-m", "game_memory.cli", "status", "--save-dir", str(unicode_save)]
    done = subprocess.run(
        [*command, "--session", "衛兵", "--model", "lexical"],
        capture_output=True,
        env=environment,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"\\u885b\\u5175" in done.stdout


# -- 3. a file system without file locks ----------------------------------------------------


@pytest.fixture
def no_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``flock`` answers as on NFS without its lock daemon."""
    if lock_module.fcntl is None:
        pytest.skip("no fcntl here")

    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(lock_module.fcntl, "flock", refuse)


def test_a_refused_lock_names_the_lock_file_and_what_to_do(no_locks: None, tmp_path: Path) -> None:
    lock = ProcessLock(tmp_path / "lock", timeout=1)
    for _ in range(2):  # the thread lock was released: the second try says the same
        with pytest.raises(PersistenceError, match="does not support file locks") as raised:
            lock.acquire()
        assert str(tmp_path / "lock") in str(raised.value)
        assert "local disk" in str(raised.value)
    assert lock.try_acquire() is False


async def test_appends_and_reads_fail_as_persistence_errors(no_locks: None, tmp_path: Path) -> None:
    async with await open_memory(tmp_path / "save", model="hashing") as memory:
        for call in (
            lambda: memory.append(_memory()),
            lambda: memory.recall(_query()),
            lambda: memory.get_status("s1"),
        ):
            with pytest.raises(PersistenceError, match="file locks"):
                await call()


def test_the_bridge_answers_storage_not_an_internal_error(no_locks: None, tmp_path: Path) -> None:
    lock = ProcessLock(tmp_path / "lock", timeout=1)
    with pytest.raises(GameMemoryError) as raised:
        lock.acquire()
    answered = error_from_exception(raised.value, "memory.remember")
    assert answered.code == ErrorCode.STORAGE_CORRUPT
    assert "file locks" in str(answered)


def test_a_failing_close_still_releases_the_thread_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lock = ProcessLock(tmp_path / "lock", timeout=1)
    lock.acquire()
    real_close = os.close

    def failing_close(fd: int) -> None:
        real_close(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(lock_module.os, "close", failing_close)
    lock.release()
    monkeypatch.setattr(lock_module.os, "close", real_close)
    assert lock.try_acquire()
    lock.release()


def test_another_holder_is_still_busy_not_refused(tmp_path: Path) -> None:
    holder = ProcessLock(tmp_path / "lock", timeout=1)
    holder.acquire()
    try:
        with pytest.raises(StoreBusyError):
            ProcessLock(tmp_path / "lock", timeout=0.1).acquire()
    finally:
        holder.release()


# -- 4. a save at the root of a file system -------------------------------------------------


def test_the_default_index_of_a_root_is_a_clear_error() -> None:
    with pytest.raises(InvalidArgumentError, match=r"root of a file system.*index"):
        opening.default_index_dir("/")


async def test_open_memory_at_a_root_asks_for_an_index_folder() -> None:
    with pytest.raises(InvalidArgumentError, match="--index-dir"):
        await open_memory("/", model="hashing", create=False)


def test_the_cli_says_so_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--save-dir", "/", "--session", "s", "--model", "hashing"]) == 1
    error = capsys.readouterr().err
    assert "root of a file system" in error and "internal error" not in error


# -- 5. Windows' MAX_PATH -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("C:\\Users\\x\\save", "\\\\?\\C:\\Users\\x\\save"),
        ("c:/Users/x/../y/save", "\\\\?\\c:\\Users\\y\\save"),
        ("C:\\", "\\\\?\\C:\\"),
        ("C:\\games\\save. \\index", "\\\\?\\C:\\games\\save\\index"),
        ("\\\\server\\share\\saves\\a", "\\\\?\\UNC\\server\\share\\saves\\a"),
        ("//server/share/saves", "\\\\?\\UNC\\server\\share\\saves"),
        ("\\\\server\\share", "\\\\?\\UNC\\server\\share\\"),
        ("\\\\?\\C:\\already\\long", "\\\\?\\C:\\already\\long"),
        ("\\\\?\\UNC\\server\\share\\x", "\\\\?\\UNC\\server\\share\\x"),
        ("\\\\.\\pipe\\x", "\\\\.\\pipe\\x"),
        ("saves\\a", "saves\\a"),  # relative: left alone
        ("C:saves", "C:saves"),  # drive-relative: left alone
        ("\\saves", "\\saves"),  # rooted, no drive: left alone
    ],
)
def test_extended_length_form(given: str, expected: str) -> None:
    assert portable.extended_length(given) == expected


def test_the_godot_default_folders_take_the_extended_form() -> None:
    """The index's longest temporary name under the node's default folders (about 280
    characters) gets the prefix that exempts it from MAX_PATH."""
    user = "C:\\Users\\JohnSmith\\AppData\\Roaming\\Godot\\app_userdata\\My Village Game"
    session, owner = "s-" + "a" * 64, "o-" + "b" * 64
    name = f"{owner}.0.abcdef12.f32.{'0' * 32}.tmp"
    longest = f"{user}\\game_memory\\index\\.game-memory-index\\{session}\\{name}"
    assert len(longest) > 260
    assert portable.extended_length(longest) == "\\\\?\\" + longest


def test_open_memory_extends_its_folders_on_windows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[str] = []

    def extend(path: str) -> str:
        seen.append(path)
        return path + "-extended"

    monkeypatch.setattr(opening, "_WINDOWS", True)
    monkeypatch.setattr(portable, "extended_length", extend)
    assert opening.resolve_folder(tmp_path / "save") == Path(f"{tmp_path / 'save'}-extended")
    assert seen == [str(tmp_path / "save")]
