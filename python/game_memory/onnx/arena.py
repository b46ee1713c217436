"""Giving onnxruntime's arena growth back to the system once a session goes idle.

onnxruntime's CPU arena keeps the largest activations a session ever needed: three batches
of 16 texts of 256 tokens grow it by ~200-400 MB that it never returns. Turning the arena
off gives them back but makes every batch map and fault in its buffers afresh (25-30%
slower, measured by ``benchmarks/sidecar_memory.py --compare-sessions``). So the arena stays
on, and an :class:`IdleArenaShrinker` waits: once no run has started for
``IDLE_SECONDS`` after a run that may have grown the arena, it makes one tiny run with
onnxruntime's ``memory.enable_memory_arena_shrinkage`` run option (which frees every arena
region no run is using) and trims the C heap. Runs in a burst (a rebuild, a conversation)
reuse the grown arena at full speed; the memory goes back when the game stops asking.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import time
from collections.abc import Callable

__all__ = ["IDLE_SECONDS", "SHRINK_RUN_OPTION", "IdleArenaShrinker", "release_freed_heap"]

#: Seconds without a run after which the arena's growth is given back.
IDLE_SECONDS = 1.0
#: The run option (key, value) that shrinks the CPU arena at the end of a run.
SHRINK_RUN_OPTION = ("memory.enable_memory_arena_shrinkage", "cpu:0")


def release_freed_heap() -> None:
    """Give memory the C heap holds but no longer uses back to the system (glibc only).

    A no-op where the C library has no ``malloc_trim`` (macOS, Windows, musl).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


class IdleArenaShrinker:
    """Call ``shrink`` once, ``IDLE_SECONDS`` after the last of a burst of runs.

    ``ran()`` after every run; ``close()`` stops the waiting thread (idempotent). The
    thread starts with the first run and is a daemon: a process may exit without closing.

    Args:
        shrink: Makes the shrinking run and trims the heap; errors in it are ignored (the
            memory stays held, nothing else changes).
        idle_seconds: How long no run must start before ``shrink``.
    """

    def __init__(self, shrink: Callable[[], None], idle_seconds: float = IDLE_SECONDS) -> None:
        self._shrink = shrink
        self._idle = idle_seconds
        self._condition = threading.Condition()
        self._last_run = 0.0
        self._pending = False
        self._closed = False
        self._thread: threading.Thread | None = None

    def ran(self) -> None:
        """Note a run: the arena may have grown; shrink it once the session is idle."""
        with self._condition:
            if self._closed:
                return
            self._last_run = time.monotonic()
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._wait, name="game-memory-onnx-arena", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def close(self) -> None:
        """Stop waiting; a shrink in progress finishes."""
        with self._condition:
            self._closed = True
            self._condition.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _wait(self) -> None:
        while True:
            with self._condition:
                while not self._closed and not self._pending:
                    self._condition.wait()
                if self._closed:
                    return
                remaining = self._last_run + self._idle - time.monotonic()
                if remaining > 0:
                    self._condition.wait(remaining)
                    continue  # a run may have come meanwhile: measure again
                self._pending = False
            try:
                self._shrink()
            except Exception:  # the memory stays held; the session itself is unaffected
                continue
