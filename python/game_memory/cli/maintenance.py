"""The maintenance commands of the CLI: status, rebuild, migrate, search, check, bench.

Each is a thin mirror of one call of the front door that :func:`game_memory.open_memory`
opens (``get_status`` / ``rebuild`` / ``migrate`` / ``recall``), or of the save's own
``check``, with human-readable output. Every ``GameMemoryError`` (and a file where a folder
is expected) becomes one line on stderr and exit code 1; a bad argument (options that
contradict each other, a value the query or the options refuse) is a
:class:`~game_memory.cli.usage.UsageError`, raised before anything is opened (exit code 2,
with the usage line); nothing prints a traceback for a condition the user can act on.
Commands that only read (``status``, ``search``, ``check``, and ``rebuild`` for the save)
never create a save: a missing folder is an error. Only ``migrate`` (and ``serve``) create
one, and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import runpy
import signal
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from game_memory.cli.capacity import given_bound, store_bound
from game_memory.cli.folders import folder_problem, index_folder, is_new_save
from game_memory.cli.hints import empty_result_hint, fallback_hint
from game_memory.cli.interrupts import finish_on_interrupt, finishing_note, interrupted_note
from game_memory.cli.options import recall_settings
from game_memory.cli.terminal import POSTGRES_HINT, console, fail, os_error, say, verbatim
from game_memory.cli.usage import UsageError, usage_error
from game_memory.cli.write_access import write_access_message
from game_memory.errors import GameMemoryError
from game_memory.memory import VectorMemoryStore
from game_memory.model import DiagnosticSink, GameMemoryQuery, GameMoment, MemoryVectorDiagnostic
from game_memory.models import NAMED_MODELS
from game_memory.opening import open_memory, resolve_folder
from game_memory.recall.options import VectorMemoryStoreOptions
from game_memory.store.file_store import FileGameMemoryStore

__all__ = [
    "run_bench",
    "run_check",
    "run_migrate",
    "run_rebuild",
    "run_search",
    "run_status",
]

_BENCHMARKS = {
    "store": "store_scale.py",
    "hybrid": "hybrid_scale.py",
    "embedding": "embedding.py",
    "retrieval": "retrieval.py",
    "multilingual": "multilingual.py",
    "npc": "npc_workload.py",
    "crossval": "crossval.py",
    "beliefs": "belief_updates.py",
    "promises": "reranker_promises.py",
    "sidecar": "sidecar_memory.py",
    "spinning": "onnx_spinning.py",
    "threads": "onnx_threads.py",
    "bounds": "cache_bounds.py",
}


def _with_memory(
    args: argparse.Namespace,
    action: Callable[[VectorMemoryStore], Awaitable[int]],
    *,
    create: bool,
    create_index: bool | None = None,
    diagnostics: DiagnosticSink | None = None,
    work: str | None = None,
) -> int:
    """Open the memory the arguments name, run ``action``, close; the exit code. ``work``
    names a write the library never stops halfway (a migration): a Ctrl-C is noted, the
    work and its report finish, and the exit code is 130 (``cli/interrupts.py``)."""
    settings = recall_settings(args)  # a UsageError before anything is opened
    given_index = getattr(args, "index_dir", None)
    database = getattr(args, "database", None)
    for path, option in ((args.save_dir, "--save-dir"), (given_index, "--index-dir")):
        problem = folder_problem(path, option)
        if problem is not None:
            return fail(problem)
    model = getattr(args, "model", None)
    if model is not None and model not in NAMED_MODELS:
        problem = folder_problem(
            model,
            "--model",
            what="a model folder",
            advice="give the folder that holds the model, or one of " + ", ".join(NAMED_MODELS),
        )
        if problem is not None:
            return fail(problem)
    index: Path | None = Path(given_index) if given_index else None
    new_save = False
    if database is None:
        index, found = index_folder(args.save_dir, given_index)
        if found is not None:
            say("notice", found)
        new_save = create and is_new_save(args.save_dir)
    _show_warnings()

    options = settings.options
    if create_index is False:  # a command that only reads embeds and writes no vector either
        options = (options or VectorMemoryStoreOptions()).model_copy(update={"catch_up": False})

    async def main() -> int:
        memory = await open_memory(
            database or args.save_dir,
            index=index,
            model=getattr(args, "model", "lexical"),
            options=options,
            reranker=settings.reranker,
            create=create,
            create_index=create_index,
            diagnostics=diagnostics,
            maximum_entries=given_bound(args),
        )
        try:
            if memory.notice is not None:
                say("notice", memory.notice.message)
            return await action(memory)
        finally:
            await memory.aclose()

    try:
        with finish_on_interrupt(finishing_note(work) if work else None) as interrupted:
            code = asyncio.run(main())
    except GameMemoryError as exc:
        return fail(write_access_message(exc, args.command))
    except BrokenPipeError:
        raise  # the reader of the output went away: main() ends quietly
    except OSError as exc:
        return fail(os_error(exc))
    if new_save and not is_new_save(args.save_dir):
        say("notice", f"created a new save at {os.path.abspath(args.save_dir)}")
    if work and interrupted:
        say("notice", interrupted_note(work))
        return 130
    return code


class _WarningLine(logging.Handler):
    """Print game-memory's warnings (a damaged index, ...) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            say("warning", record.getMessage())


def _show_warnings() -> None:
    logger = logging.getLogger("game_memory")
    if not any(isinstance(handler, _WarningLine) for handler in logger.handlers):
        logger.addHandler(_WarningLine(logging.WARNING))


def run_status(args: argparse.Namespace) -> int:
    """``game-memory status``: the session's vector index status."""

    async def action(memory: VectorMemoryStore) -> int:
        status = await memory.get_status(args.session)
        table = Table(title=verbatim(f"session {args.session}"), show_header=False)
        identity = status.active_identity
        rows = {
            **status.model_dump(mode="json"),
            "mode": status.mode,
            "active_identity": None if identity is None else str(identity),
        }
        for key, value in rows.items():
            table.add_row(key, verbatim(value))
        console().print(table)
        return 0

    return _with_memory(args, action, create=False, create_index=False)


_NEEDS_A_MODEL = (
    "rebuild embeds the session's memories, so it needs a model: {why}; run it with --model "
    "default (prepared by 'game-memory models prepare'), --model multilingual or --model PATH"
)


def run_rebuild(args: argparse.Namespace) -> int:
    """``game-memory rebuild``: re-embed the session's memories, with a progress bar."""
    if args.model == "lexical":  # a bad argument whatever the save holds
        raise UsageError(_NEEDS_A_MODEL.format(why="--model lexical has no vectors"))

    async def action(memory: VectorMemoryStore) -> int:
        await memory.authoritative.count()  # the save must exist before the index is touched
        if memory.provider is None:  # before a progress bar: there is nothing to embed with
            why = "the model could not be loaded (see the notice above)"
            return fail(_NEEDS_A_MODEL.format(why=why))
        with Progress(
            TextColumn("rebuilding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        ) as bar:
            task = bar.add_task("rebuild", total=None)

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            status = await memory.rebuild(args.session, force=args.force, progress=progress)
        console().print(
            f"state [bold]{status.state}[/bold]: {status.ready_entries} ready, "
            f"{status.pending_entries} pending, {status.stale_entries} stale, "
            f"{status.orphan_entries} orphan"
        )
        if failed:
            # A forced rebuild keeps the vectors it could not replace, so the state can read
            # ready though nothing was written (a role that may not write, say).
            why = (failed[0].details or {}).get("exception", "an error")
            return fail(
                f"the rebuild stopped at a batch it could not embed or write ({why}; the "
                "warning above says why): its memories keep their earlier vectors, or stay "
                "pending. Fix the cause and run the rebuild again: it resumes"
            )
        if not status.requires_rebuild:
            return 0
        if status.pending_entries and not status.stale_entries and not status.orphan_entries:
            # Every memory the rebuild listed got its vector (no batch failed), so what is
            # pending was saved after its listing: by another process on this save (a
            # running game's sidecar), which indexes what it saves.
            say(
                "notice",
                f"{status.pending_entries} memories saved while the rebuild ran (by another "
                "process on this save) are not indexed yet; the process that saved them "
                "indexes them ('game-memory status' shows it), or run the rebuild again",
            )
            return 0
        return fail(
            f"the session still needs a rebuild after this one ({status.stale_entries} stale, "
            f"{status.pending_entries} pending, {status.orphan_entries} orphan): another "
            "process may have changed the save meanwhile; run the rebuild again, and if it "
            "stays so, 'game-memory check'"
        )

    failed: list[MemoryVectorDiagnostic] = []

    def collect(diagnostic: MemoryVectorDiagnostic) -> None:
        if diagnostic.code == "memory_embedding_rebuild_failed":
            failed.append(diagnostic)

    return _with_memory(args, action, create=False, create_index=True, diagnostics=collect)


def run_migrate(args: argparse.Namespace) -> int:
    """``game-memory migrate``: migrate a legacy save (and vector index), or copy a save
    folder into PostgreSQL (``--to-database``)."""
    if getattr(args, "to_database", None):
        return _copy_to_database(args)

    async def action(memory: VectorMemoryStore) -> int:
        report = await memory.migrate()
        console().print(
            f"migrated {report.migrated_entries} legacy memories "
            f"({report.partitioned_entries} in the save) and {report.vector_entries} "
            "legacy vector entries"
        )
        return 0

    return _with_memory(args, action, create=True, work="migration")


def _copy_to_database(args: argparse.Namespace) -> int:
    """``game-memory migrate --to-database URL --save-dir DIR``, with a progress bar.

    A --save-dir without a save (a mistyped path) exits 1 with "there is no save at ...",
    creating nothing there nor in the database (``copy_save`` refuses it first).
    """
    if not args.save_dir:
        raise UsageError("--to-database copies the save of --save-dir; give the folder to copy")
    try:
        from game_memory.postgres import PostgresGameMemoryStore
        from game_memory.postgres.copy import copy_save
    except ImportError as exc:
        return fail(f"--to-database{POSTGRES_HINT.removeprefix('--database')} ({exc})")

    async def main() -> int:
        store = PostgresGameMemoryStore(args.to_database, maximum_entries=given_bound(args))
        bar = Progress(
            TextColumn("copying"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
        )
        task = bar.add_task("copy", total=None)

        def progress(done: int, total: int) -> None:
            # Shown from the first report on, which comes once the save is open: a --save-dir
            # without a save fails with its message alone.
            bar.start()
            bar.update(task, completed=done, total=total)

        try:
            report = await copy_save(args.save_dir, store, progress=progress)
        finally:
            if bar.live.is_started:
                bar.stop()
            await store.aclose()
        console().print(
            f"copied {report.read} memories of {len(report.sessions)} sessions into "
            f"{escape(store.where)}: {report.added} added, {report.already_there} already there. "
            "Vectors are derived: run 'game-memory rebuild --database ... --session ID'."
        )
        return 0

    try:
        return asyncio.run(main())
    except GameMemoryError as exc:
        return fail(str(exc))


#: The option of each field of the query ``search`` builds, to name it in a usage error.
_QUERY_OPTIONS = {
    "session_id": "--session",
    "owner_id": "--owner",
    "text": "--text",
    "limit": "--limit",
    "timeline_id": "--timeline",
    "tick": "--tick",
}


def _search_query(args: argparse.Namespace) -> GameMemoryQuery:
    """The query ``search`` asks, checked before the save is opened.

    Raises:
        UsageError: ``--tick`` without ``--timeline`` (or the reverse), or a value the
            query refuses (a negative ``--limit``, a tick past the 64-bit range, ...).
    """
    if (args.tick is None) != (args.timeline is None):
        raise UsageError("--tick and --timeline go together (a moment is a tick on a timeline)")
    try:
        at = None
        if args.tick is not None:
            at = GameMoment(timeline_id=args.timeline, tick=args.tick)
        return GameMemoryQuery(
            session_id=args.session,
            owner_id=args.owner,
            text=args.text,
            limit=args.limit,
            at_or_before=at,
        )
    except ValidationError as exc:
        raise usage_error(exc, _QUERY_OPTIONS) from None


def run_search(args: argparse.Namespace) -> int:
    """``game-memory search``: recall as of a game moment."""
    query = _search_query(args)

    async def action(memory: VectorMemoryStore) -> int:
        result = await memory.recall(query)
        if args.json:
            rows = [
                {
                    "memory": json.loads(hit.memory.model_dump_json()),
                    "channels": hit.channels,
                    "lexical_rank": hit.lexical_rank,
                    "vector_rank": hit.vector_rank,
                    "vector_score": hit.vector_score,
                    "fused_score": hit.fused_score,
                    "age_ticks": hit.age_ticks,
                }
                for hit in result.hits
            ]
            print(json.dumps({"fallback": result.fallback, "memories": rows}, indent=2))
            await _explain(memory, result.fallback, bool(result.hits))
            return 0
        table = Table(title="recalled" + (" (lexical fallback)" if result.fallback else ""))
        beliefs = any(hit.memory.belief_key is not None for hit in result.hits)
        columns = ("owner", "tick", "why", *(("belief",) if beliefs else ()), "memory")
        for column in columns:
            table.add_column(column)
        for hit in result.hits:
            m = hit.memory
            belief = (m.belief_key or "",) if beliefs else ()
            text = m.searchable_text or m.payload_json
            cells = (m.owner_id, m.moment.tick, hit.channels, *belief, text)
            table.add_row(*(verbatim(cell) for cell in cells))
        console().print(table)
        await _explain(memory, result.fallback, bool(result.hits))
        return 0

    async def _explain(memory: VectorMemoryStore, fallback: bool, found: bool) -> None:
        if fallback:
            say("hint", await fallback_hint(memory, args))
        if not found:
            hint = await empty_result_hint(memory, args)
            if hint is not None:
                say("hint", hint)

    return _with_memory(args, action, create=False, create_index=False)


def run_check(args: argparse.Namespace) -> int:
    """``game-memory check``: verify (with --fix repair, with --accept-loss salvage) a save.

    A Ctrl-C does not stop it halfway: a repair stopped between two of its steps would
    leave the user not knowing what was applied, and the work runs in the store's threads,
    which cannot be stopped anyway. So the check goes on to the end and prints its whole
    report (every repair it made), says at once and again at the end that it was
    interrupted, and exits 130.
    """
    database = getattr(args, "database", None)
    if args.accept_loss and not args.fix:
        # The salvage gives up acknowledged memories for good: it must be asked for whole.
        raise UsageError(
            "--accept-loss salvages with --fix only: run check --fix --accept-loss (it gives "
            "up the memories it cannot read), or check --fix to repair what loses nothing"
        )
    if database is not None and (args.accept_loss or args.ids):
        raise UsageError("--accept-loss and --ids apply to a save folder, not to --database")
    problem = folder_problem(args.save_dir, "--save-dir")
    if problem is not None:
        return fail(problem)
    if database is not None:
        try:
            from game_memory.postgres import PostgresGameMemoryStore
        except ImportError as exc:
            return fail(f"{POSTGRES_HINT} ({exc})")

    async def main() -> int:
        if database is not None:
            async with PostgresGameMemoryStore(
                database, migrate=False, maximum_entries=given_bound(args)
            ) as database_store:
                report = await database_store.check(fix=args.fix)
        else:
            async with FileGameMemoryStore(
                resolve_folder(args.save_dir), create=False, **store_bound(args)
            ) as store:
                report = await store.check(
                    fix=args.fix,
                    accept_loss=args.accept_loss,
                    list_ids=args.ids,
                )
        out = console()
        for repair in report.repairs:
            out.print("[green]repaired:[/green] ", end="")
            out.print(verbatim(repair), soft_wrap=True)
        for found in report.problems:
            out.print("[red]problem:[/red] ", end="")
            out.print(verbatim(found), soft_wrap=True)
        out.print(
            f"{report.memories} memories, {report.ledger_entries} ledger entries: "
            + ("consistent" if report.ok else f"{len(report.problems)} problems")
        )
        return 0 if report.ok else 1

    repairing = args.fix
    work = (
        "a repair is never stopped halfway"
        if repairing
        else "it repairs nothing; opening the save may roll back a killed batch, which the "
        "report names"
    )
    try:
        with finish_on_interrupt(
            f"interrupted: the check goes on to the end ({work}) and then reports what it "
            "found" + (" and repaired" if repairing else "")
        ) as interrupted:
            code = asyncio.run(main())
    except GameMemoryError as exc:
        return fail(write_access_message(exc, "check"))
    except BrokenPipeError:
        raise  # the reader of the output went away: main() ends quietly
    except OSError as exc:
        return fail(os_error(exc))
    if interrupted:
        say(
            "notice", "interrupted (Ctrl-C); the check ran to its end first: the report is complete"
        )
        return 130
    return code


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from or while handling) is a Ctrl-C: a
    ``KeyboardInterrupt``, or a worker process killed by SIGINT (a Ctrl-C reaches the
    terminal's whole process group: a benchmark may see its worker die first)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return True
        if (
            isinstance(current, subprocess.CalledProcessError)
            and current.returncode == -signal.SIGINT
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def _benchmark_failed(script: Path, exc: Exception) -> int:
    """Report a benchmark's own failure (a worker that failed, a recall that fell back, a
    setting the library refused) with its whole message, never cut: a worker's ends with
    the worker's traceback, whose last line is the cause; any other names where it was
    raised. Exit code 1: it is not a bug of game-memory (exit 70)."""
    message = str(exc).strip() or "(no message)"
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames and "Traceback (most recent call last)" not in message:
        where = f" (raised at {Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return fail(f"the benchmark {script.name} failed{where}: {type(exc).__name__}: {message}")


def run_bench(args: argparse.Namespace) -> int:
    """``game-memory bench NAME``: run a benchmark script from a source checkout.

    Returns the script's exit code (a usage error of its own: 2, as argparse ends it); a
    benchmark that raises is the benchmark's failure, said in full (1); a Ctrl-C, or a
    worker killed by one, is "interrupted" (130).
    """
    script = Path(__file__).resolve().parents[3] / "benchmarks" / _BENCHMARKS[args.name]
    if not script.is_file():
        return fail(
            f"{script} is not here: benchmarks ship with the source checkout, not the package"
        )
    extra = [item for item in args.extra if item != "--"]
    # As ``python benchmarks/NAME.py`` would: the script's folder first on the path, so it
    # can import its sibling modules (retrieval_sets, bge_m3_shaped, ...).
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *extra]
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else fail(exit_.code)
    except Exception as exc:
        if not _interrupted(exc):
            return _benchmark_failed(script, exc)
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return 0
