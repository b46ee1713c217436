"""Digests of the memories the store just encoded, so derived data does not encode them again.

A memory's content digest (what the derived vector index and the read files compare, see
``index/entries.py``) is the SHA-256 of its canonical JSON, and the store's record payload
holds exactly those bytes (``documents.encode_document``: a fixed 29-byte prefix, the
memory's JSON, a closing brace). An append or a batch encodes every memory anyway, so the
store hashes that slice then (about half a microsecond) and keeps the result here, keyed
by the memory object; the index's write and the read file's part of the same objects find
it instead of serializing each memory twice more (about 4 us each). Entries hold their
memory weakly: an entry is used only while its memory lives (a dead memory's id may be
reused by another object, which its dead reference tells apart), and the cache never keeps
a memory alive that its partition let go (1.5–4 KB each, with its strings).

Bound: :data:`MAXIMUM` memories, least recently remembered dropped first (the index's write
follows the save's append or batch at once, so the window needed is one batch); closing a
file store empties it. A miss only means the digest is computed from the memory, as
without this cache.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence

from game_memory.model import GameMemory

__all__ = ["MAXIMUM", "EncodedDigests", "encoded_digests"]

#: How many memories' digests are kept (a bulk ingest's batch of 10,000, three times over).
MAXIMUM = 32_768
#: ``{"format_version":N,"memory":`` before the memory's JSON in a record payload.
_PREFIX = len(b'{"format_version":1,"memory":')


class EncodedDigests:
    """``(sha256(memory_id), content digest)`` of memory objects the store encoded."""

    def __init__(self, maximum: int = MAXIMUM) -> None:
        self._maximum = maximum
        self._cache: OrderedDict[int, tuple[weakref.ref[GameMemory], bytes, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, memory: GameMemory, document: bytes) -> None:
        """Keep ``memory``'s digests, from ``document`` (its record payload as encoded)."""
        self.remember_many([memory], [document], 0)

    def remember_many(
        self, memories: Sequence[GameMemory], encoded: Sequence[bytes | None], skip: int
    ) -> list[bytes | None]:
        """Keep each memory's digests from its encoding (``encoded[i][skip:]`` is its record
        payload; ``None``: not encoded), under one lock; return each memory's
        ``sha256(memory_id)`` as computed (``None`` where it was not: the caller's ledger
        intents need it too).

        Only for a plain ``GameMemory`` (a subclass may serialize otherwise than the
        digest's definition), whose payload holds the memory's JSON at its fixed place.
        """
        sha256 = hashlib.sha256
        found: list[tuple[weakref.ref[GameMemory], bytes, bytes]] = []
        hashes: list[bytes | None] = []
        held = []  # the memories of ``found``, by place
        for memory, data in zip(memories, encoded, strict=True):
            if data is None or type(memory) is not GameMemory or data[-1:] != b"}":
                hashes.append(None)
                continue
            digest = sha256(memoryview(data)[skip + _PREFIX : -1]).digest()
            hashed = sha256(memory.memory_id.encode("utf-8")).digest()
            hashes.append(hashed)
            found.append((weakref.ref(memory), hashed, digest))
            held.append(memory)
        with self._lock:
            cache = self._cache
            for memory, entry in zip(held, found, strict=True):
                cache[id(memory)] = entry
            while len(cache) > self._maximum:
                cache.popitem(last=False)
        return hashes

    def clear(self) -> None:
        """Forget every memory (a store closed)."""
        with self._lock:
            self._cache.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def known(self, memories: Sequence[GameMemory]) -> list[tuple[bytes, bytes] | None]:
        """Each memory's digests if this cache holds that very object, else ``None``."""
        found: list[tuple[bytes, bytes] | None] = []
        with self._lock:
            cache = self._cache
            for memory in memories:
                entry = cache.get(id(memory))
                found.append(
                    (entry[1], entry[2]) if entry is not None and entry[0]() is memory else None
                )
        return found


#: The process's cache (the store writes it, the index and read files read it).
encoded_digests = EncodedDigests()
