"""An NPC of a few hundred memories opens from derived files too (``read_path.LAZY_MINIMUM``,
``index/stamps.STAMP_MINIMUM``): a first recall then decodes its candidates, not the whole
partition, and the index trusts its verified records instead of checking each at every
open. Below the bound a partition is decoded whole and gets no file."""

from __future__ import annotations

from pathlib import Path

from game_memory import GameMemoryQuery, GameMoment, open_memory
from game_memory.durable.names import partition_hash
from game_memory.index.stamps import STAMP_MINIMUM
from game_memory.store.lazy import LazyMemories
from game_memory.store.read_path import LAZY_MINIMUM

from .helpers import DATA, MemoryFactory

WORDS = ("dragon", "river", "storm", "smith", "harvest", "merchant", "tavern", "sword")


def query(owner: str) -> GameMemoryQuery:
    return GameMemoryQuery(
        session_id="session",
        owner_id=owner,
        text="dragon river",
        limit=8,
        at_or_before=GameMoment(timeline_id="main", tick=10_000),
    )


async def test_an_npc_of_a_few_hundred_memories_opens_from_its_read_file(
    make_memory: MemoryFactory, tmp_path: Path
) -> None:
    assert LAZY_MINIMUM <= 128 and STAMP_MINIMUM <= 128  # the bounds this test is about
    save, index = tmp_path / "save", tmp_path / "index"
    sizes = {"innkeeper": 300, "child": LAZY_MINIMUM - 1}
    memory = await open_memory(save, index=index, model="hashing")
    try:
        for owner, size in sizes.items():
            batch = [
                make_memory(
                    f"{owner}-{n}",
                    owner_id=owner,
                    tick=n,
                    text=f"{WORDS[n % 8]} {WORDS[(n * 3) % 8]} {n}",
                )
                for n in range(size)
            ]
            assert await memory.append_many(batch) == [True] * size
        expected = {
            o: [h.memory.memory_id for h in (await memory.recall(query(o))).hits] for o in sizes
        }
    finally:
        await memory.aclose()
    folder = save / DATA / "read" / f"s-{partition_hash('session')}"
    names = {path.name for path in folder.iterdir()}
    assert f"o-{partition_hash('innkeeper')}.read" in names
    assert f"o-{partition_hash('child')}.read" not in names  # below the bound: no file
    stamps = list(index.rglob(f"o-{partition_hash('innkeeper')}.verified"))
    assert len(stamps) == 1  # its 300 entries checked once, then trusted by their stamp
    reopened = await open_memory(save, index=index, model="hashing", create=False)
    try:
        for owner, size in sizes.items():
            result = await reopened.recall(query(owner))
            assert [h.memory.memory_id for h in result.hits] == expected[owner]
            view = (await reopened.authoritative.snapshot(query(owner))).views[0]
            lazy = isinstance(view.memories, LazyMemories)
            assert lazy == (size >= LAZY_MINIMUM)
            if lazy:
                assert isinstance(view.memories, LazyMemories)
                decoded = sum(m is not None for m in view.memories._records.decoded)
                assert decoded < size // 4  # the candidates, not the partition
    finally:
        await reopened.aclose()
