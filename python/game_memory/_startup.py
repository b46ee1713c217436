"""A Ctrl-C while the ``game-memory`` command starts ends it as its ``main`` would.

The command imports numpy, pydantic and the library (about 0.4 s) before its ``main`` can
catch anything. A ``KeyboardInterrupt`` raised in that time was a traceback from wherever
the import was (the CLI's own modules, importlib), and inside numpy's C extension it even
became an ``ImportError`` saying that numpy's installation is broken. So when this process
is that command, importing the library first installs a SIGINT handler that prints
"interrupted" and exits 130 at once (nothing is open yet), and the command's ``main``
gives SIGINT back to Python (:func:`started`) before it runs anything. A program that
imports the library is never touched: it gets its ``KeyboardInterrupt`` as always.
Built-in modules only, so that this module itself loads at once.
"""

import contextlib
import itertools
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

__all__ = ["interrupted", "is_the_command", "started", "starting"]


def is_the_command() -> bool:
    """Whether this process is the ``game-memory`` command (its console script, a frozen
    bundle of the same name, or ``python -m game_memory.cli``)."""
    command = os.path.basename(sys.argv[0] if sys.argv else "")
    given = list(getattr(sys, "orig_argv", []))
    as_module = any(
        flag == "-m" and name.startswith("game_memory.cli")
        for flag, name in itertools.pairwise(given)
    )
    return command in ("game-memory", "game-memory.exe") or as_module


def interrupted(_signal_number: int = signal.SIGINT, _frame: FrameType | None = None) -> None:
    """End the starting command: "interrupted" on stderr, exit code 130 (as its ``main``)."""
    with contextlib.suppress(OSError):
        os.write(2, b"interrupted\n")
    os._exit(130)


#: The SIGINT handler the process had before :func:`starting` took it.
_inherited: list[Any] = []


def starting() -> None:
    """When this process is the command, make SIGINT end it quietly until :func:`started`
    (only the main thread may set a handler; an import elsewhere changes nothing). A
    process started with SIGINT ignored (``nohup``, a script's background job, a launcher
    shielding its child) keeps ignoring it: a Ctrl-C in that terminal is not for it."""
    if not is_the_command() or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        return
    _inherited.append(previous)
    signal.signal(signal.SIGINT, interrupted)


def started() -> None:
    """Give SIGINT back as the process had it (Python's ``KeyboardInterrupt`` as a rule) if
    :func:`starting` took it."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is interrupted
    ):
        previous = _inherited.pop() if _inherited else None
        if previous is None:  # a handler not set from Python: Python's own then
            previous = signal.default_int_handler
        signal.signal(signal.SIGINT, previous)
