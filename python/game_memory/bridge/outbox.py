"""A bounded queue of encoded messages for one connection, drained by its transport.

Responses wait for room (:meth:`Outbox.put`), which stops the connection's reader and so
pushes back on a client that does not read. Notifications never wait: intermediate ones
are dropped when the queue is full (:meth:`Outbox.offer`), so a silent client can never
block the server or grow its memory.
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["Outbox"]


class Outbox:
    """Messages waiting to be sent to one client.

    Args:
        maximum_messages: Queued messages beyond which ``put`` waits and ``offer`` drops.
        maximum_bytes: The same bound in characters of encoded JSON.
    """

    def __init__(self, maximum_messages: int, maximum_bytes: int) -> None:
        self._queue: deque[str] = deque()
        self._size = 0
        self._maximum_messages = maximum_messages
        self._maximum_bytes = maximum_bytes
        self._changed = asyncio.Event()
        self._closed = False
        self.dropped = 0

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (later messages are discarded)."""
        return self._closed

    def _full(self) -> bool:
        return len(self._queue) >= self._maximum_messages or self._size >= self._maximum_bytes

    def _append(self, message: str) -> None:
        self._queue.append(message)
        self._size += len(message)
        self._changed.set()

    async def put(self, message: str) -> None:
        """Queue a message, waiting while the queue is full; discard it once closed."""
        while not self._closed and self._full():
            self._changed.clear()
            await self._changed.wait()
        if not self._closed:
            self._append(message)

    def offer(self, message: str, *, force: bool = False) -> bool:
        """Queue a message without waiting; return ``False`` if it was dropped.

        Args:
            message: The encoded message.
            force: Queue it even when full (for the few notifications a client must see,
                such as the first and last rebuild progress; each caller sends O(1)).
        """
        if self._closed or (self._full() and not force):
            self.dropped += 0 if self._closed else 1
            return False
        self._append(message)
        return True

    async def get(self) -> str | None:
        """Return the next message, waiting for one; ``None`` once closed and empty."""
        while not self._queue:
            if self._closed:
                return None
            self._changed.clear()
            await self._changed.wait()
        message = self._queue.popleft()
        self._size -= len(message)
        self._changed.set()
        return message

    def close(self, *, discard: bool = False) -> None:
        """Stop accepting messages; ``get`` drains what is queued unless ``discard``."""
        self._closed = True
        if discard:
            self._queue.clear()
            self._size = 0
        self._changed.set()
