"""Owner partitions: append-only segment logs of memory records, and a cache of their views.

One owner's memories live in ``s-<sha256(session)>/o-<sha256(owner)>.log``, continued in
``o-<hash>.1.log``, ``o-<hash>.2.log``... when a segment would grow past the store's
``maximum_file_bytes``. Only the last segment is ever appended to.

Reads take no lock: a reader sees every record completely written before it looked, and
ignores a torn tail (a record still being written, or one whose writer died). Because the
logs only grow, a cached partition is brought up to date by reading just the new bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store import fs
from game_memory.store.documents import DocumentError, decode_document
from game_memory.store.records import HEADER_BYTES, RecordCorruption, scan_records
from game_memory.store.view import PartitionView

__all__ = [
    "PartitionCache",
    "PartitionState",
    "identity_hash",
    "owner_hashes",
    "segment_path",
]

_SEGMENT = re.compile(r"^o-([0-9a-f]{64})(?:\.([1-9][0-9]{0,8}))?\.log$")


def identity_hash(value: str) -> str:
    """SHA-256 of the UTF-8 bytes of ``value``, as 64 lower-case hex digits."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def segment_path(session_directory: Path, owner_hash: str, index: int) -> Path:
    """The path of segment ``index`` (0 = the first) of an owner partition."""
    suffix = "" if index == 0 else f".{index}"
    return session_directory / f"o-{owner_hash}{suffix}.log"


def owner_hashes(session_directory: Path) -> list[str]:
    """The owner hashes with a partition in ``session_directory`` (sorted); links refused."""
    hashes: set[str] = set()
    for entry in fs.list_directory(session_directory):
        match = _SEGMENT.match(entry.name)
        if match is None:
            continue  # temporary files and foreign droppings are not partitions
        if not entry.is_file(follow_symlinks=False):
            raise PersistenceError(f"{entry.path} should be a regular file")
        hashes.add(match.group(1))
    return sorted(hashes)


@dataclass(frozen=True, slots=True)
class _Segment:
    path: Path
    device: int
    inode: int
    size: int
    end: int
    torn_bytes: int
    memories: tuple[GameMemory, ...]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition as read: its segments and the view of its memories.

    ``tail_path``/``tail_end``/``tail_torn`` describe the last segment, which a writer
    appends to after cutting off a torn tail.
    """

    session_hash: str
    owner_hash: str
    segments: tuple[_Segment, ...]
    view: PartitionView | None

    @property
    def memory_count(self) -> int:
        return sum(len(segment.memories) for segment in self.segments)

    @property
    def tail(self) -> _Segment | None:
        return self.segments[-1] if self.segments else None

    def find(self, memory_id: str) -> GameMemory | None:
        """The memory with ``memory_id`` in this partition, if present."""
        if self.view is None:
            return None
        position = self.view.positions.get(memory_id)
        return None if position is None else self.view.memories[position]

    def has_memory_hash(self, memory_hash: str) -> bool:
        """Whether a memory whose id hashes to ``memory_hash`` is in this partition."""
        if self.view is None:
            return False
        return any(identity_hash(m.memory_id) == memory_hash for m in self.view.memories)


class PartitionCache:
    """Read partitions through a bounded, thread-safe LRU cache of their parsed segments.

    Args:
        maximum_file_bytes: Largest segment file accepted (and record payload bound).
        maximum_entries: How many memories the cache keeps parsed across partitions.
    """

    def __init__(self, maximum_file_bytes: int, maximum_entries: int) -> None:
        self._maximum_file_bytes = maximum_file_bytes
        self._maximum_entries = maximum_entries
        self._states: OrderedDict[tuple[str, str], PartitionState] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()

    def read(self, session_directory: Path, session_hash: str, owner_hash: str) -> PartitionState:
        """Return the partition's current state, reusing cached segments that did not change.

        Raises:
            PersistenceError: a link, a corrupt record, a record in the wrong partition, or
                one id holding two different memories.
        """
        key = (session_hash, owner_hash)
        with self._lock:
            cached = self._states.get(key)
        segments: list[_Segment] = []
        appended: list[GameMemory] = []
        extends = cached is not None and cached.view is not None
        changed = cached is None
        index = 0
        while True:
            path = segment_path(session_directory, owner_hash, index)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                break
            except OSError as exc:
                raise PersistenceError(f"could not inspect {path}: {exc.strerror}") from exc
            if not stat.S_ISREG(info.st_mode):
                raise PersistenceError(f"{path} should be a regular file, not a link or folder")
            previous = cached.segments[index] if cached and index < len(cached.segments) else None
            segment = self._refresh(path, info, previous, session_hash, owner_hash)
            if segment is not previous:
                changed = True
                known = len(previous.memories) if previous is not None else 0
                if previous is not None and segment.memories[:known] != previous.memories:
                    extends = False  # the file was replaced or cut: rebuild the view
                appended.extend(segment.memories[known:])
            segments.append(segment)
            index += 1
        if cached is not None and len(cached.segments) > len(segments):
            changed = extends = False
        if not changed and cached is not None:
            with self._lock:
                if key in self._states:
                    self._states.move_to_end(key)
            return cached
        for segment in segments[:-1]:
            if segment.torn_bytes:
                raise PersistenceError(
                    f"{segment.path} ends with {segment.torn_bytes} bytes of an incomplete "
                    "record, but it is not the last segment: the save is corrupt"
                )
        base = cached.view if extends and cached is not None else None
        memories = appended if base is not None else [m for seg in segments for m in seg.memories]
        state = PartitionState(
            session_hash, owner_hash, tuple(segments), _build_view(base, memories, segments)
        )
        self._remember(key, state)
        return state

    def forget(self, session_hash: str, owner_hash: str) -> None:
        """Drop a partition from the cache (after this process wrote to it)."""
        with self._lock:
            state = self._states.pop((session_hash, owner_hash), None)
            if state is not None:
                self._entries -= state.memory_count

    def _refresh(
        self,
        path: Path,
        info: os.stat_result,
        previous: _Segment | None,
        session_hash: str,
        owner_hash: str,
    ) -> _Segment:
        same_file = (
            previous is not None
            and previous.inode == info.st_ino
            and previous.device == info.st_dev
            and info.st_size >= previous.end
        )
        if same_file and previous is not None and info.st_size == previous.size:
            return previous
        offset = previous.end if same_file and previous is not None else 0
        read = fs.read_file(path, self._maximum_file_bytes, offset=offset)
        if read is None:
            raise PersistenceError(f"{path} vanished while it was being read")
        data, opened = read
        if opened.st_ino != info.st_ino:
            return self._refresh(path, opened, None, session_hash, owner_hash)
        try:
            scan = scan_records(
                data, base_offset=offset, maximum_payload=self._maximum_file_bytes - HEADER_BYTES
            )
        except RecordCorruption as exc:
            raise PersistenceError(
                f"{path} is corrupt ({exc.reason} at byte {exc.offset}); restore the save from "
                "a backup. game-memory never guesses at damaged data."
            ) from exc
        memories: list[GameMemory] = list(previous.memories) if same_file and previous else []
        for payload in scan.payloads:
            try:
                memory = decode_document(payload)
            except DocumentError as exc:
                raise PersistenceError(f"{path} holds an unreadable record: {exc}") from exc
            if identity_hash(memory.session_id) != session_hash or (
                identity_hash(memory.owner_id) != owner_hash
            ):
                raise PersistenceError(
                    f"{path} holds a memory of another session or owner: a record escaped its "
                    "partition, so the save is corrupt"
                )
            memories.append(memory)
        return _Segment(
            path,
            opened.st_dev,
            opened.st_ino,
            offset + len(data),
            scan.end,
            scan.torn_bytes,
            tuple(memories),
        )

    def _remember(self, key: tuple[str, str], state: PartitionState) -> None:
        with self._lock:
            old = self._states.pop(key, None)
            if old is not None:
                self._entries -= old.memory_count
            self._states[key] = state
            self._entries += state.memory_count
            while self._entries > self._maximum_entries and len(self._states) > 1:
                _, evicted = self._states.popitem(last=False)
                self._entries -= evicted.memory_count


def _build_view(
    base: PartitionView | None, memories: list[GameMemory], segments: list[_Segment]
) -> PartitionView | None:
    """Extend ``base`` with ``memories`` (or build from scratch when ``base`` is None)."""
    positions = dict(base.positions) if base is not None else {}
    ordered = list(base.memories) if base is not None else []
    for memory in memories:
        position = positions.get(memory.memory_id)
        if position is not None:
            if ordered[position] != memory:
                raise PersistenceError(
                    f"{segments[-1].path} (or an earlier segment) holds two different memories "
                    f"with one id {memory.memory_id!r}; the save is corrupt"
                )
            continue
        positions[memory.memory_id] = len(ordered)
        ordered.append(memory)
    if not ordered:
        return None
    first = ordered[0]
    return PartitionView(first.session_id, first.owner_id, tuple(ordered), positions, base)
