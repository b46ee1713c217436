"""The authoritative file store: durability across restarts, partitions, idempotence, bounds."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from game_memory import (
    CapacityExceededError,
    FileGameMemoryStore,
    GameMemoryQuery,
    GameMemorySearchStageKind,
    GameMoment,
    InvalidArgumentError,
    MemoryConflictError,
    StoreClosedError,
)
from game_memory.model import ordinal_key
from support.stores import search, search_snapshot

from .helpers import DATA, MemoryFactory, StoreFactory, files_under, log_path

Stage = GameMemorySearchStageKind


def query(session: str = "session", **fields: object) -> GameMemoryQuery:
    return GameMemoryQuery(session_id=session, limit=fields.pop("limit", 100), **fields)


async def test_appended_memories_survive_closing_and_reopening_the_store(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    written = [
        make_memory("m1", text="The smith sold a rusty sword"),
        make_memory(
            "m2",
            owner_id="npc-ünïcode-\U0001f600",
            text="猫がいる",
            payload_json='{"a": [1, 2.5, null, "\\u00e9"]}',
            moment=GameMoment(timeline_id="world", tick=-7, calendar_json='{"day": 3}'),
            expires_at=GameMoment(timeline_id="world", tick=9),
            tags=["b", "a"],
            metadata={"mood": "calm", "ключ": "значение"},
            source_input_id="input-1",
            importance=0.125,
        ),
        make_memory("m3", session_id="other-session"),
    ]
    first = make_store()
    for memory in written:
        assert await first.append(memory) is True
    await first.aclose()

    second = make_store()
    assert await second.count() == 3
    stored = await second.enumerate("session") + await second.enumerate("other-session")
    assert sorted(stored, key=lambda m: m.memory_id) == written


async def test_appending_an_equivalent_memory_again_returns_false_and_writes_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    memory = make_memory("m1", tags=["x", "y"], metadata={"a": "1", "b": "2"})
    assert await store.append(memory) is True
    before = files_under(tmp_path / "save" / DATA)
    again = make_memory("m1", tags=["y", "x", "y"], metadata={"b": "2", "a": "1"})
    assert await store.append(again) is False
    assert files_under(tmp_path / "save" / DATA) == before
    assert await store.count() == 1


async def test_reusing_an_id_for_different_content_fails_closed_and_changes_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store()
    await store.append(make_memory("m1", text="original"))
    before = files_under(tmp_path / "save" / DATA)
    for changed in (
        make_memory("m1", text="rewritten"),
        make_memory("m1", text="original", importance=0.5000001),
        make_memory("m1", text="original", tick=2),
    ):
        with pytest.raises(MemoryConflictError, match="'m1'"):
            await store.append(changed)
    assert files_under(tmp_path / "save" / DATA) == before
    assert [m.searchable_text for m in await store.enumerate("session")] == ["original"]


async def test_the_same_id_may_exist_in_other_owners_and_sessions(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    assert await store.append(make_memory("same", owner_id="a", text="one"))
    assert await store.append(make_memory("same", owner_id="b", text="two"))
    assert await store.append(make_memory("same", session_id="s2", text="three"))
    assert await store.count() == 3


async def test_an_owner_query_reads_only_that_owner_and_a_session_query_only_that_session(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    for index in range(123):
        session = "target" if index < 60 else f"session-{index % 4}"
        owner = "npc-1" if index < 3 else f"npc-{index % 7 + 2}"
        await store.append(make_memory(f"m{index}", session_id=session, owner_id=owner))
    owner_snapshot = await search_snapshot(store, query("target", owner_id="npc-1", text="memory"))
    stage = owner_snapshot.stage(Stage.AUTHORITATIVE_SNAPSHOT)
    assert stage is not None and stage.scanned_count == 3
    assert {m.owner_id for m in owner_snapshot.authoritative_memories} == {"npc-1"}
    assert len(owner_snapshot.memories) == 3

    session_snapshot = await search_snapshot(store, query("target", limit=1))
    stage = session_snapshot.stage(Stage.AUTHORITATIVE_SNAPSHOT)
    assert stage is not None and stage.scanned_count == 60
    assert {m.session_id for m in session_snapshot.authoritative_memories} == {"target"}
    lexical = session_snapshot.stage(Stage.LEXICAL_SEARCH)
    assert lexical is not None and (lexical.scanned_count, lexical.candidate_count) == (60, 1)


async def test_a_snapshot_reports_its_three_stages_and_ordered_partition(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    for memory_id, owner in (
        ("b", "z"),
        ("a", "z"),
        ("c", "y"),
        ("\U0001f600", "y"),
        ("\uff5e", "y"),
    ):
        await store.append(make_memory(memory_id, owner_id=owner))
    snapshot = await search_snapshot(store, query())
    assert [stage.stage for stage in snapshot.stages] == [
        Stage.STORAGE_MIGRATION,
        Stage.AUTHORITATIVE_SNAPSHOT,
        Stage.LEXICAL_SEARCH,
    ]
    keys = [(m.owner_id, m.memory_id) for m in snapshot.authoritative_memories]
    assert keys == sorted(keys, key=lambda key: (ordinal_key(key[0]), ordinal_key(key[1])))
    assert keys[:3] == [("y", "c"), ("y", "\U0001f600"), ("y", "\uff5e")]
    assert await store.enumerate("session") == list(snapshot.authoritative_memories)
    assert [m.memory_id for m in await store.enumerate("session", "z")] == ["a", "b"]
    assert await store.enumerate("unknown-session") == []


async def test_game_time_hides_future_other_timeline_and_expired_memories(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("past", tick=5))
    await store.append(make_memory("now", tick=10))
    await store.append(make_memory("future", tick=11))
    await store.append(make_memory("branch", tick=1, timeline_id="alternate"))
    await store.append(
        make_memory("expiring", tick=2, expires_at=GameMoment(timeline_id="world", tick=10))
    )
    at_ten = GameMoment(timeline_id="world", tick=10)
    visible = {m.memory_id for m in await search(store, query(at_or_before=at_ten))}
    assert visible == {"past", "now"}
    at_nine = GameMoment(timeline_id="world", tick=9)
    assert {m.memory_id for m in await search(store, query(at_or_before=at_nine))} == {
        "past",
        "expiring",
    }
    assert len(await search(store, query())) == 5  # no moment: no time filtering at all


async def test_search_results_are_ranked_and_limited(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("m1", text="a dragon burned the forge", tick=1))
    await store.append(make_memory("m2", text="the smith forged a sword", tick=2))
    await store.append(make_memory("m3", text="dragon dragon dragon", tick=3, importance=0.9))
    results = await search(store, query(text="dragon", limit=1))
    assert [m.memory_id for m in results] == ["m3"]
    assert await search(store, query(text="dragon", limit=0)) == []
    assert [m.memory_id for m in await search(store, query(text="Dragon"))] == ["m3", "m1"]


async def test_the_store_wide_capacity_is_enforced_from_the_ledger(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store(maximum_entries=3)
    for index in range(3):
        await store.append(make_memory(f"m{index}", session_id=f"s{index}"))
    with pytest.raises(CapacityExceededError, match="maximum_entries") as raised:
        await store.append(make_memory("m3"))
    assert raised.value.bound == "maximum_entries"
    assert await store.append(make_memory("m0", session_id="s0")) is False  # still idempotent
    await store.aclose()
    reopened = make_store(maximum_entries=4)
    assert await reopened.append(make_memory("m3")) is True


async def test_a_memory_larger_than_maximum_file_bytes_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store(maximum_file_bytes=2_048)
    with pytest.raises(CapacityExceededError) as raised:
        await store.append(make_memory("big", text="x" * 3_000))
    assert raised.value.bound == "maximum_file_bytes"
    assert await store.count() == 0


async def test_a_snapshot_larger_than_its_bound_is_refused(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    for index in range(3):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index}"))
    assert len((await search_snapshot(store, query(), 3)).authoritative_memories) == 3
    with pytest.raises(CapacityExceededError) as raised:
        await search_snapshot(store, query(), 2)
    assert raised.value.bound == "maximum_snapshot_entries"
    with pytest.raises(InvalidArgumentError):
        await search_snapshot(store, query(), 0)


async def test_a_partition_log_rolls_over_to_a_new_segment_at_maximum_file_bytes(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_store(maximum_file_bytes=2_048)
    written = [make_memory(f"m{index:02d}", text="y" * 300) for index in range(20)]
    for memory in written:
        await store.append(memory)
    save = tmp_path / "save"
    segments = sorted(log_path(save, "session", "owner").parent.glob("o-*.log"))
    assert len(segments) >= 4
    assert all(os.path.getsize(segment) <= 2_048 for segment in segments)
    assert log_path(save, "session", "owner", 1).exists()
    await store.aclose()
    assert await make_store(maximum_file_bytes=2_048).enumerate("session") == written


async def test_a_closed_store_refuses_every_operation(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory())
    await store.aclose()
    await store.aclose()  # idempotent
    for operation in (
        store.append(make_memory("other")),
        search(store, query()),
        search_snapshot(store, query()),
        store.enumerate("session"),
        store.count(),
        store.check(),
    ):
        with pytest.raises(StoreClosedError):
            await operation


async def test_bad_arguments_raise_invalid_argument_errors(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    for options in (
        {"maximum_entries": 0},
        {"maximum_entries": 1_000_001},
        {"maximum_file_bytes": 100},
        {"lock_timeout": 0},
        {"max_workers": 0},
        {"cache_entries": 0},
        {"maximum_entries": True},
    ):
        with pytest.raises(InvalidArgumentError):
            FileGameMemoryStore(tmp_path / "save", **options)  # type: ignore[arg-type]
    store = make_store()
    with pytest.raises(InvalidArgumentError):
        await store.append("not a memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.enumerate(" ")
    with pytest.raises(InvalidArgumentError):
        await search(store, {"session_id": "s"})  # type: ignore[arg-type]


async def test_concurrent_tasks_appending_to_one_store_lose_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    memories = [make_memory(f"m{i}", owner_id=f"o{i % 3}") for i in range(60)]
    results = await asyncio.gather(*(store.append(m) for m in memories + memories[:10]))
    assert results.count(True) == 60
    assert await store.count() == 60
    assert len(await store.enumerate("session")) == 60
    assert (await store.check()).ok


async def test_a_second_store_object_sees_appends_made_through_the_first(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    writer, reader = make_store(), make_store()
    await writer.append(make_memory("m1"))
    assert [m.memory_id for m in await search(reader, query(owner_id="owner"))] == ["m1"]
    await writer.append(make_memory("m2"))
    await writer.append(make_memory("m3", owner_id="new-owner"))
    assert [m.memory_id for m in await reader.enumerate("session", "owner")] == ["m1", "m2"]
    assert len(await search(reader, query())) == 3


async def test_a_small_cache_evicts_partitions_but_answers_stay_right(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store(cache_entries=2)
    for index in range(12):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index % 4}"))
    for owner in ("o0", "o1", "o2", "o3", "o0"):
        found = await store.enumerate("session", owner)
        assert [m.memory_id for m in found] == sorted(
            (f"m{i}" for i in range(12) if i % 4 == int(owner[1])), key=ordinal_key
        )


async def test_the_save_folder_and_its_parents_are_created(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    folder = tmp_path / "deep" / "er" / "save"
    store = make_store(folder)
    await store.append(make_memory())
    assert (folder / DATA / "format.json").is_file()
    assert (folder / DATA / "ledger.log").stat().st_size == 128
