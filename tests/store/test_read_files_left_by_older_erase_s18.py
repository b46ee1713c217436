"""Read files of a partition an older build erased are removed, never stamped.

A build that predates read files erases an NPC by deleting its records and ledger intents
and leaves ``read/s-<session>/o-<owner>*.read`` (and their stamps) behind: they hold the
erased memories' ids, hashes and tokenized text. No load replaces them (the partition is
never read again), so ``compact``, and an erase of that owner or session, must remove them,
and no load may stamp them (release audit, finding 2).

The leftovers are built directly: the erase is done by this build, and the read files it
removed are put back as they were, which is what an older build's erase leaves.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore
from game_memory.durable.names import identity_hash
from game_memory.store import read_files as read_file_module
from game_memory.store import read_path

from .helpers import DATA, MemoryFactory, StoreFactory, write_legacy

COUNT = 24  # above the patched LAZY_MINIMUM: every partition gets a read file
SECRET = "thief"  # a word only the erased NPC's memories hold
MIRA = f"the {SECRET} took a purse"
ANNA = identity_hash("anna")


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read files for partitions of a few dozen memories, stamped once a few ms old (the
    defaults are 128 memories and 2 s)."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)
    monkeypatch.setattr(read_file_module, "SETTLED_NS", 20_000_000)


def read_session(save: Path, session_id: str = "session") -> Path:
    return save / DATA / "read" / f"s-{identity_hash(session_id)}"


def owner_files(save: Path, owner_id: str, session_id: str = "session") -> list[Path]:
    """Every read file of one owner (parts, stamps, temporary files)."""
    return sorted(read_session(save, session_id).glob(f"o-{identity_hash(owner_id)}.*"))


def parts(save: Path, owner_id: str) -> list[Path]:
    """The parts of one owner's read-file chain in ``session`` (not their stamps)."""
    return [path for path in owner_files(save, owner_id) if path.suffix == ".read"]


async def fill(store: FileGameMemoryStore, make_memory: MemoryFactory, session: str) -> None:
    for number in range(COUNT):
        for owner, text in (("anna", "a quiet harvest"), ("mira", MIRA)):
            memory = make_memory(
                f"{owner}-{number}", session_id=session, owner_id=owner, tick=number, text=text
            )
            await store.append(memory)


async def erased_by_an_older_build(
    make_store: StoreFactory, make_memory: MemoryFactory, save: Path, tmp_path: Path
) -> list[Path]:
    """A save of two NPCs both read (read files written), then ``mira`` erased as a build
    that predates read files does: records and intents gone, read files left, fresh and
    unstamped (then old enough to be stamped by a load). Returns mira's read files.

    ``anna``'s memories are migrated documents, all in a pack (no log segment): a
    partition held in packs only, whose read file a load still stamps."""
    for number in range(COUNT):
        write_legacy(save, make_memory(f"anna-{number}", owner_id="anna", tick=number))
    store = make_store()  # migrates anna's documents into a pack
    for number in range(COUNT):
        memory = make_memory(f"mira-{number}", owner_id="mira", tick=number, text=MIRA)
        await store.append(memory)
    await store.aclose()
    store = make_store()
    for owner in ("anna", "mira"):  # read, then persisted
        assert len(await store.enumerate("session", owner)) == COUNT
    await store.aclose()
    assert not (save / DATA / f"s-{identity_hash('session')}" / f"o-{ANNA}.log").exists()
    kept = tmp_path / "kept"
    shutil.copytree(read_session(save), kept)
    store = make_store()
    assert await store.erase("session", "mira") == COUNT
    await store.aclose()
    mira = f"o-{identity_hash('mira')}."
    for path in kept.iterdir():
        target = read_session(save) / path.name
        if path.name.startswith(mira) and not path.name.endswith(".verified"):
            target.write_bytes(path.read_bytes())  # a fresh file: no stamp vouches for it
    for path in owner_files(save, "anna"):  # anna's too: unstamped and fresh
        if path.suffix == ".verified":
            path.unlink()
        else:
            path.write_bytes(path.read_bytes())
    left = owner_files(save, "mira")
    assert left and any(SECRET.encode() in path.read_bytes() for path in left)
    time.sleep(0.05)  # older than the patched SETTLED_NS: a load would stamp it
    return left


async def test_a_load_never_stamps_the_read_file_of_a_partition_with_no_records(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    left = await erased_by_an_older_build(make_store, make_memory, save, tmp_path)
    store = make_store()
    assert await store.enumerate("session", "mira") == []
    assert len(await store.enumerate("session", "anna")) == COUNT
    await store.aclose()  # the read-file thread's stamps are all written by now
    assert not [path for path in owner_files(save, "mira") if path.suffix == ".verified"]
    assert all(path.exists() for path in left)  # a load removes nothing (compact does)
    # A partition held in packs only (no log segment) has records: its file is stamped.
    assert read_file_module.stamp_path(read_session(save) / f"o-{ANNA}.read").exists()


async def test_compact_removes_the_read_files_of_a_partition_with_no_records(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    left = await erased_by_an_older_build(make_store, make_memory, save, tmp_path)
    anna = parts(save, "anna")
    assert anna
    held = {identity_hash("session"): {ANNA}}  # what a check would list before it repairs
    assert read_file_module.unheld_read_files(save / DATA, held) == left
    store = make_store()
    report = await store.compact()
    assert owner_files(save, "mira") == []
    assert report.files_removed >= len(left)
    assert parts(save, "anna") == anna  # a partition the save holds keeps its own
    assert len(await store.enumerate("session", "anna")) == COUNT
    assert (await store.check()).ok
    again = await store.compact()
    assert again.files_removed == 0


async def test_an_erase_of_an_owner_already_erased_removes_its_read_files(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await erased_by_an_older_build(make_store, make_memory, save, tmp_path)
    anna = parts(save, "anna")
    store = make_store()
    assert await store.erase("session", "mira") == 0
    assert owner_files(save, "mira") == []
    assert anna and parts(save, "anna") == anna


async def test_an_erase_of_a_session_already_erased_removes_its_read_files(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store()
    await fill(store, make_memory, "slot")
    assert len(await store.enumerate("slot", "mira")) == COUNT
    await store.aclose()
    kept = tmp_path / "kept"
    shutil.copytree(read_session(save, "slot"), kept)
    assert any(kept.iterdir())
    store = make_store()
    assert await store.erase("slot") == 2 * COUNT
    shutil.copytree(kept, read_session(save, "slot"), dirs_exist_ok=True)  # an older build's
    assert await store.erase("slot") == 0
    assert not list(read_session(save, "slot").iterdir())


async def test_compact_removes_the_read_folder_of_a_session_the_save_no_longer_holds(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store()
    await fill(store, make_memory, "slot")
    await fill(store, make_memory, "session")
    await store.aclose()
    store = make_store()
    for session in ("slot", "session"):
        assert len(await store.enumerate(session, "mira")) == COUNT
    await store.aclose()
    kept = tmp_path / "kept"
    shutil.copytree(read_session(save, "slot"), kept)
    store = make_store()
    assert await store.erase("slot") == 2 * COUNT
    shutil.rmtree(read_session(save, "slot"), ignore_errors=True)
    shutil.copytree(kept, read_session(save, "slot"))  # what an older build's erase left
    foreign = read_session(save, "slot").parent / "notes.txt"
    foreign.write_text("not a read file")
    held = owner_files(save, "mira", "session")
    report = await store.compact()
    assert not read_session(save, "slot").exists()
    assert report.files_removed >= len(list(kept.iterdir()))
    assert owner_files(save, "mira", "session") == held  # a session the save holds: kept
    assert foreign.exists()  # not a read file: never touched


async def test_check_names_the_read_files_of_a_partition_with_no_records_and_fix_removes_them(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    left = await erased_by_an_older_build(make_store, make_memory, save, tmp_path)
    store = make_store()
    report = await store.check()
    assert not report.ok
    named = [problem for problem in report.problems if "read file" in problem]
    assert len(named) == 1
    assert named[0].startswith(f"{len(left)} read file")
    assert "of NPCs the save no longer holds" in named[0]
    assert named[0].endswith("check --fix or compact removes them")
    assert all(path.exists() for path in left)  # a plain check removes nothing
    fixed = await store.check(fix=True)
    assert fixed.ok, fixed.problems
    assert any(f"removed {len(left)} read file" in repair for repair in fixed.repairs)
    assert owner_files(save, "mira") == []
    assert parts(save, "anna")  # a partition the save holds keeps its own
    assert len(await store.enumerate("session", "anna")) == COUNT
    assert (await store.check()).ok
    await store.aclose()


# -- a check never calls an NPC the save holds "no longer held" (journal review, findings 4, 5)


def flip_a_bit(save: Path, session_id: str, owner_id: str, text: str) -> None:
    """Damage one record of an owner's log: one bit of ``text`` in it."""
    log = save / DATA / f"s-{identity_hash(session_id)}" / f"o-{identity_hash(owner_id)}.log"
    data = bytearray(log.read_bytes())
    data[data.rindex(text.encode())] ^= 0x20
    log.write_bytes(bytes(data))


def every_read_file(save: Path) -> list[Path]:
    return sorted(path for path in (save / DATA / "read").rglob("*.read") if path.is_file())


async def test_read_files_of_npcs_held_by_intents_alone_are_neither_reported_nor_removed(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # mira's log in "session" and the whole "slot" folder are lost: the ledger still holds
    # their intents (the check reports those memories as lost), so the save holds both
    # NPCs. The newest intent's partition (anna's) is damaged too, which stopped check
    # --fix's recovery before it refreshed the intents. A plain check called them NPCs the
    # save no longer holds, and check --fix deleted their read files.
    save = tmp_path / "save"
    store = make_store()
    for owner, session in (("mira", "session"), ("mira", "slot"), ("anna", "session")):
        await store.append_many(
            [
                make_memory(f"{owner}-{n}", session_id=session, owner_id=owner, tick=n, text=MIRA)
                for n in range(COUNT)
            ]
        )
    await store.append(make_memory("anna-last", owner_id="anna", tick=99, text="a rare word"))
    for owner, session in (("mira", "session"), ("mira", "slot"), ("anna", "session")):
        assert len(await store.enumerate(session, owner)) >= COUNT
    await store.aclose()
    read = every_read_file(save)
    assert len(read) == 3
    (save / DATA / f"s-{identity_hash('session')}" / f"o-{identity_hash('mira')}.log").unlink()
    shutil.rmtree(save / DATA / f"s-{identity_hash('slot')}")
    flip_a_bit(save, "session", "anna", "a rare word")
    report = await make_store().check()
    assert any("acknowledged memories are lost" in p for p in report.problems), report
    assert not any("read file" in p for p in report.problems), report
    fixed = await make_store().check(fix=True)
    assert not any("read file" in line for line in fixed.repairs + fixed.problems), fixed
    assert every_read_file(save) == read


async def test_check_fix_removes_no_read_file_while_the_save_is_damaged(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # Read files the save really no longer holds (mira's, left by an older build's erase),
    # in a save with a damaged record elsewhere: check --fix only names them until the
    # damage is repaired (derived files may be all that is left of memories it lost).
    save = tmp_path / "save"
    left = await erased_by_an_older_build(make_store, make_memory, save, tmp_path)
    store = make_store()
    await store.append(make_memory("bard-0", owner_id="bard", text="a rare word"))
    await store.aclose()
    flip_a_bit(save, "session", "bard", "a rare word")
    for accept_loss in (False, True):
        fixed = await make_store().check(fix=True, accept_loss=accept_loss)
        named = [problem for problem in fixed.problems if "read file" in problem]
        assert len(named) == 1 and named[0].startswith(f"{len(left)} read file"), fixed
        assert named[0].endswith("(it removes none from a damaged save)"), fixed
        assert not any("read file" in line for line in fixed.repairs), fixed
        assert all(path.exists() for path in left)
    repaired = await make_store().check(fix=True)  # salvaged above: now it removes them
    assert repaired.ok and any(f"removed {len(left)} read file" in r for r in repaired.repairs)
    assert owner_files(save, "mira") == []


async def test_a_folder_named_like_a_read_file_is_not_reported_as_one(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # check --fix and compact never remove a folder (this module writes none), so a check
    # that counted one reported it forever, with a repair that did nothing.
    save = tmp_path / "save"
    store = make_store()
    await fill(store, make_memory, "session")
    assert len(await store.enumerate("session", "anna")) == COUNT
    await store.aclose()
    folder = read_session(save) / f"o-{identity_hash('ghost')}.read"
    folder.mkdir(parents=True)
    held = {identity_hash("session"): {ANNA, identity_hash("mira")}}
    assert read_file_module.unheld_read_files(save / DATA, held) == []
    store = make_store()
    assert (await store.check()).ok
    assert (await store.check(fix=True)).repairs == ()
    assert (await store.compact()).files_removed == 0
    assert folder.is_dir()
