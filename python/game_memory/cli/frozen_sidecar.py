"""The entry point of the frozen sidecar that ``game-memory bundle`` builds.

A bundle runs ``game-memory serve`` only (the addon's one use of it); any other command is
refused with advice to install the package. Before serving it does two things the
installed command does not need to:

* **It finds its bundled model.** The bundle folder is the folder of the executable
  (``sys.executable`` when frozen). Its ``game-memory-bundle.json`` names the model folder
  relative to the bundle. ``--model default`` (the addon's default) loads the bundled
  named model from there (``GAME_MEMORY_HOME`` is set to the bundle folder for this
  process), so a bundled model that cannot load falls back to lexical recall with the
  ``embedding_model_unavailable`` diagnostic, as ``serve --model default`` does. A model
  folder bundled with ``--model PATH`` becomes that folder's absolute path, and a bundle
  built with ``--model lexical`` serves ``lexical``. Any other ``--model`` value is passed
  on unchanged, except that a lexical bundle, which holds no embedding runtime, refuses a
  model folder (exit code 2). The player's ``GAME_MEMORY_HOME``, the current directory
  and the player's model cache play no part. A bundle whose embedding runtime cannot be
  imported (onnxruntime's native library damaged or deleted) is a bundled model that
  cannot load: lexical recall and the diagnostic, not a traceback.
* **It checks that the save and index folders are writable** (creating them if needed) and
  exits with code 1 and one line on stderr naming the folder when one is not, instead of
  starting and failing the game's first ``remember``; a folder that is a file gets the
  line the installed ``serve`` prints. Exit codes are those of ``serve``: 0 after a clean
  stop, 1 when the memory cannot be opened (this check included), 2 for bad arguments or
  a command the bundle does not run, 130 after a Ctrl-C that lands before ``serve`` took
  over its signals ("interrupted" on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from game_memory.bundle.layout import BundleError, BundleManifest
from game_memory.cli.folders import folder_problem, index_folder
from game_memory.cli.parser import build_parser
from game_memory.cli.usage import UsageError, exit_with_usage
from game_memory.opening import default_index_dir

__all__ = ["bundle_root", "main", "unwritable_folder_problem"]

_PROGRAM = "game-memory (bundled sidecar)"

#: ``game_memory.onnx.model_home.HOME_VARIABLE``, spelled here because importing it imports
#: onnxruntime, which is what may be broken (a test keeps the two equal).
_HOME_VARIABLE = "GAME_MEMORY_HOME"


def bundle_root() -> Path:
    """The bundle folder: where the frozen executable is (resolved through links)."""
    return Path(sys.executable).resolve().parent


def run(args: argparse.Namespace) -> int:
    """``serve`` itself (:func:`game_memory.cli.serve.run`), imported when called.

    Imported here rather than with this module, so that its imports (the bridge, the
    WebSocket server) happen inside :func:`main`'s Ctrl-C handling, not in the window
    before it where a Ctrl-C ends the sidecar in a traceback.
    """
    from game_memory.cli.serve import run as serve

    return serve(args)


def unwritable_folder_problem(folder: Path, option: str | None = None) -> str | None:
    """Create ``folder`` if needed and write and delete a probe file in it.

    Args:
        folder: The save or index folder the sidecar will use.
        option: The option that gave it (``--save-dir``, ``--index-dir``); ``None`` for
            the index folder chosen beside the save.

    Returns:
        ``None`` when it is writable, else a sentence naming the folder and the reason. A
        path that is a file gets the sentence the installed ``serve`` prints for it
        (:func:`~game_memory.cli.folders.folder_problem`): "File exists" would say it is a
        matter of permissions.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except FileExistsError as exc:  # a file (or a link to one) where the folder should be
        return _file_in_the_way(folder, option) or _not_writable(folder, exc)
    except OSError as exc:
        return _not_writable(folder, exc)
    return None


def _file_in_the_way(folder: Path, option: str | None) -> str | None:
    """``serve``'s sentence for a file given as a folder (``None``: not a plain file)."""
    if option is not None:
        return folder_problem(folder, option)
    return folder_problem(folder, "the index folder", advice="move it away or give --index-dir")


def _not_writable(folder: Path, exc: OSError) -> str:
    return (
        f"the folder {folder} is not writable ({exc.strerror or exc}); give the sidecar a "
        "folder the player can write (the addon's default is user://game_memory)"
    )


def _bundled_model(manifest: BundleManifest, root: Path) -> str:
    """What ``--model default`` means in this bundle, as a ``--model`` value for ``serve``.

    A bundled named model (``bundle --model default`` or ``multilingual``) stays a *name*,
    loaded from the bundle: ``GAME_MEMORY_HOME`` is set to the bundle folder for this
    process (whatever the player's environment says), where the model sits at
    ``models/<folder>`` as in a model cache. ``serve`` then keeps what it promises for
    ``--model default``: a model that cannot load (a file damaged or deleted on the
    player's disk, by a partial update or a virus scanner) gives lexical recall and the
    ``embedding_model_unavailable`` diagnostic, not a sidecar that refuses to start and a
    game with no memory. A model folder bundled with ``--model PATH`` is passed as that
    path (a failure to load it ends the sidecar, as for ``serve --model PATH``), and a
    lexical bundle serves ``lexical``.

    Finding the name imports ``game_memory.onnx``, and so onnxruntime. When that import
    fails (its native library damaged or deleted on the player's disk) the bundled model
    cannot load whichever it is: the name is ``default``, what the bundle's model is to the
    addon, and ``serve`` falls back to lexical recall with the diagnostic naming the import
    error. Passing the folder instead would end the sidecar in that import error.
    """
    folder = manifest.model_folder(root)
    if folder is None:
        return "lexical"
    if manifest.model.kind == "default":
        try:
            from game_memory.onnx.named_models import MODEL_NAMES, named_model_directory
        except ImportError:  # a damaged runtime: a named model that cannot load
            os.environ[_HOME_VARIABLE] = str(root)
            return "default"
        for name in MODEL_NAMES:
            if named_model_directory(name, root).resolve() == folder:
                os.environ[_HOME_VARIABLE] = str(root)
                return name
    return str(folder)


def _serve_arguments(
    argv: Sequence[str], manifest: BundleManifest, root: Path
) -> argparse.Namespace | int:
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:  # argparse printed the usage and the problem
        return int(exc.code) if isinstance(exc.code, int) else 2
    if args.command != "serve":
        print(
            f"{_PROGRAM}: this bundle runs only 'serve'; install the game-memory package "
            f"(pip install game-memory=={manifest.version}) for 'game-memory {args.command}'",
            file=sys.stderr,
        )
        return 2
    if args.model == "default":
        args.model = _bundled_model(manifest, root)
    elif manifest.model.kind == "lexical" and args.model not in ("lexical", "hashing"):
        print(
            f"{_PROGRAM}: this bundle was built with --model lexical and holds no embedding "
            f"runtime, so it cannot load {args.model!r}; build the bundle with --model PATH",
            file=sys.stderr,
        )
        return 2
    return args


def main(argv: Sequence[str] | None = None, *, root: Path | None = None) -> int:
    """Run the bundled sidecar with ``argv`` (default: the process arguments).

    Args:
        argv: The command line after the program name (``serve --stdio ...``).
        root: The bundle folder; default :func:`bundle_root`.

    Returns:
        The exit code (see the module docstring). A Ctrl-C before ``serve`` takes over
        SIGINT (while the embedding runtime imports, say: a third of a second) ends it with
        "interrupted" and 130, as the installed command ends.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(arguments, root)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _main(arguments: list[str], root: Path | None) -> int:
    if any(argument in ("--version", "-h", "--help") for argument in arguments[:1]):
        return _parse_only(arguments)
    folder = root if root is not None else bundle_root()
    try:
        manifest = BundleManifest.read(folder)
    except BundleError as exc:
        print(f"{_PROGRAM}: {exc}", file=sys.stderr)
        return 1
    args = _serve_arguments(arguments, manifest, folder)
    if isinstance(args, int):
        return args
    if getattr(args, "database", None):
        print(
            f"{_PROGRAM}: the bundled sidecar serves a save folder (--save-dir); serve a "
            "PostgreSQL database with 'game-memory serve --database' from a Python install",
            file=sys.stderr,
        )
        return 2
    for folder_needed, option in _folders_needed(args):
        problem = unwritable_folder_problem(folder_needed, option)
        if problem is not None:
            print(f"game-memory serve: {problem}", file=sys.stderr)
            return 1
    try:
        return run(args)
    except UsageError as exc:  # as the installed command: the usage line, exit code 2
        try:
            exit_with_usage(build_parser(), args, exc)
        except SystemExit as exit_:
            return exit_.code if isinstance(exit_.code, int) else 2


def _folders_needed(args: argparse.Namespace) -> list[tuple[Path, str | None]]:
    """The folders ``serve`` will write, each with the option that gave it (``None``: the
    index folder found beside the save)."""
    save_dir = Path(args.save_dir).expanduser()
    needed: list[tuple[Path, str | None]] = [(save_dir, "--save-dir")]
    if args.model == "lexical":  # lexical recall reads the save alone; no index is opened
        return needed
    # The folder serve will use (``index_folder``: the demo layout's DIR/index beside
    # DIR/save included), not always the default sibling: checking that one created an
    # empty ``save.index`` and tested the wrong folder.
    chosen = index_folder(str(save_dir), args.index_dir or None)[0]
    if chosen is None:
        needed.append((default_index_dir(save_dir), None))
    else:
        needed.append((chosen.expanduser(), "--index-dir" if args.index_dir else None))
    return needed


def _parse_only(arguments: list[str]) -> int:
    try:
        build_parser().parse_args(arguments)
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else 0
    return 0
