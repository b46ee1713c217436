"""The int8 copy of a partition's rows kept in a file (``index/row_codes.py``): written at
close, used from the first recall of the next open, never used unless it proves itself the
rows', and gone with its rows.

The thresholds are lowered (copies from 64 rows, stale from 16) so that an NPC of a few
hundred memories stands for one of many thousands.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from game_memory import GameMemoryQuery, GameMoment, VectorMemoryState, VectorMemoryStore
from game_memory.durable.names import identity_hash
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.index import engine as engine_module
from game_memory.index import quantized
from game_memory.index import row_codes as row_codes_module
from game_memory.index.engine import INDEX_FOLDER
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.index.layout import file_owner, leftover_names
from game_memory.index.row_codes import HEADER_BYTES, codes_header
from game_memory.opening import open_memory
from game_memory.store.file_store import FileGameMemoryStore
from support.erased import vector_bytes, witnessed
from support.first_passes import spy_first_passes
from support.vectors import MemoryFactory, VectorStoreFactory, until

pytestmark = pytest.mark.skipif(not quantized.available(), reason="SimSIMD is a dependency")

NPC, OTHER = "npc", "smith"
_WORDS = ["bridge", "storm", "market", "dragon", "river", "king", "bread", "sword", "inn"]
Answers = list[list[tuple[str, float | None, float]]]


@pytest.fixture(autouse=True)
def small_copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(quantized, "QUANTIZED_FROM_ROWS", 64)
    monkeypatch.setattr(quantized, "STALE_ROWS", 16)
    quantized.forget_all()
    yield
    quantized.forget_all()


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each first pass a recall asked for answered from a copy."""
    return spy_first_passes(monkeypatch)


def memories(make_memory: MemoryFactory, count: int, owner: str = NPC, first: int = 0) -> list:
    rng = np.random.default_rng(first + len(owner))
    return [
        make_memory(
            f"{owner}-{index:05d}",
            owner_id=owner,
            tick=index,
            text=" ".join(rng.choice(_WORDS, 5).tolist()) + f" note {index}",
        )
        for index in range(first, first + count)
    ]


def questions(owner: str = NPC) -> list[GameMemoryQuery]:
    return [
        GameMemoryQuery(
            session_id="session",
            owner_id=owner,
            text=f"{_WORDS[number % 9]} {_WORDS[(number * 4) % 9]}",
            limit=8,
            at_or_before=GameMoment(timeline_id="world", tick=tick),
        )
        for number, tick in enumerate((10_000, 250, 120))
    ]


async def answers(store: VectorMemoryStore, owner: str = NPC) -> Answers:
    found = []
    for asked in questions(owner):
        result = await store.recall(asked)
        assert not result.fallback
        found.append(
            [(hit.memory.memory_id, hit.vector_score, hit.fused_score) for hit in result.hits]
        )
    return found


async def read_in_background(store: VectorMemoryStore, used: list[bool]) -> Answers:
    """Answers of a store just opened, whose first recall has the copier read the file of
    codes once it is answered (by the float32 product); the copier is done on return and
    ``used`` cleared."""
    first = await answers(store)
    assert not used[0]  # the open's first answer waits for no copy
    await until(quantized.idle, "the copier to read the codes")
    used.clear()
    return first


def session_folder(tmp_path: Path) -> Path:
    return tmp_path / "index" / INDEX_FOLDER / f"s-{identity_hash('session')}"


def codes_files(tmp_path: Path, owner: str = NPC) -> list[Path]:
    return sorted(session_folder(tmp_path).glob(f"o-{identity_hash(owner)}.*.q8"))


def row_files(tmp_path: Path, owner: str = NPC) -> list[Path]:
    return sorted(session_folder(tmp_path).glob(f"o-{identity_hash(owner)}.*.f32"))


async def seeded(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, count: int = 300
) -> Answers:
    """An NPC of ``count`` memories written and closed; its answers by the float32 product
    alone (as without SimSIMD)."""
    store = make_vector_store(HashingEmbeddingProvider())
    assert all(await store.append_many(memories(make_memory, count)))
    await store.aclose()
    quantized.forget_all()
    real = quantized._DOT
    quantized._DOT = None
    try:
        plain = make_vector_store(HashingEmbeddingProvider())
        reference = await answers(plain)
        await plain.aclose()
    finally:
        quantized._DOT = real
        quantized.forget_all()
    return reference


async def test_a_writer_keeps_codes_at_close_and_the_next_open_scores_from_them(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
) -> None:
    reference = await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    (rows,) = row_files(tmp_path)
    assert codes.name == rows.name.replace(".f32", ".q8")  # the generation's own
    header = codes_header(str(codes))
    assert header is not None and header[1] == 300
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    assert await read_in_background(store, used) == reference
    assert quantized.held_bytes() > 0
    assert await answers(store) == reference
    assert used and all(used)  # from the second recall on: no 4 recalls and a copy first
    await store.aclose()


async def test_an_open_told_not_to_keep_copies_reads_none(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
) -> None:
    reference = await seeded(make_vector_store, make_memory)
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider(), options={"int8_copies": False})
    assert await answers(store) == reference
    assert used and not any(used)
    assert quantized.held_bytes() == 0


def _flip_code(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(bytes(data))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _header_only(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: HEADER_BYTES - 1])


def _other_magic(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0:8] = b"GMQ8ROW9"
    path.write_bytes(bytes(data))


def _flip_bound(offset: int) -> Callable[[Path], None]:
    """Flip one exponent bit of the f64 bound at ``offset`` (24: ``U``, 32: ``R``): the
    bound becomes ~1e-155, finite and positive, which a first pass would trust and prune
    rows that belong in the best with."""

    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[offset + 7] ^= 0x20
        path.write_bytes(bytes(data))

    return damage


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_flip_code, "fails its checksum"),
        (_cut, "its size is not what its header says"),
        (_header_only, "shorter than its header"),
        (_other_magic, "not a file of int8 codes"),
        (_flip_bound(24), "its header fails its checksum"),
        (_flip_bound(32), "its header fails its checksum"),
    ],
    ids=["code", "cut", "header-only", "magic", "spread", "residual"],
)
async def test_damaged_codes_are_named_never_used_and_rewritten(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
    reason: str,
) -> None:
    reference = await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    damage(codes)
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        assert await read_in_background(store, used) == reference
    assert any(reason in r.getMessage() and codes.name in r.getMessage() for r in caplog.records)
    assert quantized.held_bytes() == 0  # refused: the product answers
    for _ in range(quantized.COPY_AFTER):
        assert await answers(store) == reference  # recalls begin a copy of their own ...
    assert not used[0]
    await store.aclose()  # ... which the close completes and writes over the damaged file
    quantized.forget_all()
    used.clear()
    again = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(again, used)
    assert await answers(again) == reference
    assert used and all(used)


def _layout_one(path: Path) -> None:
    """Make the file one of layout 1, as an earlier release wrote it: the same codes and
    bounds, magic ``GMQ8ROW1``, version 1, and no checksum over the header."""
    data = bytearray(path.read_bytes())
    data[0:8] = b"GMQ8ROW1"
    data[8:12] = (1).to_bytes(4, "little")
    data[48:64] = bytes(16)
    path.write_bytes(bytes(data))


async def test_codes_of_the_earlier_layout_are_quietly_not_trusted_and_written_again(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Layout 1 had no checksum over its bounds: such a file is not used, the upgrade is
    noted at INFO (no warning), and the next close that writes codes writes layout 2."""
    reference = await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    _layout_one(codes)
    assert codes_header(str(codes)) is None  # reads as none: a close writes it again
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    with caplog.at_level(logging.INFO, logger="game_memory.index"):
        assert await read_in_background(store, used) == reference
        for _ in range(quantized.COPY_AFTER):
            assert await answers(store) == reference
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(
        "earlier layout" in r.getMessage() and codes.name in r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO
    )
    await store.aclose()
    assert codes.read_bytes()[:8] == b"GMQ8ROW2" and codes_header(str(codes)) == (256, 300)
    quantized.forget_all()
    used.clear()
    again = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(again, used)
    assert await answers(again) == reference
    assert used and all(used)
    await again.aclose()


async def test_codes_of_other_rows_are_never_used(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A whole, intact file of codes made from other rows (another NPC's, of the same size
    and width, put in its place) is refused: its rows' checksums are not these rows'."""
    reference = await seeded(make_vector_store, make_memory)
    store = make_vector_store(HashingEmbeddingProvider())
    assert all(await store.append_many(memories(make_memory, 300, owner=OTHER)))
    await store.aclose()
    (mine,) = codes_files(tmp_path)
    (theirs,) = codes_files(tmp_path, OTHER)
    mine.write_bytes(theirs.read_bytes())
    quantized.forget_all()
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        assert await read_in_background(store, used) == reference
    assert any("not the rows now" in record.getMessage() for record in caplog.records)
    assert quantized.held_bytes() == 0
    assert await answers(store) == reference


async def test_a_close_rewrites_codes_only_once_they_lag_an_eighth_of_the_rows(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
) -> None:
    """A file lagging its rows by fewer than an eighth of them (at least ``STALE_ROWS``) is
    kept: the rows after it are scored beside it (up to ``STALE_ROWS``) and past that the
    copier extends the copy read from it; a session's close does not rewrite it all."""
    await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    before = codes.stat().st_ino

    async def session(appended: int, first: int) -> None:
        store = make_vector_store(HashingEmbeddingProvider())
        assert all(await store.append_many(memories(make_memory, appended, first=first)))
        await store.aclose()
        quantized.forget_all()

    await session(15, 300)  # 315 rows, 15 behind: below 16
    assert codes.stat().st_ino == before and codes_header(str(codes)) == (256, 300)
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(store, used)
    await answers(store)
    assert used and all(used)  # the 15 rows after the copy are scored beside it
    await store.aclose()
    quantized.forget_all()
    await session(25, 315)  # 340 rows, 40 behind: past 16, below 340 // 8 = 42
    assert codes.stat().st_ino == before and codes_header(str(codes)) == (256, 300)
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(store, used)
    for _ in range(100):  # too far behind to be used: the copier extends it first
        await answers(store)
        await until(quantized.idle, "the copier to extend the copy")
        if used[-1]:
            break
    assert used[-1]
    await store.aclose()
    quantized.forget_all()
    await session(5, 340)  # 345 rows, 45 behind: at least 345 // 8 = 43
    assert codes_header(str(codes)) == (256, 345)


async def test_a_reader_that_began_no_copy_writes_none(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    store = make_vector_store(HashingEmbeddingProvider(), options={"int8_copies": False})
    assert all(await store.append_many(memories(make_memory, 300)))
    await store.aclose()  # a writer's close writes the file whatever its front door keeps
    (codes,) = codes_files(tmp_path)
    codes.unlink()
    quantized.forget_all()
    store = make_vector_store(HashingEmbeddingProvider())
    await answers(store)  # fewer recalls than a copy waits for
    await store.aclose()
    assert codes_files(tmp_path) == []


async def test_a_close_while_the_file_is_being_read_writes_none(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading a file of codes is no copy a reader's recalls asked for: a close meanwhile
    (the file gone, say) writes none."""
    await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    codes.unlink()
    quantized.forget_all()
    reading = threading.Event()
    real = engine_module.read_codes

    def slow(*arguments: object) -> object:
        reading.set()
        time.sleep(0.3)
        return real(*arguments)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "read_codes", slow)
    store = make_vector_store(HashingEmbeddingProvider())
    await answers(store)
    await until(reading.is_set, "the copier to start reading")
    await store.aclose()  # while it reads
    assert codes_files(tmp_path) == []


def _code_bytes(vector: bytes) -> bytes:
    row = np.frombuffer(vector, dtype="<f4").astype(np.float32)[None, :]
    copy = quantized.quantize(np.ascontiguousarray(row))
    assert copy is not None
    return copy.codes[0].tobytes()


@pytest.mark.parametrize("shape", ["listed", "owner"])
async def test_an_erase_leaves_no_code_of_the_erased_memory(tmp_path: Path, shape: str) -> None:
    """The codes hold approximate vectors: an erase's rewrite removes them with their rows."""
    save, index = tmp_path / "save", tmp_path / "save.index"
    witness = witnessed("m1", "ERASED-MARKER the well is dry")
    others = [
        witnessed(f"m{number}", f"{_WORDS[number % 9]} {_WORDS[number % 7]} {number}", number)
        for number in range(2, 200)
    ]
    async with await open_memory(save, index=index, model="hashing") as memory:
        assert all(await memory.append_many([witness, *others]))
    (codes,) = index.rglob("o-*.q8")
    marker = _code_bytes((await vector_bytes([witness]))[0])
    assert marker in codes.read_bytes()  # the grep finds the code where it is
    async with await open_memory(save, index=index, model="hashing", create=False) as memory:
        erased = await memory.erase("slot", "mira", ["m1"] if shape == "listed" else None)
        assert erased == (1 if shape == "listed" else 199)
    assert not [p.name for p in index.rglob("*") if p.is_file() and marker in p.read_bytes()]
    assert not codes.exists()


def test_codes_files_and_their_temporary_files_belong_to_their_owner() -> None:
    owner = "ab" * 32
    name = f"o-{owner}.0.0000abcd.q8"
    temporary = f"{name}.{'0' * 32}.tmp"
    assert file_owner(name) == owner and file_owner(temporary) == owner
    names = [name, temporary, f"o-{owner}.0.0000abcd.f32", f"o-{owner}.0.00001234.q8"]
    # Generation 0000abcd kept: the other generation's codes and every temporary file go.
    assert leftover_names(names, owner, 0xABCD) == [temporary, f"o-{owner}.0.00001234.q8"]
    # A close killed while writing one leaves its temporary file: no sign of a rewrite.
    assert leftover_names(names, owner, 0xABCD, codes=False) == [f"o-{owner}.0.00001234.q8"]


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from game_memory.durable import fs
from game_memory.index import quantized

quantized.QUANTIZED_FROM_ROWS = 64
quantized.STALE_ROWS = 16

real = fs.atomic_write

def dying(path, pieces):
    if not path.name.endswith(".q8"):
        return real(path, pieces)
    temporary = path.with_name(path.name + "." + "0" * 32 + ".tmp")
    data = b"".join(bytes(piece) for piece in pieces)
    temporary.write_bytes(data[: len(data) // 2])  # half written, then killed
    os.kill(os.getpid(), signal.SIGKILL)

fs.atomic_write = dying
import asyncio
from game_memory import VectorMemoryStore, VectorMemoryStoreOptions
from game_memory.embedding.hashing import HashingEmbeddingProvider
from game_memory.index.file_index import FileVectorMemoryIndex
from game_memory.store.file_store import FileGameMemoryStore
sys.path.insert(0, sys.argv[3])
from conftest import build_memory

async def main():
    store = VectorMemoryStore(
        FileGameMemoryStore(Path(sys.argv[1])), FileVectorMemoryIndex(Path(sys.argv[2])),
        HashingEmbeddingProvider(), options=VectorMemoryStoreOptions(),
    )
    await store.append_many([
        build_memory(f"npc-{i:05d}", owner_id="npc", tick=i, text=f"river bread {i}")
        for i in range(300)
    ])
    await store.aclose()

asyncio.run(main())
"""


async def test_a_writer_killed_while_writing_codes_leaves_the_rows_answering(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
) -> None:
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [
            sys.executable, "-c", textwrap.dedent(_KILLED_WRITER),
            str(tmp_path / "save"), str(tmp_path / "index"), str(tests),
        ],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert codes_files(tmp_path) == []
    (leftover,) = session_folder(tmp_path).glob("*.q8.*.tmp")
    assert file_owner(leftover.name) == identity_hash(NPC)
    store = make_vector_store(HashingEmbeddingProvider())
    first = await answers(store)
    assert used and not any(used)  # no codes: the float32 product answered
    assert sum(len(hits) for hits in first) > 0
    status = await store.get_status("session")  # a killed close is no damaged index
    assert status.state == VectorMemoryState.READY and not status.requires_rebuild
    assert all(await store.append_many(memories(make_memory, 1, first=300)))
    await store.aclose()  # a writer's close writes them whole, its leftover removed
    assert not leftover.exists()
    (codes,) = codes_files(tmp_path)
    assert codes_header(str(codes)) == (256, 301)
    quantized.forget_all()
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(store, used)
    await answers(store)
    assert used and all(used)


async def test_a_copy_read_from_its_file_is_extended_in_place(
    make_vector_store: VectorStoreFactory, make_memory: MemoryFactory
) -> None:
    """Read into buffers with room, as a copy made in memory: appends past the stale bound
    extend it there, never into a second copy of every code (twice the bytes at once)."""
    await seeded(make_vector_store, make_memory)
    store = make_vector_store(HashingEmbeddingProvider())
    await answers(store)
    await until(quantized.idle, "the copier to read the codes")
    (entry,) = [entry for entry in quantized._COPIES._entries.values() if entry.copy]
    assert entry.copy is not None and entry.copy.rows == 300
    buffer = entry.codes
    assert all(await store.append_many(memories(make_memory, 20, first=300)))
    for _ in range(100):
        await answers(store)
        if entry.copy is not None and entry.copy.rows == 320:
            break
    assert entry.copy is not None and entry.copy.rows == 320
    assert entry.codes is buffer


async def test_a_close_that_cannot_take_the_writer_lock_skips_its_upkeep(
    tmp_path: Path, make_memory: MemoryFactory
) -> None:
    """Another process holding the index's writer lock past the timeout: the close still
    closes (no error), writes no stamp nor codes, and the next close writes them."""
    index = FileVectorMemoryIndex(tmp_path / "index", lock_timeout=0.05)
    store = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"), index, HashingEmbeddingProvider()
    )
    assert all(await store.append_many(memories(make_memory, 300)))
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with index.engine.locked():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        await store.aclose()
    finally:
        release.set()
        holder.join()
    assert codes_files(tmp_path) == []
    store = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "index"),
        HashingEmbeddingProvider(),
    )
    assert all(await store.append_many(memories(make_memory, 1, first=300)))
    await store.aclose()
    (codes,) = codes_files(tmp_path)
    assert codes_header(str(codes)) == (256, 301)


@pytest.mark.parametrize("planted", ["link", "folder"])
async def test_a_link_or_folder_in_place_of_the_codes_is_never_read(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    used: list[bool],
    caplog: pytest.LogCaptureFixture,
    planted: str,
) -> None:
    reference = await seeded(make_vector_store, make_memory)
    (codes,) = codes_files(tmp_path)
    elsewhere = tmp_path / "elsewhere.q8"
    codes.rename(elsewhere)  # a whole, valid file: followed, it would be used
    if planted == "link":
        codes.symlink_to(elsewhere)
    else:
        codes.mkdir()
    used.clear()
    store = make_vector_store(HashingEmbeddingProvider())
    with caplog.at_level(logging.WARNING, logger="game_memory.index"):
        assert await read_in_background(store, used) == reference
        assert await answers(store) == reference
    assert not any(used) and quantized.held_bytes() == 0
    assert any(codes.name in record.getMessage() for record in caplog.records)


async def test_reading_codes_gives_way_to_appends_chunk_by_chunk(
    make_vector_store: VectorStoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    used: list[bool],
) -> None:
    """The file is read a chunk at a time, each after the process's running appends (one
    read of a 100k NPC's 39 MB right after its first recall made the appends that followed
    wait up to 37 ms for their fsync), its checksum continued across chunks; and the front
    door's appends count as running while they run."""
    reference = await seeded(make_vector_store, make_memory)
    monkeypatch.setattr(row_codes_module, "_CHUNK_BYTES", 1_024)  # 300 × 64 bytes: 19 chunks
    waits: list[int] = []
    real = quantized.appending.give_way

    def give_way() -> None:
        waits.append(quantized.appending._running)
        real()

    monkeypatch.setattr(quantized.appending, "give_way", give_way)
    store = make_vector_store(HashingEmbeddingProvider())
    await read_in_background(store, used)
    assert len(waits) >= 19  # one before each chunk
    assert await answers(store) == reference and used and all(used)  # the checksum held

    seen: dict[str, list[int]] = {"append": [], "append_many": []}
    saved = store.authoritative

    class Watched:  # the save's appends, noting whether they are counted as running
        def __getattr__(self, name: str) -> object:
            found = getattr(saved, name)
            if name not in seen:
                return found

            async def call(*arguments: object) -> object:
                seen[name].append(quantized.appending._running)
                return await found(*arguments)

            return call

    monkeypatch.setattr(store, "authoritative", Watched())
    await store.append(memories(make_memory, 1, first=900)[0])
    await store.append_many(memories(make_memory, 2, first=901))
    assert seen == {"append": [1], "append_many": [1]}  # each counted while it runs
    monkeypatch.setattr(store, "authoritative", saved)
    await store.aclose()
