"""FileVectorMemoryIndex on disk: binary layout, partitions, generations, capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory import (
    CapacityExceededError,
    DerivedIndexError,
    FileVectorMemoryIndex,
    InvalidArgumentError,
    MemoryTextProjector,
    StoreClosedError,
)
from game_memory.durable import fs
from game_memory.durable.names import identity_hash
from game_memory.index import engine as engine_module
from game_memory.index.engine import INDEX_FOLDER, IndexEngine
from game_memory.index.entries import NO_VALUE, EntryRecord, EntryState, encode_entry, memory_hash
from game_memory.index.partition import PartitionReplacedError
from support.providers import FaultyProvider
from support.vectors import Diagnostics, MemoryFactory, VectorStoreFactory, query

SESSION, OWNER = identity_hash("session"), identity_hash("owner")
DIMENSIONS = 4


def engine_at(folder: Path, capacity: int = 100) -> IndexEngine:
    engine = FileVectorMemoryIndex(folder, capacity=capacity).engine
    engine.identity_code(FaultyProvider(DIMENSIONS).identity, create=True)
    return engine


def ready(name: str, row: int = 0, digest: bytes = b"d" * 32) -> EntryRecord:
    return EntryRecord(EntryState.READY, 0, row, memory_hash(name), digest, "")


def marker(name: str, state: EntryState = EntryState.PENDING) -> EntryRecord:
    return EntryRecord(state, NO_VALUE, NO_VALUE, memory_hash(name), b"d" * 32, "embedding_pending")


def vectors(*rows: list[float]) -> dict[int, np.ndarray]:
    return {0: np.asarray(rows, dtype=np.float32)}


async def test_vectors_are_stored_as_raw_float32_rows_beside_binary_entries(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_vector_store()
    memory = make_memory("m1", text="the cat sleeps")
    await store.append(memory)
    data = tmp_path / "index" / INDEX_FOLDER
    assert json.loads((data / "format.json").read_text()) == {
        "format": "game-memory-vector-index",
        "format_version": 1,
    }
    assert json.loads((data / "identities.json").read_text())["identities"] == [
        str(store.active_identity)
    ]
    session = data / f"s-{SESSION}"
    assert (session / f"o-{OWNER}.entries").stat().st_size == 128
    (rows,) = session.glob(f"o-{OWNER}.0.*.f32")
    stored = np.fromfile(rows, dtype="<f4")
    provider = FaultyProvider()
    expected = provider.inner.embed(MemoryTextProjector().project_document(memory))
    assert np.allclose(stored, expected / np.linalg.norm(expected), atol=1e-6)
    assert b"[" not in rows.read_bytes()[:1] and rows.stat().st_size == 256 * 4


def test_the_latest_record_of_a_memory_wins_and_a_tombstone_removes_it(tmp_path: Path) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(SESSION, OWNER, [marker("a"), marker("b")])
        engine.append(SESSION, OWNER, [ready("a")], vectors([1, 0, 0, 0]))
        engine.append(
            SESSION,
            OWNER,
            [EntryRecord(EntryState.DELETED, NO_VALUE, NO_VALUE, memory_hash("b"), bytes(32), "")],
        )
    partition = engine.partition(SESSION, OWNER)
    assert partition is not None
    assert partition.records == 4 and partition.live == 1
    latest = partition.record(memory_hash("a"))
    assert latest is not None and (latest.state, latest.row) == (EntryState.READY, 0)
    assert partition.record(memory_hash("b")) is None
    assert engine.matrix(partition, 0, DIMENSIONS).tolist() == [[1, 0, 0, 0]]


def test_an_unchanged_partition_is_served_from_memory_and_a_grown_one_reads_only_its_tail(
    tmp_path: Path,
) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(SESSION, OWNER, [ready("a")], vectors([1, 0, 0, 0]))
    first = engine.partition(SESSION, OWNER)
    assert first is not None and engine.partition(SESSION, OWNER) is first
    matrix = engine.matrix(first, 0, DIMENSIONS)
    other = engine_at(tmp_path)  # another process appends
    with other.locked():
        other.append(SESSION, OWNER, [ready("b")], vectors([0, 1, 0, 0]))
    grown = engine.partition(SESSION, OWNER)
    assert grown is not None and grown is not first
    assert grown.records == 2 and grown.inode == first.inode and grown.tag == first.tag
    assert engine.matrix(grown, 0, DIMENSIONS).tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]
    assert matrix.tolist() == [[1, 0, 0, 0]]  # earlier slices stay valid


def test_a_writer_caches_what_it_appended_as_a_read_of_the_file_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(SESSION, OWNER, [ready("a")], vectors([1, 0, 0, 0]))
        engine.append(SESSION, OWNER, [marker("b")])
        tombstone = EntryRecord(
            EntryState.DELETED, NO_VALUE, NO_VALUE, memory_hash("a"), bytes(32), ""
        )
        engine.append(SESSION, OWNER, [ready("c"), tombstone], vectors([0, 0, 1, 0]))
    reads: list[object] = []
    real_read = fs.read_file
    monkeypatch.setattr(fs, "read_file", lambda *a, **k: reads.append(a) or real_read(*a, **k))
    cached = engine.partition(SESSION, OWNER)
    assert reads == []  # the writer's own appends are not read back
    fresh = engine_at(tmp_path).partition(SESSION, OWNER)  # another process reads the file
    assert cached is not None and fresh is not None
    assert (cached.records, cached.size, cached.crc, cached.tag) == (
        fresh.records,
        fresh.size,
        fresh.crc,
        fresh.tag,
    )
    assert (cached.inode, cached.changed, cached.file) == (fresh.inode, fresh.changed, fresh.file)
    assert (
        dict(cached.position)
        == dict(fresh.position)
        == {
            memory_hash("b"): 1,
            memory_hash("c"): 2,
        }
    )
    assert [cached.record(memory_hash(n)) for n in "abc"] == [
        fresh.record(memory_hash(n)) for n in "abc"
    ]
    assert engine.matrix(cached, 0, DIMENSIONS).tolist() == [[1, 0, 0, 0], [0, 0, 1, 0]]


def test_a_file_changed_behind_a_writer_is_not_cached_as_its_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(SESSION, OWNER, [ready("a")], vectors([1, 0, 0, 0]))
    path = Path(engine.entries_path(SESSION, OWNER))
    real_append = engine_module.append_files

    def append_then_intrude(*args: Any, **kwargs: Any) -> Any:
        written = real_append(*args, **kwargs)
        tag = engine.partition(SESSION, OWNER).tag  # type: ignore[union-attr]
        with path.open("ab") as file:  # bytes no writer of this process appended
            file.write(encode_entry(marker("x"), tag))
        return written

    monkeypatch.setattr(engine_module, "append_files", append_then_intrude)
    with engine.locked():
        engine.append(SESSION, OWNER, [marker("c")])
    after = engine.partition(SESSION, OWNER)
    assert after is not None and after.records == 3 and after.size == path.stat().st_size
    assert set(after.position) == {memory_hash(n) for n in "acx"}


def test_compaction_drops_ready_entries_of_identities_it_is_not_told_to_keep(
    tmp_path: Path,
) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(SESSION, OWNER, [ready("a")], vectors([1, 0, 0, 0]))
        engine.compact(SESSION, OWNER, set())
    partition = engine.partition(SESSION, OWNER)
    assert partition is not None and partition.live == 0
    assert list((tmp_path / INDEX_FOLDER / f"s-{SESSION}").glob("*.f32")) == []


def test_a_reader_holding_a_partition_replaced_by_compaction_is_told_to_read_it_again(
    tmp_path: Path,
) -> None:
    reader = engine_at(tmp_path)
    writer = engine_at(tmp_path)
    with writer.locked():
        writer.append(
            SESSION, OWNER, [ready("a"), ready("b", 1)], vectors([1, 0, 0, 0], [0, 1, 0, 0])
        )
        writer.append(SESSION, OWNER, [ready("a")], vectors([0, 0, 1, 0]))
    stale = reader.partition(SESSION, OWNER)
    assert stale is not None
    with writer.locked():
        writer.compact(SESSION, OWNER, {0})
    with pytest.raises(PartitionReplacedError):
        reader.matrix(stale, 0, DIMENSIONS)
    fresh = reader.partition(SESSION, OWNER)
    assert fresh is not None and reader.matrix(fresh, 0, DIMENSIONS).shape == (2, DIMENSIONS)


async def test_recall_reads_a_partition_again_when_a_compaction_raced_it(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_vector_store()
    await store.append(make_memory("m1", text="the cat sleeps"))
    engine = store.index.engine
    original = engine.matrix
    raced: list[bool] = []

    def racing(*args: object, **kwargs: object) -> np.ndarray:
        if not raced:
            raced.append(True)
            raise PartitionReplacedError("compacted meanwhile")
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "matrix", racing)
    result = await store.recall(query("feline"))
    assert raced == [True]
    assert not result.fallback and result.hits[0].vector_rank == 1


async def test_an_owner_partition_holds_at_most_capacity_entries(
    tmp_path: Path, make_memory: MemoryFactory, diagnostics: Diagnostics
) -> None:
    from game_memory import FileGameMemoryStore, VectorMemoryStore

    store = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "index", capacity=2),
        FaultyProvider(),
        diagnostics=diagnostics,
    )
    try:
        for index in range(3):
            assert await store.append(make_memory(f"m{index}"))
        await store.append(make_memory("x", owner_id="another-owner"))
        assert diagnostics.codes() == ["memory_embedding_append_failed"]
        assert diagnostics[0].memory_id == "m2"
        status = await store.get_status("session")
        assert (status.ready_entries, status.pending_entries) == (3, 1)
        assert store.index is not None and store.active_identity is not None
        with pytest.raises(CapacityExceededError) as raised:
            row = np.ones((1, 256), dtype=np.float32) / 16
            store.index.write([make_memory("m9")], row, store.active_identity)
        assert raised.value.bound == "capacity"
    finally:
        await store.aclose()


def test_an_append_below_capacity_builds_no_memory_to_slot_dictionary(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    # Live memories never outnumber records, so an append that fits by its record count is
    # checked without the dictionary (building it costs the partition's size per append);
    # near the capacity the dictionary decides, and a rewritten memory still fits.
    index = FileVectorMemoryIndex(tmp_path / "index", capacity=3)
    identity = FaultyProvider(DIMENSIONS).identity
    row = np.ones((1, DIMENSIONS), dtype=np.float32) / 2
    for name in ("m0", "m1"):
        index.write([make_memory(name)], row, identity)
    partition = index.engine.partition(identity_hash("session"), identity_hash("owner"))
    assert partition is not None and partition.records == 2
    index.write([make_memory("m1")], row, identity)  # checked against ``partition``
    assert not partition.position.is_built  # type: ignore[attr-defined]
    index.write([make_memory("m1")], row, identity)  # 4 records > capacity, still 2 live
    index.write([make_memory("m2")], row, identity)
    with pytest.raises(CapacityExceededError):
        index.write([make_memory("m3")], row, identity)


@pytest.mark.parametrize("capacity", [0, 1_000_001, True])
def test_capacity_must_be_from_1_to_1000000(tmp_path: Path, capacity: int) -> None:
    with pytest.raises(InvalidArgumentError, match="capacity"):
        FileVectorMemoryIndex(tmp_path, capacity=capacity)


def test_an_index_of_another_format_version_is_refused(tmp_path: Path) -> None:
    data = tmp_path / INDEX_FOLDER
    data.mkdir(parents=True)
    (data / "format.json").write_text('{"format": "game-memory-vector-index", "format_version": 2}')
    with pytest.raises(DerivedIndexError, match="another format or version"):
        _ = FileVectorMemoryIndex(tmp_path).engine


async def test_a_closed_index_refuses_use_and_closing_is_idempotent(tmp_path: Path) -> None:
    index = FileVectorMemoryIndex(tmp_path)
    await index.aclose()
    await index.aclose()
    with pytest.raises(StoreClosedError):
        _ = index.engine
    with pytest.raises(StoreClosedError):
        await index.migrate_legacy_index()


def test_identity_codes_are_stable_across_reopening(tmp_path: Path) -> None:
    first = engine_at(tmp_path)
    with first.locked():
        assert first.identity_code(FaultyProvider(8, version="v2").identity, create=True) == 1
    reopened = FileVectorMemoryIndex(tmp_path).engine
    assert reopened.identity_code(FaultyProvider(DIMENSIONS).identity, create=False) == 0
    assert reopened.identity_code(FaultyProvider(8, version="v2").identity, create=False) == 1
    assert reopened.identity_code(FaultyProvider(8, version="v3").identity, create=False) is None


def test_a_file_reusing_the_inode_of_a_replaced_one_is_read_whole_not_as_a_continuation(
    tmp_path: Path,
) -> None:
    engine = engine_at(tmp_path)
    with engine.locked():
        engine.append(
            SESSION, OWNER, [ready("a"), ready("b", 1)], vectors([1, 0, 0, 0], [0, 1, 0, 0])
        )
    cached = engine.partition(SESSION, OWNER)
    assert cached is not None
    # Another generation of the same size lands on the same inode (as after inode reuse).
    path = Path(engine.entries_path(SESSION, OWNER))
    other = b"".join(encode_entry(marker(name), cached.tag ^ 0xFFFF) for name in ("c", "d"))
    with path.open("r+b") as file:
        file.write(other)
    reread = engine.partition(SESSION, OWNER)
    assert reread is not None and reread is not cached
    assert reread.tag == cached.tag ^ 0xFFFF
    assert reread.record(memory_hash("a")) is None and reread.record(memory_hash("c")) is not None


def test_row_buffers_leave_with_their_partition_past_the_cache_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each eviction once scanned every cached partition's row buffers (quadratic past the
    # bound: 7.8 s of an 18.7 s session-wide recall over 10,000 NPCs).
    monkeypatch.setattr(engine_module, "_CACHED_PARTITIONS", 8)
    engine = engine_at(tmp_path)
    owners = [identity_hash(f"npc{n}") for n in range(20)]
    with engine.locked():
        for number, owner in enumerate(owners):
            engine.append(SESSION, owner, [ready("a")], vectors([number, 1, 0, 0]))
    for _ in range(2):
        for number, owner in enumerate(owners):
            partition = engine.partition(SESSION, owner)
            assert partition is not None
            assert engine.matrix(partition, 0, DIMENSIONS).tolist() == [[number, 1, 0, 0]]
        assert len(engine._partitions) <= 8
        assert set(engine._row_buffers) <= set(engine._partitions)
