"""On random saves and queries, every backend pair recalls exactly what the file pair recalls.

Hypothesis draws a program (appends, some failing to embed or reusing an id; recalls with
random filters and moments; statuses; rebuilds; model changes) and runs it on the file pair
(the reference) and on each other pair of one name in the registries (today: the in-memory
pair), each behind its own front door with its own deterministic provider. Every step must
give identical results: append outcomes and errors, recalled memories in order with their
ranks and exact scores, fallbacks, stage kinds, statuses, enumerations and diagnostics.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from game_memory import (
    GameMemory,
    GameMemoryError,
    GameMemoryKind,
    GameMemoryQuery,
    GameMoment,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from support.providers import Fault, FaultyProvider
from support.vectors import Diagnostics

from .conftest import INDEX_BACKENDS, STORE_BACKENDS

WORDS = ["cat", "feline", "dog", "hound", "sword", "blade", "ale", "bridge", "猫", "一只", "屋顶"]
IDS = ["m0", "m1", "m2", "m3", "m4", "é5", "\U0001f600", "\uff5e"]
OWNERS = ["npc-a", "npc-b", "npc-\U0001f600"]
SESSIONS = ["s1", "s2"]
TIMELINES = ["world", "branch"]
CANDIDATES = sorted(name for name in STORE_BACKENDS if name != "file" and name in INDEX_BACKENDS)
EXAMPLES = int(os.environ.get("GAME_MEMORY_EQUIVALENCE_EXAMPLES", "100"))  # more: a stress run


# -- the programs -------------------------------------------------------------------------


texts = st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)
sessions = st.sampled_from(["s1", "s1", "s1", "s2"])  # mostly one session: the ranking matters


def sometimes(strategy: st.SearchStrategy[Any], otherwise: Any) -> st.SearchStrategy[Any]:
    """``strategy`` in about a third of the draws, else ``otherwise``."""
    return st.one_of(st.just(otherwise), st.just(otherwise), strategy)


@st.composite
def memories(draw: st.DrawFn) -> GameMemory:
    timeline = draw(st.sampled_from(["world", "world", "branch"]))
    tick = draw(st.integers(-3, 12))
    expiry = draw(sometimes(st.integers(0, 6), None))
    return GameMemory(
        memory_id=draw(st.sampled_from(IDS)),
        session_id=draw(sessions),
        owner_id=draw(st.sampled_from(OWNERS)),
        scope=draw(st.sampled_from(["x", "y"])),
        kind=draw(
            st.sampled_from([GameMemoryKind.FACT, GameMemoryKind.EVENT, GameMemoryKind.GOAL])
        ),
        payload_json=json.dumps({"note": draw(texts)}, ensure_ascii=False),
        moment=GameMoment(timeline_id=timeline, tick=tick),
        importance=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0.0, 1.0)),
        searchable_text=draw(st.none() | texts.filter(bool)),
        tags=draw(sometimes(st.lists(st.sampled_from(["t1", "t2"]), max_size=2), [])),
        expires_at=None if expiry is None else GameMoment(timeline_id=timeline, tick=tick + expiry),
        belief_key=draw(sometimes(st.sampled_from(["bridge", "king"]), None)),
    )


queries = st.builds(
    GameMemoryQuery,
    session_id=sessions,
    limit=st.integers(0, 12),
    owner_id=sometimes(st.sampled_from(OWNERS), None),
    text=st.one_of(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        st.sampled_from([None, "?!", "", '"note"']),
    ),
    at_or_before=sometimes(
        st.builds(GameMoment, timeline_id=st.sampled_from(TIMELINES), tick=st.integers(-2, 14)),
        None,
    ),
    scopes=sometimes(st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=1), []),
    kinds=sometimes(
        st.lists(st.sampled_from([GameMemoryKind.FACT, GameMemoryKind.GOAL]), max_size=1), []
    ),
    tags=sometimes(st.lists(st.sampled_from(["t1", "t2"]), max_size=1), []),
    minimum_importance=sometimes(st.just(0.3), 0.0),
)

appends = st.tuples(st.just("append"), memories(), sometimes(st.just(True), False))  # embed fails
steps = st.one_of(
    appends,
    appends,
    appends,
    st.tuples(st.just("again"), st.integers(0, 1_000), st.booleans()),  # re-append an earlier one
    st.tuples(st.just("recall"), queries, sometimes(st.just(True), False)),  # require_semantic
    st.tuples(st.just("recall"), queries, st.just(False)),
    st.tuples(st.just("recall"), queries, st.just(False)),
    st.tuples(st.just("recall"), queries, st.just(False)),
    st.tuples(st.just("status"), sessions, st.just(False)),
    st.tuples(st.just("enumerate"), sessions, sometimes(st.sampled_from(OWNERS), None)),
    st.tuples(st.just("rebuild"), sessions, st.booleans()),  # bool: force
    st.tuples(st.just("switch"), st.sampled_from(["v1", "v2"]), st.just(False)),  # a model change
)


@dataclass(frozen=True)
class Bounds:
    maximum_entries: int
    capacity: int


bounds = st.builds(Bounds, st.sampled_from([6, 100]), st.sampled_from([3, 100]))


# -- running a program on one pair ---------------------------------------------------------


class Pair:
    """One store × index pair behind a front door, with its own provider and diagnostics."""

    def __init__(self, store_backend: str, index_backend: str, folder: Path, limits: Bounds):
        self.open_store = STORE_BACKENDS[store_backend](folder)
        self.open_index = INDEX_BACKENDS[index_backend](folder)
        self.store = self.open_store(maximum_entries=limits.maximum_entries)
        self.index = self.open_index(capacity=limits.capacity)
        self.diagnostics = Diagnostics()
        self.doors: list[VectorMemoryStore] = []
        self.door = self.switch("v1")

    def switch(self, version: str) -> VectorMemoryStore:
        self.provider = FaultyProvider(64, version=version)
        self.door = VectorMemoryStore(
            self.store,
            self.index,
            self.provider,
            diagnostics=self.diagnostics,
            options=VectorMemoryStoreOptions(
                rebuild_batch_size=3, dispose_embedding_provider=False
            ),
        )
        self.doors.append(self.door)
        return self.door

    async def step(self, step: tuple[Any, ...], appended: list[GameMemory]) -> object:
        kind, argument, flag = step
        door = self.door
        try:
            if kind in ("append", "again"):
                if kind == "again":
                    if not appended:
                        return "nothing to append again"
                    argument = appended[argument % len(appended)]
                self.provider.document_fault = Fault.FAIL if flag else Fault.NONE
                try:
                    return await door.append(argument)
                finally:
                    self.provider.document_fault = Fault.NONE
            if kind == "recall":
                try:
                    result = await door.recall(argument, require_semantic=flag)
                finally:  # the catch-up it started ends before the next step, on both pairs
                    await door._catch_ups.idle()
                stages = [stage.stage for stage in result.snapshot.stages]
                return result.hits, result.fallback, stages, result.snapshot.authoritative_memories
            if kind == "status":
                return await door.get_status(argument)
            if kind == "enumerate":
                return await door.enumerate(argument, flag)
            if kind == "rebuild":
                return await door.rebuild(argument, force=flag)
            if kind == "switch":
                self.switch(argument)
                return argument
        except GameMemoryError as exc:
            return type(exc).__name__, getattr(exc, "bound", None)
        raise AssertionError(f"unknown step {kind!r}")

    async def aclose(self) -> None:
        for door in self.doors:
            await door.aclose()


def _scratch() -> str | None:
    """A RAM-backed temporary folder when the machine has one, else the default.

    The file pair's fsyncs would take three quarters of the run, and durability is not
    what this test compares.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


async def run_side_by_side(candidate: str, program: list[tuple[Any, ...]], limits: Bounds) -> None:
    scratch = _scratch()
    with (
        tempfile.TemporaryDirectory(dir=scratch) as reference_folder,
        tempfile.TemporaryDirectory(dir=scratch) as other,
    ):
        reference = Pair("file", "file", Path(reference_folder), limits)
        tested = Pair(candidate, candidate, Path(other), limits)
        appended: list[GameMemory] = []
        try:
            for number, step in enumerate(program):
                expected = await reference.step(step, appended)
                found = await tested.step(step, appended)
                assert found == expected, f"step {number} {step[0]} differs"
                assert tested.diagnostics.codes() == reference.diagnostics.codes()
                if step[0] == "append":
                    appended.append(step[1])
            assert await tested.store.count() == await reference.store.count()
            for session in SESSIONS:
                assert await tested.store.enumerate(session) == await reference.store.enumerate(
                    session
                )
        finally:
            await reference.aclose()
            await tested.aclose()


@pytest.mark.parametrize("candidate", CANDIDATES)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    save=st.lists(appends, min_size=3, max_size=25),
    program=st.lists(steps, min_size=5, max_size=30),
    limits=bounds,
)
def test_every_pair_recalls_exactly_what_the_file_pair_recalls(
    candidate: str, save: list[tuple[Any, ...]], program: list[tuple[Any, ...]], limits: Bounds
) -> None:
    asyncio.run(run_side_by_side(candidate, save + program, limits))


def test_there_is_a_pair_to_compare_with_the_file_pair() -> None:
    assert CANDIDATES, "the registry holds no backend pair besides the file pair"
