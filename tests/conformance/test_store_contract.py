"""What every GameMemoryStore does: idempotence, conflicts, partitions, order, bounds, lifecycle."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from game_memory import (
    CapacityExceededError,
    GameMemoryQuery,
    GameMemorySearchStageKind,
    GameMemoryStore,
    InvalidArgumentError,
    MemoryConflictError,
    StoreClosedError,
)
from game_memory.model import ordinal_key
from support.vectors import MemoryFactory

from .conftest import STORES_WITHOUT_STORE_COUNT, StoreOpener

Stage = GameMemorySearchStageKind


def query(session: str = "session", **fields: object) -> GameMemoryQuery:
    return GameMemoryQuery(session_id=session, limit=fields.pop("limit", 100), **fields)


def keys(memories: object) -> list[tuple[str, str, str]]:
    return [memory.key for memory in memories]  # type: ignore[attr-defined]


# -- idempotence and conflicts --------------------------------------------------------------


async def test_appending_an_equivalent_memory_again_returns_false_and_changes_nothing(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    assert await store.append(make_memory("m1", tags=["x", "y"], metadata={"a": "1", "b": "2"}))
    again = make_memory("m1", tags=["y", "x", "y"], metadata={"b": "2", "a": "1"})
    assert await store.append(again) is False
    assert await store.count() == 1
    assert await store.enumerate("session") == [again]


async def test_reusing_an_id_for_different_content_raises_a_conflict_and_changes_nothing(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    original = make_memory("m1", text="original")
    await store.append(original)
    for changed in (
        make_memory("m1", text="rewritten"),
        make_memory("m1", text="original", importance=0.5000001),
        make_memory("m1", text="original", tick=2),
        make_memory("m1", text="original", tags=["new"]),
    ):
        with pytest.raises(MemoryConflictError, match="'m1'"):
            await store.append(changed)
    assert await store.count() == 1
    assert await store.enumerate("session") == [original]


async def test_the_same_id_may_exist_in_other_owners_and_sessions(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    assert await store.append(make_memory("same", owner_id="a", text="one"))
    assert await store.append(make_memory("same", owner_id="b", text="two"))
    assert await store.append(make_memory("same", session_id="s2", text="three"))
    assert await store.count() == 3
    assert [m.searchable_text for m in await store.enumerate("session")] == ["one", "two"]


async def test_concurrent_tasks_appending_lose_nothing_and_add_nothing_twice(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    memories = [make_memory(f"m{i}", owner_id=f"o{i % 3}") for i in range(60)]
    results = await asyncio.gather(*(store.append(m) for m in memories + memories[:10]))
    assert results.count(True) == 60
    assert await store.count() == 60
    assert sorted(keys(await store.enumerate("session"))) == sorted(keys(memories))
    assert (await store.check()).ok


# -- partitions, order and snapshots --------------------------------------------------------


async def test_enumerate_orders_by_owner_then_memory_id_in_utf16_ordinal_order(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    for memory_id, owner in (
        ("b", "z"),
        ("a", "z"),
        ("c", "y"),
        ("\U0001f600", "y"),
        ("\uff5e", "y"),
    ):
        await store.append(make_memory(memory_id, owner_id=owner))
    found = [(m.owner_id, m.memory_id) for m in await store.enumerate("session")]
    assert found == [("y", "c"), ("y", "\U0001f600"), ("y", "\uff5e"), ("z", "a"), ("z", "b")]
    assert found == sorted(found, key=lambda key: (ordinal_key(key[0]), ordinal_key(key[1])))
    assert [m.memory_id for m in await store.enumerate("session", "z")] == ["a", "b"]
    assert await store.enumerate("unknown-session") == []
    assert await store.enumerate("session", "nobody") == []


async def test_an_owner_query_reads_only_that_owner_and_a_session_query_only_that_session(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(40):
        session = "target" if index < 20 else f"session-{index % 3}"
        owner = "npc-1" if index < 3 else f"npc-{index % 5 + 2}"
        await store.append(make_memory(f"m{index}", session_id=session, owner_id=owner))
    owner_snapshot = await store.snapshot(query("target", owner_id="npc-1", text="memory"))
    assert [view.owner_id for view in owner_snapshot.views] == ["npc-1"]
    assert {m.owner_id for m in owner_snapshot.authoritative_memories} == {"npc-1"}
    assert len(owner_snapshot.lexical) == 3
    session_snapshot = await store.snapshot(query("target", limit=1))
    assert {view.session_id for view in session_snapshot.views} == {"target"}
    assert len(session_snapshot.authoritative_memories) == 20
    owners = [view.owner_id for view in session_snapshot.views]
    assert owners == sorted(owners, key=ordinal_key)
    assert len(session_snapshot.lexical) == 1


async def test_a_snapshot_reports_its_three_stages_and_counts(
    store: GameMemoryStore, make_memory: MemoryFactory, store_backend: str
) -> None:
    for index in range(5):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index % 2}", text=f"word{index}"))
    await store.append(make_memory("elsewhere", session_id="other"))
    snapshot = await store.snapshot(query(text="word1 word2", limit=1))
    assert [s.stage for s in snapshot.stages] == [
        Stage.STORAGE_MIGRATION,
        Stage.AUTHORITATIVE_SNAPSHOT,
        Stage.LEXICAL_SEARCH,
    ]
    migration, read, lexical = snapshot.stages
    partitioned = 0 if store_backend in STORES_WITHOUT_STORE_COUNT else 6
    assert (migration.scanned_count, migration.candidate_count) == (0, partitioned)
    assert (read.scanned_count, read.candidate_count) == (5, 5)
    assert (lexical.scanned_count, lexical.candidate_count) == (5, 1)
    assert all(stage.duration_ms >= 0 and not stage.reused for stage in snapshot.stages)
    assert snapshot.visible == 5
    search = snapshot.search_snapshot()
    assert search.memories == (snapshot.lexical[0].memory,)
    assert search.authoritative_memories == tuple(await store.enumerate("session"))


async def test_a_view_holds_every_memory_of_its_partition_visible_or_not(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("kept", scope="shared", tick=1))
    await store.append(make_memory("hidden", scope="secret", tick=2))
    snapshot = await store.snapshot(query(scopes=["shared"]))
    (view,) = snapshot.views
    assert {m.memory_id for m in view.memories} == {"kept", "hidden"}
    assert [m.memory_id for m in view.memories] == ["kept", "hidden"]  # append order
    assert view.columns.mask(query(scopes=["shared"])).tolist() == [True, False]
    assert snapshot.visible == 1 and [hit.memory.memory_id for hit in snapshot.lexical] == ["kept"]


async def test_limit_zero_reads_the_partitions_and_ranks_nothing(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("m1"))
    snapshot = await store.snapshot(query(limit=0, text="memory"))
    assert snapshot.lexical == () and len(snapshot.authoritative_memories) == 1
    assert snapshot.visible == 1


async def test_an_unchanged_partition_hands_out_the_same_view_and_a_grown_one_extends_it(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    """What lets derived joins be reused (unchanged) or extended (grown), not recomputed."""
    for index in range(3):
        await store.append(make_memory(f"a{index}", owner_id="a"))
        await store.append(make_memory(f"b{index}", owner_id="b"))
    first = await store.snapshot(query(text="memory"))
    second = await store.snapshot(query(text="memory"))
    assert all(x is y for x, y in zip(first.views, second.views, strict=True))
    await store.append(make_memory("a9", owner_id="a"))
    third = await store.snapshot(query())
    grown, same = third.views
    assert same is first.views[1]
    assert grown is not first.views[0] and len(grown) == 4
    assert all(x is y for x, y in zip(grown.memories, first.views[0].memories, strict=False))


# -- bounds ---------------------------------------------------------------------------------


async def test_maximum_entries_bounds_the_whole_store(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    store = open_store(maximum_entries=3)
    for index in range(3):
        await store.append(make_memory(f"m{index}", session_id=f"s{index}"))
    with pytest.raises(CapacityExceededError, match="maximum_entries") as raised:
        await store.append(make_memory("m3"))
    assert raised.value.bound == "maximum_entries"
    assert await store.append(make_memory("m0", session_id="s0")) is False  # still idempotent
    with pytest.raises(MemoryConflictError):
        await store.append(make_memory("m0", session_id="s0", text="other"))
    assert await store.count() == 3
    assert await store.enumerate("session") == []


async def test_a_snapshot_larger_than_its_bound_is_refused(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(3):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index}"))
    assert len((await store.snapshot(query(), maximum_entries=3)).authoritative_memories) == 3
    with pytest.raises(CapacityExceededError) as raised:
        await store.snapshot(query(), maximum_entries=2)
    assert raised.value.bound == "maximum_snapshot_entries"
    assert len((await store.snapshot(query(owner_id="o1"), maximum_entries=1)).views) == 1
    for bad in (0, 1_000_001, True):
        with pytest.raises(InvalidArgumentError):
            await store.snapshot(query(), maximum_entries=bad)


async def test_out_of_range_options_and_bad_arguments_raise_invalid_argument_errors(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    for number, options in enumerate(
        ({"maximum_entries": 0}, {"maximum_entries": 1_000_001}, {"maximum_entries": True})
    ):
        with pytest.raises(InvalidArgumentError):
            open_store(f"refused-{number}", **options)
    store = open_store()
    with pytest.raises(InvalidArgumentError):
        await store.append("not a memory")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.snapshot({"session_id": "session", "limit": 1})  # type: ignore[arg-type]
    for session, owner in ((" ", None), ("", None), ("session", " "), ("x" * 1_025, None)):
        with pytest.raises(InvalidArgumentError):
            await store.enumerate(session, owner)
    assert await store.count() == 0


# -- maintenance and lifecycle --------------------------------------------------------------


async def test_a_current_save_has_nothing_to_migrate_and_checks_consistent(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    for index in range(4):
        await store.append(make_memory(f"m{index}", owner_id=f"o{index % 2}"))
    for _ in range(2):  # idempotent
        report = await store.migrate_legacy_layout()
        assert (report.migrated_entries, report.partitioned_entries) == (0, 4)
        assert not report.performed_work
    for fix in (False, True):
        check = await store.check(fix=fix)
        assert check.ok and check.repairs == ()
        assert (check.memories, check.ledger_entries) == (4, 4)


async def test_a_second_handle_on_the_save_sees_what_the_first_appended(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    writer, reader = open_store(), open_store()
    await writer.append(make_memory("m1"))
    assert [hit.memory.memory_id for hit in (await reader.snapshot(query())).lexical] == ["m1"]
    await writer.append(make_memory("m2", owner_id="new-owner"))
    assert len(await reader.enumerate("session")) == 2
    assert await open_store("another-save").count() == 0


async def test_the_folder_is_an_absolute_path_or_none(store: GameMemoryStore) -> None:
    folder = store.folder
    assert folder is None or (isinstance(folder, Path) and folder.is_absolute())


async def test_a_closed_store_refuses_every_operation(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory())
    await store.aclose()
    await store.aclose()  # idempotent
    for operation in (
        store.append(make_memory("other")),
        store.snapshot(query()),
        store.enumerate("session"),
        store.count(),
        store.migrate_legacy_layout(),
        store.check(),
    ):
        with pytest.raises(StoreClosedError):
            await operation
