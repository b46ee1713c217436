"""The CLI's memory-over-a-game commands: ``forget``, ``erase`` and ``compact``.

Each is one call of the front door (:class:`~game_memory.memory.VectorMemoryStore`),
opened on an existing save only (none of them creates one: a missing folder is one line
and exit 1):

* ``forget`` retracts one memory as of a game moment (the save only: vectors stay and are
  hidden with their memory);
* ``erase`` removes memories for good from the save *and* the derived index, whatever
  model the index was built with, so it opens the index without loading a model (a missing
  default index folder is left alone; a given ``--index-dir`` that does not exist is
  refused before anything is erased); ``--dry-run`` counts what would go and changes nothing;
* ``compact`` rewrites what needs it and prints the bytes before and after.

Every ``GameMemoryError`` (an unknown memory, a damaged partition) and ``OSError`` becomes
one line on stderr and exit code 1; a bad argument (``--memory`` without ``--owner``, a
tick past the 64-bit range) is a :class:`~game_memory.cli.usage.UsageError` raised before
anything is opened (exit code 2, with the usage line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from game_memory.cli.capacity import given_bound, store_bound
from game_memory.cli.database_urls import shown_url
from game_memory.cli.folders import folder_problem, index_folder
from game_memory.cli.interrupts import finish_on_interrupt, finishing_note, interrupted_note
from game_memory.cli.terminal import POSTGRES_HINT, console, fail, os_error, say, verbatim
from game_memory.cli.usage import UsageError, usage_error
from game_memory.cli.write_access import write_access_message
from game_memory.errors import GameMemoryError, MemoryNotFoundError
from game_memory.index.protocol import VectorIndex
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMoment
from game_memory.opening import default_index_dir, resolve_folder
from game_memory.store.protocol import GameMemoryStore

__all__ = ["run_compact", "run_erase", "run_forget"]


def _print(args: argparse.Namespace, text: str, document: dict[str, Any]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(document))
    else:
        console().print(verbatim(text), soft_wrap=True)


def _save(args: argparse.Namespace) -> GameMemoryStore:
    database = getattr(args, "database", None)
    if database is not None:
        from game_memory.postgres import PostgresGameMemoryStore

        return PostgresGameMemoryStore(database, migrate=False, maximum_entries=given_bound(args))
    from game_memory.store.file_store import FileGameMemoryStore

    return FileGameMemoryStore(resolve_folder(args.save_dir), create=False, **store_bound(args))


def _derived(args: argparse.Namespace) -> VectorIndex | None:
    """The save's index, opened without a model (``None`` when there is no index folder)."""
    database = getattr(args, "database", None)
    given = getattr(args, "index_dir", None)
    if database is not None and given is None:
        from game_memory.postgres import PostgresVectorIndex

        return PostgresVectorIndex(database, migrate=False)
    if given is None:
        found, _notice = index_folder(args.save_dir, None)
        folder = found if found is not None else default_index_dir(args.save_dir)
    else:
        folder = Path(given)
    if not os.path.lexists(folder):
        return None
    from game_memory.index.file_index import FileVectorMemoryIndex

    return FileVectorMemoryIndex(resolve_folder(folder), create=False)


def _run(
    args: argparse.Namespace,
    action: Callable[[VectorMemoryStore], Awaitable[int]],
    *,
    with_index: bool = False,
    work: str | None = None,
) -> int:
    """Open the save (and its index), run ``action``, close; the exit code.

    ``work`` names a write the library never stops halfway (an erase, a compaction): a
    Ctrl-C during it is noted at once, the work and its report finish, and the exit code
    is 130 (``cli/interrupts.py``).
    """
    for path, option in (
        (getattr(args, "save_dir", None), "--save-dir"),
        (getattr(args, "index_dir", None), "--index-dir"),
    ):
        problem = folder_problem(path, option)
        if problem is not None:
            return fail(problem)

    async def main() -> int:
        save = _save(args)
        try:
            derived = _derived(args) if with_index else None
        except BaseException:
            await save.aclose()
            raise
        async with VectorMemoryStore(save, derived) as memory:
            return await action(memory)

    try:
        with finish_on_interrupt(finishing_note(work) if work else None) as interrupted:
            code = asyncio.run(main())
    except ImportError as exc:
        return fail(f"{POSTGRES_HINT} ({exc})")
    except GameMemoryError as exc:
        return fail(write_access_message(exc, args.command))
    except OSError as exc:
        return fail(os_error(exc))
    if work and interrupted:
        say("notice", interrupted_note(work))
        return 130
    return code


def run_forget(args: argparse.Namespace) -> int:
    """``game-memory forget``: retract one memory of one NPC as of a game moment."""
    try:
        at = GameMoment(timeline_id=args.timeline, tick=args.tick)
    except ValidationError as exc:  # a tick past the 64-bit range, as search says it
        raise usage_error(exc, {"tick": "--tick", "timeline_id": "--timeline"}) from None

    async def action(memory: VectorMemoryStore) -> int:
        try:
            forgotten = await memory.forget(args.session, args.owner, args.memory, at)
        except MemoryNotFoundError:
            return fail(_unknown_memory(args))
        where = f"{args.memory!r} of {args.owner!r} in session {args.session!r}"
        text = (
            f"forgot {where} as of {args.timeline}:{args.tick} (earlier moments still recall it)"
            if forgotten
            else f"{where} was already forgotten as of {args.timeline}:{args.tick}; nothing changed"
        )
        _print(args, text, {"memory_id": args.memory, "forgotten": forgotten})
        return 0

    return _run(args, action, work="forget")


def _unknown_memory(args: argparse.Namespace) -> str:
    """An unknown ``forget --memory``, with the command that lists what the owner holds
    (the library's message names its own ``enumerate``, which the CLI has not)."""
    save = (
        ["--database", shown_url(args.database)] if args.database else ["--save-dir", args.save_dir]
    )
    who = ["--session", args.session, "--owner", args.owner, "--model", "lexical"]
    listing = shlex.join(["game-memory", "search", *save, *who])
    return (
        f"owner {args.owner!r} of session {args.session!r} holds no memory {args.memory!r}; "
        f"nothing was forgotten. Check the id ('{listing}' lists what the owner holds)"
    )


def run_erase(args: argparse.Namespace) -> int:
    """``game-memory erase``: remove a session, an NPC or listed memories for good."""
    memory_ids = args.memory or None
    if memory_ids is not None and args.owner is None:
        raise UsageError("--memory needs --owner (the NPC whose memories to erase)")
    if args.index_dir is not None and not os.path.lexists(args.index_dir):
        # A mistyped --index-dir would erase from the save and leave the vectors in the
        # real index: refuse before anything is erased. (The default folder may be absent.)
        return fail(
            f"--index-dir {args.index_dir} does not exist; nothing was erased. Give the "
            "save's index folder, or leave --index-dir out to use the one beside the save"
        )
    scope = (
        f"session {args.session!r}"
        if args.owner is None
        else f"{'listed memories' if memory_ids else 'every memory'} of {args.owner!r} in "
        f"session {args.session!r}"
    )

    async def action(memory: VectorMemoryStore) -> int:
        if args.dry_run:
            held = await memory.enumerate(args.session, args.owner)
            count = sum(1 for m in held if memory_ids is None or m.memory_id in memory_ids)
            _print(
                args,
                f"would erase {count} memor{'y' if count == 1 else 'ies'}: {scope} "
                "(nothing changed)",
                {"erased": 0, "would_erase": count},
            )
            return 0
        erased = await memory.erase(args.session, args.owner, memory_ids)
        derived = " and its vectors" if memory.index is not None else ""
        _print(
            args,
            f"erased {erased} memor{'y' if erased == 1 else 'ies'}{derived} for good: {scope}",
            {"erased": erased},
        )
        return 0

    return _run(args, action, with_index=True, work=None if args.dry_run else "erase")


def run_compact(args: argparse.Namespace) -> int:
    """``game-memory compact``: rewrite what needs it; the save's bytes before and after."""

    async def action(memory: VectorMemoryStore) -> int:
        report = await memory.compact()
        _print(
            args,
            f"compacted: {report.bytes_before:,} -> {report.bytes_after:,} bytes "
            f"({report.partitions_rewritten} partitions rewritten, {report.files_removed} "
            "leftover files removed)",
            report.model_dump(mode="json"),
        )
        return 0

    return _run(args, action, work="compaction")
