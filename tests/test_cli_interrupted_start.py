"""A Ctrl-C while the ``game-memory`` command is still importing the library ends it as
its ``main`` ends an interrupted command ("interrupted", exit 130), not in a traceback;
a program importing the library still gets its ``KeyboardInterrupt``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Runs as a console script would (``argv[0]`` given), with an import hook that raises
# ``KeyboardInterrupt`` when the library reaches ``game_memory.model``: the instant a
# Ctrl-C lands in the middle of the library's imports.
_STARTING = """
import sys

class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "game_memory.model":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Interrupting())
sys.argv[0] = sys.argv[1]
try:
    from game_memory.cli import main
except KeyboardInterrupt:
    print("the program saw KeyboardInterrupt", file=sys.stderr)
    sys.exit(3)
sys.exit(main(["--help"]))
"""


def _python(code: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that finds this checkout's library."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )


@pytest.mark.parametrize("name", ["game-memory", "game-memory.exe"])
def test_the_command_interrupted_while_importing_says_so_without_a_traceback(
    tmp_path: Path, name: str
) -> None:
    done = _python(_STARTING, str(tmp_path / "bin" / name))
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"


def test_a_program_importing_the_library_gets_its_keyboard_interrupt(tmp_path: Path) -> None:
    done = _python(_STARTING, str(tmp_path / "game.py"))
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == "the program saw KeyboardInterrupt"


def test_python_dash_m_interrupted_while_importing_says_so_too(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        textwrap.dedent(_STARTING.split("sys.argv[0] = sys.argv[1]")[0]), encoding="utf-8"
    )
    done = subprocess.run(
        [sys.executable, "-m", "game_memory.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), *sys.path])},
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"


# A real SIGINT, sent while the CLI's own modules import (after the library's): it raised
# KeyboardInterrupt there, outside any handler, and the command ended in a traceback (or,
# inside numpy's C extension, in an ImportError calling numpy's installation broken).
_SIGNALLED = """
import os, signal, sys

class Signalling:
    def find_spec(self, name, path=None, target=None):
        if name == "game_memory.cli.parser":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Signalling())
sys.argv[0] = sys.argv[1]
from game_memory.cli import main
print("imported after the SIGINT", file=sys.stderr)
sys.exit(main(["--help"]))
"""


@pytest.mark.parametrize("argv0", ["game-memory", "game.py"])
def test_a_real_ctrl_c_while_the_cli_imports_ends_the_command_quietly(
    tmp_path: Path, argv0: str
) -> None:
    done = _python(_SIGNALLED, str(tmp_path / argv0))
    if argv0 == "game-memory":
        assert (done.returncode, done.stderr) == (130, "interrupted\n")
    else:  # a program importing the library: Python's own KeyboardInterrupt
        assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr


# The command's SIGINT handler: the quiet one while it imports, then what it had before.
_HANDLERS = """
import signal, sys
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
inherited = signal.getsignal(signal.SIGINT)
sys.argv[0] = "game-memory"
import game_memory
from game_memory import _startup
starting = signal.getsignal(signal.SIGINT)
from game_memory.cli import main
try:
    main(["--version"])
except SystemExit:
    pass
names = {_startup.interrupted: "quiet", signal.SIG_IGN: "ignored"}
names[signal.default_int_handler] = "python"
print(names.get(starting), names.get(signal.getsignal(signal.SIGINT)), starting is inherited)
"""


@pytest.mark.parametrize(
    ("inherited", "expected"),
    [
        # Once main runs, a Ctrl-C is the command's (a KeyboardInterrupt it handles).
        ("python", "quiet python False"),
        # nohup, a script's background job, a launcher shielding its child: SIGINT ignored
        # stays ignored (the handler took it, then gave back Python's default: a Ctrl-C
        # ended a process meant to survive it).
        ("ignored", "ignored ignored True"),
    ],
)
def test_the_command_gives_sigint_back_as_it_found_it(inherited: str, expected: str) -> None:
    done = _python(_HANDLERS, inherited)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == expected
