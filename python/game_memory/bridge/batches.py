"""Collect the responses of one JSON-RPC batch and emit them as one array.

Pure. Entries answered at once and calls that finish later fill slots in request order;
when the last call finishes the array is sent, capped in size as one response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from game_memory.bridge.messages import (
    RequestId,
    encode_message,
    error_response,
    response_too_large,
    utf8_size,
)

__all__ = ["Batch"]


@dataclass(eq=False)
class Batch:
    """The responses of one batch, in request order.

    Attributes:
        ids: The id of each entry (for errors that replace an entry).
        slots: The encoded response of each entry; ``None`` for notifications and
            entries still running.
        pending: Calls of the batch still running.
        after: Messages to send right after the batch response (start-up diagnostics).
    """

    ids: list[RequestId]
    slots: list[str | None]
    pending: int = 0
    after: list[str] = field(default_factory=list)

    @classmethod
    def of_size(cls, size: int) -> Batch:
        """Return an empty batch of ``size`` entries."""
        return cls(ids=[None] * size, slots=[None] * size)

    def fill(self, slot: int, text: str) -> bool:
        """Record the response of a finished call; return whether the batch is complete."""
        self.slots[slot] = text
        self.pending -= 1
        return self.pending == 0

    def emit(self, maximum_bytes: int) -> list[str]:
        """Return the batch response (if any entry has one) followed by ``after``.

        When the array would exceed ``maximum_bytes``, its largest entries are replaced by
        capacity errors until it fits.
        """
        parts = {slot: text for slot, text in enumerate(self.slots) if text is not None}
        if not parts:
            return list(self.after)
        sizes = {slot: utf8_size(text) for slot, text in parts.items()}
        total = sum(sizes.values()) + len(parts) + 1
        for slot in sorted(sizes, key=sizes.__getitem__, reverse=True):
            if total <= maximum_bytes:
                break
            error = error_response(self.ids[slot], response_too_large(total, maximum_bytes))
            parts[slot] = encode_message(error)
            total += len(parts[slot]) - sizes[slot]
        return ["[" + ",".join(parts[slot] for slot in sorted(parts)) + "]", *self.after]
