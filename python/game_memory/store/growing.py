"""Sequences that the versions of a partition share and the newest extends in place.

Every append makes a new version of its partition's cached state (``partitions.py``): the
tail segment's memories and record offsets, the view's memories. Building each by
concatenation copied the segment's and the view's memories (thousands of references at
100k memories) on every append. Here a version is the first ``length`` items of a buffer
shared with the versions before it: extending the *newest* version (its length is the
buffer's filled end) writes after that end, which no older version reads; extending any
other version (a read that decoded the same growth twice, an older version kept
somewhere) copies its prefix into a new buffer, so versions never share a slot one of them
could overwrite. The same pattern as ``view.IdList`` (ids) and ``index/columns.py``.

Thread-safe: extending takes one lock, and items already handed out are never written
again (a list iterated by another thread while it grows at its end is safe in CPython).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from game_memory.durable.buffers import empty_buffer

__all__ = ["Appended", "Growing", "appended"]

_T = TypeVar("_T")
_D = TypeVar("_D", bound=np.generic)
_EXTENDING = threading.Lock()
_MINIMUM_ROOM = 256


class Appended(Sequence[_T]):
    """The first ``length`` items of a list shared by versions; immutable.

    Compares equal to any sequence of equal items (tuples included) and slices to a tuple,
    as the tuples it replaces did.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[_T], length: int | None = None) -> None:
        self._items = items
        self._length = len(items) if length is None else length

    def extended(self, more: Sequence[_T]) -> Appended[_T]:
        """These items followed by ``more`` (in place when this is the newest version)."""
        with _EXTENDING:
            if len(self._items) == self._length:
                self._items.extend(more)
                return Appended(self._items, len(self._items))
        return Appended([*self._items[: self._length], *more])

    def starts(self, other: Sequence[object]) -> bool:
        """Whether ``other`` is known to be a prefix of this, without comparing items: a
        version of the same buffer no longer than this one."""
        return (
            isinstance(other, Appended)
            and other._items is self._items
            and other._length <= self._length
        )

    @overload
    def __getitem__(self, index: int) -> _T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[_T, ...]: ...

    def __getitem__(self, index: int | slice) -> _T | tuple[_T, ...]:
        if isinstance(index, slice):
            return tuple(self._items[slice(*index.indices(self._length))])
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("index out of range")
        return self._items[index]

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[_T]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=False))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Appended({len(self)} items)"


def appended(base: Sequence[_T], more: Sequence[_T]) -> Sequence[_T]:
    """``base`` followed by ``more``: an :class:`Appended` (the first extension of another
    sequence copies it once; later ones are in place)."""
    if isinstance(base, Appended):
        return base.extended(more)
    return Appended([*base, *more])


class Growing:
    """A buffer with spare room: the versions of one column (a segment's record offsets, a
    join's rows, a lexical index's token counts) are read-only prefixes of it, and the
    newest is extended in place.

    Besides the copy, each version built by concatenation was a new allocation of the
    column's size (800 KB at 100k memories): several per append, each freed by the next,
    which the C allocator's arenas kept (the RSS of a 100k NPC's process grew by about
    35 KB per append, 70 MB of it given back by ``malloc_trim``)."""

    __slots__ = ("_buffer", "_newest")

    def __init__(self, buffer: npt.NDArray[Any], filled: int) -> None:
        self._buffer = buffer
        self._newest = _prefix(buffer, filled)  # the one version extended in place

    @staticmethod
    def extend(
        array: npt.NDArray[_D], room: Growing | None, more: npt.NDArray[Any]
    ) -> tuple[npt.NDArray[_D], Growing]:
        """``array`` (a version of ``room``, or any array) followed by ``more`` (cast to
        ``array``'s type); the new version and its room. A full buffer grows by half (at
        least 256 values)."""
        count, added = int(array.size), int(more.size)
        with _EXTENDING:
            if (
                room is not None
                and array is room._newest
                and count + added <= room._buffer.size
                and room._buffer.dtype == array.dtype
            ):
                room._buffer[count : count + added] = more
                room._newest = _prefix(room._buffer, count + added)
                return room._newest, room
        size = count + added
        buffer = empty_buffer((max(size + size // 2, size + _MINIMUM_ROOM),), array.dtype)
        buffer[:count] = array
        buffer[count:size] = more
        grown = Growing(buffer, size)
        return grown._newest, grown


def _prefix(buffer: npt.NDArray[_D], count: int) -> npt.NDArray[_D]:
    view = buffer[:count]
    view.flags.writeable = False
    return view
