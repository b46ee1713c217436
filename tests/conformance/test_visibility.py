"""What a query may see, on every backend and on both recall paths: game time and filters.

One save, one table of queries: the store's lexical snapshot and hybrid recall through the
front door must both return exactly the memories ``memory_matches_query`` allows.
"""

from __future__ import annotations

from typing import Any

import pytest

from game_memory import GameMemoryKind, GameMemoryQuery, GameMemoryStore, GameMoment
from game_memory.model import memory_matches_query
from support.providers import FaultyProvider
from support.vectors import MemoryFactory

from .conftest import HybridFactory

WORLD, BRANCH = "world", "branch"


def at(tick: int, timeline: str = WORLD) -> GameMoment:
    return GameMoment(timeline_id=timeline, tick=tick)


async def remember_scene(store: Any, make_memory: MemoryFactory) -> None:
    """Memories that all mention a cat, differing in everything visibility reads."""
    scene = [
        make_memory(
            "a", owner_id="npc-a", text="a cat by the fire", tick=10, tags=["pet", "indoor"]
        ),
        make_memory("b", owner_id="npc-b", text="a cat in the rain", tick=20, scope="secret"),
        make_memory(
            "expiring",
            owner_id="npc-a",
            text="a cat for sale",
            tick=15,
            expires_at=at(21),
            importance=0.9,
            tags=["pet"],
        ),
        make_memory("late", owner_id="npc-a", text="a cat that left", tick=30, kind="goal"),
        make_memory(
            "branched", owner_id="npc-b", text="a cat elsewhere", tick=5, timeline_id=BRANCH
        ),
        make_memory("zero", owner_id="npc-a", text="a cat at dawn", tick=0, importance=0.0),
    ]
    for memory in scene:
        await store.append(memory)
    await store.append(make_memory("theirs", session_id="other", text="a cat", tick=1))


ALL = ["a", "b", "branched", "expiring", "late", "zero"]
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no filter at all", {}, ALL),
    ("one owner", {"owner_id": "npc-b"}, ["b", "branched"]),
    ("as of tick 20", {"at_or_before": at(20)}, ["a", "b", "expiring", "zero"]),
    ("expiry is exclusive", {"at_or_before": at(21)}, ["a", "b", "zero"]),
    ("the moment itself is visible", {"at_or_before": at(30)}, ["a", "b", "late", "zero"]),
    ("before everything", {"at_or_before": at(-1)}, []),
    ("another timeline", {"at_or_before": at(99, BRANCH)}, ["branched"]),
    ("an unknown timeline", {"at_or_before": at(99, "nowhere")}, []),
    ("one scope", {"scopes": ("secret",)}, ["b"]),
    ("scopes are a set", {"scopes": ("secret", "personal")}, ALL),
    ("one kind", {"kinds": (GameMemoryKind.GOAL,)}, ["late"]),
    ("every tag", {"tags": ("pet", "indoor")}, ["a"]),
    ("one tag", {"tags": ("pet",)}, ["a", "expiring"]),
    ("minimum importance is inclusive", {"minimum_importance": 0.9}, ["expiring"]),
    ("above zero", {"minimum_importance": 0.1}, ["a", "b", "branched", "expiring", "late"]),
    (
        "filters combine",
        {"owner_id": "npc-a", "at_or_before": at(20), "tags": ("pet",)},
        ["a", "expiring"],
    ),
]


def ids(memories: Any) -> list[str]:
    return sorted(memory.memory_id for memory in memories)


@pytest.mark.parametrize(("case", "filters", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_the_lexical_snapshot_sees_exactly_what_the_predicate_allows(
    store: GameMemoryStore,
    make_memory: MemoryFactory,
    case: str,
    filters: dict[str, Any],
    expected: list[str],
) -> None:
    await remember_scene(store, make_memory)
    for text in ("cat", None):
        query = GameMemoryQuery(session_id="session", limit=50, text=text, **filters)
        snapshot = await store.snapshot(query)
        hits = [hit.memory for hit in snapshot.lexical]
        assert ids(hits) == expected
        assert snapshot.visible == len(expected)
        visible = [m for m in snapshot.authoritative_memories if memory_matches_query(m, query)]
        assert ids(visible) == expected


@pytest.mark.parametrize(("case", "filters", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_hybrid_recall_sees_exactly_what_the_predicate_allows(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    case: str,
    filters: dict[str, Any],
    expected: list[str],
) -> None:
    memory = open_hybrid(provider)
    await remember_scene(memory, make_memory)
    # "feline" reaches the memories by their vectors only; "cat" by both channels.
    for text in ("feline", "cat"):
        query = GameMemoryQuery(session_id="session", limit=50, text=text, **filters)
        result = await memory.recall(query)
        assert ids(result.memories) == expected
        assert not result.fallback


async def test_one_session_never_sees_another(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await remember_scene(store, make_memory)
    other = await store.snapshot(GameMemoryQuery(session_id="other", limit=50, text="cat"))
    assert [hit.memory.memory_id for hit in other.lexical] == ["theirs"]
    assert {view.session_id for view in other.views} == {"other"}
    assert await store.enumerate("nobody") == []


# -- belief versions ------------------------------------------------------------------------


async def remember_beliefs(store: Any, make_memory: MemoryFactory) -> None:
    """Versions of one belief of npc-a (and one of npc-b, whose beliefs are its own)."""
    bridge = {"belief_key": "bridge.eastmarch"}
    for memory in (
        make_memory("open", owner_id="npc-a", text="the cat bridge is open", tick=100, **bridge),
        make_memory(
            "repairs",
            owner_id="npc-a",
            text="the cat bridge is closed for repairs",
            tick=500,
            expires_at=at(800),
            importance=0.1,
            **bridge,
        ),
        make_memory("z-same", owner_id="npc-a", text="the cat bridge sways", tick=50, **bridge),
        make_memory("a-same", owner_id="npc-a", text="the cat bridge creaks", tick=50, **bridge),
        make_memory("rumour", owner_id="npc-a", text="a cat rumour", tick=10),
        make_memory("theirs", owner_id="npc-b", text="the cat bridge is open", tick=10, **bridge),
    ):
        await store.append(memory)


BELIEF_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no moment: the newest of all", {}, ["repairs", "rumour", "theirs"]),
    ("as of 600 the repairs", {"at_or_before": at(600)}, ["repairs", "rumour", "theirs"]),
    ("expired: the older again", {"at_or_before": at(900)}, ["open", "rumour", "theirs"]),
    ("at one tick the later append", {"at_or_before": at(60)}, ["a-same", "rumour", "theirs"]),
    (
        "a filter never brings one back",
        {"at_or_before": at(600), "minimum_importance": 0.5},
        ["rumour", "theirs"],
    ),
    ("another timeline", {"at_or_before": at(600, BRANCH)}, []),
]


@pytest.mark.parametrize(
    ("case", "filters", "expected"), BELIEF_CASES, ids=[c[0] for c in BELIEF_CASES]
)
async def test_only_the_newest_time_visible_version_of_a_belief_is_recalled(
    open_hybrid: HybridFactory,
    provider: FaultyProvider,
    make_memory: MemoryFactory,
    case: str,
    filters: dict[str, Any],
    expected: list[str],
) -> None:
    memory = open_hybrid(provider)
    await remember_beliefs(memory, make_memory)
    for text in ("cat", "feline", None):
        query = GameMemoryQuery(session_id="session", limit=50, text=text, **filters)
        lexical = await memory.authoritative.snapshot(query)
        assert lexical.visible == len(expected)
        if text != "feline":  # a paraphrase: found by vectors only
            assert ids(hit.memory for hit in lexical.lexical) == expected
        assert ids((await memory.recall(query)).memories) == expected
    assert len(await memory.enumerate("session")) == 6  # every version stays in the save
