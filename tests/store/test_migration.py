"""Migration of the reference runtime's saves: flat v1 documents and the C# partitioned layout."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from game_memory import (
    CapacityExceededError,
    GameMemory,
    GameMemoryQuery,
    GameMemorySearchStageKind,
    GameMoment,
    MemoryConflictError,
    PersistenceError,
)
from game_memory.durable.names import identity_hash
from game_memory.store.documents import decode_legacy_document, encode_legacy_document
from support.stores import search, search_snapshot

from .helpers import (
    DATA,
    MemoryFactory,
    StoreFactory,
    files_under,
    legacy_name,
    session_folder,
    write_legacy,
)

FIXTURES = Path(__file__).parent / "fixtures" / "v1"

# What the hand-written fixture documents hold (written as System.Text.Json writes them:
# \u-escaped non-ASCII and HTML-sensitive characters; one pretty-printed with a UTF-8 BOM).
FIXTURE_MEMORIES = [
    GameMemory(
        memory_id="memory-ü-1",
        session_id="save-1",
        owner_id="npc-émile",
        scope="relationship",
        kind="relationship",
        payload_json='{"quote":"<b>Tom & Jerry\'s</b> + `x`","n":[1,2.5,null]}',
        moment=GameMoment(timeline_id="world", tick=1200, calendar_json='{"day":3,"season":"été"}'),
        importance=0.75,
        searchable_text="Émile a vu un dragon \U0001f409 près de la forge\nligne 2\t“quoted”",
        tags=["forge", "été", "dragon"],
        source_input_id="input-42",
        expires_at=GameMoment(timeline_id="world", tick=5000),
        metadata={"mood": "ému", "source": "<tavern>"},
    ),
    GameMemory(
        memory_id="memory-2",
        session_id="save-1",
        owner_id="npc-tom",
        scope="skills",
        kind="procedure",
        payload_json="[]",
        moment=GameMoment(timeline_id="prologue", tick=-15),
        importance=1.0,
    ),
    GameMemory(
        memory_id="memory-3",
        session_id="save-2",
        owner_id="npc-mira",
        scope="personal",
        kind="event",
        payload_json='{"text":"Feline"}',
        moment=GameMoment(timeline_id="world", tick=9_007_199_254_740_993),
        importance=0.1,
        searchable_text="猫がいる",
    ),
]

GLOBAL_LOCKS = [
    "6ffa7f3058e16c81880e3863ef5df05116ce7d101075cf02c538626aaf6f2edc.lock",
    "45559a13a5ce2e75defae92433cf9a0a47b0d219345b8965c084f5c7048a2e49.lock",
]


def csharp_path(save: Path, memory: GameMemory) -> Path:
    return (
        save
        / ".memory-v2"
        / f"s-{identity_hash(memory.session_id)}"
        / f"o-{identity_hash(memory.owner_id)}"
        / f"{identity_hash(memory.memory_id)}.memory.json"
    )


def write_csharp_save(
    save: Path, memories: list[GameMemory], *, pending: GameMemory | None = None
) -> None:
    """A save folder exactly as the C# runtime leaves it (reference §3.2 and §3.3)."""
    (save / ".memory-v2").mkdir(parents=True)
    for memory in memories:
        path = csharp_path(save, memory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_legacy_document(memory))
        key = f"{memory.session_id}\n{memory.owner_id}\n{memory.memory_id}.memory.json"
        (save / f"{hashlib.sha256(key.encode()).hexdigest()}.lock").touch()
    for name in GLOBAL_LOCKS:
        (save / name).touch()
    layout = {"FormatVersion": 2, "EntryCount": len(memories)}
    (save / ".memory-v2" / "layout.json").write_text(json.dumps(layout, separators=(",", ":")))
    if pending is not None:  # the C# runtime died mid-add: journal and a temporary file left
        (save / ".memory-v2" / "pending-add.json").write_text(
            json.dumps(
                {
                    "FormatVersion": 1,
                    "ExpectedEntryCount": len(memories),
                    "SessionHash": identity_hash(pending.session_id),
                    "OwnerHash": identity_hash(pending.owner_id),
                    "MemoryHash": identity_hash(pending.memory_id),
                }
            )
        )
        target = csharp_path(save, pending)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.with_name(target.name + ".0123456789abcdef0123456789abcdef.tmp").write_bytes(
            encode_legacy_document(pending)[:40]
        )


def copy_fixtures(save: Path) -> None:
    save.mkdir(parents=True, exist_ok=True)
    for path in FIXTURES.iterdir():
        shutil.copyfile(path, save / path.name)


async def everything(store: object, sessions: list[str]) -> list[GameMemory]:
    found: list[GameMemory] = []
    for session in sessions:
        found.extend(await store.enumerate(session))  # type: ignore[attr-defined]
    return found


def key(memory: GameMemory) -> tuple[str, str, str]:
    return memory.key


# -- the document format ----------------------------------------------------------------


def test_the_hand_written_fixtures_decode_to_the_expected_memories() -> None:
    for memory in FIXTURE_MEMORIES:
        data = (FIXTURES / legacy_name(memory)).read_bytes()
        assert decode_legacy_document(data) == memory


def test_encoding_a_legacy_document_matches_the_csharp_bytes() -> None:
    memory = FIXTURE_MEMORIES[0]
    assert encode_legacy_document(memory) == (FIXTURES / legacy_name(memory)).read_bytes()


# -- flat documents ---------------------------------------------------------------------


async def test_flat_documents_migrate_on_first_use_and_are_moved_to_the_backup(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    written = [
        make_memory(f"m{index}", owner_id=f"npc-{index % 3}", text=f"the {index}th memory")
        for index in range(10)
    ]
    originals = {legacy_name(m): write_legacy(save, m).read_bytes() for m in written}
    store = make_store(save)
    snapshot = await search_snapshot(store, GameMemoryQuery(session_id="session", limit=20))
    stage = snapshot.stage(GameMemorySearchStageKind.STORAGE_MIGRATION)
    assert stage is not None and (stage.scanned_count, stage.candidate_count) == (10, 10)
    assert sorted(snapshot.authoritative_memories, key=key) == sorted(written, key=key)
    assert not list(save.glob("*.memory.json"))
    assert files_under(save / DATA / "legacy" / "v1") == originals
    again = await search_snapshot(store, GameMemoryQuery(session_id="session", limit=1))
    stage = again.stage(GameMemorySearchStageKind.STORAGE_MIGRATION)
    assert stage is not None and (stage.scanned_count, stage.candidate_count) == (0, 10)


async def test_hand_written_csharp_documents_migrate_exactly(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    copy_fixtures(save)
    store = make_store(save)
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (3, 3)
    assert result.performed_work
    assert sorted(await everything(store, ["save-1", "save-2"]), key=key) == sorted(
        FIXTURE_MEMORIES, key=key
    )
    hits = await search(store, GameMemoryQuery(session_id="save-1", limit=5, text="dragon"))
    assert [m.memory_id for m in hits] == ["memory-ü-1"]
    await store.aclose()
    reopened = make_store(save)
    assert sorted(await everything(reopened, ["save-1", "save-2"]), key=key) == sorted(
        FIXTURE_MEMORIES, key=key
    )
    assert (await reopened.check()).ok


async def test_the_explicit_migration_is_idempotent(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    for index in range(4):
        write_legacy(save, make_memory(f"m{index}"))
    store = make_store(save)
    first = await store.migrate_legacy_layout()
    second = await store.migrate_legacy_layout()
    assert (first.migrated_entries, first.partitioned_entries) == (4, 4)
    assert (second.migrated_entries, second.partitioned_entries, second.performed_work) == (
        0,
        4,
        False,
    )
    await store.aclose()
    assert (await make_store(save).migrate_legacy_layout()).migrated_entries == 0


async def test_a_document_added_later_is_migrated_by_the_explicit_call(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    write_legacy(save, make_memory("m1"))
    store = make_store(save)
    assert await store.count() == 1
    write_legacy(save, make_memory("m2"))
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (1, 2)


async def test_legacy_copies_left_behind_are_recognised_and_not_duplicated(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    memories = [make_memory(f"m{index}") for index in range(3)]
    for memory in memories:
        write_legacy(save, memory)
    store = make_store(save)
    await store.migrate_legacy_layout()
    # A migration interrupted after its commit, before every document was moved away:
    for memory in memories[:2]:
        shutil.copyfile(
            save / DATA / "legacy" / "v1" / legacy_name(memory), save / legacy_name(memory)
        )
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (2, 3)
    assert sorted(await store.enumerate("session"), key=key) == memories
    assert not list(save.glob("*.memory.json"))
    assert (await store.check()).ok


async def test_a_memory_already_stored_by_hand_is_not_migrated_twice(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # The reference's resumed migration: one of two documents was already moved by hand.
    save = tmp_path / "save"
    moved, remaining = make_memory("moved"), make_memory("remaining")
    store = make_store(save)
    await store.append(moved)
    write_legacy(save, remaining)
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (1, 2)
    write_legacy(save, moved)  # and its legacy copy turning up again changes nothing
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (1, 2)
    assert await store.count() == 2


async def test_legacy_memories_join_partitions_that_already_hold_appended_ones(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    await store.append(make_memory("appended", text="forge"))
    write_legacy(save, make_memory("legacy", text="forge fire"))
    await store.migrate_legacy_layout()
    await store.append(make_memory("later", text="forge later"))
    found = await search(store, GameMemoryQuery(session_id="session", owner_id="owner", limit=5))
    assert {m.memory_id for m in found} == {"appended", "legacy", "later"}
    assert (await store.check()).ok


async def test_a_large_migration_is_split_into_packs_within_the_file_bound(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    memories = [make_memory(f"m{i:03d}", owner_id=f"o{i % 5}", text="z" * 200) for i in range(60)]
    for memory in memories:
        write_legacy(save, memory)
    store = make_store(save, maximum_file_bytes=4_096)
    assert (await store.migrate_legacy_layout()).migrated_entries == 60
    packs = list(session_folder(save, "session").glob("p-*.pack"))
    assert len(packs) > 3 and all(p.stat().st_size <= 4_096 for p in packs)
    assert sorted(await store.enumerate("session"), key=key) == sorted(memories, key=key)
    assert (await store.check()).ok


# -- the C# partitioned layout ----------------------------------------------------------


async def test_a_save_written_by_the_csharp_runtime_migrates(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    memories = [
        *FIXTURE_MEMORIES,
        *(make_memory(f"m{i}", owner_id=f"npc-{i % 2}", text="smithy") for i in range(6)),
    ]
    write_csharp_save(save, memories, pending=make_memory("never-finished"))
    tree_before = files_under(save / ".memory-v2")
    store = make_store(save)
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (9, 9)
    stored = await everything(store, ["save-1", "save-2", "session"])
    assert sorted(stored, key=key) == sorted(memories, key=key)
    assert not (save / ".memory-v2").exists()
    assert files_under(save / DATA / "legacy" / "memory-v2") == tree_before
    assert all((save / name).exists() for name in GLOBAL_LOCKS)  # the old runtime's locks stay
    assert (await store.check()).ok


async def test_flat_and_partitioned_copies_of_one_memory_are_merged(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    shared = make_memory("shared")
    write_csharp_save(save, [shared, make_memory("only-partitioned")])
    write_legacy(save, shared)
    write_legacy(save, make_memory("only-flat"))
    store = make_store(save)
    result = await store.migrate_legacy_layout()
    assert (result.migrated_entries, result.partitioned_entries) == (4, 3)
    # A second C# folder later is backed up beside the first, not over it.
    write_csharp_save(save, [make_memory("second-run")])
    assert (await store.migrate_legacy_layout()).partitioned_entries == 4
    assert (save / DATA / "legacy" / "memory-v2-2").is_dir()


# -- failing closed ---------------------------------------------------------------------


def corrupt_variants(memory: GameMemory) -> dict[str, bytes]:
    good = json.loads(encode_legacy_document(memory))

    def changed(**fields: object) -> bytes:
        return json.dumps({**good, **fields}).encode()

    return {
        "not json": b'{"FormatVersion":1,',
        "duplicate property": encode_legacy_document(memory)[:-1] + b',"Scope":"again"}',
        "version 2": changed(FormatVersion=2),
        "lower-case kind": changed(Kind="fact"),
        "unknown kind": changed(Kind="Feeling"),
        "no moment": json.dumps({k: v for k, v in good.items() if k != "Moment"}).encode(),
        "payload not json": changed(PayloadJson="{oops"),
        "tick as text": changed(Moment={"TimelineId": "w", "Tick": "5", "CalendarJson": None}),
        "importance true": changed(Importance=True),
        "importance too big": changed(Importance=2),
        "importance huge": re.sub(
            rb'"Importance":[0-9.]+', b'"Importance":' + b"9" * 400, encode_legacy_document(memory)
        ),
        "blank owner": changed(OwnerId=" "),
        "too deep": changed(Metadata={"a": "b"}, Extra=json.loads("[" * 70 + "]" * 70)),
        "not an object": b"[1, 2]",
        "invalid utf-8": b'{"FormatVersion":1,"MemoryId":"\xff"}',
    }


@pytest.mark.parametrize(
    "variant", list(corrupt_variants(GameMemory.model_validate(FIXTURE_MEMORIES[1].model_dump())))
)
async def test_a_corrupt_legacy_document_fails_closed_with_nothing_moved(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, variant: str
) -> None:
    save = tmp_path / "save"
    write_legacy(save, make_memory("fine"))
    bad = make_memory("bad")
    write_legacy(save, bad, corrupt_variants(bad)[variant])
    before = files_under(save)
    store = make_store(save)
    with pytest.raises(PersistenceError, match=legacy_name(bad)):
        await store.migrate_legacy_layout()
    with pytest.raises(PersistenceError):
        await store.count()  # every use keeps failing closed until the file is repaired
    assert {k: v for k, v in files_under(save).items() if not k.startswith(DATA)} == {
        k: v for k, v in before.items()
    }
    assert not (save / DATA / "ledger.log").exists()


async def test_a_misnamed_document_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    save.mkdir()
    (save / ("0" * 64 + ".memory.json")).write_bytes(encode_legacy_document(make_memory("m1")))
    with pytest.raises(PersistenceError, match="does not match its identity"):
        await make_store(save).migrate_legacy_layout()


async def test_a_partitioned_document_in_another_owners_folder_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    memory = make_memory("m1")
    write_csharp_save(save, [memory])
    path = csharp_path(save, memory)
    wrong = path.parent.with_name(f"o-{identity_hash('somebody-else')}")
    wrong.mkdir()
    path.rename(wrong / path.name)
    with pytest.raises(PersistenceError, match="does not match its identity"):
        await make_store(save).migrate_legacy_layout()


async def test_conflicting_legacy_documents_fail_closed_with_nothing_moved(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    first = make_memory("m1", text="one version")
    write_csharp_save(save, [first])
    flat = write_legacy(save, make_memory("m1", text="another version"))
    before = files_under(save)
    store = make_store(save)
    with pytest.raises(MemoryConflictError, match="'m1'") as raised:
        await store.migrate_legacy_layout()
    # Both files are named (which one is wrong is the user's call), and what to do.
    message = str(raised.value)
    assert str(flat) in message and str(csharp_path(save, first)) in message
    assert "Remove the one of the two that is wrong" in message
    after = files_under(save)
    assert {k: v for k, v in after.items() if not k.startswith(DATA)} == before


async def test_a_legacy_document_conflicting_with_the_store_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    await store.append(make_memory("m1", text="stored"))
    before = files_under(save / DATA)
    conflicting = write_legacy(save, make_memory("m1", text="legacy"))
    write_legacy(save, make_memory("m2"))
    with pytest.raises(MemoryConflictError) as raised:
        await store.migrate_legacy_layout()
    # It blocks every use of the save: the message names the file to act on, and how.
    message = str(raised.value)
    assert f"in the file {conflicting}, conflicts with" in message
    assert "a different memory of the same id that the save already holds" in message
    assert "move that file out of the save folder (or remove it), then try again" in message
    assert files_under(save / DATA) == before
    assert len(list(save.glob("*.memory.json"))) == 2


async def test_a_migration_beyond_the_capacity_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    for index in range(3):
        write_legacy(save, make_memory(f"m{index}"))
    with pytest.raises(CapacityExceededError) as raised:
        await make_store(save, maximum_entries=2).migrate_legacy_layout()
    assert raised.value.bound == "maximum_entries"
    # The message names the command that migrates with a larger bound, and every place the
    # save must then be opened with it (Python, the CLI, the Godot node).
    message = str(raised.value)
    assert "'game-memory migrate --save-dir SAVE --maximum-entries N'" in message
    assert "open_memory(..., maximum_entries=N)" in message
    assert "--maximum-entries N on game-memory serve and every other command" in message
    assert "maximum_entries setting of the Godot GameMemory node" in message
    store = make_store(save, maximum_entries=4)
    await store.append(make_memory("already", session_id="other"))  # migrates the 3 first
    write_legacy(save, make_memory("m3"))
    write_legacy(save, make_memory("m4"))
    with pytest.raises(CapacityExceededError):
        await store.migrate_legacy_layout()
    assert len(list(save.glob("*.memory.json"))) == 2
    assert await store.count() == 4


async def test_a_legacy_document_larger_than_the_file_bound_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    write_legacy(save, make_memory("big", text="x" * 5_000))
    with pytest.raises(PersistenceError, match="limit"):
        await make_store(save, maximum_file_bytes=4_096).migrate_legacy_layout()


async def test_a_document_whose_record_would_not_fit_a_pack_fails_closed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # The legacy document fits maximum_file_bytes, but its record plus a pack's own bytes
    # would not: refused before anything is written (a pack must never exceed the bound).
    save = tmp_path / "save"
    size = next(
        n
        for n in range(3_000, 4_096)
        if len(encode_legacy_document(make_memory("big", text="x" * n))) > 4_096 - 90
    )
    big = make_memory("big", text="x" * size)
    assert len(encode_legacy_document(big)) <= 4_096
    write_legacy(save, big)
    before = files_under(save)
    with pytest.raises(CapacityExceededError) as raised:
        await make_store(save, maximum_file_bytes=4_096).migrate_legacy_layout()
    assert raised.value.bound == "maximum_file_bytes"
    assert {k: v for k, v in files_under(save).items() if not k.startswith(DATA)} == before
    assert not (save / DATA / "ledger.log").exists()


async def test_a_batch_rolled_back_after_its_barrier_leaves_a_clean_save_that_migrates(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The backup folders are made before the barrier; a rollback leaves them empty."""
    from game_memory.store import engine as engine_module

    save = tmp_path / "save"
    written = [make_memory(f"m{index}", owner_id=f"npc-{index % 2}") for index in range(6)]
    originals = {legacy_name(m): write_legacy(save, m).read_bytes() for m in written}

    def dies(self: object) -> None:
        raise RuntimeError("killed just before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(engine_module.StoreEngine, "commit_journal", dies)
        first = make_store(save)
        with pytest.raises(RuntimeError):
            await first.migrate_legacy_layout()
        await first.aclose()
    assert (save / DATA / "legacy" / "v1").is_dir()  # made durable by the barrier
    assert sorted(path.name for path in save.glob("*.memory.json")) == sorted(originals)

    store = make_store(save)
    report = await store.migrate_legacy_layout()  # recovery rolls back, then migrates
    assert (report.migrated_entries, report.partitioned_entries) == (6, 6)
    assert files_under(save / DATA / "legacy" / "v1") == originals
    assert (await store.check()).ok
    snapshot = await search_snapshot(store, GameMemoryQuery(session_id="session", limit=20))
    assert sorted(snapshot.authoritative_memories, key=key) == sorted(written, key=key)
