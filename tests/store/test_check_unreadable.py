"""What ``check`` cannot read is reported as such, never as loss; derived files are never
read, written or deleted through a link; a segment deleted from the middle of its series
is named, and the read's count is an upper bound.

Found by an audit (7 December 2026): one stray link in a session folder made ``check``
report every memory of the session lost (salvage advised) and the newest intent an append
``--fix`` drops; an unreadable log read as "records gone"; stamps were written through a
linked ``read`` folder outside the save; a middle segment deleted gave a read error
counting every memory after it as lost, without naming the file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from game_memory import PersistenceError
from game_memory.durable.names import identity_hash

from .helpers import DATA, MemoryFactory, StoreFactory, files_under, log_path, session_folder


async def saved(make_store: StoreFactory, make_memory: MemoryFactory, save: Path) -> None:
    """Two owners, three memories each; the newest intent is ``other``'s."""
    store = make_store(save)
    for number in range(3):
        await store.append(make_memory(f"a{number}", owner_id="owner", tick=number))
    for number in range(3):
        await store.append(make_memory(f"b{number}", owner_id="other", tick=number))
    await store.aclose()


def lost_or_pending(problems: tuple[str, ...]) -> list[str]:
    """The problems that claim loss, or an intent ``--fix`` would drop."""
    claims = ("lost or unreadable", "pending append", "drops it", "salvage")
    return [p for p in problems if any(claim in p for claim in claims)]


async def test_a_stray_link_in_a_session_folder_is_named_and_nothing_reads_as_lost(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await saved(make_store, make_memory, save)
    (session_folder(save, "session") / "notes").symlink_to(tmp_path)
    before = files_under(save)
    for fix, accept_loss in ((False, False), (True, False), (True, True)):
        report = await make_store(save).check(fix=fix, accept_loss=accept_loss)
        assert not report.ok
        assert any("notes: it is a symbolic link" in p for p in report.problems)
        assert lost_or_pending(report.problems) == [], report.problems
        assert (report.memories, report.ledger_entries) == (6, 6)
        assert report.repairs == ()
    assert files_under(save) == before  # nothing repaired, nothing salvaged


@pytest.mark.parametrize("hidden", ["link", "folder"])
async def test_an_owner_whose_log_cannot_be_read_is_unknown_and_its_intents_are_kept(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, hidden: str
) -> None:
    save = tmp_path / "save"
    await saved(make_store, make_memory, save)
    log = log_path(save, "session", "other")  # the owner of the newest intent
    moved = tmp_path / "elsewhere.log"
    shutil.move(log, moved)
    if hidden == "link":
        log.symlink_to(moved)
    else:
        log.mkdir()  # not a regular file
    for fix, accept_loss in ((False, False), (True, False), (True, True)):
        report = await make_store(save).check(fix=fix, accept_loss=accept_loss)
        owner = f"o-{identity_hash('other')[:12]}… was not checked"
        assert any(owner in p and "3 ledger intents are unknown" in p for p in report.problems)
        assert lost_or_pending(report.problems) == [], report.problems
        assert report.memories == 3  # the other owner's, checked as usual
        assert report.repairs == ()
    # The newest intent was not dropped: with the log back, the save checks whole again.
    if hidden == "link":
        log.unlink()
    else:
        log.rmdir()
    shutil.move(moved, log)
    report = await make_store(save).check()
    assert report.ok and (report.memories, report.ledger_entries) == (6, 6), report.problems


async def test_a_linked_read_folder_is_never_read_written_or_emptied_through(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    await store.append_many(
        [make_memory(f"m{n}", text=f"the well number {n}", tick=n) for n in range(300)]
    )
    await store.aclose()
    assert len(await make_store(save).enumerate("session", "owner")) == 300  # writes read files
    read = save / DATA / "read"
    outside = tmp_path / "outside"
    shutil.move(read, outside)
    read.symlink_to(outside)
    # A planted file behind the link, named as the session's read folder holds them.
    session = f"s-{identity_hash('session')}"
    (outside / session / f"o-{identity_hash('owner')}.keep").write_bytes(b"not the save's")
    before = files_under(outside)

    store = make_store(save)
    assert len(await store.enumerate("session", "owner")) == 300
    await store.append(make_memory("late", text="the well again", tick=400))
    await store.aclose()
    assert files_under(outside) == before  # nothing read through it was stamped or rewritten

    report = await make_store(save).check()
    assert report.memories == 301 and lost_or_pending(report.problems) == []
    assert any("read: it is a symbolic link" in p for p in report.problems)

    store = make_store(save)
    assert await store.erase("session", "owner") == 301  # removes the session's read files
    await store.aclose()
    assert files_under(outside) == before  # the target is untouched, the link is gone
    assert not read.is_symlink()


async def test_a_segment_deleted_from_the_middle_is_named_and_the_count_is_a_bound(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = make_store(save, maximum_file_bytes=1_024)
    for number in range(12):
        await store.append(make_memory(f"m{number}", text=f"event {number} " * 20, tick=number))
    await store.aclose()
    segments = sorted(session_folder(save, "session").glob("o-*.log"))
    assert len(segments) >= 4
    middle = log_path(save, "session", "owner", 2)
    middle.unlink()
    with pytest.raises(PersistenceError) as raised:
        await make_store(save, maximum_file_bytes=1_024).enumerate("session", "owner")
    message = str(raised.value)
    assert f"{middle.name} is missing from the middle of its series" in message
    assert "lost up to " in message
    report = await make_store(save, maximum_file_bytes=1_024).check()
    assert any(f"{middle.name} is missing" in p for p in report.problems)
