"""Freeze the sidecar with PyInstaller into one folder that runs with no Python installed.

PyInstaller (onedir mode) copies the interpreter, the standard library modules the sidecar
imports and every native library of numpy, onnxruntime, tokenizers, SimSIMD and
pydantic-core into ``game-memory/`` beside a small launcher. It runs in a child process:
its analysis imports half the environment and keeps global state, and its log goes to a
file the error can quote. Onedir, not onefile: a onefile build unpacks itself into a
temporary folder at every start (seconds, and a second copy on disk), which a game must
not pay each launch.

Why PyInstaller: measured here on the same entry point, PyInstaller's folder was 153 MB
with the exclusions below against 214 MB for cx_Freeze 8.7 (which copies whole packages,
tests and tools included); cx_Freeze built in 5 s against PyInstaller's 15 to 35 s, which
does not matter for a build made once per release. Nuitka needs a C compiler and compiles
numpy-sized dependency trees for many minutes. PyInstaller has hooks for every dependency
here (pyinstaller-hooks-contrib covers onnxruntime and tokenizers), builds on Windows,
macOS and Linux, and is released every few weeks.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from game_memory.bundle.layout import BUNDLE_FOLDER, BundleError, executable_name

__all__ = [
    "EMBEDDING_RUNTIME_MODULES",
    "EXCLUDED_MODULES",
    "PYINSTALLER_REQUIREMENT",
    "FrozenSidecar",
    "freeze_sidecar",
    "freezer_version",
]

#: What the ``bundle`` extra installs (and the error tells a user to install).
PYINSTALLER_REQUIREMENT = "pyinstaller>=6.10,<7"

#: Modules the sidecar never imports that hooks or optional imports would drag in: test
#: and build tools found in a development environment (mypy alone is 0.9 MB, hypothesis
#: 2 MB), the parts of onnx and onnxruntime that build or quantize graphs (only
#: ``game-memory models prepare`` does that, and the bundle runs ``serve`` only), rich (the
#: progress bars of other commands), GUI or terminal libraries, and the PostgreSQL backend
#: with its driver (``game_memory.postgres``, psycopg and its 9 MB of libpq and OpenSSL,
#: pgvector): the bundled sidecar serves a save folder and refuses ``--database``, yet the
#: backend's lazy imports pulled it in whenever the ``postgres`` extra was installed.
EXCLUDED_MODULES = (
    "IPython",
    "_pytest",
    "ast_serialize",
    "curses",
    "distutils",
    "game_memory.postgres",
    "hypothesis",
    "lib2to3",
    "mypy",
    "numpy.f2py",
    "numpy.testing",
    "onnx.backend",
    "onnx.reference",
    "onnxruntime.quantization",
    "onnxruntime.tools",
    "onnxruntime.transformers",
    "pgvector",
    "pip",
    "pkg_resources",
    "psycopg",
    "psycopg_binary",
    "psycopg_c",
    "psycopg_pool",
    "pydoc_data",
    "pytest",
    "readline",
    "rich",
    "setuptools",
    "sympy",
    "tkinter",
    "unittest",
    "yaml",
)

#: Left out of a lexical bundle (``--model lexical``) as well: the embedding runtime, which
#: only loads a model (about 60 MB of the frozen folder). Such a bundle serves lexical
#: recall and the hashing model, and refuses ``--model PATH``.
EMBEDDING_RUNTIME_MODULES = (
    "game_memory.onnx",
    "ml_dtypes",
    "onnx",
    "onnxruntime",
    "sentencepiece",
    "tokenizers",
)

#: The script PyInstaller freezes: the bundle's own entry point (see
#: ``game_memory.cli.frozen_sidecar``), so the frozen program finds its bundled model.
#: It keeps numpy's OpenBLAS on one thread unless the game's environment says otherwise:
#: set before numpy loads (docs/performance.md, "Warm hybrid recall": a recall's products
#: are small, and a second BLAS thread spinning beside them doubled a warm recall's CPU time
#: at 10k memories, a core taken from the game, for no gain in wall time).
#: It also turns off onnxruntime's telemetry, always: the official builds (1.32 on Linux and
#: macOS) otherwise write a device id and an event database under the player's
#: ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` and upload events, and a game must not
#: identify or report its players through a library it bundled. The variable is read when
#: onnxruntime creates its environment, so it is set before anything can import it.
#: The entry point restores Python's own SIGINT handler (the runtime hook below replaced it)
#: just before ``main``, whose Ctrl-C handling then takes over; a process started with
#: SIGINT ignored (a launcher shielding its child) keeps ignoring it.
_ENTRY_SCRIPT = """\
import os
import signal
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

from game_memory.cli.frozen_sidecar import main

if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
sys.exit(main())
"""

#: A runtime hook of ours (``--runtime-hook``), which PyInstaller runs before its own
#: (``pyi_rth_inspect``, ``pyi_rth_pkgutil``, ``pyi_rth_multiprocessing``: about 0.15 s of
#: imports on this machine class) and before the entry script's imports. A Ctrl-C in that
#: time raised ``KeyboardInterrupt`` inside PyInstaller's hooks: a traceback and exit code 1
#: on the game's console. Until the entry point restores Python's handler, a SIGINT prints
#: "interrupted" and ends the process with 130, as ``main`` does; nothing is open yet, so
#: there is nothing to close. Earlier than this hook (the interpreter's own start, about
#: 0.1 s) no code of a frozen program runs, and a Ctrl-C there still ends it in the
#: interpreter's start-up.
#: It imports only built-in modules (``_signal``, ``posix`` or ``nt``), which load at once:
#: importing ``os`` and ``signal`` (and ``enum`` under it) took long enough to be interrupted
#: themselves.
_RUNTIME_HOOK_SCRIPT = """\
import _signal

try:
    from posix import _exit, write
except ImportError:
    from nt import _exit, write


def _game_memory_interrupted(signal_number, frame):
    write(2, b"interrupted\\n")
    _exit(130)


if _signal.getsignal(_signal.SIGINT) is not _signal.SIG_IGN:  # started ignoring it: stays so
    _signal.signal(_signal.SIGINT, _game_memory_interrupted)
"""

_LOG_TAIL_CHARACTERS = 3_000


@dataclass(frozen=True)
class FrozenSidecar:
    """A frozen sidecar folder.

    Attributes:
        folder: The onedir folder (named ``game-memory``), holding the executable.
        freezer: ``pyinstaller <version>``.
        seconds: How long freezing took.
    """

    folder: Path
    freezer: str
    seconds: float


def freezer_version() -> str:
    """The installed PyInstaller's version.

    Raises:
        BundleError: PyInstaller is not installed; the message says how to install it.
    """
    try:
        return importlib.metadata.version("pyinstaller")
    except importlib.metadata.PackageNotFoundError:
        raise BundleError(
            "PyInstaller is not installed; install the bundle extra "
            f"(pip install 'game-memory[bundle]', or pip install '{PYINSTALLER_REQUIREMENT}')"
        ) from None


def _package_root() -> Path:
    """The folder that holds the ``game_memory`` package (``python/`` in a checkout)."""
    return Path(__file__).resolve().parents[2]


def freeze_sidecar(
    scratch: Path, *, embedding: bool = True, timeout: float = 1_800.0
) -> FrozenSidecar:
    """Freeze the sidecar into ``scratch/dist/game-memory``.

    ``scratch`` must be an empty folder; PyInstaller's work files and log stay in it.

    Args:
        scratch: The working folder.
        embedding: Include the embedding runtime (onnxruntime, tokenizers); False for a
            lexical bundle, which then holds none of :data:`EMBEDDING_RUNTIME_MODULES`.
        timeout: Seconds PyInstaller may take before it is stopped.

    Raises:
        BundleError: PyInstaller is missing, failed, timed out, or produced no executable;
            the message quotes the end of its log.
    """
    version = freezer_version()
    entry = scratch / "game_memory_sidecar.py"
    entry.write_text(_ENTRY_SCRIPT, encoding="utf-8")
    hook = scratch / "game_memory_early_interrupt.py"
    hook.write_text(_RUNTIME_HOOK_SCRIPT, encoding="utf-8")
    log = scratch / "pyinstaller.log"
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--clean",
        "--onedir",
        "--console",
        "--name",
        BUNDLE_FOLDER,
        "--distpath",
        str(scratch / "dist"),
        "--workpath",
        str(scratch / "work"),
        "--specpath",
        str(scratch),
        "--paths",
        str(_package_root()),
        "--log-level",
        "WARN",
        "--runtime-hook",
        str(hook),
    ]
    for module in EXCLUDED_MODULES + (() if embedding else EMBEDDING_RUNTIME_MODULES):
        command += ["--exclude-module", module]
    command.append(str(entry))
    # A reproducible analysis: no user site packages, no bytecode written into the checkout.
    environment = {**os.environ, "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    with log.open("wb") as output:
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=scratch,
                env=environment,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BundleError(
                f"PyInstaller did not finish within {timeout:.0f} s; its log is {log}"
            ) from None
        except OSError as exc:
            raise BundleError(f"cannot run PyInstaller: {exc.strerror or exc}") from exc
    seconds = time.monotonic() - started
    folder = scratch / "dist" / BUNDLE_FOLDER
    if result.returncode != 0 or not (folder / executable_name()).is_file():
        tail = log.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL_CHARACTERS:]
        raise BundleError(
            f"PyInstaller {version} failed (exit {result.returncode}); the end of its log "
            f"{log}:\n{tail}"
        )
    return FrozenSidecar(folder, f"pyinstaller {version}", seconds)
