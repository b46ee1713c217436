"""Memory over a whole game on every backend: forget on game time, erase, consolidate, evict.

Forgetting and consolidating are on game time: a query as of the retraction's moment or
later on its timeline no longer recalls the memory, an earlier moment or another timeline
still does (loading an earlier save brings it back). Erasing is not: the memory is gone
for good, from the save and the derived index, and its id is free again. A bounded owner
gives up its lowest-value memories down to 90% of the bound.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory import (
    GameMemory,
    GameMemoryStore,
    GameMoment,
    InvalidArgumentError,
    MemoryConflictError,
    MemoryNotFoundError,
)
from game_memory.store.lifecycle import eviction_target
from game_memory.store.protocol import SurplusErasing
from support.providers import FaultyProvider
from support.stores import search
from support.vectors import Diagnostics, MemoryFactory, query

from .conftest import HybridFactory, StoreOpener


def at(tick: int, timeline: str = "world") -> GameMoment:
    return GameMoment(timeline_id=timeline, tick=tick)


def ids(memories: Sequence[Any]) -> list[str]:
    return sorted(memory.memory_id for memory in memories)


async def recalled(
    store: GameMemoryStore, tick: int | None, timeline: str = "world", **fields: Any
) -> list[str]:
    moment = None if tick is None else at(tick, timeline)
    return ids(await search(store, query(limit=50, at_or_before=moment, **fields)))


async def village(store: GameMemoryStore, make_memory: MemoryFactory) -> None:
    for number, text in enumerate(["the mill burned", "a rumour of a dragon", "bread is cheap"]):
        await store.append(make_memory(f"m{number}", text=text, tick=10 * (number + 1)))


# -- forget ---------------------------------------------------------------------------------


async def test_a_forgotten_memory_is_hidden_from_its_moment_on_and_only_on_its_timeline(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    assert await store.forget("session", "owner", "m1", at(100)) is True
    assert await recalled(store, 99) == ["m0", "m1", "m2"]  # an earlier save: remembered
    assert await recalled(store, 100) == ["m0", "m2"]
    assert await recalled(store, 5_000) == ["m0", "m2"]
    assert await recalled(store, 5_000, "other branch") == []  # nothing there at all
    assert await recalled(store, None) == ["m0", "m2"]  # without a moment: forgotten
    text = await search(store, query("dragon", at_or_before=at(150)))
    assert text == []
    assert ids(await store.enumerate("session")) == ["m0", "m1", "m2"]  # still in the save
    assert await store.count() == 3


async def test_forgetting_is_idempotent_and_an_earlier_moment_widens_it(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    assert await store.forget("session", "owner", "m1", at(100)) is True
    assert await store.forget("session", "owner", "m1", at(100)) is False
    assert await store.forget("session", "owner", "m1", at(300)) is False  # covered already
    assert await store.forget("session", "owner", "m1", at(50)) is True
    assert await recalled(store, 60) == ["m0", "m2"]
    assert (
        await store.forget("session", "owner", "m1", at(60, "branch")) is True
    )  # another timeline


async def test_forgetting_what_the_owner_does_not_hold_raises_and_changes_nothing(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    with pytest.raises(MemoryNotFoundError, match="'m9'"):
        await store.forget("session", "owner", "m9", at(1))
    with pytest.raises(MemoryNotFoundError):
        await store.forget("session", "somebody", "m1", at(1))
    with pytest.raises(MemoryNotFoundError):
        await store.forget("another session", "owner", "m1", at(1))
    with pytest.raises(InvalidArgumentError):
        await store.forget("session", "owner", "m1", 5)  # type: ignore[arg-type]
    assert await recalled(store, None) == ["m0", "m1", "m2"]


async def test_a_retraction_is_kept_by_the_save(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    first = open_store()
    await village(first, make_memory)
    await first.forget("session", "owner", "m0", at(20))
    again = open_store()  # another handle on the same save
    assert await recalled(again, 30) == ["m1", "m2"]
    assert await recalled(again, 19) == ["m0"]


async def test_forgetting_the_newest_version_of_a_belief_brings_the_older_one_back(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("dry", text="the ford is passable", tick=10, belief_key="ford"))
    await store.append(make_memory("wet", text="the ford is flooded", tick=20, belief_key="ford"))
    assert await recalled(store, 30) == ["wet"]
    await store.forget("session", "owner", "wet", at(25))
    assert await recalled(store, 30) == ["dry"]
    assert await recalled(store, 22) == ["wet"]


# -- consolidate -------------------------------------------------------------------------------


def summary(make_memory: MemoryFactory, tick: int = 500, **fields: Any) -> GameMemory:
    fields.setdefault("kind", "reflection")
    return make_memory("fire", text="what Mira makes of the fire", tick=tick, **fields)


async def test_a_summary_replaces_its_sources_as_of_its_moment(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    assert await store.consolidate("session", "owner", ["m0", "m1"], summary(make_memory)) is True
    assert await recalled(store, 499) == ["m0", "m1", "m2"]
    assert await recalled(store, 500) == ["fire", "m2"]
    assert await recalled(store, None) == ["fire", "m2"]
    stored = next(m for m in await store.enumerate("session") if m.memory_id == "fire")
    assert stored.consolidates == ("m0", "m1")
    assert await store.count() == 4
    again = await store.consolidate("session", "owner", ["m0", "m1"], summary(make_memory))
    assert again is False  # the same summary: idempotent


async def test_a_summary_sent_again_after_its_sources_went_is_already_stored(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    # A retry of a consolidation (or its summary appended again) answers False, as any
    # memory already stored, even once a source is gone: the retention policy erases the
    # retracted sources first, so a retry on a bounded NPC would otherwise always fail.
    await village(store, make_memory)
    assert await store.consolidate("session", "owner", ["m0", "m1"], summary(make_memory)) is True
    assert await store.erase("session", "owner", ["m0"]) == 1
    again = await store.consolidate("session", "owner", ["m0", "m1"], summary(make_memory))
    assert again is False
    stored = next(m for m in await store.enumerate("session") if m.memory_id == "fire")
    assert await store.append(stored) is False
    assert await store.append_many([stored, make_memory("m9", tick=40)]) == [False, True]
    with pytest.raises(MemoryNotFoundError, match="'m0'"):  # another summary: still checked
        other = make_memory("fire2", text="a second thought", tick=500, kind="reflection")
        await store.consolidate("session", "owner", ["m0"], other)
    with pytest.raises(MemoryConflictError):  # other content under the id: still a conflict
        await store.consolidate(
            "session", "owner", ["m1"], summary(make_memory, searchable_text="another view")
        )
    assert await store.count() == 4


async def test_a_summary_stands_only_for_memories_from_before_it(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    # A source later than the summary on its timeline is refused: retracted as of the
    # summary's moment, it would never be recalled at any moment of its own.
    await village(store, make_memory)  # m0..m2 at ticks 10, 20, 30
    early = summary(make_memory, tick=25)
    with pytest.raises(InvalidArgumentError, match="'m2' \\(tick 30\\)"):
        await store.consolidate("session", "owner", ["m1", "m2"], early)
    assert await store.count() == 3
    other = make_memory("x", text="elsewhere", tick=90, timeline_id="dream")
    await store.append(other)  # another timeline: not ordered against the summary's
    assert await store.consolidate("session", "owner", ["m0", "m1", "x"], early) is True
    assert await recalled(store, 24) == ["m0", "m1"]
    assert await recalled(store, 30) == ["fire", "m2"]
    # A source erased, and its id given to a new memory later: the summary does not
    # hide the new memory (it did, at every moment, and recalling it was impossible).
    assert await store.erase("session", "owner", ["m0"]) == 1
    await store.append(make_memory("m0", text="a new mill", tick=200))
    assert await recalled(store, 199) == ["fire", "m2"]
    assert await recalled(store, 200) == ["fire", "m0", "m2"]
    assert await recalled(store, None) == ["fire", "m0", "m2"]


async def test_a_consolidation_that_cannot_be_is_refused_whole(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    with pytest.raises(MemoryNotFoundError, match="'m9'"):
        await store.consolidate("session", "owner", ["m0", "m9"], summary(make_memory))
    with pytest.raises(InvalidArgumentError, match="reflection"):
        await store.consolidate("session", "owner", ["m0"], summary(make_memory, kind="event"))
    with pytest.raises(InvalidArgumentError):
        await store.consolidate("session", "other", ["m0"], summary(make_memory))
    with pytest.raises(InvalidArgumentError):
        await store.consolidate("session", "owner", [], summary(make_memory))
    assert await store.count() == 3 and await recalled(store, None) == ["m0", "m1", "m2"]
    await store.consolidate("session", "owner", ["m0"], summary(make_memory))
    with pytest.raises(MemoryConflictError):
        await store.consolidate(
            "session", "owner", ["m1"], summary(make_memory, searchable_text="another view")
        )


# -- erase ------------------------------------------------------------------------------------


async def test_erasing_listed_memories_removes_them_for_good_and_lowers_the_count(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    store = open_store()
    await village(store, make_memory)
    await store.append(make_memory("x1", owner_id="tomas", text="the mill burned"))
    await store.forget("session", "owner", "m1", at(100))
    assert await store.erase("session", "owner", ["m1", "m2", "unknown"]) == 2
    assert await store.count() == 2
    assert ids(await store.enumerate("session")) == ["m0", "x1"]
    assert await recalled(store, 10) == ["m0", "x1"]  # not on game time: gone from every moment
    # The id is free again, and nothing of the old memory (its retraction) clings to it.
    await store.append(make_memory("m1", text="a new memory under an old id", tick=999))
    assert await recalled(store, 2_000, owner_id="owner") == ["m0", "m1"]
    assert ids(await open_store().enumerate("session", "owner")) == ["m0", "m1"]


async def test_erasing_an_owner_or_a_session_leaves_the_others(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    for owner in ("mira", "tomas"):
        for session in ("slot-1", "slot-2"):
            for number in range(3):
                await store.append(
                    make_memory(f"{owner}-{number}", owner_id=owner, session_id=session)
                )
    assert await store.erase("slot-1", "mira") == 3
    assert ids(await store.enumerate("slot-1")) == ["tomas-0", "tomas-1", "tomas-2"]
    assert await store.erase("slot-2") == 6
    assert await store.enumerate("slot-2") == []
    assert await store.erase("slot-2") == 0
    assert await store.erase("nobody's session", "nobody") == 0
    assert await store.count() == 3
    with pytest.raises(InvalidArgumentError, match="owner_id"):
        await store.erase("slot-1", memory_ids=["tomas-0"])
    report = await store.check()
    assert report.ok, report.problems


async def test_compaction_reports_and_keeps_every_memory(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await village(store, make_memory)
    await store.erase("session", "owner", ["m1"])
    report = await store.compact()
    assert report.bytes_before >= 0 and report.bytes_after >= 0  # what each backend measures
    assert ids(await store.enumerate("session")) == ["m0", "m2"]
    assert (await store.compact()).partitions_rewritten == 0  # nothing left to tidy


# -- the front door: vectors, markers, eviction ----------------------------------------------------


async def test_a_forgotten_memory_is_not_recalled_by_its_vector_either(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await memory.append(make_memory("m1", text="the cat sleeps on the roof", tick=1))
    await memory.append(make_memory("m2", text="an axe by the door", tick=2))
    assert "m1" in ids((await memory.recall(query("feline", at_or_before=at(10)))).memories)
    assert await memory.forget("session", "owner", "m1", at(5)) is True
    result = await memory.recall(query("feline", at_or_before=at(10)))
    assert "m1" not in ids(result.memories) and not result.fallback
    assert "m1" in ids((await memory.recall(query("feline", at_or_before=at(4)))).memories)


async def test_a_summary_is_recalled_with_its_sources_in_the_evidence(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await memory.append(make_memory("m1", text="smoke over the mill", tick=1))
    await memory.append(make_memory("m2", text="the miller wept", tick=2))
    made = summary(make_memory, tick=10, searchable_text="the mill fire was no accident")
    assert await memory.consolidate("session", "owner", ["m1", "m2"], made) is True
    result = await memory.recall(query("mill fire", at_or_before=at(20)))
    assert ids(result.memories) == ["fire"]
    assert result.hits[0].memory.consolidates == ("m1", "m2")
    assert (await memory.get_status("session")).ready_entries == 3


async def test_erasing_drops_the_vectors_and_leaves_no_marker_in_any_file(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    erased = [
        make_memory(
            f"e{number}",
            text=f"ERASE-MARKER-{number:03d} a secret about the well",
            payload_json=json.dumps({"secret": f"PAYLOAD-MARKER-{number:03d}"}),
            tick=number,
        )
        for number in range(6)
    ]
    kept = make_memory("k", text="KEEP-MARKER the well is deep", tick=99)
    for item in [*erased, kept]:
        await memory.append(item)
    await memory.forget("session", "owner", "e1", at(50))
    vectors = await _vectors(memory, {m.memory_id for m in erased})
    assert len(vectors) == 6
    assert await memory.erase("session", "owner", [m.memory_id for m in erased]) == 6
    status = await memory.get_status("session")
    assert (status.total_entries, status.ready_entries, status.orphan_entries) == (1, 1, 0)
    assert ids((await memory.recall(query("secret well", limit=10))).memories) == ["k"]
    save = memory.authoritative.folder
    index = memory.index.folder if memory.index is not None else None
    if save is not None:  # a backend that keeps the save in a folder: grep every file of it
        assert _markers(Path(save), [b"ERASE-MARKER-", b"PAYLOAD-MARKER-"], []) == []
        assert _markers(Path(save), [b"KEEP-MARKER"], [])  # the grep finds what is there
    if index is not None:
        assert _markers(Path(index), [b"ERASE-MARKER-", b"PAYLOAD-MARKER-"], vectors) == []
        assert _markers(Path(index), [], await _vectors(memory, {"k"}))


async def _vectors(memory: Any, memory_ids: set[str]) -> list[bytes]:
    """The float32 bytes of the ready vectors the index holds for ``memory_ids``."""
    assert memory.index is not None and memory.active_identity is not None
    snapshot = await memory.authoritative.snapshot(query(limit=0))
    found = []
    for view in snapshot.views:
        joined = memory.index.join(view, memory.active_identity)
        matrix = memory.index.vectors(joined, memory.active_identity)
        for row, position in zip(joined.rows.tolist(), joined.positions.tolist(), strict=True):
            if view.memories[position].memory_id in memory_ids:
                found.append(np.asarray(matrix[row], dtype="<f4").tobytes())
    return found


def _markers(folder: Path, markers: list[bytes], rows: list[bytes]) -> list[str]:
    """Every file under ``folder`` holding one of ``markers`` or of the vector ``rows``."""
    found = []
    for directory, _, names in os.walk(folder):
        for name in names:
            data = (Path(directory) / name).read_bytes()
            for needle in [*markers, *rows]:
                if needle in data:
                    found.append(f"{Path(directory, name).relative_to(folder)}: {needle[:20]!r}")
    return found


async def test_a_bounded_owner_gives_up_its_lowest_value_memories_down_to_90_percent(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    bound = 20
    memory = open_hybrid(provider, options={"maximum_memories_per_owner": bound})
    important = {f"m{n}" for n in range(0, 40, 7)}
    for number in range(bound):
        level = 1.0 if f"m{number}" in important else 0.1
        await memory.append(make_memory(f"m{number}", tick=number, importance=level))
    await memory.append(make_memory("other", owner_id="tomas", tick=1))
    assert len(await memory.enumerate("session", "owner")) == bound  # at the bound: all kept
    assert diagnostics.codes().count("memories_evicted") == 0
    await memory.append(make_memory(f"m{bound}", tick=bound, importance=0.1))
    kept = ids(await memory.enumerate("session", "owner"))
    assert len(kept) == eviction_target(bound) == 18
    assert f"m{bound}" in kept  # never the memory just appended
    assert important <= set(kept) | {f"m{n}" for n in range(bound + 1, 40)}
    assert "m1" not in kept and "m2" not in kept  # the oldest unimportant ones went first
    evicted = [d for d in diagnostics if d.code == "memories_evicted"]
    assert [d.details["count"] for d in evicted] == [3]
    assert all("m1" not in d.message for d in evicted)  # counts, never texts
    assert ids(await memory.enumerate("session", "tomas")) == ["other"]
    for number in range(bound + 1, bound + 3):  # below the bound again: nothing more goes
        await memory.append(make_memory(f"m{number}", tick=number, importance=0.1))
    assert len(await memory.enumerate("session", "owner")) == 20
    status = await memory.get_status("session")
    assert status.orphan_entries == 0 and status.total_entries == 21


async def test_a_forgotten_memory_is_evicted_first(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(None, options={"maximum_memories_per_owner": 3})
    for number in range(3):
        await memory.append(make_memory(f"m{number}", tick=number, importance=0.9))
    await memory.forget("session", "owner", "m2", at(10))
    await memory.append(make_memory("m3", tick=3, importance=0.0))
    assert ids(await memory.enumerate("session", "owner")) == ["m1", "m3"]  # target: 2


async def test_an_older_version_of_a_belief_is_evicted_before_its_newer_version(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    # The older version is hidden by the newer one as of the owner's newest moment, as a
    # forgotten memory is: evicting the newer one first (of lower importance) made the NPC
    # believe the old version again.
    memory = open_hybrid(None, options={"maximum_memories_per_owner": 4})
    old = make_memory("open", text="the bridge is open", tick=10, importance=0.9, belief_key="b")
    new = make_memory("shut", text="the bridge is shut", tick=20, importance=0.3, belief_key="b")
    for made in (old, new, make_memory("dust", tick=21, importance=0.0)):
        await memory.append(made)
    await memory.append(make_memory("m0", tick=22, importance=0.5))
    assert await front_recalled(memory, 30) == ["dust", "m0", "shut"]
    await memory.append(make_memory("m1", tick=23, importance=0.5))  # 5 of 4: down to 3
    assert ids(await memory.enumerate("session", "owner")) == ["m0", "m1", "shut"]
    assert await front_recalled(memory, 30) == ["m0", "m1", "shut"]
    assert await front_recalled(memory, 15) == []  # the old version went for good


@pytest.mark.parametrize("order", ["newer first", "older first", "one at a time"])
async def test_an_older_report_heard_last_never_costs_the_newer_version(
    open_hybrid: HybridFactory, make_memory: MemoryFactory, order: str
) -> None:
    # The memory just appended is never evicted, even when it is an older version (a report
    # heard later). Sparing it while valuing the newer version that hides it as any other
    # evicted the newer one: the order of a batch, not game time, chose the NPC's belief.
    memory = open_hybrid(None, options={"maximum_memories_per_owner": 10})
    await memory.append_many([make_memory(f"f{n}", tick=11 + n, importance=0.9) for n in range(9)])
    new = make_memory("shut", text="the bridge collapsed", tick=20, importance=0.0, belief_key="b")
    old = make_memory("open", text="the bridge is open", tick=10, importance=0.0, belief_key="b")
    if order == "one at a time":
        await memory.append(new)
        await memory.append(old)
    else:
        await memory.append_many([new, old] if order == "newer first" else [old, new])
    assert "shut" in ids(await memory.enumerate("session", "owner"))
    assert "shut" in await front_recalled(memory, 30)
    assert "open" not in await front_recalled(memory, 30)


async def front_recalled(memory: Any, tick: int) -> list[str]:
    """The ids a front door recalls as of ``tick`` (no text: every visible memory)."""
    return ids(await memory.search(query(limit=50, at_or_before=at(tick))))


async def test_a_memory_forgotten_only_on_another_timeline_keeps_its_value(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    # Erasing is for good: a memory the owner still recalls on its own timeline (it was
    # forgotten on another) must not be taken for one already forgotten.
    for where in (at(0, "alternate"), at(10**9, "alternate")):
        memory = open_hybrid(
            None, save=f"save-{where.tick}", options={"maximum_memories_per_owner": 4}
        )
        await memory.append(make_memory("precious", tick=100, importance=1.0))
        for number in range(3):
            await memory.append(make_memory(f"m{number}", tick=100 + number, importance=0.1))
        await memory.forget("session", "owner", "precious", where)
        assert "precious" in await front_recalled(memory, 200)
        await memory.append(make_memory("m3", tick=103, importance=0.1))  # 5 of 4: down to 3
        kept = ids(await memory.enumerate("session", "owner"))
        assert kept == ["m2", "m3", "precious"], where


async def test_appends_running_at_once_keep_the_bound_and_leave_no_orphan_vector(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    diagnostics: Diagnostics,
) -> None:
    # One append's eviction must not erase another's memory between its save and its
    # index write (the vector written after the erase would stay behind), and two
    # evictions must not both erase from one count.
    bound = 10
    memory = open_hybrid(provider, options={"maximum_memories_per_owner": bound})
    await memory.append_many([make_memory(f"base{n}", tick=n) for n in range(bound)])
    batches = [[make_memory(f"batch{n}-{k}", tick=50 + n) for k in range(3)] for n in range(3)]
    await asyncio.gather(
        *(memory.append(make_memory(f"new{n}", tick=100 + n)) for n in range(20)),
        *(memory.append_many(batch) for batch in batches),
    )
    held = await memory.enumerate("session", "owner")
    assert eviction_target(bound) <= len(held) <= bound
    evicted = sum(d.details["count"] for d in diagnostics if d.code == "memories_evicted")
    assert evicted == bound + 20 + 9 - len(held)
    status = await memory.get_status("session")
    assert status.orphan_entries == 0
    assert status.total_entries == status.ready_entries == len(held)


async def test_a_consolidation_is_an_append_the_retention_policy_applies_after(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(None, options={"maximum_memories_per_owner": 3})
    for number in range(3):
        await memory.append(make_memory(f"m{number}", tick=number, importance=0.2))
    made = summary(make_memory, tick=10, importance=1.0)
    assert await memory.consolidate("session", "owner", ["m0"], made) is True
    kept = ids(await memory.enumerate("session", "owner"))
    assert len(kept) == eviction_target(3) and "fire" in kept and "m0" not in kept


async def test_a_summary_appended_plainly_is_checked_as_consolidate_checks_it(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    # Without the checks an event could retract any memory, and an id no memory had yet
    # would hide the memory later appended under it.
    memory = open_hybrid(None)
    await village(memory, make_memory)
    with pytest.raises(InvalidArgumentError, match="reflection"):
        await memory.append(make_memory("e", tick=50, kind="event", consolidates=["m0"]))
    with pytest.raises(MemoryNotFoundError, match="ghost"):
        await memory.append(summary(make_memory, consolidates=["m0", "ghost"]))
    with pytest.raises(MemoryNotFoundError, match="ghost"):
        await memory.append_many([summary(make_memory, consolidates=["ghost"])])
    with pytest.raises(InvalidArgumentError, match="reflection"):
        await memory.append_many([make_memory("e", tick=50, kind="event", consolidates=["m1"])])
    with pytest.raises(InvalidArgumentError, match="after it"):  # m2 is at tick 30
        await memory.append_many([summary(make_memory, tick=25, consolidates=["m2"])])
    with pytest.raises(InvalidArgumentError, match="after it"):  # in the batch, and later
        await memory.append_many(
            [summary(make_memory, tick=25, consolidates=["m9"]), make_memory("m9", tick=26)]
        )
    assert await front_recalled(memory, 1_000) == ["m0", "m1", "m2"]  # nothing was appended
    # A checked summary is appended as consolidate appends it; in a batch its sources
    # may come in the same batch, in any order.
    assert await memory.append(summary(make_memory, consolidates=["m0"])) is True
    assert await front_recalled(memory, 1_000) == ["fire", "m1", "m2"]
    later = summary(make_memory, tick=600, consolidates=["m3"])
    later = later.model_copy(update={"memory_id": "later"})
    assert await memory.append_many([later, make_memory("m3", tick=550)]) == [True, True]
    assert await front_recalled(memory, 1_000) == ["fire", "later", "m1", "m2"]


async def test_an_earlier_save_still_recalls_what_a_later_moment_forgot(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    memory = open_hybrid(provider)
    await memory.append(make_memory("rumour", text="the dragon sleeps under the hill", tick=100))
    await memory.forget("session", "owner", "rumour", at(400))
    day_five = await memory.recall(query("dragon", at_or_before=at(500)))
    loaded_day_two = await memory.recall(query("dragon", at_or_before=at(200)))
    assert ids(day_five.memories) == [] and ids(loaded_day_two.memories) == ["rumour"]


# -- an erase and appends running at once -------------------------------------------------


async def _settled(memory: Any) -> tuple[list[str], Any]:
    held = ids(await memory.enumerate("session", "owner"))
    return held, await memory.get_status("session")


@pytest.mark.parametrize("bounded", [False, True])
async def test_an_erase_started_while_an_append_embeds_leaves_no_orphan_vector(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory, bounded: bool
) -> None:
    # The append has saved its memory and is embedding it when the erase of its owner
    # starts. Had the erase run then, the vector written after it would stay behind for a
    # memory no longer saved (an orphan, reported as degraded until a rebuild).
    options = {"maximum_memories_per_owner": 50} if bounded else {}
    memory = open_hybrid(provider, options=options)
    await village(memory, make_memory)
    erasing: list[asyncio.Task[int]] = []

    async def erase_meanwhile(texts: Sequence[str]) -> None:
        if not erasing:
            erasing.append(asyncio.create_task(memory.erase("session", "owner")))
            for _ in range(50):  # every chance to run to its end before the vector is written
                await asyncio.sleep(0)
            await asyncio.sleep(0.02)

    provider.on_documents = erase_meanwhile
    assert await memory.append(make_memory("late", text="the well ran dry", tick=40)) is True
    assert await erasing[0] == 4  # it waited for the append: the new memory is erased too
    held, status = await _settled(memory)
    assert held == []
    assert (status.total_entries, status.orphan_entries) == (0, 0), status


@pytest.mark.parametrize("bounded", [False, True])
async def test_an_append_started_while_an_erase_runs_keeps_its_vector(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory, bounded: bool
) -> None:
    # The erase has erased from the save and not yet from the index when an append of the
    # same owner starts. Had the append saved and indexed then, the index erase would have
    # dropped the new memory's vector: a saved memory recalled lexically only.
    options = {"maximum_memories_per_owner": 50} if bounded else {}
    memory = open_hybrid(provider, options=options)
    await village(memory, make_memory)
    store_erase = memory.authoritative.erase
    appending: list[asyncio.Task[Any]] = []

    async def erase_then_append_meanwhile(*args: Any) -> int:
        erased = await store_erase(*args)
        if not appending:
            late = make_memory("late", text="the well ran dry", tick=40)
            appending.append(asyncio.create_task(memory.append(late)))
            batch = [make_memory(f"b{n}", text="more rain", tick=41 + n) for n in range(3)]
            appending.append(asyncio.create_task(memory.append_many(batch)))
            for _ in range(50):  # every chance to save and index before the index erase
                await asyncio.sleep(0)
            await asyncio.sleep(0.02)
        return erased

    memory.authoritative.erase = erase_then_append_meanwhile  # type: ignore[method-assign]
    assert await memory.erase("session", "owner") == 3
    assert await appending[0] is True and await appending[1] == [True] * 3
    held, status = await _settled(memory)
    assert held == ["b0", "b1", "b2", "late"]
    assert status.orphan_entries == 0
    assert status.total_entries == status.ready_entries == 4, status
    hits = await memory.recall(query("well", limit=5), require_semantic=True)
    assert "late" in [hit.memory.memory_id for hit in hits.hits]


async def test_an_erase_waits_for_appends_and_appends_wait_for_a_waiting_erase(
    open_hybrid: HybridFactory, provider: FaultyProvider, make_memory: MemoryFactory
) -> None:
    # Appends that keep coming do not starve an erase, and each ends erased or kept whole.
    memory = open_hybrid(provider)
    await village(memory, make_memory)
    release = asyncio.Event()

    async def slow(texts: Sequence[str]) -> None:
        await release.wait()

    provider.on_documents = slow
    first = asyncio.create_task(memory.append(make_memory("a0", text="one", tick=50)))
    await asyncio.sleep(0.01)
    erase = asyncio.create_task(memory.erase("session", "owner"))
    await asyncio.sleep(0.01)
    later = asyncio.create_task(memory.append(make_memory("a1", text="two", tick=51)))
    await asyncio.sleep(0.01)
    assert not erase.done() and not later.done()  # the erase waits for a0; a1 for the erase
    release.set()
    assert await first is True and await erase == 4 and await later is True
    held, status = await _settled(memory)
    assert held == ["a1"]
    assert status.total_entries == status.ready_entries == 1 and status.orphan_entries == 0


async def test_an_erase_of_surplus_stops_at_the_count_it_must_keep(
    open_store: StoreOpener, make_memory: MemoryFactory
) -> None:
    # The retention policy's erase, counted under the store's lock: two processes evicting
    # from one owner at once chose from one snapshot, and their two erases whole took it
    # below its target (the new memories of both gone).
    store = open_store()
    assert isinstance(store, SurplusErasing)  # every backend of the suite has it
    for number in range(6):
        await store.append(make_memory(f"m{number}", tick=number))
    taken = await store.erase_surplus("session", "owner", ["unknown", "m4", "m1", "m2"], keep=4)
    assert taken == ["m4", "m1"]  # in the order given, ids it does not hold skipped
    assert ids(await store.enumerate("session", "owner")) == ["m0", "m2", "m3", "m5"]
    assert await store.erase_surplus("session", "owner", ["m0", "m2"], keep=4) == []
    assert await store.count() == 4
    assert await store.erase_surplus("session", "nobody", ["m0"], keep=0) == []
    with pytest.raises(InvalidArgumentError):
        await store.erase_surplus("session", "owner", ["m0"], keep=-1)


async def test_two_front_doors_evicting_from_one_owner_keep_it_at_its_target(
    open_hybrid: HybridFactory, make_memory: MemoryFactory
) -> None:
    # Two front doors over one save (as two processes), each appending to an owner at its
    # bound: each eviction chose from a snapshot without the other's new memory, so the
    # owner could end below its target (90% of the bound) with both new memories gone.
    first = open_hybrid(None, options={"maximum_memories_per_owner": 10})
    second = open_hybrid(None, options={"maximum_memories_per_owner": 10})  # (in memory: one store)
    await first.append_many([make_memory(f"f{n}", tick=n, importance=0.9) for n in range(10)])
    snapshot = first.authoritative.snapshot
    both_appended, both_chose = asyncio.Event(), asyncio.Event()
    arrived: list[str] = []

    async def barrier(event: asyncio.Event, name: str) -> None:
        arrived.append(name)
        if arrived.count(name) == 2:
            event.set()
        await asyncio.wait_for(event.wait(), 10)

    async def after_both_took_their_snapshot(query: Any) -> Any:
        if query.limit != 0:  # not an eviction's snapshot
            return await snapshot(query)
        await barrier(both_appended, "appended")  # both new memories are saved by now
        taken = await snapshot(query)
        await barrier(both_chose, "chose")  # neither erases before both have chosen
        return taken

    for door in (first, second):
        door.authoritative.snapshot = after_both_took_their_snapshot  # type: ignore[method-assign]
    await asyncio.gather(
        first.append(make_memory("a", tick=20, importance=0.0)),
        second.append(make_memory("b", tick=21, importance=0.0)),
    )
    held = ids(await first.enumerate("session", "owner"))
    assert len(held) >= eviction_target(10), held
