"""Migration of the reference runtime's flat vector index into this index's layout.

The reference keeps one JSON record per memory, ``<root>/<K>.vector-memory.json`` with
``K = sha256(session + "\\0" + owner + "\\0" + memory_id)``: PascalCase properties, the
memory flattened (kind as its ordinal), the identity, the vector as JSON numbers, and a
diagnostic code; plus empty marker files under ``.vector-partitions-v2/``. Each record is
validated before anything is written (file name against identity, vector length against
the identity, finite and non-zero values); the records become entries and L2-normalized
float32 rows here, written durably partition by partition, and the legacy files are then
removed (derived data needs no backup: the save can always rebuild it).
"""

from __future__ import annotations

import contextlib
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
from game_memory.model import MAXIMUM_PAYLOAD_DEPTH, GameMemory, GameMemoryKind
from game_memory.model.identity import MemoryEmbeddingIdentity
from game_memory.strict_json import parse_strict_json

__all__ = ["has_legacy_index", "migrate_legacy_index"]

LEGACY_SUFFIX = ".vector-memory.json"
LEGACY_MARKERS = ".vector-partitions-v2"
_MAXIMUM_RECORD_BYTES = 64 * 1024 * 1024


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
        }
    )


def _decode(
    path: Path, data: bytes
) -> tuple[GameMemory, MemoryEmbeddingIdentity | None, list[float] | None, str | None]:
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


def migrate_legacy_index(engine: IndexEngine) -> int:
    """Migrate every reference vector record of ``engine``'s folder; return how many."""
    with engine.locked():
        try:
            sources = [
                Path(e.path)
                for e in fs.list_directory(engine.root)
                if e.name.endswith(LEGACY_SUFFIX)
            ]
            decoded = []
            for path in sources:
                read = fs.read_file(path, _MAXIMUM_RECORD_BYTES)
                if read is None:
                    raise DerivedIndexError(f"{path} vanished during the migration; run it again")
                decoded.append(_decode(path, read[0]))
        except PersistenceError as exc:
            raise DerivedIndexError(str(exc)) from exc
        groups: dict[
            tuple[str, str],
            list[tuple[GameMemory, MemoryEmbeddingIdentity | None, list[float] | None, str | None]],
        ] = {}
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
            # Durable before the reference files go: one partition's files at a time.
            engine.append(session_hash, owner_hash, records, vectors, durable=True)
        for path in sources:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        markers = engine.root / LEGACY_MARKERS
        if os.path.isdir(markers) and not os.path.islink(markers):
            shutil.rmtree(markers, ignore_errors=True)
        return len(sources)
