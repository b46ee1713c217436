"""Journals an earlier release left in a save this release finished an operation in.

The player updates the game, rolls back to an older build and updates again. This release
leaves a trace of every journal it finishes (``rewrite.done.json``); an earlier release's
journal carries no generation, so in a save with a trace it is either an old copy put back
(a sync or backup tool) or the journal of an erase that older build was killed in, and
nothing in the save tells the two apart. For a while (commit fe8deb6) such a journal was
finished where the save seemed to show its rewrite under way (staged ``*.new`` files, or
the ledger without its intents while the partition held the records); an adversarial
review then showed that an old copy put back with its staged files, or with any file of a
staged name, deleted log segments written since and erased memories learned again, and
that ``check --fix`` erased a memory learned again. The safe side is taken again: the
journal is refused. ``check --fix`` sets it aside with the staged files of its partition,
gives no intent to the memories it names that have none (an erase may have been
committed), erases nothing, and names them; erasing them again, or a second ``check
--fix`` (which gives them their intents), settles them. Nothing acknowledged is lost.

The journals here are written as an earlier release writes them: this release's erase is
stopped at the named point and its journal stripped of what this release adds. The
review's probes (p1 to p5) are reproduced at the end.

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

from game_memory import FileGameMemoryStore, GameMoment, PersistenceError
from game_memory.store import rewriting
from game_memory.store.journal import MigrationJournal
from game_memory.store.rewrite_journal import RewriteJournal

from .helpers import DATA, MemoryFactory, StoreFactory, files_under, log_path, session_folder

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
ALL = ["e1", "e2", "old0", "old1", "old2"]  # the session before the interrupted erase
WITHHELD = {  # per case: what has no intent once the ledger was rewritten, per owner
    "listed, at switch": {"guard": 2},
    "listed, files staged and ledgers rewritten": {"guard": 2},
    "listed, files staged, ledgers not yet rewritten": {},
    "owner, ledgers rewritten, nothing staged": {"guard": 3},
    "session, ledgers rewritten, folder not yet deleted": {"elder": 2, "guard": 3},
}
REFUSED = r"rewrite\.json was not applied: it carries no generation"


def set_aside(save: Path) -> list[str]:
    """Every file ``check --fix`` moved into ``damaged/``."""
    return sorted(path.name for path in (save / DATA / "damaged").glob("*/*"))


def withheld_counts(problems: tuple[str, ...]) -> dict[str, int]:
    """Per owner, how many memories a problem says got no intent (the erase journal set
    aside names them)."""
    counts: dict[str, int] = {}
    for problem in problems:
        if "the erase journal check --fix set aside names" not in problem:
            continue
        assert "Erase " in problem and "check --fix again gives" in problem, problem
        owner = problem.split("owner '", 1)[1].split("'", 1)[0]
        counts[owner] = int(problem.split(": ", 1)[1].split(" ", 1)[0])
    return counts


@pytest.mark.parametrize("case", sorted(INTERRUPTED))
async def test_an_erase_an_earlier_release_was_killed_in_is_refused_and_nothing_is_lost(
    make_store: StoreFactory, make_memory: MemoryFactory, case: str
) -> None:
    save = await guard_and_elder(make_store, make_memory)
    stop, arguments, phase, with_staged = INTERRUPTED[case]
    await interrupted(make_store, save, stop, arguments)
    assert journal_of(save)["phase"] == phase
    assert "generation" not in journal_of(save)
    left_staged = staged(save)
    assert bool(left_staged) == with_staged
    # Refused by every read and by check, as an old copy would be (they look the same).
    with pytest.raises(PersistenceError, match=REFUSED):
        await ids(make_store(save))
    report = await make_store(save).check()
    assert len(report.problems) == 1 and "carries no generation" in report.problems[0], report
    # check --fix sets it aside with its staged files, and gives back no intent (the erase
    # may have been committed) but erases nothing: it names what it withheld.
    fixed = await make_store(save).check(fix=True)
    moved = [line for line in fixed.repairs if line.startswith("moved rewrite.json")]
    assert len(moved) == 1 and moved[0].endswith("erase it again"), fixed
    assert ("staged file" in moved[0]) == with_staged, fixed
    assert staged(save) == [] and not (save / DATA / REWRITE).exists()
    prefix = f"s-{sha('session')}."
    assert set_aside(save) == sorted([REWRITE, *(prefix + name for name in left_staged)])
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert withheld_counts(fixed.problems) == WITHHELD[case], fixed
    assert fixed.ok == (not WITHHELD[case]), fixed
    assert await ids(make_store(save)) == ALL  # nothing was erased, nothing lost
    # As its sentence says: check --fix again gives them their intents.
    again = await make_store(save).check(fix=True)
    assert again.ok, again
    count = sum(WITHHELD[case].values())
    added = [line for line in again.repairs if "missing ledger intent" in line]
    assert added == ([f"added {count} missing ledger intents"] if count else []), again
    settled = make_store(save)
    assert await ids(settled) == ALL and await settled.count() == len(ALL)
    assert (await settled.check(fix=True)).repairs == ()


async def test_what_such_an_erase_named_can_be_erased_again(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # The other way out its sentence names: the memories were erased, so erase them again.
    save = await guard_and_elder(make_store, make_memory)
    await interrupted(make_store, save, stop_at("_switch"), LISTED)
    fixed = await make_store(save).check(fix=True)
    assert withheld_counts(fixed.problems) == {"guard": 2}, fixed
    store = make_store(save)
    assert await store.erase(*LISTED) == 2
    assert await ids(store) == ["e1", "e2", "old1"]
    report = await store.check(fix=True)
    assert report.ok and report.repairs == (), report  # no intent comes back


async def test_a_journal_of_this_release_refused_after_its_ledger_rewrite_is_not_finished(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # A journal refused for any reason (here: a trace newer than its generation) whose
    # erase had already dropped the intents of what it erases, its records still there.
    # check --fix used to finish that erase; it may as well be an old copy, and a memory
    # named by it and without an intent one learned again: nothing is erased.
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save)
    with pytest.MonkeyPatch.context() as patch:
        stop_at("_switch")(patch)
        with pytest.raises(Stop):
            await store.erase(*LISTED)
    await store.aclose()
    (save / DATA / TRACE).write_text(json.dumps({"generation": 9}))
    fixed = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line and "staged file" in line for line in fixed.repairs)
    assert not any(line.startswith("finished") for line in fixed.repairs), fixed
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert withheld_counts(fixed.problems) == {"guard": 2}, fixed
    assert await ids(make_store(save)) == ALL
    assert staged(save) == []
    again = await make_store(save).check(fix=True)
    assert again.ok and "added 2 missing ledger intents" in again.repairs, again


# -- old copies put back stay refused ----------------------------------------------------------


def capture_at_switch(patch: pytest.MonkeyPatch, kept: dict[str, bytes]) -> None:
    """Keep the journal's bytes as the switch begins, and the staged files then (each as
    ``staged:<name>``), as a backup tool would copy them."""
    original = rewriting._switch

    def switch(rewrite: Any, directory: Path) -> None:
        if "journal" not in kept:
            kept["journal"] = (directory.parent / REWRITE).read_bytes()
            for path in directory.glob("*.new"):
                kept[f"staged:{path.name}"] = path.read_bytes()
        original(rewrite, directory)

    patch.setattr(rewriting, "_switch", switch)


def put_back(save: Path, kept: dict[str, bytes], staged_files: str, **changes: Any) -> list[str]:
    """Put the kept journal back as an earlier release wrote it (with ``changes``), and
    with it ``staged_files``: "none", "put back" (the staged files kept with it: a sync tool
    that restores deleted files) or "stray pack" (an empty ``p-9.pack.new``, a name of no
    owner's). Returns the staged names put back."""
    document = json.loads(kept["journal"])
    for name in ADDED_BY_THIS_RELEASE:
        document.pop(name, None)
    document.update(changes)
    (save / DATA / REWRITE).write_text(json.dumps(document))
    folder = session_folder(save, "session")
    if staged_files == "put back":
        for key, data in kept.items():
            if key.startswith("staged:"):
                (folder / key.removeprefix("staged:")).write_bytes(data)
    elif staged_files == "stray pack":
        (folder / "p-9.pack.new").write_bytes(b"")
    names = staged(save)
    assert bool(names) == (staged_files != "none")
    return names


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
OLD_COPIES = [
    # (what came later, the phase the copy names, what staged files came back with it):
    # without staged files at every phase, then the review's probes p1 (grown, at switch,
    # its staged segment put back), p2 (learned again, at files, put back) and p2b (a stray
    # empty staged pack), at both phases a staged file could once make it look under way.
    *[(later, phase, "none") for later in sorted(LATER) for phase in ("copies", "files", "switch")],
    *[
        (later, phase, staged_files)
        for later in sorted(LATER)
        for phase in ("files", "switch")
        for staged_files in ("put back", "stray pack")
    ],
]


@pytest.mark.parametrize(("later", "phase", "staged_files"), OLD_COPIES)
async def test_an_old_copy_without_a_generation_put_back_after_its_erase_is_still_refused(
    make_store: StoreFactory, make_memory: MemoryFactory, later: str, phase: str, staged_files: str
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
        assert (session_folder(save, "session") / f"o-{sha('guard')}.4.log").exists()
    partition = files_under(session_folder(save, "session"))
    changes = {} if phase == "switch" else {"phase": phase}
    if phase != "switch":  # the copy was taken earlier in the erase
        changes.update(segments=None, retraction_segments=None)
    names = put_back(save, kept, staged_files, **changes)
    with pytest.raises(PersistenceError, match=REFUSED):
        await ids(make_store(save, maximum_file_bytes=2048))
    report = await make_store(save, maximum_file_bytes=2048).check()
    assert any("carries no generation" in p for p in report.problems), report
    repaired = await make_store(save, maximum_file_bytes=2048).check(fix=True)
    assert repaired.ok, repaired  # one check --fix: no loop, nothing withheld
    moved = [line for line in repaired.repairs if line.startswith("moved rewrite.json")]
    assert len(moved) == 1 and ("staged file" in moved[0]) == bool(names), repaired
    assert staged(save) == []  # set aside: nothing later can switch them in
    assert files_under(session_folder(save, "session")) == partition  # not a byte changed
    fixed = make_store(save, maximum_file_bytes=2048)
    assert await ids(fixed) == expected  # nothing learned since was erased
    assert (await fixed.check()).ok


async def test_check_fix_gives_no_intent_to_what_a_journal_in_doubt_names(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # An old copy of an owner's erase put back after the owner learned again, and one of
    # the new memories lost its intent: the journal may be an old copy and the memory one
    # learned again, or the erase committed. This check --fix gives it no intent, nor
    # erases it.
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
    put_back(save, kept, "none")
    fixed = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert not any("missing ledger intent" in line for line in fixed.repairs), fixed
    assert not any(line.startswith("finished") for line in fixed.repairs), fixed
    assert withheld_counts(fixed.problems) == {"guard": 1}, fixed
    assert any("check --fix gave it none and erased nothing" in p for p in fixed.problems)
    assert await ids(make_store(save), "guard") == ["new0", "new1", "new2"]
    again = await make_store(save).check(fix=True)  # as its sentence says
    assert again.ok and any("added 1 missing ledger intent" in r for r in again.repairs), again


# -- the review's other probes ----------------------------------------------------------------


async def test_p3_an_old_compaction_journal_and_its_staged_file_put_back_delete_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # A compaction at its switch (a redundant retraction dropped, so only the retraction
    # log is staged), copied with its staged file; the owner then grew to five segments
    # and forgot another memory. Finishing the copy deleted every segment past its count.
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save, maximum_file_bytes=2048)
    await store.forget("session", "guard", "old0", GameMoment(timeline_id="world", tick=10))
    await store.forget("session", "guard", "old0", GameMoment(timeline_id="world", tick=5))
    kept: dict[str, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        capture_at_switch(patch, kept)
        assert (await store.compact()).partitions_rewritten >= 1
    assert json.loads(kept["journal"])["operation"] == "compact"
    assert [key for key in kept if key.startswith("staged:")] == [
        f"staged:r-{sha('guard')}.log.new"
    ]
    await _grown(store, make_memory)
    await store.forget("session", "guard", "old1", GameMoment(timeline_id="world", tick=40))
    expected = await ids(store)
    await store.aclose()
    partition = files_under(session_folder(save, "session"))
    assert f"o-{sha('guard')}.4.log" in partition
    put_back(save, kept, "put back")
    with pytest.raises(PersistenceError, match=REFUSED):
        await ids(make_store(save, maximum_file_bytes=2048))
    fixed = await make_store(save, maximum_file_bytes=2048).check(fix=True)
    assert fixed.ok and any("1 staged file" in line for line in fixed.repairs), fixed
    assert files_under(session_folder(save, "session")) == partition
    reader = make_store(save, maximum_file_bytes=2048)
    assert await ids(reader) == expected
    assert (await reader.check()).ok  # every retraction is there too


async def test_p4_an_old_journal_beside_a_damaged_partition_leaves_the_repairs_working(
    make_store: StoreFactory, make_memory: MemoryFactory
) -> None:
    # An old journal of the guard's erase (no generation, at files, nothing staged) and
    # one flipped bit in another guard record: check --fix failed on the damage, in a
    # loop ("run 'game-memory check' and salvage the save"), and so did every read.
    save = await guard_and_elder(make_store, make_memory)
    store = make_store(save)
    kept: dict[str, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        capture_at_switch(patch, kept)
        assert await store.erase("session", "guard", ["old1"]) == 1
    await store.append(make_memory("old3", owner_id="guard", tick=3, text="a rare word"))
    await store.aclose()
    log = log_path(save, "session", "guard")
    data = bytearray(log.read_bytes())
    data[data.index(b"a rare word")] ^= 0x20
    log.write_bytes(bytes(data))
    put_back(save, kept, "none", phase="files", segments=None, retraction_segments=None)
    report = await make_store(save).check()
    assert len(report.problems) == 1 and "carries no generation" in report.problems[0], report
    fixed = await make_store(save).check(fix=True)  # a report, not an error
    assert any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert any("1 acknowledged memory is lost or unreadable" in p for p in fixed.problems)
    assert any("check --fix --accept-loss" in p for p in fixed.problems), fixed
    other = make_store(save)  # the journal no longer stops the rest of the save
    await other.append(make_memory("e9", owner_id="elder", tick=9))
    assert await ids(other, "elder") == ["e1", "e2", "e9"]
    salvaged = await make_store(save).check(fix=True, accept_loss=True)
    assert salvaged.ok, salvaged
    assert await ids(make_store(save), "guard") == ["old0", "old2"]  # only the damaged one


P5 = {
    # the copy put back with the ledger as the erase left it: this release's (at switch,
    # its generation kept: the trace refuses it), or as an earlier release wrote it (at
    # files, no generation), which the first read used to finish, erasing the new old1
    "this release's": {},
    "an earlier release's": {"phase": "files", "segments": None, "retraction_segments": None},
}


@pytest.mark.parametrize("variant", sorted(P5))
async def test_p5_a_memory_learned_again_survives_an_old_journal_and_ledger_put_back(
    make_store: StoreFactory, make_memory: MemoryFactory, variant: str
) -> None:
    store = make_store()
    for number in range(3):
        await store.append(make_memory(f"old{number}", owner_id="guard", tick=number))
    kept: dict[str, bytes] = {}
    with pytest.MonkeyPatch.context() as patch:
        capture_at_switch(patch, kept)
        assert await store.erase("session", "guard", ["old1"]) == 1
    save = store.directory
    ledger = (save / DATA / "ledger.log").read_bytes()
    await store.append(make_memory("new0", owner_id="guard", tick=8))
    await store.append(make_memory("old1", owner_id="guard", tick=9, text="learned again"))
    await store.aclose()
    (save / DATA / "ledger.log").write_bytes(ledger)  # the backup tool's two files
    if variant == "this release's":
        (save / DATA / REWRITE).write_bytes(kept["journal"])
    else:
        put_back(save, kept, "none", **P5[variant])
    with pytest.raises(PersistenceError, match=r"rewrite\.json was not applied"):
        await ids(make_store(save))
    fixed = await make_store(save).check(fix=True)
    assert any("moved rewrite.json" in line for line in fixed.repairs), fixed
    assert "added 1 missing ledger intent" in fixed.repairs, fixed  # new0's
    assert not any(line.startswith("finished") for line in fixed.repairs), fixed
    assert withheld_counts(fixed.problems) == {"guard": 1}, fixed  # old1, named by it
    reader = make_store(save)
    assert await ids(reader) == ["new0", "old0", "old1", "old2"]
    learned = [m for m in await reader.enumerate("session", "guard") if m.memory_id == "old1"]
    assert learned[0].searchable_text == "learned again"
    again = await make_store(save).check(fix=True)
    assert again.ok and "added 1 missing ledger intent" in again.repairs, again
    assert (await make_store(save).check()).ok
    assert await ids(make_store(save)) == ["new0", "old0", "old1", "old2"]


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
