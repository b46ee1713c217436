"""A tolerant read of a whole session folder: every intact record, and exactly what is damaged.

The normal read path (``partitions.py``) stops at the first damaged byte and fails closed.
The checker needs more: which records of which partition are still intact after damage,
where the damaged stretches are and why, which files are missing from a numbered series,
and the ids that can still be read out of damaged records. Records are framed and
checksummed, so the audit resynchronizes on the next valid record header after damage
(``records.salvage_records``). Nothing here writes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.names import identity_hash, partition_hash, segment_path
from game_memory.errors import PersistenceError
from game_memory.model import GameMemory
from game_memory.store.documents import DocumentError, decode_document
from game_memory.store.packs import PACK_NAME, pack_path, pack_records_region
from game_memory.store.records import HEADER_BYTES, salvage_records
from game_memory.store.retractions import Retraction, decode_retraction

__all__ = ["DamagedFile", "OwnerAudit", "SessionAudit", "audit_session"]

_SEGMENT = re.compile(r"^([or])-([0-9a-f]{64})(?:\.([1-9][0-9]{0,8}))?\.log$")
_MEMORY_ID = re.compile(rb'"memory_id":"((?:[^"\\]|\\.){1,4096})"')


@dataclass
class DamagedFile:
    """One pack or segment as the audit read it: its damaged stretches and intact records.

    ``kept`` holds ``(owner_hash, offset, framed record)`` of the intact records in file
    order: what a salvage rewrites the file with (a pack regroups them by owner). A file is
    damaged when ``ranges`` is not empty.
    """

    path: str
    pack: bool
    ranges: list[tuple[int, int, str]] = field(default_factory=list)
    kept: list[tuple[str, int, bytes]] = field(default_factory=list)


@dataclass
class OwnerAudit:
    """One owner partition as the audit found it.

    ``memories`` are its intact memories in partition order (packs, then segments), each
    id once; ``sources`` the ``(path, offset)`` each was read from. ``retractions`` are its
    intact retractions in log order, ``retraction_sources`` where each was read from.
    """

    session_hash: str
    owner_hash: str
    memories: list[GameMemory] = field(default_factory=list)
    sources: list[tuple[str, int]] = field(default_factory=list)
    damaged: bool = False
    torn: tuple[str, int, int] | None = None  # (last segment, end of records, torn bytes)
    readable_ids: dict[str, str] = field(default_factory=dict)  # memory hash -> id
    retractions: list[Retraction] = field(default_factory=list)
    retraction_sources: list[tuple[str, int]] = field(default_factory=list)
    retractions_damaged: bool = False
    retraction_torn: tuple[str, int, int] | None = None

    #: The id hashes as last computed (in order, and as a set), for the list and length
    #: they were computed from.
    _hashes: tuple[list[GameMemory], int, list[str], frozenset[str]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def memory_hashes(self) -> frozenset[str]:
        """The hashes of the memories' ids. Computed once per state of ``memories`` (the
        audit only appends to it or replaces it): ``check`` asks once per ledger intent,
        and hashing every id of the partition each time made it quadratic in the
        partition's size (11 s at 4,000 memories in one NPC, hours at 100,000)."""
        return self._hashed()[1]

    @property
    def ordered_hashes(self) -> list[str]:
        """The hashes of the memories' ids in partition order (one per memory, cached as
        :attr:`memory_hashes` is)."""
        return self._hashed()[0]

    @property
    def retraction_hashes(self) -> list[str]:
        """The hashes of the retracted memory ids, in log order (what the retraction
        ledger's intents name)."""
        return [identity_hash(memory_id) for memory_id, _at in self.retractions]

    def _hashed(self) -> tuple[list[str], frozenset[str]]:
        memories = self.memories
        cached = self._hashes
        if cached is not None and cached[0] is memories and cached[1] == len(memories):
            return cached[2], cached[3]
        ordered = [identity_hash(memory.memory_id) for memory in memories]
        hashes = frozenset(ordered)
        self._hashes = (memories, len(memories), ordered, hashes)
        return ordered, hashes

    def name(self, session_id: str | None) -> str:
        """``session 'x', owner 'y'`` with hashes where the ids cannot be read."""
        owner = repr(self.memories[0].owner_id) if self.memories else f"o-{self.owner_hash[:12]}…"
        session = repr(session_id) if session_id is not None else f"s-{self.session_hash[:12]}…"
        return f"session {session}, owner {owner}"


@dataclass
class SessionAudit:
    """Every partition of one session folder, its damaged files and its missing files."""

    session_hash: str
    directory: Path
    owners: dict[str, OwnerAudit] = field(default_factory=dict)
    scanned: dict[str, DamagedFile] = field(default_factory=dict)
    gaps: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    # What could not be read, and so is unknown rather than lost: the owners a link or an
    # unreadable file of their series hides, or (``whole``) every owner, when the folder
    # could not be listed or a pack (which holds several owners) could not be read.
    unknown_owners: set[str] = field(default_factory=set)
    whole: bool = False

    @property
    def files(self) -> dict[str, DamagedFile]:
        """The damaged files (by path)."""
        return {path: scan for path, scan in self.scanned.items() if scan.ranges}

    @property
    def session_id(self) -> str | None:
        for owner in self.owners.values():
            if owner.memories:
                return owner.memories[0].session_id
        return None

    def owner(self, owner_hash: str) -> OwnerAudit:
        found = self.owners.get(owner_hash)
        if found is None:
            found = self.owners[owner_hash] = OwnerAudit(self.session_hash, owner_hash)
        return found


def audit_session(directory: Path, session_hash: str, maximum_file_bytes: int) -> SessionAudit:
    """Read every pack and log segment of a session folder tolerantly (see the module doc).

    A link or a non-regular file among them, or a folder that cannot be listed, is noted in
    ``unreadable`` (the salvage does not touch such a session), and what it hides is
    unknown (``unknown_owners``, ``whole``); a link of another name is noted only.
    """
    audit = SessionAudit(session_hash, directory)
    segments: dict[str, dict[int, str]] = {}
    retraction_segments: dict[str, dict[int, str]] = {}
    packs: dict[int, str] = {}
    links: list[str] = []
    try:
        entries = fs.list_directory(directory, links=links)
    except PersistenceError as exc:
        audit.unreadable.append(str(exc))
        audit.whole = True
        return audit
    for link in links:
        audit.unreadable.append(fs.refused_link(link))
        _hide(audit, os.path.basename(link))
    for entry in entries:
        segment = _SEGMENT.match(entry.name)
        pack = PACK_NAME.match(entry.name)
        if (segment or pack) and not entry.is_file(follow_symlinks=False):
            audit.unreadable.append(f"{entry.path} should be a regular file")
            _hide(audit, entry.name)
            continue
        if segment is not None:
            number = int(segment.group(3) or 0)
            series = segments if segment.group(1) == "o" else retraction_segments
            series.setdefault(segment.group(2), {})[number] = entry.path
        elif pack is not None:
            packs[int(pack.group(1))] = entry.path
    maximum_payload = maximum_file_bytes - HEADER_BYTES
    for number in range(1, max(packs, default=0) + 1):
        path = packs.get(number)
        if path is None:
            audit.gaps.append(pack_path(directory, number))
            continue
        _audit_pack(audit, path, maximum_file_bytes, maximum_payload)
    for owner_hash, numbers in sorted(segments.items()):
        owner = audit.owner(owner_hash)
        last = max(numbers)
        for number in range(last + 1):
            path = numbers.get(number)
            if path is None:
                audit.gaps.append(segment_path(directory, owner_hash, number))
                owner.damaged = True
                continue
            _audit_segment(audit, owner, path, number == last, maximum_file_bytes, maximum_payload)
    for owner_hash, numbers in sorted(retraction_segments.items()):
        owner = audit.owner(owner_hash)
        last = max(numbers)
        for number in range(last + 1):
            path = numbers.get(number)
            if path is None:
                audit.gaps.append(segment_path(directory, owner_hash, number, "r"))
                owner.retractions_damaged = True
                continue
            _audit_retractions(audit, owner, path, number == last, maximum_file_bytes)
    for owner in audit.owners.values():
        _deduplicate(audit, owner)
    return audit


def _hide(audit: SessionAudit, name: str) -> None:
    """What an unreadable entry ``name`` of the session folder hides: an owner's series
    (a segment's name), every owner (a pack's), or nothing (a name the store never uses)."""
    segment = _SEGMENT.match(name)
    if segment is not None:
        audit.unknown_owners.add(segment.group(2))
    elif PACK_NAME.match(name):
        audit.whole = True


def _read(audit: SessionAudit, path: str, maximum_file_bytes: int) -> bytes | None:
    """The whole file, or ``None`` (noted as unreadable: the salvage leaves the session
    alone) when it cannot be read or is larger than ``maximum_file_bytes``. A file that
    large is no file this store wrote with this bound, or the bound was lowered: it is
    never read into memory, and never salvaged away."""
    try:
        read = fs.read_file(path, maximum_file_bytes)
    except PersistenceError as exc:
        try:
            large = os.lstat(path).st_size > maximum_file_bytes
        except OSError:
            large = False
        hint = (
            "; if the store was written with a larger maximum_file_bytes, open it with that one"
            if large
            else ""
        )
        audit.unreadable.append(f"{exc}{hint}")
        return None
    if read is None:
        audit.unreadable.append(f"{path} vanished while it was being checked")
        return None
    return read[0]


def _decode(
    audit: SessionAudit, payload: bytes, owner_hash: str | None
) -> tuple[GameMemory | None, str]:
    """The record's memory (``None`` if unreadable or of another partition) and why not."""
    try:
        memory = decode_document(payload)
    except DocumentError as exc:
        return None, f"unreadable record ({str(exc)[:120]})"
    if partition_hash(memory.session_id) != audit.session_hash:
        return None, "a memory of another session"
    if owner_hash is not None and partition_hash(memory.owner_id) != owner_hash:
        return None, "a memory of another owner"
    return memory, ""


def _note_ids(owner: OwnerAudit | None, data: bytes) -> None:
    """Remember the memory ids readable in damaged bytes (checked by their hash later)."""
    if owner is None:
        return
    for match in _MEMORY_ID.finditer(data):
        try:
            memory_id = json.loads(b'"' + match.group(1) + b'"')
        except ValueError:
            continue
        if isinstance(memory_id, str):
            owner.readable_ids[identity_hash(memory_id)] = memory_id


def _audit_pack(audit: SessionAudit, path: str, maximum_file_bytes: int, payload: int) -> None:
    data = _read(audit, path, maximum_file_bytes)
    if data is None:
        audit.whole = True  # a pack holds several owners' records: none is known
        return
    start, stop, problem = pack_records_region(data)
    scanned = audit.scanned[path] = DamagedFile(path, pack=True)
    if problem is not None:
        # The header's 8 bytes, or (length 0) the footer and index at the end of the file.
        where = (0, start) if "header" in problem else (len(data), 0)
        scanned.ranges.append((*where, problem))
    scan = salvage_records(data[start:stop], base_offset=start, maximum_payload=payload)
    scanned.ranges.extend(scan.damage)
    if scan.torn_bytes:
        scanned.ranges.append((scan.end, scan.torn_bytes, "a record is cut short"))
    owners_seen: set[str] = set()
    for offset, length, record_payload in scan.records:
        memory, reason = _decode(audit, record_payload, None)
        if memory is None:
            scanned.ranges.append((offset, length, reason))
            continue
        owner = audit.owner(partition_hash(memory.owner_id))
        owners_seen.add(owner.owner_hash)
        owner.memories.append(memory)
        owner.sources.append((path, offset))
        scanned.kept.append((owner.owner_hash, offset, data[offset : offset + length]))
    if scanned.ranges:
        scanned.ranges.sort()
        for owner_hash in owners_seen:
            owner = audit.owner(owner_hash)
            owner.damaged = True
            for offset, length, _reason in scanned.ranges:
                _note_ids(owner, data[offset : offset + length])


def _audit_segment(
    audit: SessionAudit,
    owner: OwnerAudit,
    path: str,
    last: bool,
    maximum_file_bytes: int,
    payload: int,
) -> None:
    data = _read(audit, path, maximum_file_bytes)
    if data is None:
        audit.unknown_owners.add(owner.owner_hash)
        return
    scan = salvage_records(data, maximum_payload=payload)
    scanned = audit.scanned[path] = DamagedFile(path, pack=False)
    scanned.ranges.extend(scan.damage)
    for offset, length, record_payload in scan.records:
        memory, reason = _decode(audit, record_payload, owner.owner_hash)
        if memory is None:
            scanned.ranges.append((offset, length, reason))
            continue
        owner.memories.append(memory)
        owner.sources.append((path, offset))
        scanned.kept.append((owner.owner_hash, offset, data[offset : offset + length]))
    if scan.torn_bytes:
        if last and not scanned.ranges:
            owner.torn = (path, scan.end, scan.torn_bytes)
        else:
            scanned.ranges.append((scan.end, scan.torn_bytes, "a record is cut short"))
    if scanned.ranges:
        scanned.ranges.sort()
        owner.damaged = True
        for offset, length, _reason in scanned.ranges:
            _note_ids(owner, data[offset : offset + length])


def _audit_retractions(
    audit: SessionAudit, owner: OwnerAudit, path: str, last: bool, maximum_file_bytes: int
) -> None:
    data = _read(audit, path, maximum_file_bytes)
    if data is None:
        audit.unknown_owners.add(owner.owner_hash)
        return
    scan = salvage_records(data, maximum_payload=maximum_file_bytes - HEADER_BYTES)
    scanned = audit.scanned[path] = DamagedFile(path, pack=False)
    scanned.ranges.extend(scan.damage)
    for offset, length, payload in scan.records:
        try:
            retraction = decode_retraction(payload)
        except DocumentError as exc:
            scanned.ranges.append((offset, length, f"unreadable retraction ({str(exc)[:120]})"))
            continue
        owner.retractions.append(retraction)
        owner.retraction_sources.append((path, offset))
        scanned.kept.append((owner.owner_hash, offset, data[offset : offset + length]))
    if scan.torn_bytes:
        if last and not scanned.ranges:
            owner.retraction_torn = (path, scan.end, scan.torn_bytes)
        else:
            scanned.ranges.append((scan.end, scan.torn_bytes, "a record is cut short"))
    if scanned.ranges:
        scanned.ranges.sort()
        owner.retractions_damaged = True


def _deduplicate(audit: SessionAudit, owner: OwnerAudit) -> None:
    """Keep the first record of each id; a later copy is damage (a different one too)."""
    seen: dict[str, GameMemory] = {}
    memories: list[GameMemory] = []
    sources: list[tuple[str, int]] = []
    for memory, (path, offset) in zip(owner.memories, owner.sources, strict=True):
        first = seen.get(memory.memory_id)
        if first is None:
            seen[memory.memory_id] = memory
            memories.append(memory)
            sources.append((path, offset))
            continue
        owner.damaged = True
        scanned = audit.scanned[path]
        reason = "a second copy of a memory" if first == memory else "another memory, same id"
        for position, (_owner, kept_offset, record) in enumerate(scanned.kept):
            if kept_offset == offset:
                scanned.ranges.append((offset, len(record), reason))
                scanned.ranges.sort()
                del scanned.kept[position]
                break
    owner.memories, owner.sources = memories, sources
