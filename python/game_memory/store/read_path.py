"""Read files written from the partitions the cache holds: the parts of their chains.

:func:`persist` writes the part for the memories a partition's read-file chain
(``read_files.py``) does not cover when a read decoded many of them (at least
:data:`LAZY_MINIMUM`, and more than an eighth of those the chain covers; appends, whose
memories cost a start nothing once the close covered them, from :data:`APPENDED_MINIMUM`),
so a large partition is decoded in full once, not on every start. In the background a part
costs its own memories, never the partition's: the new part is merged with the parts
before it while the part before is not larger than what is being written (a binary
counter: a chain of ``n`` memories has at most about ``log2(n / LAZY_MINIMUM)`` parts, and
each memory is rewritten that many times at most). Closing the store leaves a partition of
up to :data:`CLOSING_MERGE_MEMORIES` memories as **one part** covering all of them (its
chain merged with what it does not cover), since a load maps a lone part and copies a
chain's arrays; a larger partition gets a part for what the chain does not cover, merged
as above only once the chain has :data:`CLOSING_PARTS` parts. Opening a partition from its
chain is ``read_chain.py``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Sequence

from game_memory.model import GameMemory
from game_memory.store.digests import encoded_digests
from game_memory.store.read_files import (
    Covered,
    Part,
    header_crc_of,
    load_read_file,
    read_file_path,
    remove_parts,
    stamp_path,
    write_read_file,
)
from game_memory.store.read_parts import merge, part_of, refreshed
from game_memory.store.rewrite_journal import REWRITE_JOURNAL
from game_memory.store.state import Chain, PartitionState

__all__ = [
    "APPENDED_MINIMUM",
    "CLOSING_PARTS",
    "LAZY_MINIMUM",
    "content_digests",
    "persist",
    "wants_persist",
]

#: Partitions with fewer memories are always decoded whole and get no file. Decoding and
#: tokenizing a memory costs ~36 µs at a first recall; a read file's load about what 30 of
#: them cost, and the recall decodes its ~65 candidates either way: 128 is past the point
#: where the file wins. (1,024 until 5 December 2026: an NPC of 500 memories took 30 ms.)
LAZY_MINIMUM = 128
#: Closing the store writes a new part without merging (bounded by the memories it adds)
#: unless the chain already has this many parts. Every part costs an open: a chain of 16
#: (the bound until 5 December 2026, which a game closing after every short session kept
#: reaching) opened a 10k partition 2.3 ms slower than one part, 4 parts 0.9 ms.
CLOSING_PARTS = 4
#: Closing the store leaves a partition of at most this many memories with a chain of one
#: part (its parts merged with what it does not cover, even when that is nothing). A load
#: maps a lone part's arrays as they are, and joins a chain's into copies: at 100k memories
#: a part of 5 memories after the rest cost a load 8 ms (31-35 ms against 23-27) and 12 MB
#: of private memory. The merge is paid once per close instead, where nobody waits on a
#: recall; above the bound the binary counter of :data:`CLOSING_PARTS` bounds what a close
#: rewrites (about 70 MB of read file at this many memories).
CLOSING_MERGE_MEMORIES = 262_144
#: Memories appended (not read back) since the chain's end before an append writes a part
#: in the background (an eighth of the chain if that is more): an appended memory costs
#: the next start nothing until the store closes, which writes the part, or until a read
#: of its files decodes it (a crash: the read path writes the part then, from
#: :data:`LAZY_MINIMUM`). At :data:`LAZY_MINIMUM` a bulk ingest over 200 NPCs of 500
#: memories wrote 600 parts and merged 200 while it ingested, a third of its time.
APPENDED_MINIMUM = 1_024
_LOG = logging.getLogger("game_memory.store")

Decode = Callable[[bytes, str], GameMemory]
Digests = Callable[[Sequence[GameMemory]], list[tuple[bytes, bytes]]]


def content_digests(memories: Sequence[GameMemory]) -> list[tuple[bytes, bytes]]:
    """``(sha256(memory_id), content digest)`` per memory, as the vector index computes them
    (``index/entries.py``: SHA-256 of the memory's canonical JSON); taken from the store's
    encoding of the same objects when it kept them (``digests.py``)."""
    serialize = GameMemory.__pydantic_serializer__.to_json
    return [
        known
        if known is not None
        else (
            hashlib.sha256(memory.memory_id.encode("utf-8")).digest(),
            hashlib.sha256(serialize(memory)).digest(),
        )
        for memory, known in zip(memories, encoded_digests.known(memories), strict=True)
    ]


def wants_persist(state: PartitionState, *, closing: bool = False, appended: bool = False) -> bool:
    """Whether :func:`persist` would write ``state``'s read file (a cheap test: counts only);
    with ``appended``, whether an append that left ``state`` should have it written (the
    memories it does not cover were written, not read: :data:`APPENDED_MINIMUM`)."""
    view = state.view
    if view is None or len(view) < LAZY_MINIMUM:
        return False
    covered = state.read_file_count
    if closing:
        return len(view) > covered or _merges_at_close(state)
    minimum = APPENDED_MINIMUM if appended else LAZY_MINIMUM
    return len(view) - covered >= max(minimum, covered // 8)


def _merges_at_close(state: PartitionState) -> bool:
    """Whether closing leaves ``state``'s chain as one part (:data:`CLOSING_MERGE_MEMORIES`):
    true for a chain of two parts or more, or one that does not cover every memory."""
    view = state.view
    if view is None or len(view) > CLOSING_MERGE_MEMORIES:
        return False
    return len(state.read_chain) > 1 or state.read_file_count < len(view)


def persist(
    session_directory: str, state: PartitionState, digests: Digests, *, closing: bool = False
) -> Chain | None:
    """Write the part of ``state``'s memories its read-file chain does not cover, if the
    read decoded enough of them (see the module); the chain as it is then, or ``None``.

    With ``closing`` (the store is being closed), a partition of up to
    :data:`CLOSING_MERGE_MEMORIES` memories is left as one part: the chain merged with the
    memories it does not cover, if any (a chain of several parts is merged even when it
    covers them all). A larger one gets any memory the chain does not cover written on its
    own (closing then costs the memories it adds, not the partition's) unless the chain has
    :data:`CLOSING_PARTS` parts already. Otherwise the part is merged with the parts before
    it while the part before holds no more memories than the merge so far (those parts are
    read back from their files, checked).

    Not while an erase or compaction is under way (``rewrite.json``), and a part written
    while one began is removed again: a read file never outlives bytes an erase removed.
    Parts after the one written no longer continue the chain and are removed.
    """
    view = state.view
    if view is None or not wants_persist(state, closing=closing):
        return None
    journal = os.path.join(os.path.dirname(session_directory), REWRITE_JOURNAL)
    if os.path.lexists(journal):
        return None
    chain = state.read_chain
    covered = sum(count for count, _ in chain)
    if covered > len(view):
        chain, covered = (), 0  # not this view's chain: write it anew
    part = part_of(state, covered, digests) if covered < len(view) else None
    whole = closing and _merges_at_close(state)
    if part is None and not (whole and len(chain) > 1):
        return None
    number = len(chain)
    if whole:
        number = 0  # one part at close (CLOSING_MERGE_MEMORIES)
    elif part is not None:
        merging = not closing or number >= CLOSING_PARTS
        size = part.count
        while merging and number and chain[number - 1][0] <= size:
            number -= 1
            size += chain[number][0]
    if number < len(chain):
        merged = _merged(session_directory, state, chain, number, part)
        if merged is None:
            number = len(chain)  # the parts could not be read back: add this one alone
        part = merged or part
    if part is None:
        return None
    previous = chain[number - 1][1] if number else 0
    if number and header_crc_of(
        read_file_path(session_directory, state.owner_hash, number - 1)
    ) != (previous):
        # The chain on disk is not the one this state knows (another writer's, or a part
        # replaced since): a part naming it would not continue it. Nothing is written.
        _LOG.info("a read file was not written: the chain it continues changed")
        return None
    target = read_file_path(session_directory, state.owner_hash, number)
    header_crc = write_read_file(
        target,
        session_hash=state.session_hash,
        owner_hash=state.owner_hash,
        part=part,
        previous=previous,
    )
    if header_crc is None:
        return None
    unchanged = not os.path.lexists(journal) and all(
        _same_file(os.path.join(session_directory, covered_file.name), covered_file)
        for covered_file in part.files
    )
    if not unchanged:
        for stale in (target, stamp_path(target)):
            with contextlib.suppress(OSError):
                os.unlink(stale)
        return None
    remove_parts(session_directory, state.owner_hash, number + 1)
    return (*chain[:number], (part.count, header_crc))


def _merged(
    session_directory: str, state: PartitionState, chain: Chain, number: int, tail: Part | None
) -> Part | None:
    """Parts ``number..`` of ``chain`` read back (each the very part the chain names, its
    files' identities refreshed) and merged with ``tail`` (if any); ``None`` if one cannot
    be."""
    parts: list[Part] = []
    for at in range(number, len(chain)):
        path = read_file_path(session_directory, state.owner_hash, at)
        read = load_read_file(path, state.session_hash, state.owner_hash)
        if read is None or read.header_crc != chain[at][1]:
            return None
        fresh = refreshed(read.part, session_directory)
        if fresh is None:
            return None
        parts.append(fresh)
    try:
        return merge([*parts, tail] if tail is not None else parts)
    except ValueError as exc:
        _LOG.info("read files were not merged (%s)", exc)
        return None


def _same_file(path: str, covered: Covered) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (covered.device, covered.inode)
