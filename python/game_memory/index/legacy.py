"""Migration of the reference runtime's flat vector index into this index's layout.

The reference keeps one JSON record per memory, ``<root>/<K>.vector-memory.json`` with
``K = sha256(session + "\\0" + owner + "\\0" + memory_id)``: PascalCase properties, the
memory flattened (kind as its ordinal), the identity, the vector as JSON numbers, and a
diagnostic code; plus empty marker files under ``.vector-partitions-v2/``. Each record is
validated before anything is written (file name against identity, vector length against
the identity, finite and non-zero values); the records become entries and L2-normalized
float32 rows here, written durably partition by partition, and the legacy files are then
removed (derived data needs no backup: the save can always rebuild it).

An invalid record (unreadable, not JSON, of another format, a vector that does not fit its
identity...) is never guessed at. On first use, and by an explicit migration, nothing is
migrated then (:class:`LegacyRecordError`, naming the record): the index reports itself
damaged and recall is lexical. A rebuild repairs it (``FileVectorMemoryIndex.verify`` with
``repair``): the valid records are migrated, the invalid ones deleted, each named in a
warning, and their memories, which then have no entry, are embedded again from the save.
Without that repair an invalid record would block the index for good, since every use
migrates first.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from game_memory.durable import fs
from game_memory.durable.names import identity_hash
from game_memory.errors import DerivedIndexError, PersistenceError
from game_memory.index.engine import IndexEngine
from game_memory.index.entries import EntryRecord, EntryState, content_digest, memory_hash
from game_memory.index.partition import derived_error
from game_memory.model import MAXIMUM_PAYLOAD_DEPTH, GameMemory, GameMemoryKind
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.model.memory import STORED
from game_memory.strict_json import parse_strict_json

__all__ = ["LegacyRecordError", "has_legacy_index", "migrate_legacy_index"]

LEGACY_SUFFIX = ".vector-memory.json"
LEGACY_MARKERS = ".vector-partitions-v2"
_MAXIMUM_RECORD_BYTES = 64 * 1024 * 1024
#: Invalid records a message names one by one (the rest are counted).
_NAMED = 3
_LOG = logging.getLogger("game_memory.index")

_Decoded = tuple[GameMemory, MemoryEmbeddingIdentity | None, list[float] | None, str | None]


class LegacyRecordError(DerivedIndexError):
    """A reference vector record could not be migrated (nothing was): the index folder's
    damage that a rebuild repairs by migrating the valid records and deleting the invalid
    ones (``FileVectorMemoryIndex.verify``), unlike damage that empties the whole index."""


def has_legacy_index(root: Path) -> bool:
    """Whether ``root`` holds reference vector records."""
    try:
        return any(e.name.endswith(LEGACY_SUFFIX) for e in fs.list_directory(root))
    except PersistenceError as exc:
        raise DerivedIndexError(str(exc)) from exc


def _memory(document: dict[str, Any]) -> GameMemory:
    expires = None
    if document.get("ExpiresTick") is not None:
        expires = {
            "timeline_id": document.get("ExpiresTimelineId"),
            "tick": document.get("ExpiresTick"),
            "calendar_json": document.get("ExpiresCalendarJson"),
        }
    return GameMemory.model_validate(
        {
            "memory_id": document.get("MemoryId"),
            "session_id": document.get("SessionId"),
            "owner_id": document.get("OwnerId"),
            "scope": document.get("Scope"),
            "kind": GameMemoryKind.parse(document.get("Kind")),
            "payload_json": document.get("PayloadJson"),
            "moment": {
                "timeline_id": document.get("TimelineId"),
                "tick": document.get("Tick"),
                "calendar_json": document.get("CalendarJson"),
            },
            "importance": document.get("Importance", 0.0),
            "searchable_text": document.get("SearchableText"),
            "tags": document.get("Tags") or (),
            "source_input_id": document.get("SourceInputId"),
            "expires_at": expires,
            "metadata": document.get("Metadata") or {},
        },
        context=STORED,
    )


def _decode(path: Path, data: bytes) -> _Decoded:
    try:
        document = parse_strict_json(data.decode("utf-8-sig"), str(path), MAXIMUM_PAYLOAD_DEPTH)
        if not isinstance(document, dict) or document.get("FormatVersion") != 1:
            raise ValueError("not a version 1 vector record")
        memory = _memory(document["Memory"])
        identity = document.get("Identity")
        vector = document.get("Vector")
        code = document.get("DiagnosticCode")
        parsed = None
        if identity is not None:
            parsed = MemoryEmbeddingIdentity(
                provider_id=identity["ProviderId"],
                model_id=identity["ModelId"],
                version=identity["Version"],
                dimensions=identity["Dimensions"],
            )
        if vector is not None:
            if parsed is None or len(vector) != parsed.dimensions:
                raise ValueError("the vector does not match its identity")
            if not all(isinstance(v, int | float) and math.isfinite(v) for v in vector):
                raise ValueError("the vector has non-finite values")
            if not any(vector):
                raise ValueError("the vector is all zeros")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, ValidationError) as exc:
        raise DerivedIndexError(f"legacy vector record {path} is invalid: {exc}") from exc
    key = f"{memory.session_id}\0{memory.owner_id}\0{memory.memory_id}"
    if path.name != identity_hash(key) + LEGACY_SUFFIX:
        raise DerivedIndexError(f"legacy vector record {path} does not match its memory")
    return memory, parsed, vector, code if isinstance(code, str) else None


def _unit_rows(rows: list[list[float]]) -> npt.NDArray[np.float32]:
    """The rows L2-normalized (in double precision) as float32, as this index stores them."""
    matrix = np.asarray(rows, dtype=np.float64)
    unit: npt.NDArray[np.float32] = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(
        np.float32
    )
    return unit


def migrate_legacy_index(engine: IndexEngine, *, drop_invalid: bool = False) -> int:
    """Migrate every reference vector record of ``engine``'s folder; return how many.

    Under the writer lock. Every record is read and validated before anything is written.
    By default an invalid record stops the migration before anything moves. With
    ``drop_invalid`` (a rebuild's repair) the valid records are migrated and the invalid
    ones deleted with them, each named in a warning (logger ``game_memory.index``): their
    memories have no entry then, and the rebuild embeds them from the save.

    Raises:
        LegacyRecordError: a record is invalid (without ``drop_invalid``; nothing was
            migrated or removed), or could not be deleted (named, with what to do).
        DerivedIndexError: a record vanished midway, or the folder is not writable (the
            writer lock could not be taken).
        StoreBusyError: another writer held the lock too long.
    """
    try:
        with engine.locked():
            return _migrate(engine, drop_invalid=drop_invalid)
    except PersistenceError as exc:
        raise derived_error(exc) from exc


def _migrate(engine: IndexEngine, *, drop_invalid: bool) -> int:
    """:func:`migrate_legacy_index`, under the writer lock."""
    sources = _sources(engine)
    decoded: list[_Decoded] = []
    migrated: list[Path] = []
    invalid: list[tuple[Path, DerivedIndexError]] = []
    for path in sources:
        try:
            decoded.append(_read(path))
            migrated.append(path)
        except LegacyRecordError as exc:
            invalid.append((path, exc))
    if invalid and not drop_invalid:
        raise LegacyRecordError(
            f"{_listed(invalid)}; nothing was migrated: a rebuild ('game-memory rebuild' "
            "or memory.rebuild) migrates the valid records, deletes the invalid ones and "
            "embeds their memories again from the save"
        )
    _write(engine, decoded)
    # The migrated records first: one that cannot be deleted leaves only invalid ones.
    for path in [*migrated, *(path for path, _ in invalid)]:
        _remove(path)
    if invalid:
        _LOG.warning(
            "deleted %s that could not be migrated (%s); %s no vector until the rebuild "
            "embeds %s from the save",
            _count(len(invalid)),
            _listed(invalid),
            "its memory has" if len(invalid) == 1 else "their memories have",
            "it" if len(invalid) == 1 else "them",
        )
    markers = engine.root / LEGACY_MARKERS
    if os.path.isdir(markers) and not os.path.islink(markers):
        shutil.rmtree(markers, ignore_errors=True)
    return len(decoded)


def _sources(engine: IndexEngine) -> list[Path]:
    """The reference records in ``engine``'s folder (``PersistenceError`` if it cannot be
    listed)."""
    entries = fs.list_directory(engine.root)
    return [Path(e.path) for e in entries if e.name.endswith(LEGACY_SUFFIX)]


def _read(path: Path) -> _Decoded:
    """The record at ``path``, validated.

    Raises:
        LegacyRecordError: it cannot be read (a link, not a regular file, too large, a
            refused read) or is invalid.
        DerivedIndexError: it vanished (another migration ran meanwhile: run it again).
    """
    try:
        read = fs.read_file(path, _MAXIMUM_RECORD_BYTES)
    except PersistenceError as exc:
        raise LegacyRecordError(f"legacy vector record {path} cannot be read: {exc}") from exc
    if read is None:
        raise DerivedIndexError(f"{path} vanished during the migration; run it again")
    try:
        return _decode(path, read[0])
    except DerivedIndexError as exc:
        raise LegacyRecordError(str(exc)) from exc


def _write(engine: IndexEngine, decoded: list[_Decoded]) -> None:
    """Write ``decoded`` as entries and rows, durably, one partition at a time."""
    groups: dict[tuple[str, str], list[_Decoded]] = {}
    for item in decoded:
        memory = item[0]
        key = (identity_hash(memory.session_id), identity_hash(memory.owner_id))
        groups.setdefault(key, []).append(item)
    for (session_hash, owner_hash), items in groups.items():
        records: list[EntryRecord] = []
        rows: dict[int, list[list[float]]] = {}
        for memory, identity, vector, code in items:
            digest = content_digest(memory)
            if identity is not None and vector is not None:
                identity_code = engine.identity_code(identity, create=True)
                assert identity_code is not None
                bucket = rows.setdefault(identity_code, [])
                records.append(
                    EntryRecord(
                        EntryState.READY,
                        identity_code,
                        len(bucket),
                        memory_hash(memory.memory_id),
                        digest,
                        "",
                    )
                )
                bucket.append(vector)
            else:
                records.append(
                    EntryRecord(
                        EntryState.PENDING,
                        0xFFFFFFFF,
                        0xFFFFFFFF,
                        memory_hash(memory.memory_id),
                        digest,
                        code or "embedding_pending",
                    )
                )
        vectors = {code: _unit_rows(bucket) for code, bucket in rows.items()}
        for identity_code in sorted(vectors):
            engine.claim_session(session_hash, identity_code)  # its folder says what codes mean
        # Durable before the reference files go: one partition's files at a time.
        engine.append(session_hash, owner_hash, records, vectors, durable=True)


def _remove(path: Path) -> None:
    """Delete the record at ``path`` (migrated, or invalid and dropped).

    Raises:
        LegacyRecordError: it could not be deleted (a folder in its place, say).
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise LegacyRecordError(
            f"could not delete the legacy vector record {path} ({exc.strerror or exc}); "
            "delete it by hand (it is derived data, not the save) and run the rebuild again"
        ) from exc


def _count(count: int) -> str:
    return "1 reference vector record" if count == 1 else f"{count} reference vector records"


def _listed(invalid: list[tuple[Path, DerivedIndexError]]) -> str:
    """The first few invalid records' errors, and how many more there are."""
    named = "; ".join(str(error) for _, error in invalid[:_NAMED])
    more = len(invalid) - _NAMED
    return named if more <= 0 else f"{named}; and {more} more invalid record(s)"
