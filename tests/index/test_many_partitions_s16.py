"""Operations over a whole session cost in proportion to its NPCs, not to their square.

Found by an audit (sixteenth session): every rewrite of one NPC's partition listed and
sorted the whole session folder to find that NPC's row files, and a rebuild rewrote every
partition, even one with nothing to drop. A rebuild with nothing to embed again listed
~8 million names at 2,000 NPCs (10.7 s; 40,000 NPCs missed the 3,600 s deadline) and an
erase of the session 4 million (4.2 s). Now such an operation lists the folder once and
hands each rewrite its NPC's names, and a partition with nothing to drop is not rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from game_memory import GameMemory, GameMemoryQuery, GameMoment, open_memory
from game_memory.durable.names import identity_hash
from game_memory.index import engine as engine_module
from game_memory.index import layout as layout_module
from game_memory.index import writer as writer_module
from game_memory.index.engine import INDEX_FOLDER, IndexEngine
from game_memory.index.entries import NO_VALUE, EntryRecord, EntryState, memory_hash
from game_memory.index.file_index import FileVectorMemoryIndex
from support.providers import FaultyProvider

SESSION = identity_hash("slot")
DIMENSIONS = 4


def _memory(owner: str) -> GameMemory:
    return GameMemory(
        memory_id=f"m-{owner}",
        session_id="slot",
        owner_id=owner,
        scope="personal",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=1),
        searchable_text=f"{owner} saw the dragon near the river",
    )


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The folders the index lists, one item per listing (every module that lists)."""
    listed: list[Path] = []
    original = layout_module.list_names

    def counting(directory: Path) -> list[str]:
        listed.append(directory)
        return original(directory)

    for module in (layout_module, engine_module, writer_module):
        monkeypatch.setattr(module, "list_names", counting)
    yield listed


async def _world(folder: Path, npcs: int) -> tuple[Path, Path]:
    save, index = folder / "save", folder / "save.index"
    async with await open_memory(save, index=index, model="hashing") as memory:
        await memory.append_many([_memory(f"npc{n}") for n in range(npcs)])
    return save, index


async def _listings_of(folder: Path, npcs: int, listed: list[Path]) -> tuple[int, int]:
    """How many listings a rebuild with nothing to embed and then an erase of the session
    made over ``npcs`` NPCs of one memory each."""
    save, index = await _world(folder, npcs)
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        listed.clear()
        status = await memory.rebuild("slot")
        rebuild = len(listed)
        assert (status.ready_entries, status.orphan_entries) == (npcs, 0)
        listed.clear()
        assert await memory.erase("slot") == npcs
        erase = len(listed)
    session = index / INDEX_FOLDER / f"s-{SESSION}"
    assert not list(session.glob("o-*"))  # the erase left no partition file
    return rebuild, erase


async def test_a_rebuild_and_a_session_erase_list_the_folder_a_bounded_number_of_times(
    tmp_path: Path, listings: list[Path]
) -> None:
    small = await _listings_of(tmp_path / "50", 50, listings)
    large = await _listings_of(tmp_path / "100", 100, listings)
    # Before: once per NPC, (58, 51) listings at 50 NPCs and (108, 101) at 100.
    assert small == large
    assert large[0] <= 8 and large[1] <= 2


async def test_a_rebuild_with_nothing_to_drop_rewrites_no_partition(
    tmp_path: Path, listings: list[Path]
) -> None:
    save, index = await _world(tmp_path, 20)
    session = index / INDEX_FOLDER / f"s-{SESSION}"
    files = {path.name: path.stat().st_ino for path in session.glob("o-*")}
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        status = await memory.rebuild("slot")
        assert (status.ready_entries, status.orphan_entries) == (20, 0)
        query = GameMemoryQuery(session_id="slot", owner_id="npc7", text="dragon", limit=5)
        found = await memory.recall(query, require_semantic=True)
        assert [m.memory_id for m in found.memories] == ["m-npc7"]
    after = {path.name: path.stat().st_ino for path in session.glob("o-*")}
    assert after == files  # the same files, of the same generation


# -- the engine's judgement of what a compaction would drop ---------------------------------


def _engine(folder: Path) -> IndexEngine:
    engine = FileVectorMemoryIndex(folder, capacity=100).engine
    engine.identity_code(FaultyProvider(DIMENSIONS).identity, create=True)
    return engine


def _ready(name: str, row: int = 0) -> EntryRecord:
    return EntryRecord(EntryState.READY, 0, row, memory_hash(name), b"d" * 32, "")


def _rows(count: int) -> dict[int, np.ndarray]:
    return {0: np.eye(count, DIMENSIONS, dtype=np.float32)}


def _superseded(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    engine.append(SESSION, owner, [_ready("a")], _rows(1))


def _tombstone(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    dead = EntryRecord(EntryState.DELETED, NO_VALUE, NO_VALUE, memory_hash("b"), bytes(32), "")
    engine.append(SESSION, owner, [dead])


def _dead_tail_rows(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    engine.append(SESSION, owner, [], _rows(1))  # rows a writer killed before entries left


def _temporary_file(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    (rows,) = engine.session_directory(SESSION).glob(f"o-{owner}.0.*.f32")
    rows.with_name(f"{rows.name}.0123456789abcdef0123456789abcdef.tmp").write_bytes(b"x")


def _old_generation(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    stale = engine.vectors_path(SESSION, owner, 0, 0x1234ABCD)
    Path(stale).write_bytes(b"\0" * 16)


def _rewrite_mark(engine: IndexEngine, owner: str) -> None:
    engine.append(SESSION, owner, [_ready("a"), _ready("b", 1)], _rows(2))
    Path(engine.rewriting_path(SESSION, owner)).touch()


@pytest.mark.parametrize(
    "spoil",
    [_superseded, _tombstone, _dead_tail_rows, _temporary_file, _old_generation, _rewrite_mark],
)
def test_only_a_partition_with_something_to_drop_is_rewritten(
    tmp_path: Path, spoil: Callable[[IndexEngine, str], None]
) -> None:
    engine = _engine(tmp_path)
    clean, spoiled = identity_hash("clean"), identity_hash("spoiled")
    with engine.locked():
        engine.append(SESSION, clean, [_ready("a"), _ready("b", 1)], _rows(2))
        spoil(engine, spoiled)
        files = engine.session_files(SESSION)
        assert not engine.compact(SESSION, clean, {0}, files[clean])
        assert engine.compact(SESSION, spoiled, {0}, files[spoiled])
        # Dropping an identity code is something to drop too.
        assert engine.compact(SESSION, clean, set())
    left = sorted(path.name for path in engine.session_directory(SESSION).iterdir())
    assert not [name for name in left if name.endswith((".tmp", ".rewriting"))]
    partition = engine.partition(SESSION, spoiled)
    assert partition is not None and partition.records == partition.live
    (rows,) = engine.session_directory(SESSION).glob(f"o-{spoiled}.0.*.f32")
    assert rows.name.endswith(f".{partition.tag:08x}.f32")
    assert rows.stat().st_size == partition.live * DIMENSIONS * 4
