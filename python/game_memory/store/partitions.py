"""Owner partitions: their packs and append-only logs, and a cache of their views.

An owner's memories live in a session folder ``s-<sha256(session)>/``:

* in packs ``p-1.pack``, ``p-2.pack``... (immutable bulk writes, see packs.py), as the
  owner's range of each pack, and
* in the owner's log ``o-<sha256(owner)>.log``, continued in ``o-<hash>.1.log``... when a
  segment would grow past ``maximum_file_bytes``. Only the last segment is appended to.

Its retractions (``forget``) live in the owner's retraction log ``r-<sha256(owner)>.log``,
continued in segments the same way (``retractions.py``).

Reads take no lock: a reader sees every record completely written before it looked, and
ignores a torn log tail (a record still being written, or one whose writer died). Logs
only grow between rewrites, so a cached partition is brought up to date by reading just
the new bytes; a file replaced by a rewrite (erase, compaction) is read again whole.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from game_memory.durable import fs
from game_memory.durable.fs import lstat_regular
from game_memory.durable.names import identity_hash, partition_hash, segment_path
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.descriptors import naming_exhaustion
from game_memory.store.documents import DocumentError, decode_document
from game_memory.store.growing import Growing
from game_memory.store.grown import Part, build_view, grown_state
from game_memory.store.layout import salvage_advice
from game_memory.store.lazy import LazyPositions, concatenated, same_prefix
from game_memory.store.packs import (
    PACK_NAME,
    PackIndex,
    pack_path,
    read_pack_index,
    read_pack_range,
)
from game_memory.store.read_chain import seeded_state
from game_memory.store.read_path import content_digests, persist, wants_persist
from game_memory.store.records import HEADER_BYTES, RecordCorruption, scan_records
from game_memory.store.retractions import Retraction, decode_retraction
from game_memory.store.rewrite_counts import RewriteCounts
from game_memory.store.state import (
    Chain,
    PackPart,
    PartitionState,
    Segment,
    is_current,
    session_folder,
)
from game_memory.store.upkeep import Upkeep

# identity_hash, partition_hash, segment_path and PartitionState are re-exported: other
# layers import them from here.
__all__ = [
    "PartitionCache",
    "PartitionState",
    "identity_hash",
    "partition_hash",
    "segment_path",
]

#: The view builder under its old name here (``tests/store/test_view.py`` imports it).
_build_view = build_view
_LOG = logging.getLogger("game_memory.store")
_SEGMENT = re.compile(r"^[or]-([0-9a-f]{64})(?:\.([1-9][0-9]{0,8}))?\.log$")
_PACK_CACHE = 4_096
_Item = TypeVar("_Item")


class PartitionCache:
    """Read partitions through a bounded, thread-safe LRU cache of their parsed records.

    Args:
        maximum_file_bytes: Largest log segment or pack accepted (bounds record payloads).
        maximum_entries: How many memories the cache keeps parsed across partitions.

    ``background``, when set (the file store sets its read-file thread's ``submit``), runs
    the writing of read files (``read_path.persist``) off the reading or appending thread:
    a read file costs the partition's size to write, and an append or a recall must not
    wait for that (at 100k memories, seconds). Without it they are written in the caller.
    """

    def __init__(self, maximum_file_bytes: int, maximum_entries: int) -> None:
        self._maximum_file_bytes = maximum_file_bytes
        self._maximum_entries = maximum_entries
        self._states: OrderedDict[tuple[str, str], PartitionState] = OrderedDict()
        self._packs: OrderedDict[str, PackIndex] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()
        self.background: Callable[[Callable[[], None]], object] | None = None
        #: Where a load's stamps go (``upkeep.py``): the file store's, drained by its
        #: read-file thread and at close; without one they are written during the load.
        self.upkeep: Upkeep | None = None
        self._persisting: set[tuple[str, str]] = set()  # a background write is queued
        #: Other processes' rewrites (``rewrite_counts.py``; the reader sets it): a cached
        #: partition whose counts moved is read again from its files, never reused.
        self.counts: RewriteCounts | None = None

    # -- listing ------------------------------------------------------------------------

    def pack_indexes(self, session_directory: str | Path) -> list[PackIndex]:
        """The session's packs, in number order (``p-1``, ``p-2``... until one is missing)."""
        indexes: list[PackIndex] = []
        number = 1
        while True:
            path = pack_path(session_directory, number)
            info = lstat_regular(path)
            if info is None:
                return indexes
            indexes.append(self._pack_index(path, info))
            number += 1

    def owner_hashes(self, session_directory: str | Path) -> list[str]:
        """Every owner with records in the session (logs and packs), sorted; links refused."""
        hashes: set[str] = set()
        if session_folder(session_directory) is None:
            return []
        for entry in fs.list_directory(Path(session_directory)):
            match = _SEGMENT.match(entry.name)
            named = match is not None or PACK_NAME.match(entry.name)
            if named and not entry.is_file(follow_symlinks=False):
                raise PersistenceError(f"{entry.path} should be a regular file")
            if match is not None:
                hashes.add(match.group(1))
        for index in self.pack_indexes(session_directory):
            hashes.update(index.owners)
        return sorted(hashes)

    # -- reading ------------------------------------------------------------------------

    def current(self, session_hash: str, owner_hash: str) -> PartitionState | None:
        """The cached state of a partition if its files are still the ones it was read
        from (``is_current``: a few ``lstat`` calls), else ``None``; never reads a file."""
        return self._current(session_hash, owner_hash, None)

    def _current(
        self, session_hash: str, owner_hash: str, rewrites: tuple[int, int] | None
    ) -> PartitionState | None:
        """:meth:`current`, with the rewrite counts already read before it (``read``), or
        ``None`` to read them after the ``lstat`` calls."""
        key = (session_hash, owner_hash)
        with self._lock:
            cached = self._states.get(key)
        if cached is None or not is_current(cached):
            return None
        # Read after the lstat calls (or before them, by ``read``): a file they found under
        # a reused inode number was made after the rewrite that freed it, which counted
        # first.
        if self.counts is not None:
            if rewrites is None:
                rewrites = self.counts.stamp(session_hash, owner_hash)
            if cached.rewrites != rewrites:
                return None
        with self._lock:
            if key in self._states:
                self._states.move_to_end(key)
        return cached

    def read(
        self, session_directory: str | Path, session_hash: str, owner_hash: str
    ) -> PartitionState:
        """Return the partition's current state, reusing what did not change since last read.

        The descriptors a cached state holds are bounded for the whole process, however
        many partitions are cached (``descriptors.py``).

        Raises:
            PersistenceError: a link, a corrupt record or pack, a record in the wrong
                partition, or one id holding two different memories; or no descriptor left
                to open a file with, said so (``descriptors.out_of_descriptors``: no damage).
        """
        with naming_exhaustion():
            return self._read(session_directory, session_hash, owner_hash)

    def _read(
        self, session_directory: str | Path, session_hash: str, owner_hash: str
    ) -> PartitionState:
        """:meth:`read`, its errors as they come."""
        # The counts before any file is looked at: a rewrite after this is seen next time.
        rewrites = None if self.counts is None else self.counts.stamp(session_hash, owner_hash)
        current = self._current(session_hash, owner_hash, rewrites)
        if current is not None:
            return current
        key = (session_hash, owner_hash)
        with self._lock:
            cached = self._states.get(key)
        if cached is not None and cached.rewrites != rewrites:
            # Rewritten by another process since: its files may be new ones that look
            # like the old (``rewrite_counts.py``). Read from scratch, packs included.
            cached = None
            self._forget_packs(os.fspath(session_directory))
        folder_inode = session_folder(session_directory)
        indexes = self.pack_indexes(session_directory)
        if cached is None and folder_inode is not None:
            # A read file stands in for an earlier read of the bytes it covers (checked
            # against them first); the rest of this read then goes on as for any cache.
            cached = seeded_state(
                os.fspath(session_directory),
                session_hash,
                owner_hash,
                indexes,
                lambda number: segment_path(session_directory, owner_hash, number),
                lambda data, path: _decode(data, path, session_hash, owner_hash),
                self.upkeep,  # the stamps of what the load checked: off this read
            )
            if cached is not None and cached.view is not None:
                positions = cached.view.positions
                if isinstance(positions, LazyPositions):
                    positions.background = self.background  # builds its dict there
        packs = self._read_packs(indexes, owner_hash, session_hash, cached)
        same_packs = cached is not None and len(packs) == len(cached.packs)
        if cached is not None and same_packs:
            same_packs = all(a is b for a, b in zip(packs, cached.packs, strict=True))
        probes = [(pack.path, pack.inode, pack.size, pack.changed) for pack in indexes]

        def memories(data: bytes, path: str) -> GameMemory:
            return _decode(data, path, session_hash, owner_hash)

        segments, appended, grown = self._read_series(
            session_directory, owner_hash, "o", cached.segments if cached else (), memories, probes
        )
        retractions, _, retracted = self._read_series(
            session_directory,
            owner_hash,
            "r",
            cached.retraction_segments if cached else (),
            _retraction,
            probes,
        )
        extends = (
            same_packs and cached is not None and cached.view is not None and appended is not None
        )
        changed = not same_packs or grown
        absent = (
            pack_path(session_directory, len(indexes) + 1),
            segment_path(session_directory, owner_hash, len(segments)),
            segment_path(session_directory, owner_hash, len(retractions), "r"),
        )
        folder = None if folder_inode is None else (os.fspath(session_directory), folder_inode)
        if not changed and not retracted and cached is not None:
            state = dataclasses.replace(
                cached, probes=tuple(probes), absent=absent, folder=folder, rewrites=rewrites
            )
            state = self._remember(key, state)
            return self._persisted(session_directory, key, state)
        for series in (segments, retractions):
            for segment in series[:-1]:
                if segment.torn_bytes:
                    raise PersistenceError(
                        f"{segment.path} ends with {segment.torn_bytes} bytes of an incomplete "
                        "record, but it is not the last segment: a record the save "
                        f"acknowledged was cut short. {salvage_advice(segment.path)}."
                    )
        retracted_items = tuple(item for segment in retractions for item in segment.items)
        if extends and cached is not None:
            view = build_view(cached.view, appended or [], session_directory, retracted_items)
        else:
            everything = [m for part in packs for m in part.memories]
            everything.extend(m for segment in segments for m in segment.items)
            view = build_view(None, everything, session_directory, retracted_items)
        state = PartitionState(
            session_hash,
            owner_hash,
            tuple(packs),
            tuple(segments),
            view,
            tuple(probes),
            absent,
            folder,
            tuple(retractions),
            # The chain covers a prefix of these memories only if they extend its view's.
            cached.read_chain if extends and cached is not None else (),
            rewrites,
        )
        state = self._remember(key, state)
        return self._persisted(session_directory, key, state)

    def install_parts(
        self,
        session_directory: str | Path,
        state: PartitionState,
        parts: Sequence[Part],
    ) -> bool:
        """Cache ``state`` grown by what a writer just wrote, without reading it back.

        ``parts`` are a write plan's parts in order, each ``(path, size before, framed
        records, their memories)``: the first may grow the tail segment (its size before is
        the tail's end), the others (size before ``-1``) are the next new segments of the
        series, in order; a batch that rolls a partition over writes both. Only when
        ``state`` is still the cached version (or that version marked covered by a read
        file since: ``_same_read``) and every file is exactly as it was plus the records
        (same inode, that size; a new segment of the next number holding just them);
        otherwise nothing is installed and the next read reads as before. An empty
        partition (no view yet: its first batch or append) gets the view a read of the
        new files would build. Call under the writer lock, after the write is durable.
        """
        key = (state.session_hash, state.owner_hash)
        with self._lock:
            current = self._states.get(key)
        if current is None or not _same_read(current, state) or not parts:
            return False
        # ``current`` is ``state`` itself or ``state`` marked covered by a read file written
        # meanwhile (``_covered``): grow that one, so the coverage is not forgotten.
        grown = grown_state(current, parts, session_directory)
        if grown is None:
            return False
        with self._lock:
            if self._states.get(key) is not current:
                return False  # replaced meanwhile: the next read reads the files
            self._remember_locked(key, grown)
        self._persisted(session_directory, key, grown, appended=True)
        return True

    def _persisted(
        self,
        session_directory: str | Path,
        key: tuple[str, str],
        state: PartitionState,
        *,
        appended: bool = False,
    ) -> PartitionState:
        """Write the partition's read file when this read decoded enough, or this append
        (``appended``) wrote enough (``read_path.py``), in the background when there is
        one (then ``state`` is returned as it is)."""
        if not wants_persist(state, appended=appended):
            return state
        directory = os.fspath(session_directory)
        background = self.background
        if background is None:
            chain = persist(directory, state, content_digests)
            if chain is not None:
                return self._covered(key, state, chain) or state
            return state
        with self._lock:
            if key in self._persisting:
                return state
            self._persisting.add(key)
        try:
            background(lambda: self._persist_later(directory, key, state))
        except RuntimeError:  # shut down: closing writes what the read files do not cover
            with self._lock:
                self._persisting.discard(key)
        return state

    def _persist_later(self, directory: str, key: tuple[str, str], state: PartitionState) -> None:
        """The background job: write ``state``'s read file; never raises (an optimisation).

        Skipped when the cache no longer holds ``state`` or a state grown from it by
        appends: an erase or compaction replaced its files meanwhile (and forgot the
        cached state), so the bytes its memories were read from may be gone. A rewrite
        that begins while the file is written is caught by ``persist`` itself.
        """
        try:
            with self._lock:
                current = self._states.get(key)
            if current is None or (current is not state and not _grew_from(current, state)):
                return
            chain = persist(directory, state, content_digests)
            if chain is not None:
                self._covered(key, state, chain)
        except (PersistenceError, OSError) as exc:
            _LOG.info("a read file was not written (%s)", exc)
        finally:
            with self._lock:
                self._persisting.discard(key)

    def _covered(
        self, key: tuple[str, str], state: PartitionState, chain: Chain
    ) -> PartitionState | None:
        """Record that the read files now cover ``state``'s memories (as ``chain``), on the
        cached state if it is ``state`` or grew from it by appends only (the chain covers a
        prefix of it then); a state replaced meanwhile (an erase, another file) is left
        alone.

        Returns the cached state as marked (``None`` when it was left alone). The marked
        state is a copy that differs only in ``read_chain`` (``_same_read``), so a writer
        holding the unmarked one still installs what it wrote on top of it."""
        with self._lock:
            current = self._states.get(key)
            if current is None:
                return None
            if current.read_chain == chain:
                return current
            if current is not state and not _grew_from(current, state):
                return None
            marked = dataclasses.replace(current, read_chain=chain)
            self._states[key] = marked
            return marked

    def persist_all(self) -> int:
        """Write the read file of every cached partition it does not cover in full (at close).

        Never raises: a read file is an optimisation (``read_path.py``). Returns how many
        were written.
        """
        with self._lock:
            states = list(self._states.values())
        written = 0
        for state in states:
            if state.folder is None or not wants_persist(state, closing=True):
                continue
            try:
                chain = persist(state.folder[0], state, content_digests, closing=True)
                written += chain is not None
            except (PersistenceError, OSError) as exc:
                _LOG.info("a read file was not written at close (%s)", exc)
        return written

    def _read_series(
        self,
        session_directory: str | Path,
        owner_hash: str,
        series: str,
        previous: tuple[Segment[_Item], ...],
        decode: Callable[[bytes, str], _Item],
        probes: list[tuple[str, int, int, int]],
    ) -> tuple[list[Segment[_Item]], list[_Item] | None, bool]:
        """Read one series of log segments, reusing ``previous`` where files did not change.

        Returns the segments, the items appended since ``previous`` (``None`` when an
        earlier item changed: a file was replaced, cut or removed, so nothing extends), and
        whether anything changed at all. Adds each segment's identity to ``probes``.
        """
        segments: list[Segment[_Item]] = []
        appended: list[_Item] | None = []
        changed = False
        index = 0
        while True:
            path = segment_path(session_directory, owner_hash, index, series)
            info = lstat_regular(path)
            if info is None:
                break
            probes.append((path, info.st_ino, info.st_size, info.st_ctime_ns))
            before = previous[index] if index < len(previous) else None
            segment, grown = self._refresh(path, info, before, decode)
            if segment is not before:
                changed = True
                known = len(before.items) if before is not None else 0
                if (
                    before is not None
                    and not grown
                    and not same_prefix(segment.items, before.items)
                ):
                    appended = None  # the file was replaced or cut: rebuild the view
                if appended is not None:
                    appended.extend(segment.items[known:])
            segments.append(segment)
            index += 1
        if len(previous) > len(segments):
            changed, appended = True, None
        return segments, appended, changed

    def forget(self, session_hash: str, owner_hash: str) -> None:
        """Drop a partition from the cache."""
        with self._lock:
            state = self._states.pop((session_hash, owner_hash), None)
            if state is not None:
                self._entries -= state.memory_count

    def forget_session(self, session_hash: str) -> None:
        """Drop every partition of a session from the cache."""
        with self._lock:
            for key in [key for key in self._states if key[0] == session_hash]:
                self._entries -= self._states.pop(key).memory_count

    def _forget_packs(self, session_directory: str) -> None:
        """Drop the cached pack indexes of one session folder."""
        prefix = os.path.join(session_directory, "")
        with self._lock:
            for path in [path for path in self._packs if path.startswith(prefix)]:
                del self._packs[path]

    def _pack_index(self, path: str, info: os.stat_result) -> PackIndex:
        with self._lock:
            index = self._packs.get(path)
        if index is None or (index.inode, index.device, index.size, index.changed) != (
            info.st_ino,
            info.st_dev,
            info.st_size,
            info.st_ctime_ns,
        ):
            index = read_pack_index(path, info, self._maximum_file_bytes)
        with self._lock:
            self._packs[path] = index
            self._packs.move_to_end(path)
            while len(self._packs) > _PACK_CACHE:
                self._packs.popitem(last=False)
        return index

    def _read_packs(
        self,
        indexes: list[PackIndex],
        owner_hash: str,
        session_hash: str,
        cached: PartitionState | None,
    ) -> list[PackPart]:
        previous = {id(part.index): part for part in cached.packs} if cached is not None else {}
        parts: list[PackPart] = []
        for index in indexes:
            if owner_hash not in index.owners:
                continue
            part = previous.get(id(index))
            if part is None or part.index is not index:
                payloads = read_pack_range(
                    index, owner_hash, self._maximum_file_bytes - HEADER_BYTES
                )
                memories = tuple(
                    _decode(payload, index.path, session_hash, owner_hash) for payload in payloads
                )
                part = PackPart(index, memories)
            parts.append(part)
        return parts

    def _refresh(
        self,
        path: str,
        info: os.stat_result,
        previous: Segment[_Item] | None,
        decode: Callable[[bytes, str], _Item],
    ) -> tuple[Segment[_Item], bool]:
        """The segment as it is now, and whether it is ``previous`` grown (its items a
        prefix by construction: only the bytes after its end were read)."""
        same_file = (
            previous is not None
            and previous.inode == info.st_ino
            and previous.device == info.st_dev
            and info.st_size >= previous.end
        )
        if same_file and previous is not None and info.st_size == previous.size:
            return previous, True
        if same_file and previous is not None and not _continues(path, previous, decode):
            same_file = False  # another file under a reused inode number: read it whole
        offset = previous.end if same_file and previous is not None else 0
        read = fs.read_file(path, self._maximum_file_bytes, offset=offset)
        if read is None:
            raise PersistenceError(f"{path} vanished while it was being read")
        data, opened = read
        if opened.st_ino != info.st_ino:
            return self._refresh(path, opened, None, decode)[0], False
        try:
            scan = scan_records(
                data, base_offset=offset, maximum_payload=self._maximum_file_bytes - HEADER_BYTES
            )
        except RecordCorruption as exc:
            raise PersistenceError(
                f"{path} is corrupt ({exc.reason} at byte {exc.offset}); game-memory never "
                f"guesses at damaged data. {salvage_advice(path)}."
            ) from exc
        new = [decode(payload, path) for payload in scan.payloads]
        starts = np.empty(len(new), np.int64)
        position = offset
        for number, payload in enumerate(scan.payloads):
            starts[number] = position
            position += HEADER_BYTES + len(payload)
        room: Growing | None = None
        if same_file and previous is not None:
            items = concatenated(previous.items, new)
            starts, room = Growing.extend(previous.starts, previous.room, starts)
        else:
            items = tuple(new)
        segment = Segment(
            path,
            opened.st_dev,
            opened.st_ino,
            offset + len(data),
            scan.end,
            scan.torn_bytes,
            items,
            starts,
            room,
        )
        return segment, same_file

    def _remember(self, key: tuple[str, str], state: PartitionState) -> PartitionState:
        with self._lock:
            return self._remember_locked(key, state)

    def _remember_locked(self, key: tuple[str, str], state: PartitionState) -> PartitionState:
        """Cache ``state`` (evicting the least recently used past the bound); the state as
        cached (its read-file chain may be a newer one: see below)."""
        old = self._states.pop(key, None)
        if old is not None:
            self._entries -= old.memory_count
            if old.read_file_count > state.read_file_count and _grew_from(state, old):
                # A read built ``state`` from ``old``'s version before the read-file thread
                # marked it covered by a newer chain: keep that chain (the one on disk).
                state = dataclasses.replace(state, read_chain=old.read_chain)
        self._states[key] = state
        self._entries += state.memory_count
        while self._entries > self._maximum_entries and len(self._states) > 1:
            _, evicted = self._states.popitem(last=False)
            self._entries -= evicted.memory_count
        return state


def _same_read(current: PartitionState, state: PartitionState) -> bool:
    """Whether ``current`` is ``state``, or a copy of it that differs only in the read
    files covering its memories (``PartitionCache._covered``)."""
    return current is state or (
        current.view is state.view
        and current.segments is state.segments
        and current.packs is state.packs
        and current.retraction_segments is state.retraction_segments
        and current.probes is state.probes
        and current.absent is state.absent
    )


def _grew_from(current: PartitionState, earlier: PartitionState) -> bool:
    """Whether ``current``'s memories are ``earlier``'s plus appended ones: the same packs,
    and its memory log the same files, each at least as long (logs only grow between
    rewrites, and a rewrite gives them other inodes). Its retractions may differ: read
    files hold memories, not retractions."""
    if len(current.packs) != len(earlier.packs) or len(current.segments) < len(earlier.segments):
        return False
    if any(a is not b for a, b in zip(current.packs, earlier.packs, strict=True)):
        return False
    return current.memory_count >= earlier.memory_count and all(
        (now.path, now.device, now.inode) == (then.path, then.device, then.inode)
        and now.end >= then.end
        for now, then in zip(current.segments, earlier.segments, strict=False)
    )


def _decode(payload: bytes, path: str, session_hash: str, owner_hash: str) -> GameMemory:
    try:
        memory = decode_document(payload)
    except DocumentError as exc:
        raise PersistenceError(f"{path} holds an unreadable record: {exc}") from exc
    if partition_hash(memory.session_id) != session_hash or (
        partition_hash(memory.owner_id) != owner_hash
    ):
        raise PersistenceError(
            f"{path} holds a memory of another session or owner: a record escaped its "
            "partition, so the save is corrupt"
        )
    return memory


def _continues(path: str, previous: Segment[_Item], decode: Callable[[bytes, str], _Item]) -> bool:
    """Whether the file at ``path`` still holds ``previous``'s last record where it was read.

    A rewrite (an erase, a compaction) replaces a segment with a new file, and a file made
    by a later rewrite can get the inode number the first one freed: a reader that cached
    the first file then saw the same inode, a size past its end, and read on from there
    into the middle of another record ("corrupt at byte 264": a crash campaign's compact
    round, with a writer and two compactions beside the reader). Checked by reading that
    last record again (one ``pread``; a segment without items has nothing to compare, and
    is read from its start either way).
    """
    if not previous.items or len(previous.starts) != len(previous.items):
        return not previous.items
    start = int(previous.starts[-1])
    try:
        data = fs.read_range(path, start, previous.end - start)
        scan = scan_records(data, base_offset=start, maximum_payload=len(data))
    except (PersistenceError, RecordCorruption):
        return False
    if len(scan.payloads) != 1 or scan.end != previous.end:
        return False
    try:
        return bool(decode(scan.payloads[0], path) == previous.items[-1])
    except PersistenceError:
        return False


def _retraction(payload: bytes, path: str) -> Retraction:
    try:
        return decode_retraction(payload)
    except DocumentError as exc:
        raise PersistenceError(f"{path} holds an unreadable retraction: {exc}") from exc
