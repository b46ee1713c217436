"""Ctrl-C during work that must not stop halfway: note it, finish, then say so.

Most commands stop at a Ctrl-C (``KeyboardInterrupt``, exit 130): what they leave behind
is resumable (a rebuild) or nothing at all. ``check --fix``, ``erase``, ``compact``,
``forget`` and ``migrate`` are different: they write in the store's worker threads, which
Python cannot stop, and the library never cancels a write, so the event loop waits for
them before it exits anyway; an "interrupted" then hid what they did (an erase of 99,000
memories ran 3 to 6 s after the Ctrl-C, silent, and ended in "interrupted" with no count).
Here a Ctrl-C is only recorded: the work finishes and reports, and the caller says it was
interrupted (exit 130).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

__all__ = ["finish_on_interrupt", "finishing_note", "interrupted_note"]


@contextlib.contextmanager
def finish_on_interrupt(note: str | None) -> Iterator[list[int]]:
    """Within the block, a Ctrl-C prints ``note`` on stderr (once) and nothing stops.

    Yields a list that holds one entry per Ctrl-C received (falsy: none). Outside the main
    thread, where no signal handler can be set, and with no ``note``, the block runs as it
    would without this.
    """
    received: list[int] = []
    if note is None:
        yield received
        return

    def record(signal_number: int, _frame: FrameType | None) -> None:
        if not received:
            # os.write, not print: the handler may run in the middle of a print to stderr.
            with contextlib.suppress(OSError):
                os.write(2, f"{note}\n".encode(errors="replace"))
        received.append(signal_number)

    try:
        previous = signal.signal(signal.SIGINT, record)
    except ValueError:  # not the main thread
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def finishing_note(work: str) -> str:
    """What a Ctrl-C prints at once during ``work`` (an erase, a migration, a compaction:
    writes the library never stops halfway), before the work has ended."""
    return (
        f"interrupted: the {work} goes on to the end (it is never stopped halfway) and then "
        "reports what it did"
    )


def interrupted_note(work: str) -> str:
    """The notice after the report of ``work`` that a Ctrl-C did not stop."""
    return f"interrupted (Ctrl-C); the {work} ran to its end first: the report is complete"
