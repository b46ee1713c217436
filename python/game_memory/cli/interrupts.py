"""Ctrl-C during work that must not stop halfway: note it, finish, then say so.

Most commands stop at a Ctrl-C (``KeyboardInterrupt``, exit 130): what they leave behind
is resumable (a rebuild) or nothing at all. ``check --fix`` is different: it repairs in
the store's worker threads, which Python cannot stop, and the event loop waits for them
before it exits anyway; a "interrupted" then would hide the repairs it made. Here a
Ctrl-C is only recorded: the work finishes and reports, and the caller says it was
interrupted.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from types import FrameType

__all__ = ["finish_on_interrupt"]


@contextlib.contextmanager
def finish_on_interrupt(note: str) -> Iterator[list[int]]:
    """Within the block, a Ctrl-C prints ``note`` on stderr (once) and nothing stops.

    Yields a list that holds one entry per Ctrl-C received (falsy: none). Outside the main
    thread, where no signal handler can be set, the block runs as it would without this.
    """
    received: list[int] = []

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
