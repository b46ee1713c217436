"""Old copies of the batch and rewrite journals put back after their operation finished.

A cloud sync or a backup tool restoring one file can bring back ``migration.json`` (an
``append_many`` batch's journal) or ``rewrite.json`` (an erase's) long after the operation
committed. Acted on blindly, the first "rolled back" the committed batch and every memory
appended after it, the second "finished" the erase again over what the NPC learned since,
and ``check`` then called the save consistent. A journal is applied only when the save is
in a state its operation leaves interrupted: an old copy is refused (``PersistenceError``
naming it and the repair), whether the trace of the last finished journal (its generation)
or the save itself (the ledger counts, the intents and segments after the batch's mark, the
intents of what an erase erases) gives it away; moving it aside is the repair, and it works.
A journal a kill really left is still rolled back or finished, trace or not.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, PersistenceError
from game_memory.store.journal import MigrationJournal
from game_memory.store.rewrite_journal import RewriteJournal

from .helpers import DATA, MemoryFactory, StoreFactory, log_path

BATCH_TRACE = "migration.done.json"
REWRITE_TRACE = "rewrite.done.json"


class Stop(Exception):
    """A simulated kill: the operation stops here."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def ids(store: FileGameMemoryStore, owner: str | None = None) -> list[str]:
    return sorted(m.memory_id for m in await store.enumerate("session", owner))


def capture_journal(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, *, before: bool
) -> dict[str, bytes]:
    """Keep the bytes of the journal the first call of ``owner.name`` leaves (``before``:
    as it is when the call starts), as a backup tool would have copied it."""
    kept: dict[str, bytes] = {}
    original: Callable[..., Any] = getattr(owner, name)

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if before and not kept:
            kept["journal"] = Path(self.path).read_bytes()
        result = original(self, *args, **kwargs)
        if not before and not kept:
            kept["journal"] = Path(self.path).read_bytes()
        return result

    monkeypatch.setattr(owner, name, wrapped)
    return kept


def put_back(save: Path, name: str, data: bytes, *, without: tuple[str, ...] = ()) -> None:
    """Restore an old journal, the traces named in ``without`` lost (deleted) with it."""
    for trace in without:
        (save / DATA / trace).unlink(missing_ok=True)
    (save / DATA / name).write_bytes(data)


def set_aside(save: Path, name: str) -> None:
    """The repair the message names: move the journal out of the save folder."""
    shutil.move(save / DATA / name, save.parent / f"aside-{name}")


# -- the batch journal ---------------------------------------------------------------------


async def guard_batch(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[FileGameMemoryStore, bytes, int]:
    """g0, then g1 and g2 as one append_many batch; return the store, the batch journal as
    it was just before its commit and the guard log's size before the batch."""
    store = make_store(maximum_file_bytes=1 << 20)
    await store.append(make_memory("g0", owner_id="guard", tick=0))
    size = log_path(store.directory, "session", "guard").stat().st_size
    with monkeypatch.context() as patch:
        kept = capture_journal(patch, MigrationJournal, "commit", before=True)
        batch = [make_memory(f"g{n}", owner_id="guard", tick=n) for n in (1, 2)]
        assert await store.append_many(batch) == [True, True]
    return store, kept["journal"], size


async def test_an_old_batch_journal_put_back_after_later_appends_is_refused_and_loses_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _journal, size = await guard_batch(make_store, make_memory, monkeypatch)
    save = store.directory
    for number in (3, 4, 5):
        await store.append(make_memory(f"g{number}", owner_id="guard", tick=number))
    await store.aclose()
    # As an earlier release wrote it (the audit's reproduction): no generation, no limits.
    old = {
        "format_version": 2,
        "ledger_records_before": 1,
        "packs": [],
        "segments": [[f"s-{sha('session')}/o-{sha('guard')}.log", size]],
    }
    put_back(save, "migration.json", json.dumps(old).encode())
    reopened = make_store(save)
    assert await ids(reopened) == [f"g{n}" for n in range(6)]  # nothing undone at open
    with pytest.raises(PersistenceError, match=r"migration\.json was not applied") as raised:
        await reopened.append(make_memory("g6", owner_id="guard", tick=6))
    assert "game-memory check --save-dir" in str(raised.value)
    report = await make_store(save).check()
    assert not report.ok and any("migration.json was not applied" in p for p in report.problems)
    assert "check --fix" in str(raised.value)  # which sets it aside: it holds no memory
    repaired = await make_store(save).check(fix=True)  # never applies it either
    assert any("moved migration.json" in line for line in repaired.repairs), repaired
    assert not (save / DATA / "migration.json").exists()
    assert list((save / DATA / "damaged").glob("*/migration.json"))  # kept for a post-mortem
    fixed = make_store(save)
    assert (await fixed.check()).ok
    assert await fixed.append(make_memory("g6", owner_id="guard", tick=6))
    assert await ids(fixed) == [f"g{n}" for n in range(7)]


async def test_the_journal_of_a_committed_batch_put_back_is_refused_even_with_nothing_after(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The save is byte for byte what a kill just before the commit leaves: only the trace
    # of the finished batch tells the two apart.
    store, journal, _size = await guard_batch(make_store, make_memory, monkeypatch)
    save = store.directory
    await store.aclose()
    put_back(save, "migration.json", journal)
    reopened = make_store(save)
    with pytest.raises(PersistenceError, match="older than the last operation this save finish"):
        await reopened.append(make_memory("g3", owner_id="guard", tick=3))
    assert await ids(make_store(save)) == ["g0", "g1", "g2"]


async def _appended(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    # The ledger is longer than the batch leaves it.
    await store.append(make_memory("g3", owner_id="guard", tick=3))


async def _erased_and_appended(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    # As long as the batch leaves it, but the intent after the mark names its group commit.
    await store.erase("session", "guard", ["g0"])
    await store.append(make_memory("g3", owner_id="guard", tick=3))


async def _erased_and_batched_elsewhere(
    store: FileGameMemoryStore, make_memory: MemoryFactory
) -> None:
    # As long again, and written by a batch, but of a partition the old batch never wrote.
    await store.erase("session", "guard", ["g0", "g1"])
    batch = [make_memory(f"e{n}", owner_id="elder", tick=n) for n in (1, 2)]
    assert await store.append_many(batch) == [True, True]


async def _erased_and_batched_longer(
    store: FileGameMemoryStore, make_memory: MemoryFactory
) -> None:
    # As long again, the guard's, written by a batch: but the guard's log is longer.
    await store.erase("session", "guard", ["g0", "g1"])
    batch = [make_memory(f"g{n}", owner_id="guard", tick=n, text="x" * 900) for n in (3, 4)]
    assert await store.append_many(batch) == [True, True]


async def _erased(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    # Only an erase after it: the ledger and the log just shorter, what a kill could leave.
    await store.erase("session", "guard", ["g0"])


BOTH = (BATCH_TRACE, REWRITE_TRACE)
LATER: dict[str, tuple[Callable[[FileGameMemoryStore, MemoryFactory], Any], tuple[str, ...]]] = {
    # what happened after the batch, and the traces lost with it
    "appended": (_appended, BOTH),
    "erased and appended": (_erased_and_appended, BOTH),
    "erased and batched elsewhere": (_erased_and_batched_elsewhere, BOTH),
    "erased and batched longer": (_erased_and_batched_longer, BOTH),
    "erased, the batch trace lost": (_erased, (BATCH_TRACE,)),  # the erase's trace is newer
}


@pytest.mark.parametrize("later", sorted(LATER))
async def test_without_its_trace_an_old_batch_journal_is_refused_by_what_came_after(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    later: str,
) -> None:
    store, journal, _size = await guard_batch(make_store, make_memory, monkeypatch)
    save = store.directory
    happened, lost = LATER[later]
    await happened(store, make_memory)
    expected = await ids(store)
    await store.aclose()
    put_back(save, "migration.json", journal, without=lost)
    reopened = make_store(save)
    with pytest.raises(PersistenceError, match=r"migration\.json was not applied"):
        await reopened.append(make_memory("g9", owner_id="guard", tick=9))
    assert await ids(make_store(save)) == expected


@pytest.mark.parametrize("written", ["whole", "in part"])
async def test_a_batch_a_kill_interrupted_is_still_rolled_back_after_earlier_batches(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    written: str,
) -> None:
    store, _journal, _size = await guard_batch(make_store, make_memory, monkeypatch)
    save = store.directory
    size = log_path(save, "session", "guard").stat().st_size
    batch = [make_memory(f"b{n}", owner_id=o, tick=n) for n in range(4) for o in ("guard", "mira")]
    with monkeypatch.context() as patch:

        def killed(self: MigrationJournal) -> None:
            raise Stop("commit")

        patch.setattr(MigrationJournal, "commit", killed)
        with pytest.raises(Stop):
            await store.append_many(batch)
    assert (save / DATA / "migration.json").exists()
    if written == "in part":  # a kill mid-write: some intents and half a record
        with (save / DATA / "ledger.log").open("r+b") as ledger:
            ledger.truncate(5 * 128)
        with log_path(save, "session", "guard").open("r+b") as log:
            log.truncate(size + 40)
    reopened = make_store(save)
    assert await ids(reopened) == ["g0", "g1", "g2"]
    assert not (save / DATA / "migration.json").exists()
    assert await reopened.count() == 3
    assert (await reopened.check()).ok
    trace = json.loads((save / DATA / BATCH_TRACE).read_bytes())
    assert trace["generation"] == 2  # the rolled-back batch is finished too


async def test_an_interrupted_batch_of_an_earlier_release_is_still_rolled_back(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No trace in the save and a journal without the new fields: what a save last written
    # by an earlier release holds after a kill before a batch's commit.
    store = make_store()
    await store.append(make_memory("g0", owner_id="guard"))
    with monkeypatch.context() as patch:

        def killed(self: MigrationJournal) -> None:
            raise Stop("commit")

        patch.setattr(MigrationJournal, "commit", killed)
        with pytest.raises(Stop):
            await store.append_many([make_memory(f"b{n}", owner_id="guard") for n in range(3)])
    journal = save_data(store) / "migration.json"
    document = json.loads(journal.read_bytes())
    for field in ("generation", "ledger_records_after", "segment_limits"):
        document.pop(field, None)
    journal.write_text(json.dumps(document))
    reopened = make_store(store.directory)
    assert await ids(reopened) == ["g0"]
    assert (await reopened.check()).ok


# -- the erase journal ---------------------------------------------------------------------


async def guard_and_elder(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> FileGameMemoryStore:
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"old{number}", owner_id="guard", tick=number))
        await store.append(make_memory(f"e{number}", owner_id="elder", tick=number))
    return store


async def test_an_old_erase_journal_put_back_is_refused_and_the_new_memories_stay(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = await guard_and_elder(make_store, make_memory)
    save = store.directory
    assert await store.erase("session", "guard") == 3
    for number in range(3):
        await store.append(make_memory(f"new{number}", owner_id="guard", tick=10 + number))
    await store.aclose()
    old = {  # as an earlier release wrote it (the audit's reproduction)
        "format_version": 1,
        "operation": "erase",
        "phase": "copies",
        "session_hash": sha("session"),
        "owner_hash": sha("guard"),
        "memory_hashes": None,
        "segments": None,
        "retraction_segments": None,
    }
    put_back(save, "rewrite.json", json.dumps(old).encode())
    with pytest.raises(PersistenceError, match=r"rewrite\.json was not applied") as raised:
        await ids(make_store(save), "guard")
    assert "game-memory check --save-dir" in str(raised.value)
    with pytest.raises(PersistenceError, match=r"rewrite\.json was not applied"):
        await make_store(save).append(make_memory("new3", owner_id="guard", tick=13))
    report = await make_store(save).check()  # reported, not raised
    assert not report.ok and any("rewrite.json was not applied" in p for p in report.problems)
    repaired = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in repaired.repairs), repaired
    fixed = make_store(save)
    assert await ids(fixed, "guard") == ["new0", "new1", "new2"]
    assert await ids(fixed, "elder") == ["e0", "e1", "e2"]
    assert (await fixed.check()).ok


ERASES: dict[str, tuple[tuple[Any, ...], list[str], bool, tuple[str, ...]]] = {
    # what is erased; what the guard learns after it (the same id again, for a list), and
    # whether as one batch; the traces lost with the journal
    "owner": (("session", "guard"), ["new0", "new1", "new2"], False, BOTH),
    "listed": (("session", "guard", ["old1"]), ["old1"], False, BOTH),
    "session": (("session",), ["new0", "new1", "new2"], False, BOTH),
    "owner, then a batch, the erase's trace lost": (
        ("session", "guard"),
        ["new0", "new1"],
        True,
        (REWRITE_TRACE,),  # the batch's trace is newer
    ),
}


@pytest.mark.parametrize("case", sorted(ERASES))
async def test_without_its_trace_an_old_erase_journal_is_refused_by_what_came_after(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    store = await guard_and_elder(make_store, make_memory)
    save = store.directory
    arguments, learned, batched, lost = ERASES[case]
    with monkeypatch.context() as patch:
        kept = capture_journal(patch, RewriteJournal, "write", before=False)
        assert await store.erase(*arguments)
    memories = [
        make_memory(memory_id, owner_id="guard", tick=20 + number, text="learned again")
        for number, memory_id in enumerate(learned)
    ]
    if batched:
        assert await store.append_many(memories) == [True] * len(memories)
    for memory in [] if batched else memories:
        assert await store.append(memory)
    expected = await ids(store)
    await store.aclose()
    put_back(save, "rewrite.json", kept["journal"], without=lost)
    with pytest.raises(PersistenceError, match=r"rewrite\.json was not applied"):
        await make_store(save).append(make_memory("later", owner_id="guard", tick=30))
    # check reports it and check --fix sets it aside, as the message says, also when only
    # the save (no trace) tells it is old: check called it an erase to finish, and
    # --fix --accept-loss said the save was fine with the journal still there.
    report = await make_store(save).check()
    assert any("rewrite.json was not applied" in p for p in report.problems), report
    repaired = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in repaired.repairs), repaired
    assert not (save / DATA / "rewrite.json").exists()
    assert await ids(make_store(save)) == expected


def _stop_after_write(number: int) -> Callable[[pytest.MonkeyPatch], None]:
    def install(patch: pytest.MonkeyPatch) -> None:
        original = RewriteJournal.write
        calls = 0

        def write(self: RewriteJournal, rewrite: Any) -> None:
            nonlocal calls
            original(self, rewrite)
            calls += 1
            if calls == number:
                raise Stop("write")

        patch.setattr(RewriteJournal, "write", write)

    return install


def _stop_before_remove(patch: pytest.MonkeyPatch) -> None:
    def remove(self: RewriteJournal, generation: int = 0) -> None:
        raise Stop("remove")

    patch.setattr(RewriteJournal, "remove", remove)


STOPS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "after the journal": _stop_after_write(1),
    "after the copies": _stop_after_write(2),
    "after staging": _stop_after_write(3),
    "before the journal goes": _stop_before_remove,
}


@pytest.mark.parametrize("where", sorted(STOPS))
async def test_an_erase_a_kill_interrupted_is_still_finished_after_earlier_erases(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    store = await guard_and_elder(make_store, make_memory)
    save = store.directory
    assert await store.erase("session", "elder", ["e0"]) == 1  # a trace of generation 1
    with monkeypatch.context() as patch:
        STOPS[where](patch)
        with pytest.raises(Stop):
            await store.erase("session", "guard", ["old0", "old2"])
    assert (save / DATA / "rewrite.json").exists()
    reader = make_store(save)
    assert await ids(reader) == ["e1", "e2", "old1"]
    assert not (save / DATA / "rewrite.json").exists()
    assert (await reader.check()).ok
    assert json.loads((save / DATA / REWRITE_TRACE).read_bytes()) == {"generation": 2}


async def test_an_interrupted_erase_of_an_earlier_release_is_still_finished(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await guard_and_elder(make_store, make_memory)
    with monkeypatch.context() as patch:
        _stop_after_write(2)(patch)  # the copies removed, the files untouched
        with pytest.raises(Stop):
            await store.erase("session", "guard")
    journal = save_data(store) / "rewrite.json"
    document = json.loads(journal.read_bytes())
    for field in ("generation", "ledgers", "erased_intents"):
        document.pop(field, None)
    journal.write_text(json.dumps(document))
    reader = make_store(store.directory)
    assert await ids(reader) == ["e0", "e1", "e2"]
    assert (await reader.check()).ok


async def test_the_trace_of_an_erase_names_none_of_what_it_erased(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = await guard_and_elder(make_store, make_memory)
    save = store.directory
    assert await store.erase("session", "guard", ["old1"]) == 1
    trace = (save / DATA / REWRITE_TRACE).read_bytes()
    assert json.loads(trace) == {"generation": 1}
    assert sha("old1").encode() not in trace


async def test_an_unlocked_reader_racing_batches_never_takes_a_live_journal_for_an_old_one(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # Readers read the journal without the lock (a partition short of its intents): a
    # batch that commits, and the next that begins, while one looks must not be refused.
    store = make_store(maximum_file_bytes=1 << 20)
    await store.append(make_memory("g0", owner_id="guard"))
    engine = store._engine
    journal = MigrationJournal(save_data(store), engine.ledger)  # a reader's own view
    stop = asyncio.Event()

    async def batches() -> None:
        number = 1
        while not stop.is_set():
            batch = [make_memory(f"g{number + n}", owner_id="guard") for n in range(3)]
            await store.append_many(batch)
            number += 3

    async def reads() -> None:
        for _ in range(200):
            await asyncio.to_thread(journal.read)
        stop.set()

    await asyncio.gather(batches(), reads())


def save_data(store: FileGameMemoryStore) -> Path:
    """The data folder of a store's save."""
    return store.directory / DATA
