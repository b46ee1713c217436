"""What the checker reads: the whole store, tolerantly, with every intent classified.

:func:`survey_store` audits every session folder (``audit.py``: intact records, damaged
stretches, missing files), reads the ledger tolerantly and the migration journal, and
sorts every intent without an intact record into the one pending append (only the newest
intent can be one), the intents of an uncommitted batch, and acknowledged memories that
are lost; and every record without an intent. Retractions are compared per partition
with the retraction ledger the same way, by identity (the memory each names), not only by
count: the newest retraction intent may be pending; any other intent without its
retraction is loss. Records name no owner, so a retraction log segment that holds a
retraction its partition has no intent for, where the partition also lacks retractions it
has intents for, or of a memory the partition does not hold, or the very retraction
another partition of the session holds, is another partition's (a log copied, swapped or
renamed): the whole segment is damage, never a retraction whose intent ``--fix`` adds.
Nothing here writes.

What could not be read is *unknown*, never loss: the owners whose log segment is a link or
cannot be read, every owner of a session whose folder cannot be listed or whose pack cannot
be read, and everything when the data folder cannot be listed. The intents naming them are
counted apart (``unknown``), neither lost nor pending, and records are matched against a
ledger only when that ledger could be read. (Until 7 December 2026 one stray link in a
session folder made every memory of the session read as lost, and the newest intent an
append ``check --fix`` may drop.) A link of a name the store never uses is reported only.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError
from game_memory.model import GameMoment
from game_memory.store.audit import OwnerAudit, SessionAudit, audit_session
from game_memory.store.engine import StoreEngine
from game_memory.store.ledger import LedgerEntry

__all__ = ["Survey", "survey_store"]

_SESSION = re.compile(r"^s-([0-9a-f]{64})$")

#: Why a retraction log segment is set aside as another partition's (``audit.DamagedFile``).
FOREIGN_RETRACTION = "a retraction log segment of another owner (no intent of this one names it)"


@dataclass
class Survey:
    """Everything the checker read, and what it concluded."""

    sessions: dict[str, SessionAudit] = field(default_factory=dict)
    intents: list[LedgerEntry | None] = field(default_factory=list)
    unwritten: int = 0
    batch: int | None = None  # the journal's ledger mark, if a batch is uncommitted
    appended_batch: bool = False  # that batch is an append_many's, not a migration's
    unreadable: list[str] = field(default_factory=list)
    # intent position -> the audit of its partition, for intents without a record
    lost: dict[int, OwnerAudit] = field(default_factory=dict)
    pending: int | None = None
    uncommitted: list[int] = field(default_factory=list)
    # records without an intent, in partition order
    unlisted: list[tuple[OwnerAudit, str]] = field(default_factory=list)
    repeated: list[LedgerEntry] = field(default_factory=list)
    retraction_intents: list[LedgerEntry | None] = field(default_factory=list)
    retraction_unwritten: int = 0
    # per partition (session hash, owner hash): retractions lost, and records without intents
    lost_retractions: dict[tuple[str, str], int] = field(default_factory=dict)
    # ... the memory hashes of retractions without an intent (in log order), and the
    # retraction log segments that are another partition's (set aside as damage)
    unlisted_retractions: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    foreign_retractions: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    pending_retraction: int | None = None
    rewrite: str | None = None  # an unfinished erase or compaction, described
    # What could not be read: sessions not audited (all when the data folder could not be
    # listed), whether each ledger was read, and the intents naming an unaudited session.
    unknown_sessions: set[str] = field(default_factory=set)
    listed: bool = True
    ledger_read: bool = True
    retraction_ledger_read: bool = True
    unknown: Counter[tuple[str, str]] = field(default_factory=Counter)  # partition -> intents

    @property
    def memories(self) -> int:
        return sum(len(o.memories) for s in self.sessions.values() for o in s.owners.values())

    @property
    def valid_intents(self) -> int:
        return sum(entry is not None for entry in self.intents)

    @property
    def damaged_intents(self) -> list[int]:
        return [index for index, entry in enumerate(self.intents) if entry is None]

    @property
    def damaged_retraction_intents(self) -> list[int]:
        return [index for index, entry in enumerate(self.retraction_intents) if entry is None]

    def owner(self, entry: LedgerEntry) -> OwnerAudit:
        session = self.sessions.get(entry.session_hash)
        if session is None:
            session = self.sessions[entry.session_hash] = SessionAudit(
                entry.session_hash, Path("/")
            )
        return session.owner(entry.owner_hash)

    def known(self, session_hash: str, owner_hash: str) -> bool:
        """Whether the partition's files were read (its records are what the disk holds)."""
        if not self.listed or session_hash in self.unknown_sessions:
            return False
        audit = self.sessions.get(session_hash)
        return audit is None or owner_hash not in audit.unknown_owners

    def session_id(self, owner: OwnerAudit) -> str | None:
        session = self.sessions.get(owner.session_hash)
        return None if session is None else session.session_id

    @property
    def needs_salvage(self) -> bool:
        """Whether only ``accept_loss`` can make the store consistent."""
        damaged = any(s.files or s.gaps for s in self.sessions.values())
        return (
            damaged
            or bool(self.lost)
            or bool(self.damaged_intents)
            or bool(self.lost_retractions)
            or bool(self.damaged_retraction_intents)
        )


def survey_store(engine: StoreEngine) -> Survey:
    """Read the whole store tolerantly and classify every intent and record. Under the lock."""
    survey = Survey()
    links: list[str] = []
    try:
        listing = fs.list_directory(engine.data, links=links)
    except PersistenceError as exc:
        survey.unreadable.append(str(exc))
        survey.listed = False
        listing = []
    for path in links:
        survey.unreadable.append(fs.refused_link(path))
        match = _SESSION.match(os.path.basename(path))
        if match is not None:
            survey.unknown_sessions.add(match.group(1))
    for entry in listing:
        match = _SESSION.match(entry.name)
        if match is None:
            continue
        try:
            fs.ensure_directory(Path(entry.path), create=False)
        except PersistenceError as exc:
            survey.unreadable.append(str(exc))
            survey.unknown_sessions.add(match.group(1))
            continue
        audit = audit_session(Path(entry.path), match.group(1), engine.maximum_file_bytes)
        survey.unreadable.extend(audit.unreadable)
        if audit.whole:
            survey.unknown_sessions.add(match.group(1))
            continue
        survey.sessions[match.group(1)] = audit
    try:
        survey.intents, survey.unwritten = engine.ledger.read_tolerant()
    except PersistenceError as exc:
        survey.unreadable.append(str(exc))
        survey.ledger_read = False
    try:
        read = engine.retraction_ledger.read_tolerant()
        survey.retraction_intents, survey.retraction_unwritten = read
    except PersistenceError as exc:
        survey.unreadable.append(str(exc))
        survey.retraction_ledger_read = False
    try:
        journal = engine.journal.read()
    except PersistenceError as exc:
        survey.unreadable.append(str(exc))
        journal = None
    survey.batch = None if journal is None else journal[0]
    survey.appended_batch = journal is not None and engine.journal.last_version == 2
    _classify(survey)
    _classify_retractions(survey)
    return survey


def _classify_retractions(survey: Survey) -> None:
    """Compare each partition's retractions with its retraction intents, by identity."""
    expected: dict[tuple[str, str], Counter[str]] = {}
    newest: LedgerEntry | None = None
    for entry in survey.retraction_intents:
        if entry is not None:
            newest = entry
            key = (entry.session_hash, entry.owner_hash)
            if survey.known(*key):
                expected.setdefault(key, Counter())[entry.memory_hash] += 1
    last_valid = bool(survey.retraction_intents) and survey.retraction_intents[-1] is not None
    held: dict[tuple[str, str], OwnerAudit] = {}
    for session in survey.sessions.values():
        for owner in session.owners.values():
            held[(owner.session_hash, owner.owner_hash)] = owner
    if survey.retraction_ledger_read:
        _set_aside_foreign(survey, expected, held)
    for key in sorted(set(expected) | set(held)):
        if not survey.known(*key):
            continue
        partition = held.get(key)
        found = Counter(partition.retraction_hashes if partition is not None else ())
        wanted = expected.get(key, Counter())
        missing = wanted - found
        shortfall = sum(missing.values())
        damaged = partition is not None and partition.retractions_damaged
        if (
            shortfall == 1
            and newest is not None
            and key == (newest.session_hash, newest.owner_hash)
            and missing[newest.memory_hash] == 1
            and last_valid
            and not damaged
        ):
            # Only the newest retraction intent can be a forget still in flight.
            survey.pending_retraction = len(survey.retraction_intents) - 1
        elif shortfall > 0:
            survey.lost_retractions[key] = shortfall
            if partition is not None and partition.retraction_torn is not None:
                # Acknowledged retractions are missing, so the log was cut in the middle
                # of one of them: damage, set aside by a salvage (as for memory logs).
                path, end, torn = partition.retraction_torn
                scanned = survey.sessions[partition.session_hash].scanned[path]
                scanned.ranges.append((end, torn, "the file ends in the middle of a record"))
                partition.retraction_torn, partition.retractions_damaged = None, True
        extra = found - wanted
        if extra and survey.retraction_ledger_read and partition is not None:
            # Of the retractions of one memory, the newest are the ones without an intent.
            unlisted: list[str] = []
            for memory_hash in reversed(partition.retraction_hashes):
                if extra[memory_hash] > 0:
                    extra[memory_hash] -= 1
                    unlisted.append(memory_hash)
            unlisted.reverse()
            survey.unlisted_retractions[key] = unlisted


def _set_aside_foreign(
    survey: Survey,
    expected: dict[tuple[str, str], Counter[str]],
    held: dict[tuple[str, str], OwnerAudit],
) -> None:
    """Find the retraction log segments that are another partition's and mark them damaged.

    A forget appends its intent (fsynced) before its record, so a retraction without an
    intent is never what a crash leaves: either the ledger lost the intent, or the record
    is not this partition's. It is taken for another partition's (retraction records
    name no owner, so the whole segment is suspect, as a memory log holding another
    owner's memory is) when the partition also lacks retractions its intents name (a log
    swapped or renamed), when the memory it names is not the partition's, or when another
    partition of the session holds the very same retraction (a log copied).

    "Lacks retractions its intents name" counts only when another partition of the session
    has an intent for the retraction that is too many here and no record of it there (the
    two logs swapped): the count-based repairs of earlier releases (their salvage, and
    ``check --fix`` adding intents for the last retractions) left healthy partitions whose
    intents name other retractions of their own, and those were taken for another's, so
    ``--fix --accept-loss`` gave an intact, acknowledged forget up.
    """
    mirrors: dict[tuple[str, tuple[str, GameMoment]], set[str]] = {}
    for (session_hash, owner_hash), owner in held.items():
        for retraction in owner.retractions:
            mirrors.setdefault((session_hash, retraction), set()).add(owner_hash)
    unmatched: dict[str, Counter[str]] = {}  # per session: intents naming no record
    for (session_hash, owner_hash), wanted in expected.items():
        owner_audit = held.get((session_hash, owner_hash))
        found_there = Counter(owner_audit.retraction_hashes) if owner_audit else Counter()
        unmatched.setdefault(session_hash, Counter()).update(wanted - found_there)
    for key, owner in sorted(held.items()):
        if not owner.retractions or not survey.known(*key):
            continue
        wanted = expected.get(key, Counter())
        hashes = owner.retraction_hashes
        found = Counter(hashes)
        extra = found - wanted
        if not extra:
            continue
        missing = wanted - found
        elsewhere = unmatched.get(owner.session_hash, Counter()) - missing
        foreign: set[str] = set()
        for retraction, memory_hash, (path, _offset) in zip(
            owner.retractions, hashes, owner.retraction_sources, strict=True
        ):
            if extra[memory_hash] <= 0:
                continue
            copied = mirrors[(owner.session_hash, retraction)] - {owner.owner_hash}
            swapped = bool(missing) and elsewhere[memory_hash] > 0
            if swapped or memory_hash not in owner.memory_hashes or copied:
                foreign.add(path)
        if foreign:
            _drop_segments(survey.sessions[owner.session_hash], owner, foreign)
            survey.foreign_retractions[key] = sorted(foreign)


def _drop_segments(session: SessionAudit, owner: OwnerAudit, paths: set[str]) -> None:
    """Mark every record of the retraction log segments ``paths`` as damage (the salvage
    moves them aside) and leave their retractions out of the partition's."""
    for path in paths:
        scanned = session.scanned[path]
        for _owner, offset, record in scanned.kept:
            scanned.ranges.append((offset, len(record), FOREIGN_RETRACTION))
        scanned.kept.clear()
        if owner.retraction_torn is not None and owner.retraction_torn[0] == path:
            _path, end, torn = owner.retraction_torn
            scanned.ranges.append((end, torn, "a record is cut short"))
            owner.retraction_torn = None
        scanned.ranges.sort()
    kept = [i for i, (path, _o) in enumerate(owner.retraction_sources) if path not in paths]
    owner.retractions = [owner.retractions[i] for i in kept]
    owner.retraction_sources = [owner.retraction_sources[i] for i in kept]
    owner.retractions_damaged = True


def _classify(survey: Survey) -> None:
    newest = len(survey.intents) - 1
    seen: Counter[LedgerEntry] = Counter()
    for index, entry in enumerate(survey.intents):
        if entry is None:
            continue
        seen[entry] += 1
        if seen[entry] == 2:
            survey.repeated.append(entry)
        if not survey.known(entry.session_hash, entry.owner_hash):
            survey.unknown[(entry.session_hash, entry.owner_hash)] += 1
            continue
        owner = survey.owner(entry)
        if entry.memory_hash in owner.memory_hashes:
            continue
        if survey.batch is not None and index >= survey.batch:
            survey.uncommitted.append(index)
        elif index == newest and not owner.damaged:
            survey.pending = index
        else:
            survey.lost[index] = owner
    for owner in survey.lost.values():
        if owner.torn is not None:
            # Not an unacknowledged append: acknowledged records are missing, so the file
            # was cut short in the middle of one of them. Damage, set aside by a salvage.
            path, end, torn = owner.torn
            session = survey.sessions[owner.session_hash]
            scanned = session.scanned[path]
            scanned.ranges.append((end, torn, "the file ends in the middle of a record"))
            owner.torn, owner.damaged = None, True
    if survey.pending is not None:
        entry = survey.intents[survey.pending]
        if entry is not None and survey.owner(entry).damaged:
            # Its partition lost acknowledged records too: the newest is one of them, not
            # an append in flight (check --fix must never drop it).
            survey.lost[survey.pending] = survey.owner(entry)
            survey.pending = None
    if not survey.ledger_read:
        return  # which records have an intent cannot be known
    named = {(e.session_hash, e.owner_hash, e.memory_hash) for e in survey.intents if e}
    for session in survey.sessions.values():
        for owner in session.owners.values():
            if owner.owner_hash in session.unknown_owners:
                continue
            # In partition order (the order --fix appends their intents in).
            for memory_hash in owner.ordered_hashes:
                if (owner.session_hash, owner.owner_hash, memory_hash) not in named:
                    survey.unlisted.append((owner, memory_hash))
