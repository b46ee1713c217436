"""Room in one connection's queue, taken for an answer before the answer is built.

A recall's answer may be megabytes. Were it built first and queued afterwards, a client
that does not read would make the server hold every answer its running requests build (up
to 64 of 16 MiB each); so a recall takes room for the part it is about to build
(:meth:`AnswerRoom.take`, an upper bound of its size) and waits while there is none. The
room is held by the response (its :class:`~game_memory.bridge.budget.ResponseBudget`: the
members of one batch share it) until the response is queued (:meth:`AnswerRoom.give_back`).

No response ever waits for another: a response that already holds room and needs more (a
``memory.recall_many``, a batch) may take it while it is the oldest response holding room
and the client has taken everything queued. So the queue holds at most its bound
(``outbox_bytes``) plus one response, and two responses holding room never wait on each
other for good.
"""

from __future__ import annotations

from game_memory.bridge.outbox import Outbox

__all__ = ["AnswerRoom"]


class AnswerRoom:
    """The room the responses of one connection hold in its outbox, oldest first.

    Args:
        outbox: The connection's outbox, which counts the room held against its bound.

    Use from one event loop.
    """

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        self._held: dict[object, int] = {}

    def holds(self, owner: object) -> bool:
        """Whether ``owner`` holds room now."""
        return owner in self._held

    async def take(self, owner: object, size: int, cap: int) -> None:
        """Take room for ``size`` more characters of ``owner``'s response, waiting for it.

        Args:
            owner: The response the room is for (the same object for its every part).
            size: An upper bound of the part about to be built.
            cap: The most room one response may hold (the response cap): a response
                never takes more, since a bigger one is refused anyway.

        Cancelled while waiting, nothing more is held.
        """
        size = min(size, cap - self._held.get(owner, 0))
        if size <= 0:
            return
        await self._outbox.wait_until(lambda: self._may_take(owner, size))
        # A response is one message, whatever the parts it is built from.
        self._outbox.hold(size, messages=0 if owner in self._held else 1)
        self._held[owner] = self._held.get(owner, 0) + size

    def give_back(self, owner: object) -> bool:
        """Give back all the room ``owner`` holds; return whether it held any."""
        if owner not in self._held:
            return False
        self._outbox.release(self._held.pop(owner), messages=1)
        return True

    def _may_take(self, owner: object, size: int) -> bool:
        if self._outbox.fits(size):
            return True
        oldest = next(iter(self._held), None)
        return oldest is owner and self._outbox.empty
