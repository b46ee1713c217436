"""Memories read only when asked for: a sequence that decodes each record on first access.

A partition opened from its derived read file (``read_files.py``) does not decode its
memories: recall works on columns, and only the memories it hands out (the final hits, a
few dozen) are read. :class:`LazyMemories` holds where each record is (an open file, an
offset, a length) and decodes a record the first time it is indexed, checking its
frame checksum and, through ``decode``, its full model validation and its partition, like
an eager read. Decoded memories are kept (bounded by the partition's size, and released
with the view), so a memory object is the same on every access: joins and tests that
compare identities keep working.

Open files stay valid when a rewrite replaces or removes the file (the old inode lives on
while open), so a view read before an erase still reads what it saw. The process keeps at
most ``descriptors.MAXIMUM_OPEN_RECORD_FILES`` of them open, the most recently read: a
file past the bound is opened again when next read, and a view whose file a rewrite
replaced meanwhile fails its reads, named (``descriptors.RecordFile``). Not on Windows,
where an open file cannot be replaced: there each read opens the file, and a view read
before an erase fails its reads afterwards, named, instead of blocking the erase.

:class:`LazyMemories` compares equal to any sequence of the same memories (tuples
included), slices to a tuple, and concatenates without decoding (``+`` with a tuple gives
another lazy sequence: that is how a grown partition extends its view).

Both lazy sequences here stand in for a tuple in a frozen record (a search snapshot's
``authoritative_memories``), so they behave as that tuple where a record is used as a
value: they hash as the tuple of their memories (equal to it, so a snapshot stays
hashable), and pickle and copy *as* that tuple (``__reduce__``): what is unpickled is a
plain tuple, with no open file or sorting closure to carry. Each of these reads every
memory once; nothing else does.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import operator
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.descriptors import RecordFile
from game_memory.store.growing import Appended, appended

__all__ = [
    "LazyMemories",
    "LazyPositions",
    "Location",
    "RecordFile",
    "Reordered",
    "concatenated",
    "same_prefix",
]

_T = TypeVar("_T")
_ADVISE = getattr(os, "posix_fadvise", None)
_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", 0)

#: Where a record is: its file (an index into the sequence's files), offset, whole length.
Location = tuple[int, int, int]


class LazyPositions(Mapping[str, int]):
    """Memory id -> position for ids in append order, the dict built when lookups are many.

    A partition opened from its read file has its ids as a list; the first recall never
    looks an id up, and the dict costs about 10 to 25 ms per 100k ids, which the first
    append after loading a large save paid (each append looks its id up). Given the ids'
    hashes (``hashes``: ``sha256(memory_id)`` of each id in order, 32 bytes each, as the
    read file holds them), a lookup before the dict exists compares the first 4 bytes of
    the id's hash with every id's (one numpy pass, about 30 µs per 100k ids) and confirms
    the id itself; the last id looked up is remembered (an append looks it up twice). The
    first such lookup has ``background`` (the store's read-file thread, when set) build
    the dict in chunks of :data:`CHUNK` ids, so no lookup waits for it and the GIL is
    never held long; once built, lookups use it and the hash keys (4 bytes per id) are
    dropped. After :data:`SCANS` scans without a dict (no ``background``), the next lookup
    builds it; without hashes, the first does. Iterating and ``len`` use the list.

    Raises:
        PersistenceError: on a lookup that finds an id listed twice, or the lookup that
            builds the dict if any id is (the read file is wrong: its ids are checked
            against the save only as records are decoded).
    """

    __slots__ = (
        "_built", "_hashes", "_ids", "_keys", "_last", "_lock", "_scans", "_where", "background"
    )  # fmt: skip

    #: Lookups answered from the hashes at most, before a lookup builds the dict itself.
    SCANS = 256
    #: Ids added to the dict per step of a background build (about 0.2 ms each), and the
    #: pause before each step (seconds): a thread waiting for the GIL waits one step at most.
    CHUNK = 2_048
    PAUSE = 0.000_5

    def __init__(
        self, ids: Sequence[str], where: str, hashes: bytes | memoryview | None = None
    ) -> None:
        self._ids = ids
        self._where = where
        self._built: dict[str, int] | None = None
        self._lock = threading.Lock()
        self._hashes = hashes if hashes is not None and len(hashes) == 32 * len(ids) else None
        self._keys: npt.NDArray[np.uint32] | None = None
        self._scans = 0
        self._last: tuple[str, int | None] = ("", None)  # the last id scanned for, and where
        #: Where to build the dict off the caller's thread (a ``submit``), if anywhere.
        self.background: Callable[[Callable[[], None]], object] | None = None

    def positions(self) -> dict[str, int]:
        """The dict (built on first use; never mutated: copy it to extend it)."""
        built = self._built
        if built is None:
            with self._lock:
                if self._built is None:
                    found = dict(zip(self._ids, range(len(self._ids)), strict=True))
                    if len(found) != len(self._ids):
                        raise self._twice()
                    self._built = found
                    self._hashes, self._keys = None, None
                built = self._built
        return built

    @property
    def ids(self) -> Sequence[str]:
        """The ids in append order (as given: a read file's, often packed)."""
        return self._ids

    @property
    def built(self) -> bool:
        """Whether the dict was built yet."""
        return self._built is not None

    def _twice(self) -> PersistenceError:
        return PersistenceError(
            f"the read file {self._where} names one memory id twice; the read "
            "file is wrong: delete the folder .game-memory/read (derived "
            "data, rebuilt on the next read) and try again"
        )

    def _find(self, memory_id: str) -> int | None:
        """The position of ``memory_id``, or ``None``: by the dict, or by the hashes."""
        built = self._built
        if built is not None:
            return built.get(memory_id)
        last = self._last  # an append looks its id up twice in a row (check, then grow)
        if last[0] == memory_id and last[0]:
            return last[1]
        with self._lock:
            keys = self._keys
            scan = self._hashes is not None and self._scans < self.SCANS
            if scan:
                self._scans += 1
                if keys is None and self._hashes is not None:
                    keys = _hash_keys(self._ids, self._hashes)
                    if keys is None:
                        self._hashes = None  # they do not match the ids: use the dict
                    else:
                        self._start_build()
                    self._keys = keys
        if not scan or keys is None:
            return self.positions().get(memory_id)
        digest = hashlib.sha256(memory_id.encode("utf-8")).digest()
        target = np.frombuffer(digest[:4], np.uint32)[0]
        ids = self._ids
        found = [p for p in np.flatnonzero(keys == target).tolist() if ids[p] == memory_id]
        if len(found) > 1:
            raise self._twice()
        position = found[0] if found else None
        self._last = (memory_id, position)
        return position

    def _start_build(self) -> None:
        """Queue the dict's build on ``background`` (under the lock; at most once)."""
        background = self.background
        if background is None:
            return
        # A store closing refuses the job: a lookup then builds the dict if it must.
        with contextlib.suppress(RuntimeError):
            background(self._build_in_chunks)

    def _build_in_chunks(self) -> None:
        """The background build: the dict grown :data:`CHUNK` ids at a time (the GIL can
        pass between chunks), installed whole. An id listed twice installs nothing and
        ends the scans, so the next lookup builds the dict itself and raises."""
        ids, found = self._ids, dict[str, int]()
        for start in range(0, len(ids), self.CHUNK):
            time.sleep(self.PAUSE)  # gives up the GIL: the caller's work goes first
            stop = min(start + self.CHUNK, len(ids))
            found.update(zip(ids[start:stop], range(start, stop), strict=True))
        with self._lock:
            if self._built is not None:
                return
            if len(found) != len(ids):
                self._scans, self._last = self.SCANS, ("", None)
                return
            self._built = found
            self._hashes, self._keys = None, None

    def __getitem__(self, memory_id: str) -> int:
        found = self._find(memory_id) if isinstance(memory_id, str) else None
        if found is None:
            raise KeyError(memory_id)
        return found

    def get(self, memory_id: str, default: int | None = None) -> int | None:  # type: ignore[override]
        found = self._find(memory_id) if isinstance(memory_id, str) else None
        return default if found is None else found

    def __contains__(self, memory_id: object) -> bool:
        return isinstance(memory_id, str) and self._find(memory_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def _hash_keys(ids: Sequence[str], hashes: bytes | memoryview) -> npt.NDArray[np.uint32] | None:
    """The first 4 bytes of each id's 32-byte hash, contiguous for the compare; ``None``
    when a sample of the ids (65 spread over the list, first and last included) does not
    hash to what ``hashes`` says: a read file whose hashes do not line up with its ids
    (shifted, from another list) then falls back to the dict, which checks every id."""
    keys = np.frombuffer(hashes, np.uint32).reshape(-1, 8)[:, 0].copy()
    count = len(ids)
    if count:
        sample = sorted({*range(0, count, max(1, count // 64)), count - 1})
        for position in sample:
            digest = hashlib.sha256(ids[position].encode("utf-8")).digest()
            if hashes[32 * position : 32 * position + 32] != digest:
                return None
    return keys


def _will_need(fd: int, offset: int, length: int) -> None:
    """Hint that bytes ``offset .. offset + length`` of ``fd`` will be read soon."""
    if _ADVISE is not None:
        _ADVISE(fd, offset, length, _WILLNEED)


class _Records:
    """The shared state of one partition's lazily decoded records."""

    def __init__(
        self,
        files: Sequence[RecordFile],
        locations: Sequence[Location],
        decode: Callable[[bytes, str], GameMemory],
        expected: Sequence[str] | None,
    ) -> None:
        self.files = files
        self.locations = locations
        self.decode = decode
        self.expected = expected
        self.decoded: list[GameMemory | None] = [None] * len(locations)
        self.lock = threading.Lock()

    def read_ahead(self, indexes: Sequence[int]) -> None:
        """Ask the kernel to read the records of ``indexes`` not decoded yet, all at once,
        before they are read one by one: with the page cache cold (after a reboot), a first
        recall's few dozen records then arrive in one round of parallel reads instead of
        one disk wait each. A hint only (nothing where ``posix_fadvise`` is missing)."""
        if _ADVISE is None:
            return
        decoded, locations, files = self.decoded, self.locations, self.files
        for index in indexes:
            if decoded[index] is None:
                file_index, offset, length = locations[index]
                files[file_index].advise(offset, length, _will_need)

    def get(self, index: int) -> GameMemory:
        memory = self.decoded[index]
        if memory is None:
            file_index, offset, length = self.locations[index]
            file = self.files[file_index]
            memory = self.decode(file.record(offset, length), file.path)
            if self.expected is not None and memory.memory_id != self.expected[index]:
                raise PersistenceError(
                    f"{file.path} holds another memory at byte {offset} than its read file "
                    "says; the read file is wrong: delete the folder .game-memory/read "
                    "(derived data, rebuilt on the next read) and try again"
                )
            with self.lock:
                if self.decoded[index] is None:
                    self.decoded[index] = memory
                else:
                    memory = self.decoded[index]
        assert memory is not None
        return memory


class LazyMemories(Sequence[GameMemory]):
    """An immutable sequence of memories, some decoded only on first access.

    ``records[start:stop]`` of a shared record store, followed by ``tail`` (memories read
    eagerly, e.g. appended since the read file was written).
    """

    __slots__ = ("_records", "_start", "_stop", "_tail")

    def __init__(
        self,
        records: _Records,
        start: int,
        stop: int,
        tail: Sequence[GameMemory] = (),
    ) -> None:
        self._records = records
        self._start = start
        self._stop = stop
        # Shared with the sequences this one extends or is extended by (``growing.py``):
        # an append adds to it in place instead of copying every memory appended since
        # the read file was written.
        self._tail: Appended[GameMemory] = tail if isinstance(tail, Appended) else Appended([*tail])

    @classmethod
    def of(
        cls,
        files: Sequence[RecordFile],
        locations: Sequence[Location],
        decode: Callable[[bytes, str], GameMemory],
        expected: Sequence[str] | None = None,
    ) -> LazyMemories:
        """A sequence over ``locations`` (decoded by ``decode(payload, path)`` when asked;
        a decoded memory whose id is not ``expected[i]`` raises ``PersistenceError``)."""
        return cls(_Records(files, locations, decode, expected), 0, len(locations))

    @property
    def lazy_count(self) -> int:
        """How many of the memories are decoded on demand (the rest were read eagerly)."""
        return self._stop - self._start

    def window(self, start: int, stop: int) -> LazyMemories:
        """Memories ``start..stop`` of the lazily held ones, as a lazy sequence."""
        assert 0 <= start <= stop <= self._stop - self._start
        return LazyMemories(self._records, self._start + start, self._start + stop)

    def decoded_count(self) -> int:
        """How many lazily held memories were decoded so far (for tests and bounds)."""
        part = self._records.decoded[self._start : self._stop]
        return sum(memory is not None for memory in part)

    def __len__(self) -> int:
        return self._stop - self._start + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> GameMemory: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[GameMemory, ...]: ...

    def __getitem__(self, index: int | slice) -> GameMemory | tuple[GameMemory, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("memory index out of range")
        lazy = self._stop - self._start
        if index < lazy:
            return self._records.get(self._start + index)
        return self._tail[index - lazy]

    def __iter__(self) -> Iterator[GameMemory]:
        get = self._records.get
        for index in range(self._start, self._stop):
            yield get(index)
        yield from self._tail

    def picked(self, indexes: Sequence[int]) -> list[GameMemory]:
        """``[self[i] for i in indexes]`` (each in ``0 .. len − 1``) with one bounds check
        for all: a recall reads its few dozen hits this way."""
        if not indexes:
            return []
        if min(indexes) < 0 or max(indexes) >= len(self):
            raise IndexError("memory index out of range")
        start, lazy = self._start, self._stop - self._start
        get, tail = self._records.get, self._tail
        if max(indexes) < lazy:
            # The usual case: every one was decoded by an earlier recall (a list lookup
            # each); a memory not decoded yet is read as ``self[i]`` reads it.
            at = list(map(operator.add, itertools.repeat(start), indexes)) if start else indexes
            found = list(map(self._records.decoded.__getitem__, at))
            # By identity: ``None in found`` would compare every memory with None (a
            # pydantic __eq__ call each).
            if not any(map(operator.is_, found, itertools.repeat(None))):
                return found  # type: ignore[return-value]
            self._records.read_ahead(at)
            return list(map(get, at))
        return [get(start + index) if index < lazy else tail[index - lazy] for index in indexes]

    def __add__(self, other: Sequence[GameMemory]) -> LazyMemories:
        return LazyMemories(self._records, self._start, self._stop, self._tail.extended(other))

    def __eq__(self, other: object) -> bool:
        return _equal(self, other)

    def __ne__(self, other: object) -> bool:
        return not _equal(self, other)

    def __hash__(self) -> int:
        return _tuple_hash(self)

    def __reduce__(self) -> _AsTuple:
        return _as_tuple(self)

    def __repr__(self) -> str:
        return f"LazyMemories({len(self)} memories, {self.decoded_count()} lazily decoded)"

    def extends(self, prefix: Sequence[object]) -> bool:
        """Whether ``prefix`` is known to be this sequence's start without decoding anything."""
        if not isinstance(prefix, LazyMemories):
            return False
        if prefix._records is not self._records or prefix._start != self._start:
            return False
        if prefix._stop != self._stop or len(prefix._tail) > len(self._tail):
            return False
        return self._tail.starts(prefix._tail) or all(
            a is b for a, b in zip(prefix._tail, self._tail, strict=False)
        )


class Reordered(Sequence[GameMemory]):
    """``memories`` in another order, read lazily; ``order()`` (the positions in that order)
    is called on first use, so a snapshot nobody reads in order never sorts."""

    __slots__ = ("_got", "_memories", "_order")

    def __init__(self, memories: Sequence[GameMemory], order: Callable[[], Sequence[int]]) -> None:
        self._memories = memories
        self._got = order
        self._order: Sequence[int] | None = None

    @property
    def _positions(self) -> Sequence[int]:
        if self._order is None:
            self._order = self._got()
        return self._order

    def __len__(self) -> int:
        return len(self._memories)

    @overload
    def __getitem__(self, index: int) -> GameMemory: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[GameMemory, ...]: ...

    def __getitem__(self, index: int | slice) -> GameMemory | tuple[GameMemory, ...]:
        if isinstance(index, slice):
            return tuple(self._memories[at] for at in self._positions[index])
        return self._memories[self._positions[index]]

    def __iter__(self) -> Iterator[GameMemory]:
        memories = self._memories
        return (memories[at] for at in self._positions)

    def __eq__(self, other: object) -> bool:
        return _equal(self, other)

    def __ne__(self, other: object) -> bool:
        return not _equal(self, other)

    def __hash__(self) -> int:
        return _tuple_hash(self)

    def __reduce__(self) -> _AsTuple:
        return _as_tuple(self)

    def __repr__(self) -> str:
        return f"Reordered({len(self)} memories)"


#: What ``__reduce__`` returns for a lazy sequence: "call ``tuple`` on these memories".
_AsTuple = tuple[type[tuple[GameMemory, ...]], tuple[tuple[GameMemory, ...]]]


def _tuple_hash(sequence: Sequence[GameMemory]) -> int:
    """The hash of the tuple ``sequence`` equals (reads every memory)."""
    return hash(tuple(sequence))


def _as_tuple(sequence: Sequence[GameMemory]) -> _AsTuple:
    """``sequence`` reduced for pickle and copy to the plain tuple it equals."""
    return (tuple, (tuple(sequence),))


def _equal(sequence: Sequence[GameMemory], other: object) -> bool:
    if sequence is other:
        return True
    if not isinstance(other, Sequence) or isinstance(other, str) or len(other) != len(sequence):
        return False
    return all(a == b for a, b in zip(sequence, other, strict=True))


def concatenated(base: Sequence[_T], more: Sequence[_T]) -> Sequence[_T]:
    """``base`` followed by ``more``, lazily when ``base`` is lazy (nothing decoded), and in
    place when ``base`` is the newest version of its buffer (``growing.py``)."""
    if isinstance(base, LazyMemories):
        return cast("Sequence[_T]", base + cast("Sequence[GameMemory]", more))
    return appended(base, more)


def same_prefix(memories: Sequence[object], prefix: Sequence[object]) -> bool:
    """Whether ``prefix`` is the start of ``memories`` (equal items), cheaply if lazy or a
    version of one shared buffer."""
    count = len(prefix)
    if len(memories) < count:
        return False
    if isinstance(memories, Appended) and memories.starts(prefix):
        return True
    if isinstance(memories, LazyMemories) or isinstance(prefix, LazyMemories):
        # Only a lazy sequence built on ``prefix`` is known to start with it; anything
        # else is treated as another read (correct, only slower: its caller rebuilds).
        return isinstance(memories, LazyMemories) and memories.extends(prefix)
    return tuple(memories[:count]) == tuple(prefix)
