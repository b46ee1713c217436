"""Read a file descriptor (stdin) from a daemon thread without blocking the event loop.

Works for pipes, terminals, regular files and ``/dev/null`` alike, which the event loop's
own pipe support does not. At most ``queue_chunks`` chunks wait in memory; the thread
stops reading until the loop has taken one.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections import deque

__all__ = ["StdinReader"]


class StdinReader:
    """Hand the bytes of ``fd`` to the event loop, chunk by chunk, until end of file.

    Args:
        fd: The file descriptor to read (default 0, stdin). It is never closed.
        chunk_size: Largest chunk read at once.
        queue_chunks: Chunks read ahead before the thread waits for the loop.
    """

    def __init__(self, fd: int = 0, *, chunk_size: int = 65_536, queue_chunks: int = 4) -> None:
        self._fd = fd
        self._chunk_size = chunk_size
        self._room = threading.Semaphore(queue_chunks)
        self._chunks: deque[bytes] = deque()
        self._ready = asyncio.Event()
        self._eof = False
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start the reading thread; call from the event loop that will :meth:`read`."""
        self._loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._run, name=f"game-memory-read-fd{self._fd}")
        thread.daemon = True  # a read blocked on a silent parent must not keep us alive
        thread.start()

    async def read(self) -> bytes:
        """Return the next chunk; ``b""`` at end of file (and on every later call)."""
        while not self._chunks:
            if self._eof:
                return b""
            self._ready.clear()
            await self._ready.wait()
        chunk = self._chunks.popleft()
        if chunk:
            self._room.release()
        else:
            self._eof = True
        return chunk

    def stop(self) -> None:
        """Ask the thread to stop at its next chance; pending chunks stay readable."""
        self._stopped = True

    def _deliver(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._ready.set()

    def _read_once(self) -> bytes:
        while True:
            try:
                return os.read(self._fd, self._chunk_size)
            except BlockingIOError:
                # Someone made the descriptor non-blocking (a shared terminal): wait for it.
                select.select([self._fd], [], [], 1.0)
            except InterruptedError:
                continue
            except OSError:
                return b""

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        while not self._stopped:
            while not self._room.acquire(timeout=0.5):
                if self._stopped:
                    return
            chunk = self._read_once()
            try:
                loop.call_soon_threadsafe(self._deliver, chunk)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                return
            if not chunk:
                return
