"""The file store on a CPython made to look like Windows' (``support/windows_like.py``).

No Windows machine runs the tests, so POSIX-only calls of the library (``pread``, folders
opened as files, ``fcntl``, ``mmap`` flags, text-mode opens, ``fsync`` of a read-only
descriptor…) would ship unnoticed. ``support/windows_scenario.py`` runs the store end to
end twice, each in a fresh interpreter and folder: plainly, and with the emulation
installed first; both must succeed and observe the same, and the emulated run must have
done nothing the emulation refused. The command line (the demo, check, search, status,
rebuild, compact, erase) and the stdio sidecar the Godot addon launches run on it too
(``support/windows_cli.py``). The emulation itself is tested here too, each check in
a fresh interpreter (installing it cannot be undone), so that a green scenario means
something. What it cannot emulate is listed in its docstring.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the emulation is built on Linux's os and fcntl"
)

SUPPORT = Path(__file__).resolve().parent / "support"
SCENARIO = SUPPORT / "windows_scenario.py"
#: Keys only the emulated run prints.
EMULATION_ONLY = ("violations", "sharing_conflicts")


def _environment() -> dict[str, str]:
    threads = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    return {**os.environ, **threads, "PYTHONPATH": str(SUPPORT)}


@dataclass(frozen=True)
class Run:
    """One scenario run: its exit code, output and what it observed (``None`` if failed)."""

    returncode: int
    stderr: str
    observed: dict[str, Any] | None

    def failure(self) -> str:
        return f"exit {self.returncode}:\n{self.stderr[-6000:]}"

    def violations(self) -> list[str] | None:
        """What the emulation refused (printed to stderr too when the run failed)."""
        if self.observed is not None:
            return list(self.observed["violations"])
        for line in self.stderr.splitlines():
            if line.startswith('{"violations": '):
                return list(json.loads(line)["violations"])
        return None


def _scenario(folder: Path, *flags: str) -> Run:
    done = subprocess.run(
        [sys.executable, str(SCENARIO), str(folder), *flags],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env=_environment(),
    )
    observed = json.loads(done.stdout) if done.returncode == 0 else None
    return Run(done.returncode, done.stderr, observed)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The scenario run plainly and Windows-like, each in a folder of its own."""
    return {
        "plain": _scenario(tmp_path_factory.mktemp("plain")),
        "windows_like": _scenario(tmp_path_factory.mktemp("windows_like"), "--windows-like"),
    }


def test_the_plain_run_exercises_the_paths_at_risk(runs: dict[str, Run]) -> None:
    """Vectors, not lexical recall alone; a row file large enough to be mapped, whose int8
    codes are written at close; recalls that answer the same after a reopen."""
    plain = runs["plain"]
    assert plain.observed is not None, plain.failure()
    observed = plain.observed
    assert observed["mode"] == "hybrid"
    assert observed["batch"] == {"memories": 5_004, "created": 5_004}
    assert observed["index_files_after_close"].get(".q8") == 1
    recalls = observed["recalls"]
    assert all(not recall["fallback"] and recall["hits"] for recall in recalls)
    assert any(vector is not None for recall in recalls for _, _, vector in recall["hits"])
    assert observed["recalls_again"] == recalls
    assert observed["recalls_after_reopen"] == recalls
    assert observed["recalls_after_changes"] != recalls  # the forget and the erase show
    assert observed["status"]["state"] == "ready"


def test_the_windows_like_run_succeeds(runs: dict[str, Run]) -> None:
    emulated = runs["windows_like"]
    assert emulated.returncode == 0, emulated.failure()


def test_the_windows_like_run_observes_what_the_plain_run_does(runs: dict[str, Run]) -> None:
    plain, emulated = runs["plain"].observed, runs["windows_like"].observed
    assert plain is not None, runs["plain"].failure()
    assert emulated is not None, runs["windows_like"].failure()
    shown = {key: value for key, value in emulated.items() if key not in EMULATION_ONLY}
    assert shown == plain


def test_the_windows_like_run_does_nothing_windows_refuses(runs: dict[str, Run]) -> None:
    emulated = runs["windows_like"]
    violations = emulated.violations()
    assert violations is not None, emulated.failure()
    assert violations == []


def test_nothing_open_or_mapped_is_renamed_over_or_removed(runs: dict[str, Run]) -> None:
    """On Windows a file open or mapped cannot be renamed over or removed; the emulation
    records such calls (``windows_like.sharing_conflicts``). A close merges and replaces a
    read NPC's read file, an erase replaces a read NPC's log segments and removes its read
    files: on Windows those are read rather than mapped, and record files opened for each
    lazy read rather than kept open (``portable.HELD_FILES_REPLACEABLE``)."""
    emulated = runs["windows_like"]
    assert emulated.observed is not None, emulated.failure()
    assert emulated.observed["sharing_conflicts"] == []


# -- the command line and the sidecar -----------------------------------------------------

CLI = SUPPORT / "windows_cli.py"


def _command(*arguments: str) -> tuple[str, dict[str, Any]]:
    """``game-memory ARGUMENTS`` on the emulation, in a fresh interpreter; its stdout and
    the report it printed last on stderr (the exit code, and what the emulation refused or
    recorded)."""
    done = subprocess.run(
        [sys.executable, str(CLI), *arguments],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
        env=_environment(),
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return done.stdout, json.loads(lines[-1])


def test_the_command_line_runs_on_windows_like(tmp_path: Path) -> None:
    """The demo, then check, search, status, rebuild, compact and erase on its save: each
    exits 0 and does nothing Windows refuses, nor touches a file it holds open or mapped."""
    save = str(tmp_path / "demo" / "save")
    where = ("--save-dir", save)
    session = ("--session", "millbrook")
    commands = [
        ("demo", "--model", "hashing", "--data", str(tmp_path / "demo"), "--json"),
        ("check", *where),
        ("search", *where, "--model", "hashing", *session, "--owner", "tess", "--text", "money"),
        ("status", *where, "--model", "hashing", *session),
        ("rebuild", *where, "--model", "hashing", *session),
        ("compact", *where),
        ("erase", *where, *session, "--owner", "tess"),
        ("check", *where),
    ]
    for command in commands:
        output, report = _command(*command)
        assert report == {"code": 0, "violations": [], "sharing_conflicts": []}, (command, output)
    assert "consistent" in output


def test_the_stdio_sidecar_serves_on_windows_like(tmp_path: Path) -> None:
    """``game-memory serve --stdio`` (what the Godot addon launches): the ready line, then
    initialize, remember and recall (each answered before the next is sent) and end of
    input, on the emulation."""
    remembered = {
        "session_id": "save-1",
        "owner_id": "npc-mira",
        "text": "Heard a song at the inn",
        "moment": {"timeline_id": "main", "tick": 5},
    }
    command = ["serve", "--stdio", "--save-dir", str(tmp_path / "save"), "--model", "hashing"]
    process = subprocess.Popen(
        [sys.executable, str(CLI), *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    requests, replies = process.stdin, process.stdout
    assert requests is not None and replies is not None
    try:
        assert json.loads(replies.readline())["event"] == "ready"

        def ask(number: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            message = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
            requests.write(json.dumps(message) + "\n")
            requests.flush()
            while True:  # notifications (diagnostics) may come first
                reply: dict[str, Any] = json.loads(replies.readline())
                if reply.get("id") == number:
                    return reply

        assert ask(1, "initialize", {"protocol_version": 1})["result"]["mode"] == "hybrid"
        assert ask(2, "memory.remember", remembered)["result"]["created"] is True
        recalled = ask(3, "memory.recall", {"session_id": "save-1", "text": "song"})
        assert [m["text"] for m in recalled["result"]["memories"]] == [remembered["text"]]
        _, errors = process.communicate(timeout=60)  # end of input: the sidecar exits
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, errors[-4000:]
    report = json.loads(errors.strip().splitlines()[-1])
    assert report == {"code": 0, "violations": [], "sharing_conflicts": []}


# -- the emulation itself ------------------------------------------------------------------


def emulated(code: str, folder: Path) -> str:
    """Run ``code`` in a fresh interpreter with the emulation installed first, in
    ``folder``; its output (it must succeed)."""
    script = "import windows_like\n" + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=folder,
        env=_environment(),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_os_lacks_what_windows_lacks(tmp_path: Path) -> None:
    emulated(
        """
        import os
        for name in ("pread", "pwrite", "preadv", "pwritev", "fdatasync", "posix_fadvise",
                     "POSIX_FADV_WILLNEED", "sched_getaffinity", "O_NOFOLLOW", "O_CLOEXEC",
                     "O_DIRECTORY", "O_DSYNC"):
            assert not hasattr(os, name), name
        assert hasattr(os, "link") and hasattr(os, "O_SYNC")
        assert (os.O_BINARY, os.O_NOINHERIT) == (1 << 30, 1 << 29)
        assert os.supports_dir_fd == set()
        try:
            from os import pread
        except ImportError:
            pass
        else:
            raise AssertionError("from os import pread")
        """,
        tmp_path,
    )


def test_an_open_in_text_mode_is_refused_and_recorded(tmp_path: Path) -> None:
    emulated(
        """
        import errno, os, windows_like
        try:
            os.open("data", os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError as exc:
            assert exc.errno == errno.EINVAL and "text mode" in str(exc)
        else:
            raise AssertionError("opened in text mode")
        try:
            os.open(os.devnull, os.O_WRONLY)
        except OSError:
            pass
        else:
            raise AssertionError("os.devnull opened in text mode")
        assert len(windows_like.violations()) == 2, windows_like.violations()
        assert not os.path.exists("data")
        fd = os.open("data", os.O_WRONLY | os.O_CREAT | os.O_BINARY | os.O_NOINHERIT, 0o644)
        os.write(fd, b"a\\nb\\x1ac")
        os.close(fd)
        fd = os.open("data", os.O_RDONLY | os.O_BINARY)
        assert os.read(fd, 100) == b"a\\nb\\x1ac"
        os.close(fd)
        assert len(windows_like.violations()) == 2
        """,
        tmp_path,
    )


def test_folders_cannot_be_opened_nor_used_as_dir_fd(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    emulated(
        """
        import errno, os
        try:
            os.open("folder", os.O_RDONLY | os.O_BINARY)
        except PermissionError as exc:
            assert exc.errno == errno.EACCES
        else:
            raise AssertionError("a folder was opened")
        for call in (lambda: os.open("x", os.O_RDONLY | os.O_BINARY, dir_fd=3),
                     lambda: os.stat("x", dir_fd=3),
                     lambda: os.unlink("x", dir_fd=3),
                     lambda: os.replace("x", "y", src_dir_fd=3, dst_dir_fd=3)):
            try:
                call()
            except NotImplementedError as exc:
                assert "dir_fd unavailable" in str(exc)
            else:
                raise AssertionError("dir_fd accepted")
        try:
            os.scandir(0)
        except TypeError:
            pass
        else:
            raise AssertionError("scandir took a descriptor")
        """,
        tmp_path,
    )


def test_fsync_needs_a_descriptor_open_for_writing(tmp_path: Path) -> None:
    emulated(
        """
        import errno, os, windows_like
        fd = os.open("data", os.O_RDWR | os.O_CREAT | os.O_BINARY, 0o644)
        os.fsync(fd)
        os.close(fd)
        fd = os.open("data", os.O_RDONLY | os.O_BINARY)
        try:
            os.fsync(fd)
        except OSError as exc:
            assert exc.errno == errno.EBADF
        else:
            raise AssertionError("fsync of a read-only descriptor")
        os.close(fd)
        assert len(windows_like.violations()) == 1 and "read-only" in windows_like.violations()[0]
        """,
        tmp_path,
    )


def test_rename_never_replaces_and_replace_moves_no_folder(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "folder").mkdir()
    emulated(
        """
        import os, windows_like
        try:
            os.rename("a", "b")
        except FileExistsError:
            pass
        else:
            raise AssertionError("os.rename replaced a file")
        os.rename("a", "new")
        os.replace("new", "b")
        assert open("b", "rb").read() == b"a"
        try:
            os.replace("c", "folder")
        except PermissionError:
            pass
        else:
            raise AssertionError("os.replace replaced a folder")
        assert len(windows_like.violations()) == 2, windows_like.violations()
        """,
        tmp_path,
    )


def test_names_windows_cannot_hold_are_refused(tmp_path: Path) -> None:
    emulated(
        """
        import errno, os
        for name in ("a:b", "what?", "CON", "nul.txt", "Com1.log", "trailing.", "space "):
            try:
                os.open(name, os.O_WRONLY | os.O_CREAT | os.O_BINARY, 0o644)
            except OSError as exc:
                assert exc.errno == errno.EINVAL, name
            else:
                raise AssertionError(name)
        os.close(os.open("console.txt", os.O_WRONLY | os.O_CREAT | os.O_BINARY, 0o644))
        """,
        tmp_path,
    )


def test_fcntl_is_gone_and_msvcrt_locks_bytes_per_descriptor(tmp_path: Path) -> None:
    emulated(
        """
        import errno, os, subprocess, sys
        try:
            import fcntl
        except ImportError:
            pass
        else:
            raise AssertionError("fcntl imported")
        import msvcrt
        flags = os.O_RDWR | os.O_CREAT | os.O_BINARY
        first, second = os.open("lock", flags, 0o644), os.open("lock", flags, 0o644)
        msvcrt.locking(first, msvcrt.LK_NBLCK, 1)  # byte 0: the position
        def refused(fd, mode=msvcrt.LK_NBLCK, number=errno.EACCES):
            try:
                msvcrt.locking(fd, mode, 1)
            except OSError as exc:
                assert exc.errno == number, exc
                return True
            return False
        assert refused(second)  # another descriptor of this process
        assert refused(first)  # locks do not stack
        os.lseek(second, 1, os.SEEK_SET)
        msvcrt.locking(second, msvcrt.LK_NBLCK, 1)  # byte 1 is free
        assert os.lseek(second, 0, os.SEEK_CUR) == 1  # the position does not move
        os.lseek(second, 2, os.SEEK_SET)
        assert refused(second, msvcrt.LK_UNLCK)  # byte 2 is not locked
        os.lseek(second, 0, os.SEEK_SET)
        assert refused(second, msvcrt.LK_UNLCK)  # byte 0 is the other descriptor's
        third = os.open("lock", flags, 0o644)
        os.close(third)  # closing another descriptor of the file keeps the locks
        child = (
            "import windows_like, msvcrt, os\\n"
            "fd = os.open('lock', os.O_RDWR | os.O_BINARY)\\n"
            "try:\\n    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)\\n"
            "except PermissionError:\\n    print('refused')\\n"
            "else:\\n    print('taken')\\n"
        )
        def other_process():
            return subprocess.run([sys.executable, "-c", child], capture_output=True,
                                  text=True, check=True).stdout.strip()
        assert other_process() == "refused"
        os.lseek(first, 0, os.SEEK_SET)
        msvcrt.locking(first, msvcrt.LK_UNLCK, 1)
        assert other_process() == "taken"
        msvcrt.locking(first, msvcrt.LK_NBLCK, 1)
        import windows_like
        windows_like.LOCK_RETRIES, windows_like.LOCK_RETRY_SECONDS = 3, 0.01
        os.lseek(second, 0, os.SEEK_SET)
        assert refused(second, msvcrt.LK_LOCK, errno.EDEADLOCK)  # after the retries
        """,
        tmp_path,
    )


def test_mmap_has_windows_signature_and_no_posix_names(tmp_path: Path) -> None:
    (tmp_path / "data").write_bytes(bytes(range(256)) * 1024)
    emulated(
        """
        import errno, mmap, os
        for name in ("MAP_SHARED", "MAP_PRIVATE", "MAP_ANONYMOUS", "MAP_NORESERVE", "PROT_READ",
                     "PROT_WRITE", "PROT_EXEC", "MADV_DONTNEED", "MADV_WILLNEED"):
            assert not hasattr(mmap, name), name
        assert mmap.ALLOCATIONGRANULARITY == 65536
        assert not hasattr(mmap.mmap, "madvise")
        fd = os.open("data", os.O_RDONLY | os.O_BINARY)
        region = mmap.mmap(fd, 4096, access=mmap.ACCESS_READ)
        assert isinstance(region, mmap.mmap) and region[:3] == bytes([0, 1, 2])
        assert not hasattr(region, "madvise")
        for keywords in ({"flags": 1}, {"prot": 1}):
            try:
                mmap.mmap(-1, 4096, **keywords)
            except TypeError:
                pass
            else:
                raise AssertionError(keywords)
        try:
            mmap.mmap(fd, 4096, 1)  # a POSIX flags argument is Windows' tag name
        except TypeError:
            pass
        else:
            raise AssertionError("flags taken as a tag name")
        try:
            mmap.mmap(fd, 4096, access=mmap.ACCESS_READ, offset=4096)
        except OSError as exc:
            assert exc.errno == errno.EINVAL
        else:
            raise AssertionError("an offset off the allocation granularity")
        anonymous = mmap.mmap(-1, 4096)
        anonymous[:1] = b"x"
        """,
        tmp_path,
    )


def test_ctypes_has_no_c_mmap_and_asyncio_no_signal_handlers(tmp_path: Path) -> None:
    emulated(
        """
        import asyncio, ctypes, ctypes.util, signal
        try:
            ctypes.CDLL(None).mmap
        except OSError:
            pass
        else:
            raise AssertionError("the C library's mmap is reachable")
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")  # by name: still loads
        async def main():
            loop = asyncio.get_running_loop()
            try:
                loop.add_signal_handler(signal.SIGINT, lambda: None)
            except NotImplementedError:
                return
            raise AssertionError("a signal handler was added")
        asyncio.run(main())
        """,
        tmp_path,
    )


def test_sharing_conflicts_are_recorded_not_raised(tmp_path: Path) -> None:
    for name in ("open", "mapped", "closed", "new"):
        (tmp_path / name).write_bytes(b"x" * 4096)
    emulated(
        """
        import mmap, os, windows_like
        held = os.open("open", os.O_RDONLY | os.O_BINARY)
        os.replace("new", "open")  # fails on Windows: the target is open
        fd = os.open("mapped", os.O_RDONLY | os.O_BINARY)
        region = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        os.close(fd)
        os.remove("mapped")  # fails on Windows: the map holds the file
        fd = os.open("closed", os.O_RDONLY | os.O_BINARY)
        os.close(fd)
        os.remove("closed")  # fine: closed
        conflicts = windows_like.sharing_conflicts()
        assert len(conflicts) == 2, conflicts
        assert "open as descriptor" in conflicts[0] and "mapped" in conflicts[1], conflicts
        assert windows_like.violations() == []
        """,
        tmp_path,
    )


def test_the_stdlib_still_works_and_a_late_import_is_refused(tmp_path: Path) -> None:
    emulated(
        """
        import os, tempfile, windows_like
        fd, name = tempfile.mkstemp(dir=".")
        os.write(fd, b"x")
        os.close(fd)
        os.remove(name)
        assert windows_like.violations() == []
        """,
        tmp_path,
    )
    done = subprocess.run(
        [sys.executable, "-c", "import numpy, windows_like"],
        capture_output=True,
        text=True,
        check=False,
        env=_environment(),
    )
    assert done.returncode != 0 and "before numpy" in done.stderr
