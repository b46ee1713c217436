"""A bounded queue of encoded messages for one connection, drained by its transport.

The bound (``outbox_messages``, ``outbox_bytes``) covers the messages queued and the room
held for answers being built (:meth:`Outbox.hold`): a recall takes room for its answer
before it builds it, so a client that does not read never makes the server build answers
it has no room for. Responses wait for room (:meth:`Outbox.put`); while the queue is full
or anything waits for room, the session stops reading from the client
(:meth:`Outbox.has_room`), which pushes back on a client that does not read.
Notifications never wait: intermediate ones are dropped when the queue is full
(:meth:`Outbox.offer`), so a silent client can never block the server, and the answers
it holds stay within the bound.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["Outbox"]


class Outbox:
    """Messages waiting to be sent to one client, and room held for answers being built.

    Args:
        maximum_messages: Queued messages beyond which ``put`` waits and ``offer`` drops.
        maximum_bytes: The same bound in characters of encoded JSON, room held included.

    Use from one event loop; nothing here is thread-safe.
    """

    def __init__(self, maximum_messages: int, maximum_bytes: int) -> None:
        self._queue: deque[str] = deque()
        self._size = 0
        self._reserved = 0
        self._reserved_messages = 0
        self._waiting = 0
        self._maximum_messages = maximum_messages
        self._maximum_bytes = maximum_bytes
        self._changed = asyncio.Event()
        self._closed = False
        self.dropped = 0

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (later messages are discarded)."""
        return self._closed

    @property
    def queued_bytes(self) -> int:
        """Characters of the messages queued now."""
        return self._size

    @property
    def reserved_bytes(self) -> int:
        """Room held for answers being built (see :meth:`hold`)."""
        return self._reserved

    def _full(self) -> bool:
        return (
            len(self._queue) + self._reserved_messages >= self._maximum_messages
            or self._size + self._reserved >= self._maximum_bytes
        )

    def _append(self, message: str) -> None:
        self._queue.append(message)
        self._size += len(message)
        self._changed.set()

    async def _wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    def has_room(self, *, behind_waiting: bool = True) -> bool:
        """Whether the client may be read again: closed, or the queue is not full (and,
        with ``behind_waiting``, no answer is waiting for room)."""
        if self._closed:
            return True
        return not self._full() and not (behind_waiting and self._waiting)

    async def changed(self) -> None:
        """Wait until something changes: a message queued or taken, room held or given
        back, :meth:`wake` or :meth:`close`."""
        await self._wait_change()

    def wake(self) -> None:
        """Wake whoever waits in :meth:`changed`, to check its condition again."""
        self._changed.set()

    def fits(self, size: int) -> bool:
        """Whether room for ``size`` more characters may be held now: the messages queued
        and held are under the message bound and ``size`` fits in the byte bound beside
        what is queued and held, or nothing is queued or held at all (an answer bigger
        than the whole bound still gets its turn). Always once closed."""
        if self._closed or (not self._queue and self._reserved_messages == 0):
            return True
        return (
            len(self._queue) + self._reserved_messages < self._maximum_messages
            and self._size + self._reserved + size <= self._maximum_bytes
        )

    @property
    def empty(self) -> bool:
        """Whether no message is queued (the client has taken everything so far)."""
        return not self._queue

    def hold(self, size: int, *, messages: int = 0) -> None:
        """Hold room for ``size`` characters (and ``messages`` messages) of answers being
        built (see :meth:`fits`); give it back with :meth:`release` once they are queued
        or given up."""
        self._reserved += size
        self._reserved_messages += messages
        self._changed.set()

    def release(self, size: int, *, messages: int = 0) -> None:
        """Give back room held with :meth:`hold`."""
        self._reserved -= size
        self._reserved_messages -= messages
        self._changed.set()

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()`` (checked at each change) or the outbox is closed.

        Counts as waiting for room (see :meth:`has_room`) meanwhile.
        """
        if self._closed or ready():
            return
        self._waiting += 1
        try:
            while not self._closed and not ready():
                await self._wait_change()
        finally:
            self._waiting -= 1
            self._changed.set()

    async def put(self, message: str) -> None:
        """Queue a message, waiting while the queue is full; discard it once closed.

        Cancelled while waiting, the message is not queued.
        """
        if not self._closed and self._full():
            self._waiting += 1
            try:
                while not self._closed and self._full():
                    await self._wait_change()
            finally:
                self._waiting -= 1
                self._changed.set()
        if not self._closed:
            self._append(message)

    def offer(self, message: str, *, force: bool = False) -> bool:
        """Queue a message without waiting; return ``False`` if it was dropped.

        Args:
            message: The encoded message.
            force: Queue it even when full: for the few notifications a client must see
                (the first and last rebuild progress; each caller sends O(1)), an answer
                whose room was held, and the answers the shutdown owes.
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
            await self._wait_change()
        message = self._queue.popleft()
        self._size -= len(message)
        self._changed.set()
        return message

    def close(self, *, discard: bool = False) -> None:
        """Stop accepting messages; ``get`` drains what is queued unless ``discard``.

        Waiters for room return at once. Room held stays counted until it is released.
        """
        self._closed = True
        if discard:
            self._queue.clear()
            self._size = 0
        self._changed.set()
