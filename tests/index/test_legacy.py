"""Migration of the reference (C#) flat vector index: validated, then moved, never guessed."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory import (
    DerivedIndexError,
    GameMemory,
    GameMoment,
    MemoryEmbeddingIdentity,
    MemoryTextProjector,
    VectorMemoryState,
    VectorMemoryStore,
)
from game_memory.index.engine import INDEX_FOLDER
from support.providers import FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, file_hashes, query


def ids(memories: Sequence[Any]) -> list[str]:
    return [memory.memory_id for memory in memories]


def reference_key(memory: GameMemory) -> str:
    """K = sha256(session NUL owner NUL memory id), as the reference names its records."""
    text = f"{memory.session_id}\0{memory.owner_id}\0{memory.memory_id}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_record(
    memory: GameMemory,
    identity: MemoryEmbeddingIdentity | None,
    vector: Sequence[float] | None,
    code: str | None = None,
) -> dict[str, Any]:
    """One record as the reference writes it: PascalCase, memory flattened, kind ordinal."""
    expires = memory.expires_at
    return {
        "FormatVersion": 1,
        "Memory": {
            "MemoryId": memory.memory_id,
            "SessionId": memory.session_id,
            "OwnerId": memory.owner_id,
            "Scope": memory.scope,
            "Kind": memory.kind.ordinal,
            "PayloadJson": memory.payload_json,
            "TimelineId": memory.moment.timeline_id,
            "Tick": memory.moment.tick,
            "CalendarJson": memory.moment.calendar_json,
            "Importance": memory.importance,
            "SearchableText": memory.searchable_text,
            "Tags": list(memory.tags),
            "SourceInputId": memory.source_input_id,
            "ExpiresTimelineId": expires.timeline_id if expires else None,
            "ExpiresTick": expires.tick if expires else None,
            "ExpiresCalendarJson": expires.calendar_json if expires else None,
            "Metadata": dict(memory.metadata),
        },
        "Identity": None
        if identity is None
        else {
            "ProviderId": identity.provider_id,
            "ModelId": identity.model_id,
            "Version": identity.version,
            "Dimensions": identity.dimensions,
        },
        "Vector": None if vector is None else [float(value) for value in vector],
        "DiagnosticCode": code,
    }


def write_reference_index(
    folder: Path, records: Sequence[tuple[GameMemory, dict[str, Any]]]
) -> list[Path]:
    """Write the reference layout: flat records, layout.json and empty partition markers."""
    folder.mkdir(parents=True, exist_ok=True)
    markers = folder / ".vector-partitions-v2"
    markers.mkdir(exist_ok=True)
    (markers / "layout.json").write_text(
        json.dumps({"FormatVersion": 2, "EntryCount": len(records)})
    )
    paths = []
    for memory, record in records:
        key = reference_key(memory)
        path = folder / f"{key}.vector-memory.json"
        path.write_text(json.dumps(record), encoding="utf-8")
        owner = markers / f"s-{_sha(memory.session_id)}" / f"o-{_sha(memory.owner_id)}"
        owner.mkdir(parents=True, exist_ok=True)
        (owner / f"{key}.entry").touch()
        paths.append(path)
    return paths


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reference_vector(provider: FaultyProvider, memory: GameMemory) -> list[float]:
    """The normalized float32 vector the reference stored for ``memory``."""
    raw = provider.inner.embed(MemoryTextProjector().project_document(memory))
    return (raw / np.linalg.norm(raw)).astype(np.float32).tolist()


def rich_memories(make_memory: MemoryFactory) -> list[GameMemory]:
    return [
        make_memory(
            "m1",
            text="the cat sleeps on the roof",
            kind="relationship",
            tick=3,
            importance=0.75,
            tags=("roof", "cat"),
            metadata={"mood": "calm", "source": "observation"},
            source_input_id="input-7",
            payload_json='{"where": "roof", "n": 1.5}',
            moment=GameMoment(timeline_id="world", tick=3, calendar_json='{"day": 2}'),
            expires_at=GameMoment(timeline_id="world", tick=900, calendar_json='{"day": 9}'),
        ),
        make_memory("m2", text="the smith sharpened an axe", kind="event", tick=4),
    ]


async def saved(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> tuple[VectorMemoryStore, FaultyProvider, list[GameMemory]]:
    """A store whose save holds :func:`rich_memories` and whose index holds nothing yet."""
    provider = FaultyProvider()
    store = make_vector_store(provider)
    memories = rich_memories(make_memory)
    for memory in memories:
        await store.authoritative.append(memory)  # the save only: no vectors written here
    return store, provider, memories


def test_the_reference_key_matches_the_reference_example() -> None:
    key = hashlib.sha256(b"session\0owner\0one").hexdigest()
    assert key.startswith("055ed4af") and key.endswith("51eb")


async def test_a_reference_index_is_migrated_and_its_vectors_are_used_without_embedding(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    index = tmp_path / "index"
    legacy = write_reference_index(
        index,
        [
            (m, reference_record(m, provider.identity, reference_vector(provider, m)))
            for m in memories
        ],
    )
    status = await store.get_status("session")
    assert (status.state, status.ready_entries) == (VectorMemoryState.READY, 2)
    result = await store.recall(query("feline", limit=1))
    assert ids(result.memories) == ["m1"] and not result.fallback
    assert provider.documents.calls == 0
    assert not any(path.exists() for path in legacy)
    assert not (index / ".vector-partitions-v2").exists()
    assert (index / INDEX_FOLDER / "format.json").exists()


async def test_migration_runs_once_and_reports_how_many_records_it_moved(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    memories = rich_memories(make_memory)
    provider = FaultyProvider()
    store = make_vector_store(provider)
    write_reference_index(
        tmp_path / "index",
        [
            (m, reference_record(m, provider.identity, reference_vector(provider, m)))
            for m in memories
        ],
    )
    assert await store.index.migrate_legacy_index() == 2
    assert await store.index.migrate_legacy_index() == 0


async def test_a_record_without_a_vector_becomes_a_pending_entry_keeping_its_code(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    write_reference_index(
        tmp_path / "index",
        [
            (memories[0], reference_record(memories[0], None, None, "embedding_rebuild_failed")),
            (memories[1], reference_record(memories[1], provider.identity, None)),
        ],
    )
    status = await store.get_status("session")
    assert (status.state, status.pending_entries) == (VectorMemoryState.DEGRADED, 2)
    partition = store.index.engine.partition(_sha("session"), _sha("owner"))
    assert partition is not None
    entry = partition.record(hashlib.sha256(b"m1").digest())
    assert entry is not None and entry.code == "embedding_rebuild_failed"
    assert (await store.rebuild("session")).state is VectorMemoryState.READY


async def test_reference_vectors_of_another_model_are_stale(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, _, memories = await saved(make_vector_store, make_memory)
    old = FaultyProvider(version="reference")
    write_reference_index(
        tmp_path / "index",
        [(m, reference_record(m, old.identity, reference_vector(old, m))) for m in memories],
    )
    status = await store.get_status("session")
    assert (status.state, status.stale_entries) == (VectorMemoryState.REBUILD_REQUIRED, 2)
    assert (await store.recall(query("feline"))).fallback


async def test_a_reference_record_of_other_content_is_migrated_but_never_used(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, _ = await saved(make_vector_store, make_memory)
    edited = make_memory("m1", text="an older text of the memory")
    write_reference_index(
        tmp_path / "index",
        [(edited, reference_record(edited, provider.identity, reference_vector(provider, edited)))],
    )
    status = await store.get_status("session")
    assert (status.ready_entries, status.pending_entries) == (0, 2)


def break_name(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Memory"]["MemoryId"] = "renamed"  # no longer matches the file name
    return record


def short_vector(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Vector"] = record["Vector"][:-1]
    return record


def vector_without_identity(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Identity"] = None
    return record


def newer_format(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["FormatVersion"] = 2
    return record


def unknown_kind(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Memory"]["Kind"] = 42
    return record


def text_vector(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Vector"] = ["0.5"] * len(record["Vector"])
    return record


def zero_vector(memory: GameMemory, record: dict[str, Any]) -> dict[str, Any]:
    record["Vector"] = [0.0] * len(record["Vector"])
    return record


BROKEN = {
    "all-zero vector": zero_vector,
    "file name of another memory": break_name,
    "vector shorter than its identity": short_vector,
    "vector without an identity": vector_without_identity,
    "newer record format": newer_format,
    "unknown kind ordinal": unknown_kind,
    "vector of strings": text_vector,
}


def _authoritative(save: Path) -> dict[str, str]:
    """The save's files, less ``unsynced.log``, which closing the store empties."""
    return {name: digest for name, digest in file_hashes(save).items() if "unsynced" not in name}


@pytest.mark.parametrize("damage", list(BROKEN.values()), ids=list(BROKEN))
async def test_an_invalid_reference_record_stops_the_migration_before_anything_moves(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    tmp_path: Path,
    damage: Any,
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    save = _authoritative(tmp_path / "save")
    records = [
        (m, reference_record(m, provider.identity, reference_vector(provider, m))) for m in memories
    ]
    records[1] = (records[1][0], damage(records[1][0], records[1][1]))
    write_reference_index(tmp_path / "index", records)
    legacy = {
        name: digest for name, digest in file_hashes(tmp_path / "index").items() if "vector" in name
    }
    result = await store.recall(query("axe"))
    assert ids(result.memories) == ["m2"] and result.fallback
    assert diagnostics.codes() == ["memory_vector_search_failed"]
    with pytest.raises(DerivedIndexError, match="legacy vector record"):
        await store.index.migrate_legacy_index()
    after = file_hashes(tmp_path / "index")
    assert all(after[name] == digest for name, digest in legacy.items())
    await store.aclose()
    assert _authoritative(tmp_path / "save") == save


async def test_a_non_finite_number_in_a_reference_vector_is_refused(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    (path,) = write_reference_index(
        tmp_path / "index",
        [(memories[0], reference_record(memories[0], provider.identity, [0.5] * 256))],
    )
    path.write_text(path.read_text().replace("0.5", "1e999", 1))  # parses as infinity
    with pytest.raises(DerivedIndexError, match="legacy vector record"):
        await store.index.migrate_legacy_index()
    assert path.exists()


def _not_json(path: Path) -> None:
    path.write_text('{"broken": ', encoding="utf-8")


def _a_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()  # cannot be read, nor deleted as a file


@pytest.mark.parametrize("force", [False, True], ids=["rebuild", "forced"])
@pytest.mark.parametrize("damage", [*BROKEN.values(), _not_json], ids=[*BROKEN, "not JSON"])
async def test_a_rebuild_migrates_the_valid_reference_records_and_drops_the_invalid_ones(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    damage: Any,
    force: bool,
) -> None:
    """An invalid record stops every migration (each use of the index migrates first), so
    only a rebuild can get past it: it migrates the valid records, deletes the invalid ones
    (derived data, named in a warning) and embeds their memories from the save."""
    store, provider, memories = await saved(make_vector_store, make_memory)
    save = _authoritative(tmp_path / "save")
    records = [
        (m, reference_record(m, provider.identity, reference_vector(provider, m))) for m in memories
    ]
    if damage is not _not_json:
        records[1] = (records[1][0], damage(records[1][0], records[1][1]))
    valid, invalid = write_reference_index(tmp_path / "index", records)
    if damage is _not_json:
        _not_json(invalid)
    assert (await store.recall(query("axe"))).fallback
    assert (await store.get_status("session")).state is VectorMemoryState.DEGRADED
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        status = await store.rebuild("session", force=force)
    assert (status.state, status.ready_entries) == (VectorMemoryState.READY, 2)
    assert any(
        invalid.name in r.getMessage() and "deleted" in r.getMessage() for r in caplog.records
    )
    assert "memory_vector_index_reset" in diagnostics.codes()
    assert not valid.exists() and not invalid.exists()
    # The valid record's vector was migrated, not embedded again (unless forced).
    assert ["axe" in text for text in provider.documents.texts] == (
        [False, True] if force else [True]
    )
    result = await store.recall(query("axe", limit=1))
    assert ids(result.memories) == ["m2"] and not result.fallback
    assert not (await store.recall(query("feline", limit=1))).fallback
    assert await store.index.migrate_legacy_index() == 0
    await store.aclose()
    assert _authoritative(tmp_path / "save") == save


async def test_an_invalid_reference_record_names_the_rebuild_that_repairs_it(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    (path,) = write_reference_index(
        tmp_path / "index",
        [(memories[0], reference_record(memories[0], provider.identity, [0.5] * 256))],
    )
    _not_json(path)
    with pytest.raises(DerivedIndexError, match=r"nothing was migrated: a rebuild") as caught:
        await store.index.migrate_legacy_index()
    assert path.name in str(caught.value)


async def test_a_reference_record_the_rebuild_cannot_delete_is_named_with_what_to_do(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store, provider, memories = await saved(make_vector_store, make_memory)
    (path,) = write_reference_index(
        tmp_path / "index",
        [(memories[0], reference_record(memories[0], provider.identity, [0.5] * 256))],
    )
    _a_folder(path)
    with pytest.raises(DerivedIndexError, match="delete it by hand"):
        await store.rebuild("session")
    path.rmdir()
    assert (await store.rebuild("session")).state is VectorMemoryState.READY
