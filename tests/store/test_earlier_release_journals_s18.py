"""Journals an earlier release left in a save this release finished an operation in.

The player updates the game, rolls back to an older build and updates again. This release
leaves a trace of every journal it finishes (``rewrite.done.json``); an earlier release's
journal carries no generation. An erase that older build was killed in is committed (its
journal is the commit): it must be finished, never undone. Until December 2026 this
release refused such a journal outright as an old copy put back, and ``check --fix`` set it
aside and then gave the erased memories their ledger intents back: the erase was undone.
The journal is now judged by the save: finished where the save shows its rewrite under way
(staged files, or the ledger rewritten while the partition still holds the records), and
refused where it does not (an old copy put back after its rewrite finished).

The journals here are written as an earlier release writes them: this release's erase is
stopped at the named point and its journal stripped of what this release adds.

Also: a plain ``check`` names the batch its own open rolled back (it used to report the
save consistent, as if nothing had been there).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory import FileGameMemoryStore, PersistenceError
from game_memory.store import rewriting
from game_memory.store.journal import MigrationJournal
from game_memory.store.rewrite_journal import RewriteJournal

from .helpers import DATA, MemoryFactory, StoreFactory, session_folder

REWRITE = "rewrite.json"
TRACE = "rewrite.done.json"
ADDED_BY_THIS_RELEASE = ("generation", "ledgers", "erased_intents")


class Stop(Exception):
    """A simulated kill: the operation stops here."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def ids(store: FileGameMemoryStore, owner: str | None = None) -> list[str]:
    return sorted(m.memory_id for m in await store.enumerate("session", owner))


def journal_of(save: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((save / DATA / REWRITE).read_bytes())
    return document


def as_earlier_release(save: Path) -> dict[str, Any]:
    """Rewrite the save's journal as an earlier release wrote it (no generation, nothing
    to check it against); return it."""
    document = journal_of(save)
    for name in ADDED_BY_THIS_RELEASE:
        document.pop(name, None)
    (save / DATA / REWRITE).write_text(json.dumps(document))
    return document


def staged(save: Path) -> list[str]:
    return sorted(p.name for p in session_folder(save, "session").glob("*.new"))


def stop_at(name: str) -> Callable[[pytest.MonkeyPatch], None]:
    """Stop the rewrite on entering ``rewriting.<name>``."""

    def install(patch: pytest.MonkeyPatch) -> None:
        def stopped(*args: Any, **kwargs: Any) -> None:
            raise Stop(name)

        patch.setattr(rewriting, name, stopped)

    return install


def stop_before_switch_is_written(patch: pytest.MonkeyPatch) -> None:
    """Stop before the journal advances to ``switch``: files staged, ledgers rewritten."""
    original = RewriteJournal.write

    def write(self: RewriteJournal, rewrite: Any) -> None:
        if rewrite.phase == "switch":
            raise Stop("write")
        original(self, rewrite)

    patch.setattr(RewriteJournal, "write", write)


async def guard_and_elder(make_store: StoreFactory, make_memory: MemoryFactory) -> Path:
    """Guard and elder with three memories each, and a trace of this release (an erase of
    e0: ``rewrite.done.json`` records generation 1); return the save."""
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"old{number}", owner_id="guard", tick=number))
        await store.append(make_memory(f"e{number}", owner_id="elder", tick=number))
    assert await store.erase("session", "elder", ["e0"]) == 1
    assert json.loads((store.directory / DATA / TRACE).read_bytes()) == {"generation": 1}
    await store.aclose()
    return store.directory


async def interrupted(
    make_store: StoreFactory,
    save: Path,
    stop: Callable[[pytest.MonkeyPatch], None],
    arguments: tuple[Any, ...],
) -> None:
    """Run an erase that is stopped (a kill), then make its journal an earlier release's."""
    store = make_store(save)
    with pytest.MonkeyPatch.context() as patch:
        stop(patch)
        with pytest.raises(Stop):
            await store.erase(*arguments)
    await store.aclose()
    as_earlier_release(save)


LISTED = ("session", "guard", ["old0", "old2"])
INTERRUPTED: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], tuple[Any, ...], str, bool]] = {
    # where the older build was killed; what it erased; the journal's phase then, and
    # whether staged files are there
    "listed, at switch": (stop_at("_switch"), LISTED, "switch", True),
    "listed, files staged and ledgers rewritten": (
        stop_before_switch_is_written,
        LISTED,
        "files",
        True,
    ),
    "listed, files staged, ledgers not yet rewritten": (
        stop_at("_rewrite_ledgers"),
        LISTED,
        "files",
        True,
    ),
    "owner, ledgers rewritten, nothing staged": (
        stop_before_switch_is_written,
        ("session", "guard"),
        "files",
        False,
    ),
    "session, ledgers rewritten, folder not yet deleted": (
        stop_at("remove_tree"),
        ("session",),
        "files",
        False,
    ),
}
EXPECTED = {  # what the session holds once the erase is finished
    "listed": ["e1", "e2", "old1"],
    "owner": ["e1", "e2"],
    "session": [],
}


@pytest.mark.parametrize("case", sorted(INTERRUPTED))
async def test_an_erase_an_earlier_release_was_killed_in_is_finished_and_stays_erased(
    make_store: StoreFactory, make_memory: MemoryFactory, case: str
) -> None:
    save = await guard_and_elder(make_store, make_memory)
    stop, arguments, phase, with_staged = INTERRUPTED[case]
    await interrupted(make_store, save, stop, arguments)
    assert journal_of(save)["phase"] == phase
    assert "generation" not in journal_of(save)
    assert bool(staged(save)) == with_staged
    expected = EXPECTED[case.split(",")[0]]
    # check names it as what it is (committed, to finish), not as an old copy
    report = await make_store(save).check()
    assert any("an earlier release" in p and "only needs finishing" in p for p in report.problems)
    reader = make_store(save)
    assert await ids(reader) == expected  # the first read finishes it
    assert not (save / DATA / REWRITE).exists() and staged(save) == []
    # its trace records a generation newer than the one before, never 0
    assert json.loads((save / DATA / TRACE).read_bytes()) == {"generation": 2}
    assert (await reader.check()).ok
    fixed = await make_store(save).check(fix=True)
    assert fixed.ok and fixed.repairs == (), fixed
    again = make_store(save)
    assert await ids(again) == expected  # not brought back by the repair
    assert await again.count() == len(expected)


async def test_check_fix_finishes_such_an_erase_and_gives_back_no_intent(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # The audit's reproduction: the older build killed at the switch, then check --fix.
    save = await guard_and_elder(make_store, make_memory)
    await interrupted(make_store, save, stop_at("_switch"), LISTED)
    fixed = await make_store(save).check(fix=True)
    assert fixed.ok, fixed
    assert any("finished an erase of 2 memories" in line for line in fixed.repairs), fixed
    assert not any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert await ids(make_store(save)) == ["e1", "e2", "old1"]


async def test_a_crash_while_such_an_erase_is_finished_is_finished_by_the_next_open(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    save = await guard_and_elder(make_store, make_memory)
    await interrupted(make_store, save, stop_at("_rewrite_ledgers"), LISTED)
    finisher = make_store(save)
    with pytest.MonkeyPatch.context() as patch:
        stop_at("_switch")(patch)  # this release dies too, half way through finishing it
        with pytest.raises(Stop):
            await ids(finisher)
    await finisher.aclose()
    adopted = journal_of(save)  # rewritten as this release's, to be judged as one
    assert adopted["phase"] == "switch" and adopted["generation"] == 2
    assert "ledgers" in adopted and "erased_intents" in adopted
    reader = make_store(save)
    assert await ids(reader) == ["e1", "e2", "old1"]
    assert json.loads((save / DATA / TRACE).read_bytes()) == {"generation": 2}
    assert (await reader.check()).ok


# -- old copies put back stay refused ----------------------------------------------------------


def capture_at_switch(patch: pytest.MonkeyPatch, kept: dict[str, bytes]) -> None:
    """Keep the journal's bytes as the switch begins, as a backup tool would copy it."""
    original = rewriting._switch

    def switch(rewrite: Any, directory: Path) -> None:
        kept.setdefault("journal", (directory.parent / REWRITE).read_bytes())
        original(rewrite, directory)

    patch.setattr(rewriting, "_switch", switch)


async def _learned_again(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    # The erased id learned again: the ledger holds its intent, the log its record.
    await store.append(make_memory("old1", owner_id="guard", tick=20, text="learned again"))


async def _grown(store: FileGameMemoryStore, make_memory: MemoryFactory) -> None:
    # Not learned again, but the log grew past the segments the journal names: finishing
    # its switch would delete them.
    for number in range(12):
        text = f"later {number} " + "x" * 300
        await store.append(make_memory(f"later{number}", owner_id="guard", tick=30, text=text))


LATER: dict[str, Callable[[FileGameMemoryStore, MemoryFactory], Any]] = {
    "learned again": _learned_again,
    "grown": _grown,
}


@pytest.mark.parametrize("phase", ["copies", "files", "switch"])
@pytest.mark.parametrize("later", sorted(LATER))
async def test_an_old_copy_without_a_generation_put_back_after_its_erase_is_still_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, phase: str, later: str
) -> None:
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save, maximum_file_bytes=2048)
    kept: dict[str, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        capture_at_switch(patch, kept)
        assert await store.erase("session", "guard", ["old1"]) == 1
    await LATER[later](store, make_memory)
    expected = await ids(store)
    await store.aclose()
    if later == "grown":
        assert (session_folder(save, "session") / f"o-{sha('guard')}.2.log").exists()
    document = json.loads(kept["journal"])
    for name in ADDED_BY_THIS_RELEASE:
        document.pop(name, None)
    if phase != "switch":  # the copy was taken earlier in the erase
        document.update(phase=phase, segments=None, retraction_segments=None)
    (save / DATA / REWRITE).write_text(json.dumps(document))
    with pytest.raises(PersistenceError, match=r"rewrite\.json was not applied"):
        await ids(make_store(save, maximum_file_bytes=2048))
    report = await make_store(save, maximum_file_bytes=2048).check()
    assert any("shows none of its rewrite under way" in p for p in report.problems), report
    repaired = await make_store(save, maximum_file_bytes=2048).check(fix=True)
    assert any("moved rewrite.json" in line for line in repaired.repairs), repaired
    fixed = make_store(save, maximum_file_bytes=2048)
    assert await ids(fixed) == expected  # nothing learned since was erased
    assert (await fixed.check()).ok


# -- check --fix never un-erases what an erase journal it set aside names -------------------------


async def test_check_fix_finishes_the_erase_of_a_journal_it_sets_aside_rather_than_undo_it(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # A journal refused for any reason (here: a trace newer than its generation) whose
    # erase had already dropped the intents of what it erases, its records still there.
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save)
    with pytest.MonkeyPatch.context() as patch:
        stop_at("_switch")(patch)
        with pytest.raises(Stop):
            await store.erase(*LISTED)
    await store.aclose()
    (save / DATA / TRACE).write_text(json.dumps({"generation": 9}))
    fixed = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert any("finished the erase of 2 memories" in line for line in fixed.repairs), fixed
    assert fixed.ok, fixed
    reader = make_store(save)
    assert await ids(reader) == ["e1", "e2", "old1"]
    assert staged(save) == []
    assert (await reader.check(fix=True)).repairs == ()  # and no later --fix brings them back


async def test_check_fix_neither_erases_nor_gives_back_an_intent_where_the_journal_is_in_doubt(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # An old copy of an owner's erase put back after the owner learned again, and one of
    # the new memories lost its intent: the ledger still holds others the journal names,
    # so the journal may be an old copy and the memory one learned again. This check
    # --fix gives it no intent (the erase may have been committed), nor erases it.
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save)
    kept: dict[str, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        capture_at_switch(patch, kept)
        assert await store.erase("session", "guard") == 3
    for number in range(3):
        await store.append(make_memory(f"new{number}", owner_id="guard", tick=10 + number))
    await store.aclose()  # closed cleanly: no intent is reconciled at the next open
    damaging = make_store(save)
    assert await damaging.count() == 5
    engine = damaging._engine
    with engine.locked():  # an intent lost (damage, or a bug)
        rows = engine.ledger.records()
        drop = np.array(
            [engine.ledger.memory_hash(rows, n) == sha("new1") for n in range(rows.shape[0])]
        )
        assert drop.sum() == 1
        engine.ledger.rewrite_records(rows, drop)
    await damaging.aclose()
    document = json.loads(kept["journal"])
    for name in ADDED_BY_THIS_RELEASE:
        document.pop(name, None)
    (save / DATA / REWRITE).write_text(json.dumps(document))
    fixed = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert not any("finished the erase" in line for line in fixed.repairs), fixed
    assert any("check --fix gave them none" in p for p in fixed.problems), fixed
    assert await ids(make_store(save), "guard") == ["new0", "new1", "new2"]
    again = await make_store(save).check(fix=True)  # as its sentence says
    assert again.ok and any("added 1 missing ledger intent" in r for r in again.repairs), again


# -- a plain check names what opening the save rolled back ----------------------------------------


async def test_a_plain_check_names_the_batch_its_open_rolled_back(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    store = make_store()
    await store.append(make_memory("g0", owner_id="guard"))
    with pytest.MonkeyPatch.context() as patch:

        def killed(self: MigrationJournal) -> None:
            raise Stop("commit")

        patch.setattr(MigrationJournal, "commit", killed)
        with pytest.raises(Stop):
            await store.append_many([make_memory(f"b{n}", owner_id="guard") for n in range(3)])
    # (not closed: closing settles the save, as the next open does)
    assert (store.directory / DATA / "migration.json").exists()
    checker = make_store(store.directory)
    report = await checker.check()
    assert report.ok, report  # consistent now: the open rolled it back
    assert any(
        "rolled back an append_many batch that never committed (3 intents" in line
        and "when the save was opened" in line
        for line in report.repairs
    ), report
    assert (await checker.check()).repairs == ()  # reported once
    assert await ids(checker) == ["g0"]
