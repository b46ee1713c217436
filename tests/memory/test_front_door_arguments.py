"""Wrong arguments to the front door are refused up front with a library error.

Each case here once got through: it was accepted and failed later with a raw ``TypeError``
or ``AttributeError`` from inside the library (every recall, for a wrong reranker), or it
was refused by a layer below with a message about a parameter the caller never passed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    FileGameMemoryStore,
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    InvalidArgumentError,
    VectorMemoryStore,
    open_memory,
)
from support.vectors import MemoryFactory, query


@pytest.mark.parametrize("save", [None, 5, b"save", "", "   ", ["save"]])
async def test_a_save_that_is_not_a_path_is_refused_before_anything_opens(
    tmp_path: Path, save: Any
) -> None:
    os.chdir(tmp_path)  # an accepted "" or "   " would create a save here
    with pytest.raises(InvalidArgumentError, match="save must"):
        await open_memory(save, model="lexical")
    assert list(tmp_path.iterdir()) == []


async def test_an_index_that_is_not_a_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="index must"):
        await open_memory(tmp_path / "save", index=7, model="hashing")  # type: ignore[arg-type]
    assert not (tmp_path / "save").exists()


@pytest.mark.parametrize(
    "reranker", [GameAwareMemoryReranker(), {"importance_weight": 0.5}, "default"]
)
async def test_open_memory_takes_the_rerankers_options_and_nothing_else(
    tmp_path: Path, reranker: Any
) -> None:
    with pytest.raises(InvalidArgumentError, match="GameAwareMemoryRerankerOptions"):
        await open_memory(tmp_path / "save", model="lexical", reranker=reranker)


async def test_open_memory_with_reranker_options_uses_them(tmp_path: Path) -> None:
    options = GameAwareMemoryRerankerOptions(importance_weight=0.5)
    memory = await open_memory(tmp_path / "save", model="lexical", reranker=options)
    async with memory:
        assert memory.reranker is not None and memory.reranker.options == options


@pytest.mark.parametrize("reranker", [GameAwareMemoryRerankerOptions(), {"rank": 1}, 3])
def test_the_front_door_takes_a_reranker_object(tmp_path: Path, reranker: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="reranker must be a reranker object"):
        VectorMemoryStore(FileGameMemoryStore(tmp_path / "save"), reranker=reranker)


async def test_a_reranker_of_its_own_with_rank_is_accepted(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    class Reversed:
        def rank(self, _query: Any, fused: list[Any]) -> list[Any]:
            return list(reversed(fused))

    async with VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"), reranker=Reversed()
    ) as memory:
        await memory.append(make_memory("m1", text="the cat sat"))
        await memory.append(make_memory("m2", text="the cat ran"))
        assert len((await memory.recall(query("cat"))).memories) == 2


@pytest.mark.parametrize("options", [{"relevance_weight": 1.0}, "weights", 1.0])
def test_the_reranker_refuses_options_of_another_type(options: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="GameAwareMemoryRerankerOptions"):
        GameAwareMemoryReranker(options)


async def test_a_diagnostics_sink_must_be_callable(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="diagnostics must be a callable"):
        VectorMemoryStore(FileGameMemoryStore(tmp_path / "save"), diagnostics=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="diagnostics must be a callable"):
        await open_memory(tmp_path / "other", model="hashing", diagnostics="log")  # type: ignore[arg-type]


async def test_a_snapshot_bound_of_zero_is_refused_by_the_front_door(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    async with await open_memory(tmp_path / "save", model="lexical") as memory:
        await memory.append(make_memory("m1", text="the cat sat"))
        for bound in (0, -1):
            with pytest.raises(InvalidArgumentError, match=r"maximum_snapshot_entries .*1 or more"):
                await memory.recall(query("cat"), maximum_snapshot_entries=bound)
            with pytest.raises(InvalidArgumentError, match="maximum_snapshot_entries"):
                await memory.search_snapshot(query("cat"), bound)
        result = await memory.recall(query("cat"), maximum_snapshot_entries=1)
        assert [m.memory_id for m in result.memories] == ["m1"]


async def test_a_progress_that_is_not_callable_is_refused_before_the_rebuild(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    async with await open_memory(tmp_path / "save", model="hashing") as memory:
        await memory.append(make_memory("m1", text="the cat sat"))
        with pytest.raises(InvalidArgumentError, match="progress must be a callable"):
            await memory.rebuild("session", force=True, progress=5)  # type: ignore[arg-type]
        seen: list[tuple[int, int]] = []
        await memory.rebuild("session", force=True, progress=lambda d, t: seen.append((d, t)))
        assert seen and seen[-1][0] == seen[-1][1]
