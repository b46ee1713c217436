"""``check --fix --accept-loss``: keep every intact record, set the damage aside, record the loss.

What only an explicit, documented choice may do, because it gives up acknowledged
memories that can no longer be read. Under the writer lock, after the recovery:

1. create ``.game-memory/damaged/<UTC time>/`` and write ``report.json`` there first: each
   damaged file with its damaged stretches, each missing file, and every lost memory (its
   ledger position, its session, owner and memory hashes, and the ids when they can still
   be read: from the partition's other records, or from the damaged bytes, checked
   against the hash);
2. for each damaged file: hard-link the original into that folder (the damaged bytes are
   kept for forensics, untouched), then replace the file atomically (temporary file,
   fsync, rename, folder fsync) with its intact records, in their order (a pack is
   rebuilt from its intact records, grouped by owner);
3. put an empty file in place of each file missing from a numbered series, so the files
   after it are read again;
4. rewrite the ledger atomically: the intents of the intact memories, in order, plus
   intents for intact memories that had none. Damaged intents and those of lost memories
   are dropped. The retraction ledger likewise, by identity: an intent is kept for each
   intact retraction of its partition that names the same memory, and one is added for
   each intact retraction that had none (a retraction log is salvaged like a memory log;
   one of another partition was moved aside as damage in step 2, so it gets none).

Every step is atomic on its own and keeps every intact record, so a crash part-way leaves
a store that still fails closed where it is damaged, and running the salvage again
finishes it (the report of the second run lists what the first one had not yet dropped).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

from game_memory.durable import fs
from game_memory.errors import PersistenceError
from game_memory.store.audit import DamagedFile, SessionAudit
from game_memory.store.engine import StoreEngine
from game_memory.store.ledger import LedgerEntry
from game_memory.store.packs import encode_pack
from game_memory.store.survey import Survey

__all__ = ["DAMAGED_FOLDER", "new_damaged_folder", "salvage"]

DAMAGED_FOLDER = "damaged"


def salvage(engine: StoreEngine, survey: Survey) -> list[str]:
    """Salvage the store (see the module docstring); return the repairs as sentences."""
    folder = _new_folder(engine.data / DAMAGED_FOLDER)
    shown = os.path.relpath(folder, engine.root)
    _write_report(engine, survey, folder)
    repairs: list[str] = []
    for session in survey.sessions.values():
        for path, scanned in sorted(session.files.items()):
            original = _set_aside(path, session, folder)
            _rewrite(path, scanned)
            repairs.append(
                f"moved {os.path.relpath(path, engine.root)} aside to {shown}/{original} and "
                f"rewrote it with its {len(scanned.kept)} intact records"
            )
        for path in session.gaps:
            _fill(path)
            shown_gap = os.path.relpath(path, engine.root)
            repairs.append(f"put an empty {shown_gap} in place of the missing one")
        if session.files or session.gaps:
            fs.fsync_directory(session.directory)
    lost: dict[tuple[str, str], int] = {}
    for owner in survey.lost.values():
        key = (owner.session_hash, owner.owner_hash)
        lost[key] = lost.get(key, 0) + 1
    for (session_hash, owner_hash), count in sorted(lost.items()):
        owner = survey.sessions[session_hash].owner(owner_hash)
        repairs.append(
            f"gave up {count} acknowledged memor{'y' if count == 1 else 'ies'} of "
            f"{owner.name(survey.session_id(owner))} (listed in {shown}/report.json)"
        )
    for (session_hash, owner_hash), count in sorted(survey.lost_retractions.items()):
        owner = survey.owner(LedgerEntry(session_hash, owner_hash, ""))
        repairs.append(
            f"gave up {count} acknowledged retraction{'' if count == 1 else 's'} of "
            f"{owner.name(survey.session_id(owner))} (those memories are recalled again)"
        )
    repairs.extend(_rewrite_ledger(engine, survey))
    repairs.extend(_rewrite_retraction_ledger(engine, survey))
    return repairs


def new_damaged_folder(data: Path) -> Path:
    """A new ``damaged/<UTC time>`` folder of the data folder ``data``, for what is set aside."""
    return _new_folder(data / DAMAGED_FOLDER)


def _new_folder(parent: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    number = 1
    while True:
        folder = parent / (stamp if number == 1 else f"{stamp}-{number}")
        if not os.path.lexists(folder):
            fs.make_folders(folder)
            return folder
        number += 1


def _write_report(engine: StoreEngine, survey: Survey, folder: Path) -> None:
    files: list[dict[str, object]] = []
    missing: list[str] = []
    for session in survey.sessions.values():
        for path, scanned in sorted(session.files.items()):
            files.append(
                {
                    "path": os.path.relpath(path, engine.root),
                    "kept_records": len(scanned.kept),
                    "damage": [
                        {"offset": offset, "length": length, "reason": reason}
                        for offset, length, reason in scanned.ranges
                    ],
                }
            )
        missing.extend(os.path.relpath(path, engine.root) for path in session.gaps)
    lost: list[dict[str, object]] = []
    for position, owner in sorted(survey.lost.items()):
        entry = survey.intents[position]
        assert entry is not None
        lost.append(
            {
                "ledger_position": position,
                "session_hash": entry.session_hash,
                "owner_hash": entry.owner_hash,
                "memory_hash": entry.memory_hash,
                "session_id": survey.session_id(owner),
                "owner_id": owner.memories[0].owner_id if owner.memories else None,
                "memory_id": owner.readable_ids.get(entry.memory_hash),
            }
        )
    document = {
        "format_version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "what": "check --fix --accept-loss: the originals of the damaged files are beside this "
        "report; the store no longer reads them",
        "damaged_files": files,
        "missing_files": missing,
        "lost_memories": lost,
        "damaged_ledger_positions": survey.damaged_intents,
        "lost_retractions": [
            {"session_hash": session, "owner_hash": owner, "count": count}
            for (session, owner), count in sorted(survey.lost_retractions.items())
        ],
        "damaged_retraction_ledger_positions": survey.damaged_retraction_intents,
    }
    fs.atomic_write(folder / "report.json", json.dumps(document, indent=2).encode())


def _set_aside(path: str, session: SessionAudit, folder: Path) -> str:
    """Keep the damaged original in ``folder`` (a hard link; a copy where links fail)."""
    name = f"{session.directory.name}.{os.path.basename(path)}"
    target = folder / name
    try:
        os.link(path, target)
    except OSError:
        read = fs.read_file(path, 1 << 40)
        fs.atomic_write(target, b"" if read is None else read[0])
    fs.fsync_directory(folder)
    return name


def _rewrite(path: str, scanned: DamagedFile) -> None:
    """Replace ``path`` atomically with its intact records (in order)."""
    if scanned.pack:
        groups: dict[str, list[bytes]] = {}
        for owner_hash, _offset, record in scanned.kept:
            groups.setdefault(owner_hash, []).append(record)
        data = encode_pack(list(groups.items()))
    else:
        data = b"".join(record for _owner, _offset, record in scanned.kept)
    _replace(Path(path), data)


def _fill(path: str) -> None:
    """An empty segment, or an empty pack, where one is missing from its series."""
    _replace(Path(path), encode_pack([]) if path.endswith(".pack") else b"")


def _replace(path: Path, data: bytes) -> None:
    try:
        fs.atomic_write(path, data)
    except PersistenceError as exc:
        raise PersistenceError(f"the salvage could not rewrite {path}: {exc}") from exc


def _rewrite_retraction_ledger(engine: StoreEngine, survey: Survey) -> list[str]:
    """Keep an intent for each intact retraction that names its memory; add the missing."""
    held: dict[tuple[str, str], list[str]] = {}
    for session in survey.sessions.values():
        for owner in session.owners.values():
            held[(owner.session_hash, owner.owner_hash)] = owner.retraction_hashes
    remaining = {key: Counter(hashes) for key, hashes in held.items()}
    kept: list[LedgerEntry] = []
    for entry in survey.retraction_intents:
        if entry is None:
            continue
        found = remaining.get((entry.session_hash, entry.owner_hash))
        if found is not None and found[entry.memory_hash] > 0:
            found[entry.memory_hash] -= 1
            kept.append(entry)
    for key, hashes in sorted(held.items()):
        extra = remaining[key]
        # Of the retractions of one memory, the newest are the ones without an intent.
        added: list[str] = []
        for memory_hash in reversed(hashes):
            if extra[memory_hash] > 0:
                extra[memory_hash] -= 1
                added.append(memory_hash)
        kept.extend(LedgerEntry(*key, memory_hash) for memory_hash in reversed(added))
    if kept == survey.retraction_intents:
        return []
    engine.retraction_ledger.rewrite(kept)
    return [f"rewrote {engine.retraction_ledger.path} with {len(kept)} retraction intents"]


def _rewrite_ledger(engine: StoreEngine, survey: Survey) -> list[str]:
    present = {
        (owner.session_hash, owner.owner_hash, memory_hash)
        for session in survey.sessions.values()
        for owner in session.owners.values()
        for memory_hash in owner.memory_hashes
    }
    kept: list[LedgerEntry] = []
    seen: set[LedgerEntry] = set()
    for entry in survey.intents:
        if entry is not None and tuple(entry) in present and entry not in seen:
            kept.append(entry)
            seen.add(entry)
    added = [
        LedgerEntry(owner.session_hash, owner.owner_hash, memory_hash)
        for owner, memory_hash in survey.unlisted
    ]
    entries = kept + [entry for entry in added if entry not in seen]
    if entries == survey.intents:
        return []
    engine.ledger.rewrite(entries)
    dropped = survey.valid_intents - len(kept)
    return [
        f"rewrote {engine.ledger.path} with {len(entries)} intents (dropped {dropped} of lost "
        f"memories and {len(survey.damaged_intents)} damaged ones, added "
        f"{len(entries) - len(kept)} for memories that had none)"
    ]
