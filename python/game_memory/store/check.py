"""A consistency checker for one store folder: the ledger against every partition record.

Meant for tests, post-mortems and the ``game-memory check`` command. It reads everything
from disk (not the caches). Problems are reported as sentences; with ``fix=True`` only the
repairs that cannot lose an acknowledged memory are applied: cutting torn tails (bytes of
records whose writer died before acknowledging them) and resolving pending intents.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.names import identity_hash
from game_memory.errors import PersistenceError
from game_memory.model import StoreCheckReport
from game_memory.store.engine import StoreEngine
from game_memory.store.ledger import LedgerEntry
from game_memory.store.partitions import PartitionCache

__all__ = ["check_store"]

_SESSION = re.compile(r"^s-([0-9a-f]{64})$")


def _scan(engine: StoreEngine) -> tuple[Counter[LedgerEntry], list[str], list[tuple[str, int]]]:
    records: Counter[LedgerEntry] = Counter()
    problems: list[str] = []
    torn: list[tuple[str, int]] = []
    cache = PartitionCache(engine.maximum_file_bytes, 1)
    try:
        with os.scandir(engine.data) as listing:
            sessions = sorted(listing, key=lambda entry: entry.name)
    except OSError as exc:
        return records, [f"could not list {engine.data}: {exc.strerror}"], torn
    for session in sessions:
        match = _SESSION.match(session.name)
        if match is None:
            if session.is_symlink():
                problems.append(f"{session.path} is a symbolic link")
            continue
        session_hash = match.group(1)
        directory = Path(session.path)
        try:
            fs.ensure_directory(directory, create=False)
            hashes = cache.owner_hashes(directory)
        except PersistenceError as exc:
            problems.append(str(exc))
            continue
        for owner_hash in hashes:
            try:
                state = cache.read(directory, session_hash, owner_hash)
            except PersistenceError as exc:
                problems.append(str(exc))
                continue
            finally:
                cache.forget(session_hash, owner_hash)
            tail = state.tail
            if tail is not None and tail.torn_bytes:
                torn.append((tail.path, tail.end))
            stored = [memory for part in state.packs for memory in part.memories]
            stored.extend(memory for segment in state.segments for memory in segment.memories)
            for memory in stored:
                records[LedgerEntry(session_hash, owner_hash, identity_hash(memory.memory_id))] += 1
    return records, problems, torn


def _problems(engine: StoreEngine) -> tuple[list[str], int, int, list[tuple[str, int]]]:
    records, problems, torn = _scan(engine)
    for path, end in torn:
        problems.append(f"{path} ends with a torn record after byte {end}")
    if engine.ledger.torn_bytes():
        problems.append(f"{engine.ledger.path} ends with a torn record")
    if fs.read_file(engine.journal_path, 1 << 24) is not None:
        problems.append(f"{engine.journal_path} marks an uncommitted migration batch")
    try:
        intents = Counter(engine.ledger.read())
    except PersistenceError as exc:
        problems.append(str(exc))
        intents = Counter()
    for entry, count in records.items():
        if count > 1:
            problems.append(f"memory {entry.memory_hash[:12]}… has {count} records")
        if entry not in intents:
            problems.append(
                f"memory {entry.memory_hash[:12]}… in partition o-{entry.owner_hash[:12]}… has "
                "no ledger intent (the count is too low)"
            )
    for entry, count in intents.items():
        if count > 1:
            problems.append(f"memory {entry.memory_hash[:12]}… has {count} ledger intents")
        if entry not in records:
            problems.append(
                f"ledger intent for memory {entry.memory_hash[:12]}… has no record (a pending "
                "append)"
            )
    return problems, sum(records.values()), sum(intents.values()), torn


def check_store(engine: StoreEngine, *, fix: bool = False) -> StoreCheckReport:
    """Check (and optionally repair) the store; see the module docstring.

    Holds the writer lock throughout, so the report describes one consistent state: an
    append of another process waits until the check is done (readers are not blocked).
    """
    repairs: list[str] = []
    with engine.locked():
        problems, memories, intents, torn = _problems(engine)
        if fix and problems:
            for path, end in torn:
                engine.cut_tail(path, end)
                repairs.append(f"cut the torn tail of {path} at byte {end}")
            torn_ledger = engine.ledger.torn_bytes()
            if torn_ledger:
                repairs.append(f"cut {torn_ledger} bytes of a torn record off {engine.ledger.path}")
            before = engine.ledger.count()
            engine.recover(force=True)
            if engine.ledger.count() != before:
                repairs.append(f"dropped {before - engine.ledger.count()} pending ledger intents")
            problems, memories, intents, _ = _problems(engine)
    return StoreCheckReport(
        memories=memories,
        ledger_entries=intents,
        problems=tuple(problems),
        repairs=tuple(repairs),
    )
