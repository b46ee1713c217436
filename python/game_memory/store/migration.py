"""Migration of the reference runtime's saves into this store's layout.

Two legacy layouts are read, both holding v1 documents (see documents.py):

* the flat layout: ``<save>/<sha256(session\\nowner\\nmemory_id)>.memory.json``;
* the C# runtime's partitioned layout: ``<save>/.memory-v2/s-<sha256(session)>/
  o-<sha256(owner)>/<sha256(memory_id)>.memory.json``.

The migration runs under the store lock, so it is serialized across processes, in four
phases: (1) read and validate **every** legacy document, checking that its file name
matches its identity; (2) resolve duplicates: an equivalent memory already migrated is
skipped, a different one is a conflict; (3) write the new memories as one batch: journal
(ledger mark and pack names), ledger intents, packs per session, one barrier (everything
written is fsynced), journal removed (the commit); (4) only then move the legacy documents,
untouched, into ``.game-memory/legacy/`` (a backup the old runtime can read). A failure in
phases 1-2 changes nothing; a crash in phase 3 is rolled back whole by recovery (the legacy
documents are still in place); a crash in phase 4 leaves legacy copies that the next run
recognises as already migrated. Running it again is always safe.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from game_memory.durable import fs
from game_memory.durable.names import identity_hash, partition_hash
from game_memory.errors import CapacityExceededError, MemoryConflictError, PersistenceError
from game_memory.model import GameMemory, MigrationReport
from game_memory.store.capacity import BOUND_OPTIONS
from game_memory.store.documents import DocumentError, decode_legacy_document, encode_document
from game_memory.store.engine import StoreEngine
from game_memory.store.packs import PACK_OVERHEAD, write_pack
from game_memory.store.records import encode_record

__all__ = ["has_legacy_layout", "migrate_legacy_layout"]

LEGACY_SUFFIX = ".memory.json"
CSHARP_FOLDER = ".memory-v2"
LEGACY_BACKUP = "legacy"
_HASH_FOLDER = re.compile(r"^[so]-[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class _Source:
    """One legacy document: its folder, its file name, and which layout it belongs to."""

    folder: str
    name: str
    csharp: bool

    @property
    def path(self) -> str:
        return os.path.join(self.folder, self.name)


def has_legacy_layout(root: Path) -> bool:
    """Whether ``root`` holds legacy documents or a C# partitioned folder.

    Stops at the first one (the migration lists the folder in full, refusing links); a
    folder without any is listed once, refusing links.
    """
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.name.endswith(LEGACY_SUFFIX) or entry.name == CSHARP_FOLDER:
                    return True
                if entry.is_symlink():
                    raise PersistenceError(
                        f"refusing to read {entry.path}: it is a symbolic link. A save folder "
                        "must contain only real files and folders."
                    )
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise PersistenceError(f"could not list {root}: {exc.strerror}") from exc
    return False


def _documents_in(folder: str, csharp: bool) -> list[_Source]:
    sources: list[_Source] = []
    for entry in fs.list_directory(Path(folder)):
        if entry.name.endswith(LEGACY_SUFFIX):
            if not entry.is_file(follow_symlinks=False):
                raise PersistenceError(f"{entry.path} should be a regular file")
            sources.append(_Source(folder, entry.name, csharp))
    return sources


def _sources(root: Path) -> list[_Source]:
    """Every legacy document: the flat ones in ``root``, then the C# partitioned ones."""
    sources = _documents_in(os.fspath(root), csharp=False)
    csharp = root / CSHARP_FOLDER
    if os.path.lexists(csharp):
        fs.ensure_directory(csharp, create=False)
        for session in fs.list_directory(csharp):
            if not _HASH_FOLDER.match(session.name) or not session.name.startswith("s-"):
                continue  # layout.json, pending-add.json, temporary files
            fs.ensure_directory(Path(session.path), create=False)
            for owner in fs.list_directory(Path(session.path)):
                if not _HASH_FOLDER.match(owner.name) or not owner.name.startswith("o-"):
                    continue
                fs.ensure_directory(Path(owner.path), create=False)
                sources.extend(_documents_in(owner.path, csharp=True))
    return sources


def _read_all(engine: StoreEngine, sources: list[_Source]) -> list[tuple[_Source, GameMemory]]:
    """Read, decode and fully validate every document, checking each file name."""
    root = os.fspath(engine.root)
    csharp_root = os.path.join(root, CSHARP_FOLDER)
    documents: list[tuple[_Source, GameMemory]] = []
    hashes: dict[str, str] = {}

    def hashed(value: str) -> str:
        digest = hashes.get(value)
        if digest is None:
            digest = hashes[value] = identity_hash(value)
        return digest

    folder: str | None = None
    folder_fd = -1
    try:
        for source in sources:
            if source.folder != folder:
                if folder_fd >= 0:
                    os.close(folder_fd)
                    folder_fd = -1
                folder_fd = fs.open_folder(source.folder)
                folder = source.folder
            data = fs.read_at(folder_fd, source.name, engine.maximum_file_bytes, source.folder)
            if data is None:
                raise PersistenceError(f"{source.path} vanished during the migration; run it again")
            try:
                memory = decode_legacy_document(data)
            except DocumentError as exc:
                raise PersistenceError(
                    f"legacy memory document {source.path} is invalid ({exc}); nothing was "
                    "migrated and the legacy files are untouched. Repair or remove that file."
                ) from exc
            if source.csharp:
                expected_folder = os.path.join(
                    csharp_root, f"s-{hashed(memory.session_id)}", f"o-{hashed(memory.owner_id)}"
                )
                key = memory.memory_id
            else:
                expected_folder = root
                key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}"
            if (
                source.folder != expected_folder
                or source.name != identity_hash(key) + LEGACY_SUFFIX
            ):
                raise PersistenceError(
                    f"legacy memory document {source.path} does not match its identity "
                    f"(session {memory.session_id!r}, owner {memory.owner_id!r}, id "
                    f"{memory.memory_id!r}); nothing was migrated"
                )
            documents.append((source, memory))
    finally:
        if folder_fd >= 0:
            os.close(folder_fd)
    return documents


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load, then restore it.

    A migration creates hundreds of thousands of long-lived objects; each time their number
    grows by a quarter the collector walks all of them again, which costs more than the
    migration's own work. Nothing it allocates is cyclic garbage, so pausing loses nothing.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _conflict(memory: GameMemory, source: _Source, other: str, advice: str) -> MemoryConflictError:
    """The error of a legacy document whose id is taken by different content: it names the
    document's file (the one to act on), what it conflicts with, and what to do."""
    return MemoryConflictError(
        f"legacy memory {memory.memory_id!r} of owner {memory.owner_id!r} in session "
        f"{memory.session_id!r}, in the file {source.path}, conflicts with {other}; nothing "
        f"was migrated and the legacy files are untouched. {advice}"
    )


#: What to do when a migration would exceed ``maximum_entries``: migrate with a larger
#: bound (the command, or the Python call), then open the save with it wherever it is opened.
_CAPACITY_ADVICE = (
    "Migrate it with a larger bound, 'game-memory migrate --save-dir SAVE --maximum-entries N' "
    "(from Python: open_memory(SAVE, maximum_entries=N), then migrate()), and from then on "
    "open the save with that bound: " + BOUND_OPTIONS
)


def migrate_legacy_layout(engine: StoreEngine) -> MigrationReport:
    """Migrate every legacy document of ``engine``'s folder (see the module docstring).

    Raises:
        PersistenceError: a legacy document is corrupt, misnamed, or a link.
        MemoryConflictError: two documents (or a document and a stored memory) share an id
            with different content.
        CapacityExceededError: the migrated store would exceed ``maximum_entries``.
    """
    engine.layout.guard()
    with engine.locked():
        engine.layout.guard()
        engine.recover(checkpoint=False)  # a migration that fails closed changes nothing
        with _no_cycle_collection():
            # Everything the migration built is freed when _migrate returns, before the
            # collector is back on: re-enabled over them, its first pass would walk them all.
            return _migrate(engine)


def _migrate(engine: StoreEngine) -> MigrationReport:
    """The migration's phases, under the lock, after recovery (see the module docstring)."""
    sources = _sources(engine.root)
    if not sources:
        return MigrationReport(migrated_entries=0, partitioned_entries=engine.ledger.count())
    if len(sources) > engine.maximum_entries:
        raise CapacityExceededError(
            f"the legacy save holds {len(sources):,} documents, more than maximum_entries "
            f"({engine.maximum_entries:,}); nothing was migrated and the legacy files are "
            f"untouched. {_CAPACITY_ADVICE}",
            bound="maximum_entries",
        )
    documents = _read_all(engine, sources)

    new = _new_memories(engine, documents)
    before = engine.ledger.count()
    added = sum(len(memories) for memories in new.values())
    if before + added > engine.maximum_entries:
        raise CapacityExceededError(
            f"migrating {added:,} memories into a store holding {before:,} would exceed "
            f"maximum_entries ({engine.maximum_entries:,}); nothing was migrated and the "
            f"legacy files are untouched. {_CAPACITY_ADVICE}",
            bound="maximum_entries",
        )

    if new:
        _write_batch(engine, new, before)

    _back_up(engine, sources)
    return MigrationReport(migrated_entries=len(sources), partitioned_entries=engine.ledger.count())


def _new_memories(
    engine: StoreEngine, documents: list[tuple[_Source, GameMemory]]
) -> dict[tuple[str, str], list[GameMemory]]:
    """Phase 2: the memories not migrated yet, by (session hash, owner hash).

    Equal copies (a flat and a partitioned document, or a document already migrated) are
    merged; different content under one identity is a conflict.

    Raises:
        MemoryConflictError: two documents, or a document and a stored memory, differ.
    """
    unique: dict[tuple[str, str, str], GameMemory] = {}
    found_in: dict[tuple[str, str, str], _Source] = {}
    for source, memory in documents:
        seen = unique.setdefault(memory.key, memory)
        first = found_in.setdefault(memory.key, source)
        if seen is not memory and seen != memory:
            raise _conflict(
                memory,
                source,
                f"another legacy document of the same id with different content, {first.path}",
                "Remove the one of the two that is wrong (or move it out of the save folder), "
                "then try again.",
            )
    groups: dict[tuple[str, str], list[GameMemory]] = {}
    for memory in unique.values():
        key = (partition_hash(memory.session_id), partition_hash(memory.owner_id))
        groups.setdefault(key, []).append(memory)
    new: dict[tuple[str, str], list[GameMemory]] = {}
    existing_sessions = {
        entry.name[2:] for entry in fs.list_directory(engine.data) if entry.name[:2] == "s-"
    }
    for (session_hash, owner_hash), memories in groups.items():
        if session_hash not in existing_sessions:
            new.setdefault((session_hash, owner_hash), []).extend(memories)
            continue
        state = engine.read_partition(session_hash, owner_hash)
        for memory in memories:
            existing = state.find(memory.memory_id)
            if existing is None:
                new.setdefault((session_hash, owner_hash), []).append(memory)
            elif existing != memory:
                raise _conflict(
                    memory,
                    found_in[memory.key],
                    "a different memory of the same id that the save already holds",
                    "The save keeps its own: move that file out of the save folder (or remove "
                    "it), then try again.",
                )
    return new


def _write_batch(
    engine: StoreEngine, new: dict[tuple[str, str], list[GameMemory]], before: int
) -> None:
    """Write new memories as packs: journal, ledger intents, packs, one barrier, commit.

    Raises:
        CapacityExceededError: a memory's record would not fit a pack of
            ``maximum_file_bytes`` (checked before anything is written).
    """
    sessions: dict[str, list[tuple[str, list[bytes]]]] = {}
    digests: list[tuple[bytes, bytes, bytes]] = []
    largest = engine.maximum_file_bytes - PACK_OVERHEAD
    for (session_hash, owner_hash), memories in sorted(new.items()):
        records = [encode_record(encode_document(memory)) for memory in memories]
        for memory, record in zip(memories, records, strict=True):
            if len(record) > largest:
                raise CapacityExceededError(
                    f"legacy memory {memory.memory_id!r} of owner {memory.owner_id!r} takes "
                    f"{len(record):,} bytes as a record, more than fits a file of "
                    f"maximum_file_bytes ({engine.maximum_file_bytes:,}); nothing was "
                    "migrated. Open the store with a larger maximum_file_bytes.",
                    bound="maximum_file_bytes",
                )
        sessions.setdefault(session_hash, []).append((owner_hash, records))
        session_digest, owner_digest = bytes.fromhex(session_hash), bytes.fromhex(owner_hash)
        digests.extend(
            (session_digest, owner_digest, hashlib.sha256(memory.memory_id.encode()).digest())
            for memory in memories
        )
    plans = []
    for session_hash, groups in sessions.items():
        fs.ensure_directory(engine.session_directory(session_hash), durable=False)
        plans.extend(engine.plan_packs(session_hash, groups))
    engine.checkpoint()  # its intents are of partitions unsynced.log does not name
    engine.write_journal(before, [path for path, _ in plans])
    intents = engine.ledger.encode_digests(digests, before)
    engine.ledger.append_encoded(intents, durable=False)  # the barrier makes it durable
    for path, groups in plans:
        write_pack(path, groups)
    packs = [Path(path) for path, _ in plans]
    # The backup folders are made here, so the barrier makes them durable with the batch
    # (engine.data holds legacy/, legacy/ holds v1/) instead of two fsyncs in a row after
    # the commit. Rolled back, the batch leaves them empty: the store never reads them.
    backup = _backup_folders(engine, durable=False)
    folders = [engine.data, backup, *(engine.session_directory(session) for session in sessions)]
    fs.sync_all([engine.ledger.path, *packs], folders)
    engine.commit_journal()


def _backup_folders(engine: StoreEngine, *, durable: bool) -> Path:
    """Create ``legacy/`` and ``legacy/v1/`` if needed (each durably if ``durable``)."""
    backup = engine.data / LEGACY_BACKUP
    fs.ensure_directory(backup, durable=durable)
    fs.ensure_directory(backup / "v1", durable=durable)
    return backup


def _back_up(engine: StoreEngine, sources: list[_Source]) -> None:
    """Move the migrated legacy documents into ``.game-memory/legacy/``, untouched.

    Renames (cheap, and freeing nothing) rather than deletes: the backup is what the old
    runtime can read again if a game must roll back. Delete the folder when not needed.
    Flat documents go to ``legacy/v1/`` one by one; the C# ``.memory-v2`` folder moves
    whole to ``legacy/memory-v2`` (``memory-v2-N`` if that exists). A crash part-way leaves
    some documents in place: the next migration finds them already migrated and moves them.
    For the same reason the moves are not flushed: a power loss may put some documents back
    in the save folder, which only means they are moved again. (The commit before this was
    flushed, so it never comes undone after a document has moved; the backup folders are
    created durably, so a move that persisted is always reachable.)
    """
    # The folders are made durably (here, or by the batch's barrier): a document moved
    # into a folder whose own entry a power loss then took would be in neither place.
    backup = _backup_folders(engine, durable=True)
    flat = backup / "v1"
    names = [source.name for source in sources if not source.csharp]
    if names:
        fs.rename_all(engine.root, flat, names)
    csharp = engine.root / CSHARP_FOLDER
    if os.path.lexists(csharp):
        number = 1
        target = backup / "memory-v2"
        while os.path.lexists(target):
            number += 1
            target = backup / f"memory-v2-{number}"
        try:
            os.rename(csharp, target)
        except OSError as exc:
            raise PersistenceError(
                f"could not move {csharp} into the backup folder {backup}: {exc.strerror}; "
                "the migration itself is committed, run it again to finish the clean-up"
            ) from exc
