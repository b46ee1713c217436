"""Split a byte stream into lines of bounded size, for the stdio transport.

Pure: feed chunks in, get complete lines (or :data:`OVERSIZED` markers) out. A line over
the bound is never held in memory: its bytes are counted and dropped until its newline,
and it yields one marker carrying its size.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LineFramer", "Oversized"]


@dataclass(frozen=True)
class Oversized:
    """A line longer than the bound was dropped; ``size`` is its length in bytes."""

    size: int


class LineFramer:
    """Cut a byte stream into ``\\n``-terminated lines of at most ``maximum_bytes``.

    A trailing ``\\r`` is removed; blank lines are skipped. Memory held is at most
    ``maximum_bytes`` plus one chunk.

    Args:
        maximum_bytes: The longest line passed on (without its line ending).
    """

    def __init__(self, maximum_bytes: int) -> None:
        self._maximum = maximum_bytes
        self._buffer = bytearray()
        self._dropping: int | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """Add ``chunk``; return the lines (and oversize markers) it completes, in order."""
        results: list[bytes | Oversized] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._take(piece)
            if end < 0:
                break
            self._end_line(results)
            start = end + 1
        return results

    def end(self) -> list[bytes | Oversized]:
        """Signal end of input; return the unterminated last line, if any."""
        results: list[bytes | Oversized] = []
        if self._buffer or self._dropping is not None:
            self._end_line(results)
        return results

    def _take(self, piece: bytes) -> None:
        if self._dropping is not None:
            self._dropping += len(piece)
            return
        # Allow one extra byte for a '\r' that the line ending will remove.
        if len(self._buffer) + len(piece) > self._maximum + 1:
            self._dropping = len(self._buffer) + len(piece)
            self._buffer.clear()
            return
        self._buffer += piece

    def _end_line(self, results: list[bytes | Oversized]) -> None:
        if self._dropping is not None:
            results.append(Oversized(self._dropping))
            self._dropping = None
            return
        line = bytes(self._buffer)
        self._buffer.clear()
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._maximum:
            results.append(Oversized(len(line)))
        elif line.strip():
            results.append(line)
