"""Which journals a save has finished, and what is said of one that is an old copy.

Each journal, of a batch (``migration.json``, ``journal.py``) or of a rewrite
(``rewrite.json``, ``rewrite_journal.py``), carries a ``generation``, one more than the
newest its save finished, and finishing one records its generation in the journal's
*trace*: ``migration.done.json`` (the batch journal itself, renamed there instead of
deleted) or ``rewrite.done.json``. A journal not newer than a trace is an old copy put back
after its operation finished (by a cloud sync or a backup tool restoring one file):
applying it would destroy memories acknowledged since, so it is refused with
:class:`StaleJournalError`, which ``game-memory check`` reports and ``check --fix`` sets
aside (a journal holds no memory).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError

__all__ = [
    "BATCH_JOURNAL",
    "REWRITE_JOURNAL",
    "StaleJournalError",
    "finished_path",
    "last_finished",
    "next_generation",
    "older",
    "retire",
    "stale_message",
    "whole_number",
]

BATCH_JOURNAL = "migration.json"
REWRITE_JOURNAL = "rewrite.json"
_MAXIMUM_BYTES = 1 << 24


class StaleJournalError(PersistenceError):
    """A journal that disagrees with its save was not applied (see the module docstring).

    Attributes:
        journal: The journal's path.
        reason: Why it is not the journal of an operation interrupted in this save.
    """

    def __init__(self, journal: Path, reason: str) -> None:
        super().__init__(stale_message(journal, reason))
        self.journal = journal
        self.reason = reason


def whole_number(value: object, least: int = 0) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``least``: what a journal's
    counts and generations must be."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def finished_path(journal: Path) -> Path:
    """Where a journal goes once its operation is finished (``x.json`` -> ``x.done.json``)."""
    return journal.with_name(journal.name.removesuffix(".json") + ".done.json")


def last_finished(data: Path) -> tuple[int, str] | None:
    """The newest generation the save in ``data`` finished, with the trace recording it,
    or ``None`` (no trace: no journal of this release was ever finished there).

    A trace that does not parse counts as none: it only ever adds a check, holds no
    memory, and the next finished journal replaces it.

    Raises:
        PersistenceError: a trace is a link, not a regular file, or too large.
    """
    newest: tuple[int, str] | None = None
    for journal in (BATCH_JOURNAL, REWRITE_JOURNAL):
        trace = finished_path(data / journal)
        read = fs.read_file(trace, _MAXIMUM_BYTES)
        if read is None:
            continue
        try:
            generation = json.loads(read[0]).get("generation", 0)
        except (ValueError, AttributeError):
            continue
        if whole_number(generation) and (newest is None or generation > newest[0]):
            newest = (generation, trace.name)
    return newest


def next_generation(data: Path) -> int:
    """The generation of a journal begun now: one more than :func:`last_finished`'s."""
    finished = last_finished(data)
    return 1 if finished is None else finished[0] + 1


def retire(journal: Path) -> None:
    """Take a journal away durably: rename it to its trace (:func:`finished_path`), then
    fsync the folder. Nothing if it is gone already."""
    try:
        os.replace(journal, finished_path(journal))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise PersistenceError(f"could not remove {journal}: {exc.strerror}") from exc
    fs.fsync_directory(journal.parent)


def older(generation: int, finished: tuple[int, str] | None) -> str | None:
    """Why a journal of ``generation`` is an old copy, given :func:`last_finished`; or
    ``None`` (it is newer than anything finished)."""
    if finished is None or generation > finished[0]:
        return None
    if generation == 0:
        return (
            "it carries no generation, so an earlier release wrote it, and this save has "
            f"finished a later operation since ({finished[1]} records generation "
            f"{finished[0]}): it is an old copy put back, or an earlier release was "
            "interrupted in this save after this one wrote to it, and the two cannot be "
            "told apart"
        )
    return (
        f"it is older than the last operation this save finished: its generation, "
        f"{generation}, is not newer, and {finished[1]} records generation {finished[0]} as "
        "finished"
    )


def stale_message(journal: Path, reason: str) -> str:
    """What to say of a journal that disagrees with the save: it was not applied, why, and
    the repair (the journal holds no memory: set it aside, then check the save)."""
    save = shlex.quote(str(journal.parent.parent))
    return (
        f"{journal} was not applied: {reason}. Such a journal is most likely an old copy "
        "put back (by a cloud sync or a backup tool restoring one file), or the save "
        "changed behind it, and acting on it could destroy memories acknowledged since. "
        f"Move {journal.name} out of {journal.parent} "
        f"(it holds no memory; keep it for a post-mortem), then run 'game-memory check "
        f"--save-dir {save}' (or let 'game-memory check --fix --save-dir {save}' set it "
        "aside)"
    )
