"""What ``game-memory search`` says when it finds nothing, or falls back to lexical recall.

An empty answer to ``--owner Mira`` when the owner is ``mira``, or to a session id with a
typo, looks like "no memories" unless the command says why; a lexical fallback looks like
weak recall unless it says what to run. These hints read the save only (the session's
memories, to list its owners; a few spellings of the session id) and never fail the
command: a hint that cannot be computed is left out. They go to stderr, so ``--json``
output stays one JSON document.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
from pathlib import Path

from game_memory.cli.database_urls import shown_url
from game_memory.errors import GameMemoryError
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMemory, VectorMemoryState

__all__ = ["empty_result_hint", "fallback_hint"]


async def empty_result_hint(memory: VectorMemoryStore, args: argparse.Namespace) -> str | None:
    """Why a search found nothing: an unknown session or owner (with near misses), or the
    moment hiding later memories."""
    try:
        memories = await memory.enumerate(args.session)
        owners = sorted({m.owner_id for m in memories})
        if not owners:
            for spelling in _spellings(args.session):
                if await memory.enumerate(spelling):
                    return (
                        f"session {args.session!r} holds no memories in this save; did you mean "
                        f"{spelling!r}? (ids are case-sensitive)"
                    )
            return f"session {args.session!r} holds no memories in this save"
        if args.owner is not None and args.owner not in owners:
            near = _near(args.owner, owners)
            if near:
                suggestion = " or ".join(repr(owner) for owner in near)
                return (
                    f"owner {args.owner!r} has no memories in session {args.session!r}; did you "
                    f"mean {suggestion}? (ids are case-sensitive)"
                )
            listed = ", ".join(repr(owner) for owner in owners[:10])
            more = f" and {len(owners) - 10} more" if len(owners) > 10 else ""
            return (
                f"owner {args.owner!r} has no memories in session {args.session!r}; its owners "
                f"are {listed}{more}"
            )
    except GameMemoryError:
        return None
    if args.tick is not None:
        asked = [m for m in memories if args.owner is None or m.owner_id == args.owner]
        hidden = sum(1 for m in asked if _hidden_by_moment(m, args.timeline, args.tick))
        if hidden:
            return (
                f"no memory matched as of tick {args.tick} on timeline {args.timeline!r}; "
                f"{hidden} of the {len(asked)} memories asked are hidden at that moment "
                "(of later ticks, of other timelines, or expired)"
            )
    return None


def _hidden_by_moment(m: GameMemory, timeline: str, tick: int) -> bool:
    """Whether the moment alone hides ``m`` (a later tick, another timeline, expired): the
    hint blames the moment only when it hid something, never for an answer that no words
    matched or that ``forget`` removed."""
    if m.moment.timeline_id != timeline or m.moment.tick > tick:
        return True
    expiry = m.expires_at
    return expiry is not None and expiry.timeline_id == timeline and expiry.tick <= tick


async def fallback_hint(memory: VectorMemoryStore, args: argparse.Namespace) -> str:
    """What to run when semantic recall could not help (the lexical fallback)."""
    database = getattr(args, "database", None)
    where = ["--database", shown_url(database)] if database else ["--save-dir", args.save_dir]
    command = ["game-memory", "rebuild", *where]
    if args.index_dir is not None:
        command += ["--index-dir", args.index_dir]
    command += ["--model", args.model, "--session", args.session]
    rebuild = shlex.join(command)
    try:
        status = await memory.get_status(args.session)
    except GameMemoryError as exc:
        return f"semantic recall was unavailable ({exc}); then run: {rebuild}"
    if status.state is VectorMemoryState.REBUILD_REQUIRED:
        return (
            f"the index holds vectors of another model ({status.stale_entries} stale), so "
            f"recall was lexical; re-embed with: {rebuild}"
        )
    if status.requires_rebuild:
        folder = getattr(memory.index, "directory", None)
        if isinstance(folder, Path) and folder.is_dir() and not os.access(folder, os.W_OK):
            # A rebuild could not write either: say what stops it first.
            return (
                f"the index folder {folder} is not writable, so recall was lexical; make it "
                f"writable, then run: {rebuild} --force"
            )
        return (
            f"{status.pending_entries} memories have no usable vector (pending, or a damaged "
            f"index), so recall was lexical; repair with: {rebuild} --force"
        )
    return "the embedding model failed for this query (see the warning above); try again"


def _spellings(value: str) -> list[str]:
    found: list[str] = []
    for spelling in (value.strip(), value.lower(), value.casefold(), value.title(), value.upper()):
        if spelling and spelling != value and spelling not in found:
            found.append(spelling)
    return found


def _near(value: str, known: list[str]) -> list[str]:
    folded = [name for name in known if name.casefold() == value.casefold()]
    close = difflib.get_close_matches(value, known, n=3, cutoff=0.6)
    return list(dict.fromkeys(folded + close))[:3]
