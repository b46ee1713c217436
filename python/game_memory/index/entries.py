"""The derived index's binary entry records and memory digests.

An entry says, for one memory of one owner partition, whether a vector of some embedding
identity exists and where. It holds no memory text: only ``sha256(memory_id)`` to find the
memory and a content digest to prove the vector was computed from *this* content.

Record (128 bytes, little-endian)::

    0   magic "GMV\\x01"      4  state u8 (1 ready, 2 pending, 3 failed, 4 deleted), 3 zero
    8   identity code u32     12 row u32 (0xFFFFFFFF = none)
    16  sha256(memory_id)     48 content digest (sha256 of the memory's canonical JSON)
    80  diagnostic code, ASCII, zero-padded to 32 bytes
    112 vector-file tag u32   116 row checksum u32   120 4 zero bytes
    124 CRC-32 of bytes 0..123

Records are appended; the last record of a memory wins (a deleted state is a tombstone).
The tag names the generation of the partition's vector files (``o-<owner>.<code>.<tag>.f32``):
every record of one entries file carries the same tag, and a compaction writes new vector
files under a new tag before it replaces the entries file, so a reader always pairs an
entries file with the rows it was written against.

The row checksum (ready records only) is the sum of the row's 32-bit little-endian words
modulo 2**32: any change of one byte of a row changes it, and a whole partition's rows
are verified with one vectorized pass when first loaded (CRC-32 of every row would take
ten times longer). Records themselves carry a CRC-32.

Hashes and digests are raw 32-byte fields (numpy ``V32``): a fixed-width *string* field
would drop trailing zero bytes and make one hash in 128 unmatchable.
"""

from __future__ import annotations

import hashlib
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from game_memory.durable.checksum import crc32
from game_memory.model import GameMemory
from game_memory.store.digests import encoded_digests

__all__ = [
    "ENTRY_BYTES",
    "ENTRY_DTYPE",
    "NO_VALUE",
    "EntryRecord",
    "EntryState",
    "MemoryDigests",
    "content_digest",
    "decode_entries",
    "encode_entry",
    "encode_ready",
    "memory_hash",
    "row_checksums",
]

ENTRY_BYTES = 128
NO_VALUE = 0xFFFFFFFF
_MAGIC = b"GMV\x01"
_LAYOUT = struct.Struct("<4sB3xII32s32s32sII4x")
ENTRY_DTYPE = np.dtype(
    [
        ("magic", "S4"),
        ("state", "u1"),
        ("pad", "V3"),
        ("identity", "<u4"),
        ("row", "<u4"),
        ("memory", "V32"),
        ("digest", "V32"),
        ("code", "S32"),
        ("tag", "<u4"),
        ("checksum", "<u4"),
        ("reserved", "V4"),
        ("crc", "<u4"),
    ]
)


class EntryState(IntEnum):
    """What an entry says about its memory's vector."""

    READY = 1
    PENDING = 2
    FAILED = 3
    DELETED = 4


@dataclass(frozen=True, slots=True)
class EntryRecord:
    """One decoded entry."""

    state: EntryState
    identity: int
    row: int
    memory_hash: bytes
    digest: bytes
    code: str
    checksum: int = 0


def row_checksums(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.uint32]:
    """The checksum of each row of a float32 matrix (see the module docstring)."""
    words = np.ascontiguousarray(rows, dtype="<f4").view("<u4")
    sums: npt.NDArray[np.uint32] = words.sum(axis=1, dtype=np.uint32)
    return sums


def content_digest(memory: GameMemory) -> bytes:
    """SHA-256 of the memory's canonical JSON: equal digests mean equal content."""
    # The serializer's own bytes, as model_dump_json() produces them, without its overhead.
    return hashlib.sha256(type(memory).__pydantic_serializer__.to_json(memory)).digest()


def memory_hash(memory_id: str) -> bytes:
    """SHA-256 of a memory id (raw 32 bytes)."""
    return hashlib.sha256(memory_id.encode("utf-8")).digest()


def encode_entry(record: EntryRecord, tag: int) -> bytes:
    """Frame one entry record of a partition whose vector files carry ``tag``."""
    body = _LAYOUT.pack(
        _MAGIC,
        int(record.state),
        record.identity,
        record.row,
        record.memory_hash,
        record.digest,
        record.code.encode("ascii")[:32],
        tag,
        record.checksum,
    )
    return body + struct.pack("<I", crc32(body))


def encode_ready(
    identity: int,
    first_row: int,
    hashes: Sequence[bytes],
    digests: Sequence[bytes],
    checksums: npt.NDArray[np.uint32],
    tag: int,
) -> bytes:
    """The records of ready vectors of identity ``identity`` in rows ``first_row...``, one
    per memory hash, framed in one pass: the bytes :func:`encode_entry` gives for each
    (tested), without an :class:`EntryRecord` per memory (a bulk append writes hundreds)."""
    count = len(hashes)
    records = np.zeros(count, ENTRY_DTYPE)
    records["magic"] = _MAGIC
    records["state"] = int(EntryState.READY)
    records["identity"] = identity
    records["row"] = np.arange(first_row, first_row + count, dtype=np.uint32)
    records["memory"] = np.frombuffer(b"".join(hashes), dtype="V32")
    records["digest"] = np.frombuffer(b"".join(digests), dtype="V32")
    records["tag"] = tag
    records["checksum"] = checksums
    body = memoryview(records.tobytes())
    size = ENTRY_BYTES - 4
    records["crc"] = [
        crc32(body[at : at + size]) for at in range(0, count * ENTRY_BYTES, ENTRY_BYTES)
    ]
    return records.tobytes()


def decode_entries(
    data: bytes | memoryview, trusted: int = 0, *, checked: bool = False
) -> tuple[np.ndarray, int]:
    """Parse whole records of ``data``; return them and the torn tail's length.

    ``trusted`` leading records are not checked: the caller has checked their bytes as a
    whole against a verified stamp (``stamps.py``), which vouches that these very bytes
    passed every check of a record (magic, state, CRC-32). The others are checked, unless
    ``checked``: the bytes are the caller's own :func:`encode_entry` output (a writer
    caching what it just appended).

    Raises:
        ValueError: a complete record has a bad magic, state or checksum (the message names
            the record's position in ``data``).
    """
    whole = len(data) // ENTRY_BYTES * ENTRY_BYTES
    records = np.frombuffer(data, dtype=ENTRY_DTYPE, count=whole // ENTRY_BYTES)
    if records.size > trusted and not checked:
        rest = records[trusted:]
        bad_magic = rest["magic"] != _MAGIC
        bad_state = (rest["state"] < 1) | (rest["state"] > 4)
        if bad_magic.any() or bad_state.any():
            bad = trusted + int(np.flatnonzero(bad_magic | bad_state)[0])
            raise ValueError(f"record {bad} is malformed")
        view = memoryview(data)
        body = ENTRY_BYTES - 4
        for index, expected in enumerate(records["crc"][trusted:].tolist(), trusted):
            start = index * ENTRY_BYTES
            if crc32(view[start : start + body]) != expected:
                raise ValueError(f"record {index} fails its checksum")
    return records, len(data) - whole


class MemoryDigests:
    """A bounded cache of ``(memory_hash, content_digest)`` per memory object.

    Memories are immutable and shared by every cached view of a partition, so a memory's
    digests are computed once per process instead of once per search. An entry holds its
    memory weakly: it is used only while the memory lives (a dead memory's id may be
    reused by another object, which the dead reference tells apart), and the cache never
    keeps alive a memory its partition let go (up to ``maximum`` memories of 1.5–4 KB
    each could outlive their partition when it held them).
    """

    def __init__(self, maximum: int = 300_000) -> None:
        self._maximum = maximum
        self._cache: OrderedDict[int, tuple[weakref.ref[GameMemory], bytes, bytes]] = OrderedDict()
        self._lock = threading.Lock()
        #: ``(key, reference)`` of entries whose memory died, appended by the references'
        #: callbacks (``list.append`` takes no lock: a callback may run while this thread
        #: holds ``_lock``) and dropped at the next call. A game whose NPCs forget as they
        #: learn makes new memory objects all the time (every eviction reads the NPC's
        #: partition again): dead entries kept their slots until the LRU bound, about
        #: 100 MB for a live set of 2,000 memories.
        self._dead: list[weakref.KeyedRef[int, GameMemory]] = []
        #: The one callback of every entry's reference (a closure per memory cost 20 MB
        #: at 100k memories): the reference is a ``KeyedRef`` carrying its key.
        self._died = self._dead.append

    @property
    def maximum(self) -> int:
        """The most memories whose digests are kept."""
        return self._maximum

    def get(self, memory: GameMemory) -> tuple[bytes, bytes]:
        """Return ``(sha256(memory_id), content digest)`` of ``memory``."""
        return self.get_many((memory,))[0]

    def get_many(self, memories: Sequence[GameMemory]) -> list[tuple[bytes, bytes]]:
        """Return ``(sha256(memory_id), content digest)`` of each memory, in order."""
        found: list[tuple[bytes, bytes] | None] = []
        missing: list[int] = []
        with self._lock:
            cache = self._cache
            if self._dead:
                self._drop_dead()
            for index, memory in enumerate(memories):
                cached = cache.get(id(memory))
                if cached is not None and cached[0]() is memory:
                    found.append((cached[1], cached[2]))
                else:
                    found.append(None)
                    missing.append(index)
        if missing:
            # The store keeps the digests of the memories it just encoded (its records hold
            # their canonical JSON): an index write after the save's finds them there.
            known = encoded_digests.known([memories[i] for i in missing])
            computed = [
                (memories[i], *found)
                if found is not None
                else (memories[i], memory_hash(memories[i].memory_id), content_digest(memories[i]))
                for i, found in zip(missing, known, strict=True)
            ]
            with self._lock:
                for index, (memory, hashed, digest) in zip(missing, computed, strict=True):
                    key = id(memory)
                    reference = weakref.KeyedRef(memory, self._died, key)
                    self._cache[key] = (reference, hashed, digest)
                    found[index] = (hashed, digest)
                while len(self._cache) > self._maximum:
                    self._cache.popitem(last=False)
        return found  # type: ignore[return-value]

    def __len__(self) -> int:
        """How many memories' digests are held (those that died since the last call
        included)."""
        with self._lock:
            return len(self._cache)

    def _drop_dead(self) -> None:
        """Drop the entries whose memory died (under ``_lock``); an entry replaced since
        by a new memory at the same ``id`` holds another reference and stays."""
        dead, cache = self._dead, self._cache  # never rebound: callbacks hold its append
        while dead:
            reference = dead.pop()
            key = reference.key
            entry = cache.get(key)
            if entry is not None and entry[0] is reference:
                del cache[key]
