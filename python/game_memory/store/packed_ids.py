"""Memory ids kept as the one text a read file stores them in, each cut out when asked for.

A read file holds a partition's ids as one blob, each id followed by a NUL. Splitting it
made one string object per id on the first read of a save (about 0.5 ms per 10k ids, the
largest single cost of loading a read file), yet the first recall looks at a few dozen
ids. :class:`PackedIds` keeps the decoded text and where each id ends, and cuts an id out
when it is read: one slice. Iterating or slicing a range splits only that range (the
background build of the id → position dict reads it in chunks, ``lazy.LazyPositions``).

Only ASCII blobs are kept packed (a character per byte, so byte offsets are character
offsets); others are split at once (:func:`unpacked_ids`), as before.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt

__all__ = ["PackedIds", "joined_ids", "unpacked_ids"]

_SEPARATOR = "\0"
#: Picks of at least this many ids make the cut table (:meth:`PackedIds._cuts`) first.
_PICKED_BY_CUTS = 256


class PackedIds(Sequence[str]):
    """``len(ends)`` ids: ``text[ends[i]]`` is the NUL after id ``i``, which starts after
    the NUL before it (at 0 for the first). Immutable."""

    __slots__ = ("_bounds", "_ends", "_text")

    def __init__(self, text: str, ends: npt.NDArray[np.int64]) -> None:
        self._text = text
        self._ends = ends
        self._bounds: array.array[int] | None = None

    def _cuts(self) -> array.array[int]:
        """``-1`` then every id's end, as an ``array`` (made on first use, 8 bytes per id):
        id ``i`` is ``text[cuts[i] + 1 : cuts[i + 1]]``. Reading a numpy array's items one
        by one costs ten times as much, for a pick of many ids (:data:`_PICKED_BY_CUTS`);
        making it costs 0.7 ms per 100k ids, so a few ids are cut by their items instead
        (:meth:`_start`)."""
        bounds = self._bounds
        if bounds is None:
            bounds = array.array("q", [-1])
            bounds.frombytes(self._ends.astype("=i8", copy=False).tobytes())
            self._bounds = bounds
        return bounds

    def _start(self, index: int) -> int:
        """Where id ``index`` (in ``0 .. len``) starts: after the NUL before it."""
        bounds = self._bounds
        if bounds is not None:
            return bounds[index] + 1
        return int(self._ends.item(index - 1)) + 1 if index else 0

    def picked(self, indexes: Sequence[int]) -> list[str]:
        """The ids at ``indexes``, each in ``0 .. len − 1`` (not checked: the caller's)."""
        text = self._text
        if self._bounds is None and len(indexes) < _PICKED_BY_CUTS:
            start, end = self._start, self._ends.item
            return [text[start(index) : end(index)] for index in indexes]
        cuts = self._cuts()
        return [text[cuts[index] + 1 : cuts[index + 1]] for index in indexes]

    @classmethod
    def of_blob(cls, blob: bytes | memoryview) -> PackedIds | None:
        """The ids of a blob of NUL-terminated ASCII ids (bytes, or a read file's map: not
        copied); ``None`` when it holds another byte above 127 (split those with
        :func:`unpacked_ids`).

        Raises:
            ValueError: the blob does not end with a separator (a writer ends every id
                with one).
        """
        try:
            text = str(blob, "ascii")
        except UnicodeDecodeError:
            return None
        if text and text[-1] != _SEPARATOR:
            raise ValueError("its ids do not end with a separator")
        ends = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0).astype(np.int64, copy=False)
        return cls(text, ends)

    @classmethod
    def of_ids(cls, ids: Sequence[str]) -> PackedIds | None:
        """``ids`` packed (already packed ones as they are); ``None`` when one is not ASCII
        or holds a NUL, which a blob cannot separate."""
        if isinstance(ids, PackedIds):
            return ids
        text = _SEPARATOR.join(ids) + _SEPARATOR if ids else ""
        if not text.isascii() or text.count(_SEPARATOR) != len(ids):
            return None
        return cls.of_blob(text.encode("ascii"))

    @property
    def blob(self) -> bytes:
        """The ids as a read file stores them: ASCII, each followed by a NUL."""
        return self._text.encode("ascii")

    @classmethod
    def joined(cls, parts: Sequence[PackedIds]) -> PackedIds:
        """The ids of ``parts`` one after the other."""
        ends: list[npt.NDArray[np.int64]] = []
        shift = 0
        for part in parts:
            ends.append(part._ends + shift)
            shift += len(part._text)
        text = "".join(part._text for part in parts)
        return cls(text, np.concatenate(ends) if ends else np.empty(0, np.int64))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        count = len(self._ends)
        if isinstance(index, slice):
            start, stop, step = index.indices(count)
            if step != 1:
                return [self[position] for position in range(start, stop, step)]
            if start >= stop:
                return []
            return self._text[self._start(start) : self._start(stop) - 1].split(_SEPARATOR)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("memory id index out of range")
        return self._text[self._start(index) : self._start(index + 1) - 1]

    def __len__(self) -> int:
        return len(self._ends)

    def __iter__(self) -> Iterator[str]:
        return iter(self[:])

    def __eq__(self, other: object) -> bool:
        """Equal to ids of the same values in the same order (packed, a list, a tuple)."""
        if isinstance(other, PackedIds):
            return self._text == other._text
        if isinstance(other, list | tuple):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedIds({len(self)} ids)"


def unpacked_ids(blob: bytes) -> list[str]:
    """The ids of a blob of NUL-terminated UTF-8 ids, split at once.

    Raises:
        ValueError: the blob is not UTF-8 or does not end with a separator.
    """
    ids = blob.decode("utf-8").split(_SEPARATOR)
    if ids.pop() != "":
        raise ValueError("its ids do not end with a separator")
    return ids


def joined_ids(parts: Sequence[Sequence[str]], *, pack: bool = False) -> Sequence[str]:
    """The ids of several parts in order: a part's own ids when there is one, packed
    when every part is (with ``pack``, when every part can be: :meth:`PackedIds.of_ids`),
    else one list."""
    if len(parts) == 1:
        return parts[0]
    packed = [PackedIds.of_ids(part) if pack else part for part in parts]
    if packed and all(isinstance(part, PackedIds) for part in packed):
        return PackedIds.joined([part for part in packed if isinstance(part, PackedIds)])
    return list(itertools.chain.from_iterable(parts))
