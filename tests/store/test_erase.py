"""The file store's erase: bytes gone for good, copies included, whole or not at all.

What every backend must do is in the conformance suite; here is the file store's own: the
rewritten segments and packs, the ledgers, the legacy backups and the damaged files set
aside, an erase interrupted at each step (finished by the next reader or writer, never
half visible), readers racing an erase, and a damaged partition refusing to be erased.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    InvalidArgumentError,
    PersistenceError,
)
from game_memory.durable.names import identity_hash
from game_memory.store import rewriting
from game_memory.store.rewrite_journal import RewriteJournal
from support.stores import search

from .helpers import (
    DATA,
    MemoryFactory,
    StoreFactory,
    files_under,
    legacy_name,
    log_path,
    session_folder,
    write_legacy,
)
from .test_migration import csharp_path, write_csharp_save


def backed_up(save: Path, memory: GameMemory) -> Path:
    """Where a migrated C# document lies in the legacy backup."""
    return (
        save / DATA / "legacy" / "memory-v2" / csharp_path(Path(), memory).relative_to(".memory-v2")
    )


def marked(make_memory: MemoryFactory, number: int, **fields: Any) -> GameMemory:
    """A memory whose text and payload carry markers unique to it."""
    fields.setdefault("tick", number)
    return make_memory(
        f"m{number}",
        text=f"TEXT-MARKER-{number:04d} a rumour about the mill " + "w" * 200,
        payload_json=json.dumps({"secret": f"PAYLOAD-MARKER-{number:04d}"}),
        **fields,
    )


def markers_left(folder: Path, numbers: list[int]) -> list[str]:
    """Every file under ``folder`` holding a marker of one of ``numbers``."""
    found = []
    for path, data in files_under(folder).items():
        for number in numbers:
            for kind in ("TEXT", "PAYLOAD"):
                if f"{kind}-MARKER-{number:04d}".encode() in data:
                    found.append(f"{path}: {kind} {number}")
    return found


async def filled(
    make_store: StoreFactory, make_memory: MemoryFactory, **options: Any
) -> FileGameMemoryStore:
    store = make_store(**options)
    for number in range(12):
        owner = "mira" if number < 8 else "tomas"
        await store.append(marked(make_memory, number, owner_id=owner))
    return store


async def ids(store: FileGameMemoryStore, session: str = "session") -> list[str]:
    return sorted(memory.memory_id for memory in await store.enumerate(session))


async def test_erasing_listed_memories_rewrites_the_log_and_lowers_the_count(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = await filled(make_store, make_memory, maximum_file_bytes=2_048)
    assert log_path(save, "session", "mira", 2).exists()  # several segments
    await store.forget("session", "mira", "m2", GameMoment(timeline_id="world", tick=50))
    await store.forget("session", "mira", "m3", GameMoment(timeline_id="world", tick=50))
    assert await store.erase("session", "mira", ["m1", "m2", "unknown"]) == 2
    assert markers_left(save, [1, 2]) == []
    assert markers_left(save, [0, 3, 4, 5, 6, 7, 8]) != []
    assert await store.count() == 10
    assert await ids(store) == sorted(f"m{n}" for n in range(12) if n not in (1, 2))
    reopened = make_store()
    assert await reopened.count() == 10
    report = await reopened.check()
    assert report.ok and report.memories == report.ledger_entries == 10, report.problems
    # m3's retraction stayed, m2's went with it.
    query = GameMemoryQuery(session_id="session", owner_id="mira", limit=20)
    assert "m3" not in {m.memory_id for m in await search(reopened, query)}
    retractions = (session_folder(save, "session") / f"r-{identity_hash('mira')}.log").read_bytes()
    assert b'"m3"' in retractions and b'"m2"' not in retractions
    assert not (save / DATA / "rewrite.json").exists()
    assert not [p for p in files_under(save) if p.endswith((".new", ".tmp"))]


async def test_erasing_an_owner_or_a_session_removes_their_files(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = await filled(make_store, make_memory)
    await store.append(marked(make_memory, 20, session_id="other"))
    assert await store.erase("session", "tomas") == 4
    assert not log_path(save, "session", "tomas").exists()
    assert markers_left(save, [8, 9, 10, 11]) == []
    assert await store.erase("session") == 8
    assert not session_folder(save, "session").exists()
    assert markers_left(save, list(range(12))) == []
    assert await store.count() == 1
    assert await ids(store, "other") == ["m20"]
    assert await store.erase("session") == 0  # nothing left: a no-op
    assert (await store.check()).ok


async def test_erasing_migrated_memories_rewrites_packs_and_removes_their_legacy_copies(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    flat = [marked(make_memory, n, owner_id="mira" if n % 2 else "tomas") for n in range(6)]
    for memory in flat:
        write_legacy(save, memory)
    csharp = [marked(make_memory, n, owner_id="elda") for n in range(10, 13)]
    write_csharp_save(save, csharp)
    store = make_store()
    assert (await store.migrate_legacy_layout()).migrated_entries == 9
    # A crash in the backup phase can leave a migrated document in the save folder.
    stray = save / legacy_name(flat[1])
    stray.write_bytes((save / DATA / "legacy" / "v1" / legacy_name(flat[1])).read_bytes())
    assert await store.erase("session", "mira", ["m1", "m3"]) == 2
    assert await store.erase("session", "elda", ["m11"]) == 1
    assert markers_left(save, [1, 3, 11]) == []
    assert not stray.exists()
    backup = save / DATA / "legacy"
    assert (backup / "v1" / legacy_name(flat[0])).exists()  # others' backups stay
    assert not backed_up(save, csharp[1]).exists()
    assert backed_up(save, csharp[0]).exists()
    assert await store.erase("session", "elda") == 2
    assert not (
        backup / "memory-v2" / f"s-{identity_hash('session')}" / f"o-{identity_hash('elda')}"
    ).exists()
    reopened = make_store()
    assert (await reopened.migrate_legacy_layout()).migrated_entries == 0  # nothing comes back
    assert await ids(reopened) == ["m0", "m2", "m4", "m5"]
    assert (await reopened.check()).ok


async def test_erasing_removes_the_damaged_files_a_salvage_set_aside(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    store = await filled(make_store, make_memory)
    await store.append(marked(make_memory, 30, session_id="other"))
    log = log_path(save, "session", "mira")
    data = bytearray(log.read_bytes())
    data[40] ^= 0xFF  # damage m0's record
    log.write_bytes(bytes(data))
    other = log_path(save, "other", "owner")
    data = bytearray(other.read_bytes())
    data[40] ^= 0xFF
    other.write_bytes(bytes(data))
    assert (await store.check(accept_loss=True)).ok
    aside = save / DATA / "damaged"
    assert markers_left(aside, [1, 30])  # the originals are kept for forensics
    assert await store.erase("session", "mira") == 7
    assert markers_left(save, list(range(8))) == []
    assert markers_left(aside, [30])  # another session's forensics stay
    assert list(aside.glob("*/report.json"))


async def test_a_damaged_partition_is_not_erased_and_nothing_changes(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    await filled(make_store, make_memory)
    log = log_path(save, "session", "mira")
    data = bytearray(log.read_bytes())
    data[-5] ^= 0xFF
    log.write_bytes(bytes(data))
    before = files_under(save)
    with pytest.raises(PersistenceError, match="corrupt"):
        await make_store().erase("session", "mira", ["m1"])
    assert files_under(save) == before


async def test_erase_checks_its_arguments(make_store: StoreFactory) -> None:
    with pytest.raises(InvalidArgumentError, match="owner_id"):
        await make_store().erase("session", memory_ids=["m1"])
    with pytest.raises(InvalidArgumentError):
        await make_store().erase("session", "mira", "m1")  # a string is not a list of ids


# -- interrupted erases ------------------------------------------------------------------------


class Stop(Exception):
    """Raised by the test where a crash is simulated."""


def stop_after(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: int = 1) -> None:
    """Make ``owner.name`` raise ``Stop`` right after its ``calls``-th call completes."""
    original = getattr(owner, name)
    seen = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        seen["n"] += 1
        if seen["n"] == calls:
            raise Stop(name)
        return result

    monkeypatch.setattr(owner, name, wrapped)


def stop_before(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    """Make ``owner.name`` raise ``Stop`` instead of running."""

    def stopped(*args: Any, **kwargs: Any) -> Any:
        raise Stop(name)

    monkeypatch.setattr(owner, name, stopped)


def stop_in_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop after the switch's first change: a staged file renamed into place, or an old
    segment deleted."""
    original = rewriting._switch

    def stop(function: Callable[..., None]) -> Callable[..., None]:
        def changed(*args: Any, **kwargs: Any) -> None:
            function(*args, **kwargs)
            raise Stop("switch")

        return changed

    def switch(rewrite: Any, directory: Path) -> None:
        with pytest.MonkeyPatch.context() as inner:  # only the switch's own calls
            inner.setattr(os, "replace", stop(os.replace))
            inner.setattr(os, "unlink", stop(os.unlink))
            original(rewrite, directory)

    monkeypatch.setattr(rewriting, "_switch", switch)


INTERRUPTIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "after the journal": lambda m: stop_after(m, RewriteJournal, "write", 1),
    "after the copies": lambda m: stop_after(m, rewriting, "remove_copies"),
    "after the ledgers": lambda m: stop_after(m, rewriting, "_rewrite_ledgers"),
    "after staging": lambda m: stop_after(m, RewriteJournal, "write", 3),
    "in the switch": stop_in_switch,
    "before the journal goes": lambda m: stop_before(m, RewriteJournal, "remove"),
}


@pytest.mark.parametrize("scope", ["listed", "owner", "session"])
@pytest.mark.parametrize("where", sorted(INTERRUPTIONS))
async def test_an_interrupted_erase_is_finished_by_the_next_reader_and_never_half_seen(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    scope: str,
) -> None:
    save = tmp_path / "save"
    store = await filled(make_store, make_memory, maximum_file_bytes=2_048)
    for number in (1, 5, 9):
        owner = "mira" if number < 8 else "tomas"
        await store.forget("session", owner, f"m{number}", GameMoment(timeline_id="world", tick=99))
    erased, arguments = {
        "listed": ([1, 2, 6], ("session", "mira", ["m1", "m2", "m6"])),
        "owner": (list(range(8)), ("session", "mira")),
        "session": (list(range(12)), ("session",)),
    }[scope]
    kept = sorted(f"m{n}" for n in range(12) if n not in erased)
    with monkeypatch.context() as patch:
        INTERRUPTIONS[where](patch)
        with contextlib.suppress(Stop):
            await store.erase(*arguments)
    stopped = (save / DATA / "rewrite.json").exists()
    if scope != "session" or where not in ("in the switch", "after staging"):
        # (a session is deleted whole: it has no staging and no switch)
        assert stopped, "the simulated crash should have left the erase unfinished"
    if stopped:
        report = await make_store().check()
        assert not report.ok and "finishes it" in report.problems[0]
    reader = make_store()
    assert await ids(reader) == kept
    assert not (save / DATA / "rewrite.json").exists()
    assert markers_left(save, erased) == []
    assert await reader.count() == len(kept)
    report = await reader.check()
    assert report.ok, report.problems
    assert await reader.erase(*arguments) == 0  # the rerun finds nothing left to erase


async def test_a_reader_racing_an_erase_sees_it_whole_or_not_at_all(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    writer = make_store(maximum_file_bytes=2_048)
    for number in range(60):
        await writer.append(marked(make_memory, number, owner_id=f"npc-{number % 3}"))
    everything = {f"m{n}" for n in range(60)}
    after_first = everything - {f"m{n}" for n in range(0, 60, 3)}
    after_second = after_first - {f"m{n}" for n in range(1, 60, 3)}
    allowed = [everything, after_first, after_second]
    seen: list[set[str]] = []
    done = threading.Event()

    def read() -> None:
        async def loop() -> None:
            async with FileGameMemoryStore(tmp_path / "save") as reader:
                while not done.is_set():
                    seen.append({m.memory_id for m in await reader.enumerate("session")})

        asyncio.run(loop())

    thread = threading.Thread(target=read)
    thread.start()
    try:
        await asyncio.sleep(0.05)
        assert await writer.erase("session", "npc-0") == 20
        await asyncio.sleep(0.02)
        assert await writer.erase("session", "npc-1", [f"m{n}" for n in range(1, 60, 3)]) == 20
        await asyncio.sleep(0.05)
    finally:
        done.set()
        thread.join(timeout=60)
    assert len(seen) > 3
    assert all(state in allowed for state in seen), [
        sorted(s)[:5] for s in seen if s not in allowed
    ]
    assert seen[-1] == after_second


async def test_erasing_one_memory_decodes_none_of_the_kept_ones(
    make_store: StoreFactory, make_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite copies records byte for byte and needs only their ids: it decoded and
    validated every memory of the partition, twice (its copies and its staging), which
    was most of an erase of one memory of a large NPC (1.0 s -> 0.4 s at 16,000)."""
    store = make_store()
    await store.append_many([make_memory(f"m{n}", owner_id="mira", tick=n) for n in range(40)])
    assert len(await store.enumerate("session", "mira")) == 40  # the partition is read
    from game_memory.store import documents

    decoded: list[bytes] = []
    real = documents.decode_document

    def counting(payload: bytes) -> Any:
        decoded.append(payload)
        return real(payload)

    monkeypatch.setattr(documents, "decode_document", counting)
    monkeypatch.setattr(rewriting, "decode_document", counting, raising=False)
    assert await store.erase("session", "mira", ["m7"]) == 1
    assert decoded == []
    monkeypatch.undo()
    assert sorted(m.memory_id for m in await store.enumerate("session", "mira")) == sorted(
        f"m{n}" for n in range(40) if n != 7
    )
    assert (await make_store().check()).ok


async def test_a_record_of_another_partition_stops_the_erase_before_it_changes_anything(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """Reading ids alone, the rewrite still refuses a record that is not of the partition
    (a log copied over another NPC's): nothing is erased, and the message says so."""
    save = tmp_path / "save"
    store = make_store()
    await store.append(make_memory("a0", owner_id="mira"))
    await store.append(make_memory("b0", owner_id="tomas"))
    await store.aclose()
    folder = session_folder(save, "session")
    mira = folder / f"o-{identity_hash('mira')}.log"
    tomas = folder / f"o-{identity_hash('tomas')}.log"
    mira.write_bytes(mira.read_bytes() + tomas.read_bytes())  # a foreign record appended
    before = {name: data for name, data in files_under(save).items() if name.endswith(".log")}
    with pytest.raises(PersistenceError):
        await make_store().erase("session", "mira", ["a0"])
    after = {name: data for name, data in files_under(save).items() if name.endswith(".log")}
    assert after == before


def test_the_rewrite_reads_a_records_ids_and_refuses_one_of_another_partition(
    make_memory: MemoryFactory,
) -> None:
    from game_memory.store.documents import encode_document
    from game_memory.store.partitions import partition_hash

    payload = encode_document(make_memory("m1", owner_id="mira"))
    session, mira = partition_hash("session"), partition_hash("mira")
    assert rewriting._memory_id(payload, "o.log", session, mira) == "m1"
    with pytest.raises(PersistenceError, match="another partition"):
        rewriting._memory_id(payload, "o.log", session, partition_hash("tomas"))
    for broken in (b"not json", b'{"memory": 5}', b'{"memory": {"memory_id": 1}}', b"[]"):
        with pytest.raises(PersistenceError, match="unreadable record"):
            rewriting._memory_id(broken, "o.log", session, mira)
