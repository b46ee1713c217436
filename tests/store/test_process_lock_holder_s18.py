"""A writer lock that times out names the process holding it (``durable/lock.py``): where
Linux's ``/proc/locks`` says who holds the ``flock`` on the lock file, and the message as
before wherever the system does not say."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from game_memory import StoreBusyError
from game_memory.durable import lock as lock_module
from game_memory.durable.lock import ProcessLock

#: The message's end when no holder is named: the same text as before the holder was added.
_NO_HOLDER_TAIL = "s; retry, or check for a stuck process using this save"

_HOLDER_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from game_memory.durable.lock import ProcessLock

    lock = ProcessLock(Path(sys.argv[1]), timeout=10.0)
    lock.acquire()
    print("held", flush=True)
    sys.stdin.read()  # hold it until the test closes the pipe
    lock.release()
    """
)


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A lock file held by another process (through the project's own ``ProcessLock``)
    until the fixture ends."""
    script = tmp_path / "holder_s18.py"
    script.write_text(_HOLDER_SCRIPT, encoding="utf-8")
    path = tmp_path / "lock"
    with subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:  # leaving it closes the pipes and waits for the holder
        assert holder.stdout is not None and holder.stdin is not None
        try:
            assert holder.stdout.readline().strip() == "held"
            yield path, holder
        finally:
            holder.stdin.close()  # the holder releases the lock and exits


def _refusal(path: Path) -> str:
    with pytest.raises(StoreBusyError) as refused:
        ProcessLock(path, timeout=0.1).acquire()
    return str(refused.value)


def test_a_timed_out_wait_names_the_process_holding_the_lock_never_this_one(
    held_lock: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    """Another process holds it: named (where ``/proc/locks`` says). This process holds it
    (another descriptor, as another thread's lock would): there is no one else to name."""
    path, holder = held_lock
    message = _refusal(path)
    assert f"the store is locked by another writer ({path}) for more than 0.1 s" in message
    if sys.platform.startswith("linux"):  # /proc/locks says who holds it
        assert f", held by process {holder.pid} (holder_s18.py " in message
        assert "check whether that process is stuck or still using this save" in message
    else:  # no /proc/locks: the message as before
        assert message.endswith(_NO_HOLDER_TAIL)
    ours = ProcessLock(tmp_path / "our-lock", timeout=1.0)
    ours.acquire()
    try:
        assert _refusal(tmp_path / "our-lock").endswith(_NO_HOLDER_TAIL)
    finally:
        ours.release()


def test_without_proc_locks_the_message_stays_as_before(
    held_lock: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No ``/proc/locks`` (another system), one that cannot be read, or one that does not
    list the lock file: the refusal is the one before, and the lookup raises nothing."""
    path, _ = held_lock
    expected = (
        f"the store is locked by another writer ({path}) for more than 0.1 s; retry, or "
        "check for a stuck process using this save"
    )
    unrelated = tmp_path / "locks"
    unrelated.write_text("1: FLOCK  ADVISORY  WRITE 4242 fe:00:1 0 EOF\nnot a lock line\n")
    for proc_locks in (tmp_path / "missing", tmp_path, unrelated):  # absent, a folder, no match
        monkeypatch.setattr(lock_module, "_PROC_LOCKS", proc_locks)
        assert _refusal(path) == expected


def test_a_holder_that_just_left_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc/locks`` read just before the holder exits: its pid has no process any more,
    so nothing is named (a pid that may be reused soon would be the wrong one to blame)."""
    path = tmp_path / "lock"
    path.touch()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=30)
    stat = path.stat()
    major, minor = lock_module.os.major(stat.st_dev), lock_module.os.minor(stat.st_dev)
    locks = tmp_path / "locks"
    locks.write_text(
        f"1: FLOCK  ADVISORY  WRITE {gone.pid} {major:02x}:{minor:02x}:{stat.st_ino} 0 EOF\n"
    )
    monkeypatch.setattr(lock_module, "_PROC_LOCKS", locks)
    assert lock_module._lock_holder(path) is None


_SAMPLE = """\
1: POSIX  ADVISORY  WRITE 500 fe:00:77 0 EOF
2: OFDLCK ADVISORY  WRITE -1 fe:00:77 0 EOF
3: FLOCK  ADVISORY  WRITE 600 fe:00:78 0 EOF
4: FLOCK  ADVISORY  WRITE 601 fe:01:77 0 EOF
5: FLOCK  ADVISORY  READ  800 fe:00:77 0 EOF
6: LEASE  ACTIVE    READ  801 fe:00:77 0 EOF
7: FLOCK  ADVISORY  WRITE 0 fe:00:77 0 EOF
7: -> FLOCK  ADVISORY  WRITE 900 fe:00:77 0 EOF
8: FLOCK  ADVISORY  WRITE 1234 fe:00:77 0 EOF
9: FLOCK  ADVISORY  WRITE 700 103:1a:77 0 EOF
"""


def test_the_parser_finds_the_flock_holder_of_the_file() -> None:
    """Only an exclusive ``flock`` (``FLOCK … WRITE``, what ``fcntl.flock`` with ``LOCK_EX``
    shows) on the same device and inode counts; ``fcntl`` locks, open file description
    locks, shared locks, leases, waiters, pids hidden from this namespace do not. The
    device numbers are hex."""
    lines = _SAMPLE.splitlines()
    assert lock_module._flock_holder(lines, (0xFE, 0), 77, own_pid=1) == 1234
    assert lock_module._flock_holder(lines, (0x103, 0x1A), 77, own_pid=1) == 700
    assert lock_module._flock_holder(lines, (0xFE, 0), 78, own_pid=1) == 600


def test_the_parser_finds_nothing_without_a_match_or_for_our_own_pid() -> None:
    lines = _SAMPLE.splitlines()
    assert lock_module._flock_holder(lines, (0xFE, 0), 79, own_pid=1) is None
    assert lock_module._flock_holder(lines, (0xFE, 2), 77, own_pid=1) is None
    assert lock_module._flock_holder(lines, (0xFE, 0), 78, own_pid=600) is None
    assert lock_module._flock_holder([], (0xFE, 0), 77, own_pid=1) is None


def test_the_parser_skips_malformed_lines() -> None:
    malformed = [
        "",
        "garbage",
        "1: FLOCK",
        "2: FLOCK  ADVISORY  WRITE abc fe:00:77 0 EOF",
        "3: FLOCK  ADVISORY  WRITE 12 zz:00:77 0 EOF",
        "4: FLOCK  ADVISORY  WRITE 13 fe:00:7x 0 EOF",
        "5: FLOCK  ADVISORY  WRITE 14 <none>:0 0 EOF",
        "6: FLOCK  ADVISORY  WRITE 15 fe:00 0 EOF",
        "7: FLOCK  ADVISORY  WRITE 16 fe:00:77:1 0 EOF",
        "\x00\ufffd: FLOCK ADVISORY WRITE",
    ]
    assert lock_module._flock_holder(malformed, (0xFE, 0), 77, own_pid=1) is None
    good = "8: FLOCK  ADVISORY  WRITE 17 fe:00:77 0 EOF"
    assert lock_module._flock_holder([*malformed, good], (0xFE, 0), 77, own_pid=1) == 17


def test_the_program_is_short_printable_and_hides_what_may_be_a_password() -> None:
    program = lock_module._program
    sidecar = b"/work/.venv/bin/python3.12\0/work/.venv/bin/game-memory\0serve\0--stdio\0"
    assert program(sidecar) == "game-memory serve --stdio"
    assert program(b"/usr/bin/python3\0-m\0game_memory\0check\0") == "python3 -m game_memory check"
    assert program(b"/opt/Godot_v4.3\0--path\0game\0") == "Godot_v4.3 --path game"
    migrate = b"game-memory\0migrate\0--to-database\0postgresql://u:secret@db/x\0u@host\0"
    assert program(migrate) == "game-memory migrate --to-database … …"
    assert program(b"tool\0a\x1b[31mb\tc\0") == "tool a?[31mb?c"
    assert program(b"python3\0-c\0import x\nx.run()\0save\0") == "python3 -c … save"
    assert program(b"tool\0\xff\xfe\0") == "tool \ufffd\ufffd"
    long = program(b"game\0" + b"x" * 500 + b"\0")
    assert len(long) == 80 and long.startswith("game xxx") and long.endswith("…")
    assert program(b"") == "" and program(b"\0\0") == ""
