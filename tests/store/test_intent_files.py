"""Intent files: a ledger index restored from one checks exactly what one built from the
ledger checks, and is never trusted over a ledger that changed (``store/intent_files.py``)."""

from __future__ import annotations

import mmap
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, PersistenceError
from game_memory.durable.names import identity_hash
from game_memory.store import intent_files
from game_memory.store import intents as intents_module
from game_memory.store.intent_files import GrownPositions, count_before, head
from game_memory.store.intents import LedgerIndex
from game_memory.store.ledger import Ledger

from .helpers import DATA, MemoryFactory, StoreFactory, log_path

COUNT = 40
OWNERS = ("npc", "guard", "smith")


@pytest.fixture(autouse=True)
def small_ledgers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Persist the index of ledgers of a few dozen records (the default is 1,024)."""
    monkeypatch.setattr(intents_module, "PERSIST_MINIMUM", 8)


def intent_file(save: Path) -> Path:
    return save / DATA / "read" / "ledger.intents"


async def fill(store: FileGameMemoryStore, make_memory: MemoryFactory, start: int = 0) -> None:
    for number in range(start, start + COUNT):
        owner = OWNERS[number % len(OWNERS)]
        await store.append(make_memory(f"m{number:03d}", owner_id=owner, text=f"word {number}"))


def index_of(save: Path) -> LedgerIndex:
    index = LedgerIndex(Ledger(save / DATA / "ledger.log", 10_000))
    index.refresh()
    return index


def loaded_intents(save: Path) -> intent_files.Intents | None:
    """The save's intent file as an open would use it (``None``: not usable)."""
    ledger = save / DATA / "ledger.log"
    return intent_files.load_intents(ledger, os.lstat(ledger))


def summary(index: LedgerIndex) -> tuple[object, ...]:
    mark = index.refresh()
    session = identity_hash("session")
    return (
        mark.count,
        index.owner_hashes(session),
        [index.positions(session, owner, mark) for owner in index.owner_hashes(session)],
        index.damaged(),
    )


async def saved(make_store: StoreFactory, make_memory: MemoryFactory) -> list[int]:
    """Fill a store, close it (which writes the intent file); return what it counted."""
    store = make_store()
    await fill(store, make_memory)
    found = await counts(store)
    await store.aclose()
    return found


async def counts(store: FileGameMemoryStore) -> list[int]:
    found = []
    for owner in OWNERS:
        query = GameMemoryQuery(session_id="session", owner_id=owner, text="word", limit=100)
        found.append(len((await store.snapshot(query)).lexical))
    return found


async def test_an_index_restored_from_the_intent_file_equals_one_read_from_the_ledger(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    expected = await saved(make_store, make_memory)
    assert intent_file(save).exists()
    restored = index_of(save)
    assert restored._persisted == COUNT  # started from the file, not from the ledger
    os.unlink(intent_file(save))
    built = index_of(save)
    assert summary(restored) == summary(built)
    assert await counts(make_store()) == expected


@pytest.mark.parametrize("base", [[], [0], [2, 5, 9], [1, 3, 4, 8, 20]])
@pytest.mark.parametrize("tail", [[], [21], [25, 30, 31]])
def test_grown_positions_count_and_slice_as_one_list(base: list[int], tail: list[int]) -> None:
    """Counts before any stop and every prefix of an array grown by a list are those of
    the one list they stand for (the boundary between the two included)."""
    whole = base + tail
    grown = GrownPositions(np.array(base, np.uint64), list(tail))
    assert len(grown) == len(whole)
    for stop in range(-1, 33):
        expected = sum(position < stop for position in whole)
        assert count_before(grown, stop) == expected
        assert count_before(np.array(whole, np.uint64), stop) == expected
        assert count_before(whole, stop) == expected
    for length in range(len(whole) + 1):
        assert [int(p) for p in head(grown, length)] == whole[:length]
    grown.append(40)
    grown.extend([41, 42])
    assert [int(p) for p in head(grown, len(grown))] == [*whole, 40, 41, 42]


async def test_restored_positions_stay_arrays_until_their_partition_grows(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """An open keeps the file's positions as arrays (no list per partition: 2.2 ms per
    100k intents); a partition that grows keeps its array, uncopied, under a
    ``GrownPositions`` (a new object) with a list of what was added, and counts and
    positions are those of an index read from the ledger before, after, and in the file
    written again at close."""
    import numpy as np

    save = tmp_path / "save"
    await saved(make_store, make_memory)
    store = make_store()
    await counts(store)
    index = store._engine.intents
    kinds = {type(found) for found in index._positions.values()}
    assert kinds == {np.ndarray}  # nothing grew: every partition as the file holds it
    npc = [key for key, found in index._positions.items() if len(found) == 14]
    (key,) = npc
    before = index._positions[key]
    await store.append(make_memory("late", owner_id="npc", text="word late"))
    assert await counts(store) == [15, 13, 13]
    grown = index._positions[key]
    assert isinstance(grown, GrownPositions) and grown.base is before
    assert len(grown.tail) == 1 and len(grown) == 15
    assert head(grown, 15).tolist()[:-1] == before.tolist()
    assert sum(isinstance(found, np.ndarray) for found in index._positions.values()) == 2
    live = summary(index)
    await store.aclose()
    restored = index_of(save)
    os.unlink(intent_file(save))
    assert summary(restored) == live == summary(index_of(save))


async def test_appends_after_the_intent_file_are_read_from_the_ledger(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await saved(make_store, make_memory)
    store = make_store()
    await store.append(make_memory("late", owner_id="npc", text="word late"))
    assert await counts(store) == [15, 13, 13]
    await store.aclose()
    restored = index_of(save)
    assert 0 < restored._persisted <= COUNT + 1
    os.unlink(intent_file(save))
    assert summary(restored) == summary(index_of(save))


@pytest.mark.parametrize("damage", ["flip", "cut", "foreign", "empty"])
async def test_a_damaged_intent_file_is_ignored_and_rewritten(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, damage: str
) -> None:
    save = tmp_path / "save"
    expected = await saved(make_store, make_memory)
    path = intent_file(save)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) - 5] ^= 0x01  # inside the positions
    elif damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "foreign":
        data = bytearray(b"GMINTS01 and nothing else")
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    restored = index_of(save)
    assert restored._persisted == COUNT  # read from the ledger, then written again
    assert path.read_bytes() != bytes(data)
    os.unlink(path)
    assert summary(restored) == summary(index_of(save))
    assert await counts(make_store()) == expected


async def test_a_ledger_changed_under_its_intent_file_is_read_from_the_ledger(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await saved(make_store, make_memory)
    ledger = save / DATA / "ledger.log"
    data = bytearray(ledger.read_bytes())
    data[5 * 128 + 90] ^= 0x01  # the memory hash of record 5: its CRC no longer holds
    ledger.write_bytes(bytes(data))  # in place: the same inode
    restored = index_of(save)
    assert restored.damaged() == [5]  # the damage is seen, as without an intent file
    os.unlink(intent_file(save))
    assert summary(restored) == summary(index_of(save))


async def test_an_erase_rewrites_the_ledger_and_its_old_intent_file_is_not_used(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store()
    await fill(store, make_memory)
    await store.erase("session", "npc")
    await store.aclose()
    restored = index_of(save)
    assert identity_hash("npc") not in restored.owner_hashes(identity_hash("session"))
    os.unlink(intent_file(save))
    assert summary(restored) == summary(index_of(save))
    assert await counts(make_store()) == [0, 13, 13]


async def test_a_lost_log_still_fails_closed_with_an_intent_file(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await saved(make_store, make_memory)
    assert intent_file(save).exists()
    log_path(save, "session", "guard").unlink()
    query = GameMemoryQuery(session_id="session", owner_id="guard", text="word", limit=5)
    with pytest.raises(PersistenceError, match="lost"):
        await make_store().snapshot(query)


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from game_memory.store import intent_files
from game_memory.store import intents
from game_memory.store.intents import LedgerIndex
from game_memory.store.ledger import Ledger

def dying(path, data):
    temporary = path.with_name(path.name + ".0123.tmp")
    temporary.write_bytes(data[: len(data) // 2])  # half written, then killed
    os.kill(os.getpid(), signal.SIGKILL)

intents.PERSIST_MINIMUM = 8
intent_files.fs.atomic_write = dying
LedgerIndex(Ledger(Path(sys.argv[1]), 10_000)).refresh()
"""


async def test_a_reader_killed_while_writing_the_intent_file_leaves_nothing_wrong(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    expected = await saved(make_store, make_memory)
    os.unlink(intent_file(save))
    ledger = save / DATA / "ledger.log"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), str(save / DATA / "ledger.log")],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert not intent_file(save).exists()
    assert list(intent_file(save).parent.glob("ledger.intents.*.tmp"))
    assert intent_files.load_intents(save / DATA / "ledger.log", os.lstat(ledger)) is None
    store = make_store()
    assert await counts(store) == expected
    await store.aclose()  # the write is queued on the store's read-file thread
    assert intent_file(save).exists()


async def test_closing_writes_the_intent_file_for_every_record_it_does_not_cover(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """A batch's intents are read by no refresh of the store that wrote them; closing the
    store indexes them and writes the intent file, so the next open reads no record."""
    save = tmp_path / "save"
    store = make_store()
    batch = [
        make_memory(f"m{n:03d}", owner_id=OWNERS[n % 3], text=f"word {n}") for n in range(COUNT)
    ]
    assert await store.append_many(batch) == [True] * COUNT
    assert not intent_file(save).exists()
    await store.aclose()
    loaded = loaded_intents(save)
    assert loaded is not None and loaded.count == COUNT  # every record covered
    restored = index_of(save)
    os.unlink(intent_file(save))
    assert summary(restored) == summary(index_of(save))


async def test_a_copied_save_uses_its_intent_file_checked_by_content(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """The index is a function of the ledger's bytes: a copy (another inode, other times)
    whose ledger holds the same bytes starts from the intent file; one whose bytes differ
    does not."""
    import shutil

    expected = await saved(make_store, make_memory)
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "save", copy)
    loaded = loaded_intents(copy)
    assert loaded is not None and loaded.count == COUNT  # used, checked by its CRC
    assert await counts(make_store(copy)) == expected
    damaged = tmp_path / "damaged"
    shutil.copytree(tmp_path / "save", damaged)
    ledger = damaged / DATA / "ledger.log"
    data = bytearray(ledger.read_bytes())
    data[3 * 128 + 90] ^= 0x01  # record 3's memory hash: its CRC no longer holds
    ledger.write_bytes(bytes(data))
    assert loaded_intents(damaged) is None
    rebuilt = index_of(damaged)
    assert rebuilt.damaged() == [3]  # read from the ledger, damage seen
    os.unlink(intent_file(damaged))
    assert summary(rebuilt) == summary(index_of(damaged))


async def test_the_append_that_crosses_the_mark_queues_the_intent_file(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """The intent file is written on the read-file thread, not in the append that read
    enough new records; a queued write of a ledger replaced meanwhile counts for nothing."""
    save = tmp_path / "save"
    store = make_store()
    queued: list[object] = []
    store._engine.intents.background = queued.append
    await fill(store, make_memory)
    assert len(queued) == 1  # one write queued at a time
    assert not intent_file(save).exists()
    job = queued.pop()
    assert callable(job)
    job()
    assert intent_file(save).exists()
    persisted = store._engine.intents._persisted
    assert 8 <= persisted <= COUNT
    await fill(store, make_memory, start=COUNT)
    assert len(queued) == 1
    store._engine.intents._reset(None)  # as when the ledger is found replaced
    job = queued.pop()
    assert callable(job)
    job()
    assert store._engine.intents._persisted == 0  # the reset index keeps its own count
    await store.aclose()
    restored = index_of(save)
    assert restored._persisted == 2 * COUNT
    os.unlink(intent_file(save))
    assert summary(restored) == summary(index_of(save))


async def test_positions_are_read_in_place_from_the_mapped_file_which_a_new_one_replaces(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """An open maps the intent file instead of copying it (the positions are most of it);
    the next intent file still replaces it by a rename while those arrays live, and they
    keep the values they had."""
    save = tmp_path / "save"
    store = make_store()
    await fill(store, make_memory)
    await store.aclose()
    loaded = loaded_intents(save)
    assert loaded is not None and loaded.count == COUNT
    arrays = list(loaded.positions.values())
    mapped = os.name != "nt"  # Windows reads it: a file mapped there cannot be replaced
    assert arrays and all(isinstance(owner_of(array), mmap.mmap) == mapped for array in arrays)
    values = [array.tolist() for array in arrays]
    again = make_store()
    await fill(again, make_memory, COUNT)
    await again.aclose()
    replaced = loaded_intents(save)
    assert replaced is not None and replaced.count == 2 * COUNT
    assert [array.tolist() for array in arrays] == values


def owner_of(array: object) -> object:
    """The object whose memory ``array`` views (through its bases and a memoryview)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array.obj if isinstance(array, memoryview) else array
