"""A running bound on the size of a response while its result is being built.

The 16 MiB response cap (``maximum_response_bytes``) must hold while a result is built, not
only once it is serialized: a ``memory.recall_many`` of 64 queries over memories of a
megabyte each would otherwise build (and then serialize) gigabytes before the cap is
checked. Handlers charge each large piece of a result (a recalled memory) to the call's
:class:`ResponseBudget` as they build it; the budget raises :class:`ResponseTooLargeError`
(-32003) as soon as the pieces are known to pass the cap, so the memory a call holds stays
near the cap.

Counting is cheap on the common path: a piece is first charged by an upper bound of its
encoded size (string lengths times the worst escape factor, no serialization). Only when
the bounds could pass the cap are the pieces serialized and measured exactly, so an
ordinary small response costs a few ``len`` calls and is never refused by an estimate.
The members of one JSON-RPC batch share one budget, because they are sent as one array.

Pure, with no lock (the bridge core imports no threading): a result may be built in a
worker thread while another member of its batch charges the same budget, and a charge that
races another may then go uncounted. That only loosens the memory bound by a piece or two;
it never sends a response over the cap, because the encoded response is checked exactly.
"""

from __future__ import annotations

from typing import Any

from game_memory.bridge.codes import ErrorCode, RpcError
from game_memory.bridge.messages import encode_message, utf8_size

__all__ = ["ResponseBudget", "ResponseTooLargeError"]


class ResponseTooLargeError(RpcError):
    """The result being built is over the response cap; answered with -32003.

    Handlers that catch failures per entry (``memory.recall_many``) must let this one
    through: it is about the whole response, not about one query.
    """

    def __init__(self, size: int, bound: int) -> None:
        super().__init__(
            ErrorCode.CAPACITY_EXCEEDED,
            f"the response would be over {size:,} bytes, past the limit of {bound:,} bytes; "
            "ask for less (a smaller limit, fewer queries or batch entries)",
            {"kind": "ResponseTooLarge", "bound": "maximum_response_bytes"},
        )


class ResponseBudget:
    """The size, counted or bounded, of the pieces of one response built so far.

    Args:
        maximum_bytes: The response cap (UTF-8 bytes).
    """

    def __init__(self, maximum_bytes: int) -> None:
        self.maximum_bytes = maximum_bytes
        self._exact = 0
        self._bounded = 0
        self._unmeasured: list[Any] = []

    @property
    def charged(self) -> int:
        """Bytes charged so far: exact sizes plus upper bounds of unmeasured pieces.

        Never less than the encoded size of the pieces; callers use it to decide whether a
        result is big enough to serialize off the event loop.
        """
        return self._exact + self._bounded

    def charge(self, piece: Any, upper_bound: int) -> None:
        """Count ``piece``, a JSON-ready value whose encoded size is at most ``upper_bound``.

        Raises:
            ResponseTooLargeError: The pieces charged so far, measured exactly, are over
                the cap. Nothing more should be built for this response.
        """
        if self._exact + self._bounded + upper_bound <= self.maximum_bytes:
            self._bounded += upper_bound
            self._unmeasured.append(piece)
            return
        # Near the cap the bounds may overestimate: measure every piece exactly, once.
        for earlier in self._unmeasured:
            self._exact += utf8_size(encode_message(earlier))
        self._unmeasured.clear()
        self._bounded = 0
        self._exact += utf8_size(encode_message(piece))
        if self._exact > self.maximum_bytes:
            raise ResponseTooLargeError(self._exact, self.maximum_bytes)
