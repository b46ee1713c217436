"""Damage messages name the file, what is wrong with it, and the repair that really works.

Each test damages a save as a disk would, reads the message, then does what the message
says and asserts the save is whole again: a message that names a repair is tested by that
repair. (A message that only said "restore the save from a backup" left a user with no
backup stuck, although ``check --fix --accept-loss`` repairs the damage.)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, GameMemoryQuery, GameMoment, PersistenceError
from game_memory.store.layout import STORE_FORMAT_VERSION
from game_memory.store.ledger import KIND_RETRACT, RECORD_BYTES, Ledger, LedgerEntry
from game_memory.store.packs import read_pack_index
from support.stores import search

from .helpers import DATA, MemoryFactory, StoreFactory, session_folder, write_legacy

FORMAT2 = Path(__file__).parent / "fixtures" / "format2" / "save"
FORMAT_LINE = json.dumps({"format": "game-memory-store", "format_version": STORE_FORMAT_VERSION})


def salvage_command(save: Path) -> str:
    return f"'game-memory check --fix --accept-loss --save-dir {save}'"


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


async def visible(store: FileGameMemoryStore) -> list[str]:
    query = GameMemoryQuery(session_id="session", limit=20)
    return sorted(memory.memory_id for memory in await search(store, query))


# -- the ledgers ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ledger.log", "retraction-ledger.log"])
async def test_a_damaged_newest_intent_names_the_salvage_which_repairs_it_losing_nothing(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, name: str
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    for number in range(4):
        await store.append(make_memory(f"m{number}", tick=number))
    for number in range(3):
        await store.forget(
            "session", "owner", f"m{number}", GameMoment(timeline_id="world", tick=10)
        )
    await store.aclose()
    ledger = save / DATA / name
    flip(ledger, ledger.stat().st_size - RECORD_BYTES + 90)  # inside the checksummed body

    store = make_store(save)
    assert await visible(store) == ["m3"]  # reads go on
    with pytest.raises(PersistenceError) as raised:
        await store.append(make_memory("m9", tick=9))
    message = str(raised.value)
    assert f"{ledger} is corrupt at record " in message and "newest intent" in message
    assert "its checksum is wrong" in message
    assert salvage_command(save) in message and "gives up no" in message

    # check --fix ended in the recovery's one line (exit 1, no report); it reports now,
    # repairs nothing, and names the salvage for the memory whose intent is damaged.
    fixed = await store.check(fix=True)
    assert not fixed.ok and not fixed.repairs
    assert any("could not recover the save, so it repaired nothing" in p for p in fixed.problems)
    assert not any("check --fix adds the intents" in p for p in fixed.problems)

    report = await store.check(accept_loss=True)
    assert report.repairs and (await store.check()).ok
    reopened = make_store(save)
    assert await visible(reopened) == ["m3"]  # every memory and retraction kept
    assert await reopened.append(make_memory("m9", tick=9)) is True
    assert await reopened.count() == 5 and (await reopened.check()).ok


@pytest.mark.parametrize("kind", [1, KIND_RETRACT])
def test_a_damaged_older_intent_names_the_salvage_too(tmp_path: Path, kind: int) -> None:
    data = tmp_path / "save" / DATA
    data.mkdir(parents=True)
    ledger = Ledger(data / "ledger.log", 100, kind)
    hashes = [LedgerEntry(f"{n:064x}", f"{n + 1:064x}", f"{n + 2:064x}") for n in range(3)]
    ledger.append(hashes, first_index=0)
    flip(ledger.path, RECORD_BYTES + 40)
    for read in (ledger.read, ledger.records):
        with pytest.raises(PersistenceError) as raised:
            read()
        message = str(raised.value)
        assert "is corrupt at record 1 (its checksum is wrong)" in message
        assert "newest" not in message and salvage_command(tmp_path / "save") in message
    whole = ledger.path.read_bytes()
    ledger.path.write_bytes(whole[:RECORD_BYTES] + whole[2 * RECORD_BYTES :])  # one lost
    with pytest.raises(PersistenceError) as raised:
        ledger.read()
    assert "record 1 (it carries sequence 2: records were lost or reordered)" in str(raised.value)
    assert salvage_command(tmp_path / "save") in str(raised.value)


# -- format.json ----------------------------------------------------------------------------

_DAMAGED_FORMATS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "a bit of the field name": (
        lambda good: good[:3] + bytes([good[3] ^ 0x10]) + good[4:],
        'its "format" field is not "game-memory-store"',
    ),
    "a bit of the punctuation": (
        lambda good: good[:11] + bytes([good[11] ^ 0x10]) + good[12:],
        "it is not valid JSON",
    ),
    "not UTF-8": (lambda good: b"\xff\xfe" + good, "it is not valid JSON"),
    "a list": (lambda good: b"[]", "it is not a JSON object"),
    "a boolean version": (
        lambda good: b'{"format": "game-memory-store", "format_version": true}',
        'its "format_version" field is not a whole number',
    ),
}


def advised_content(message: str) -> str:
    """The JSON the message ends with: the content it says to put in format.json."""
    return message[message.rindex("{") :]


@pytest.mark.parametrize("damage", sorted(_DAMAGED_FORMATS))
async def test_a_damaged_format_file_says_so_and_its_documented_content_repairs_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, damage: str
) -> None:
    save = tmp_path / "save"
    store = make_store(save)
    for number in range(3):
        await store.append(make_memory(f"m{number}", tick=number))
    await store.aclose()
    path = save / DATA / "format.json"
    change, problem = _DAMAGED_FORMATS[damage]
    path.write_bytes(change(path.read_bytes()))

    with pytest.raises(PersistenceError) as raised:
        await make_store(save).enumerate("session")
    message = str(raised.value)
    assert message.startswith(f"{path} is damaged ({problem})")
    assert "backup" in message and message.endswith(FORMAT_LINE)
    assert "Expecting" not in message and "'format'" not in message  # no parser internals

    path.write_text(advised_content(message))  # do what it says
    repaired = make_store(save)
    assert await visible(repaired) == ["m0", "m1", "m2"]
    assert (await repaired.check()).ok


async def test_an_older_save_repaired_with_the_advised_format_reads_the_same(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    shutil.copytree(FORMAT2, save)
    async with FileGameMemoryStore(save) as store:
        before = [m.memory_id for m in await store.enumerate("slot-2")]
    flip(save / DATA / "format.json", 3)
    async with FileGameMemoryStore(save) as store:
        with pytest.raises(PersistenceError) as raised:
            await store.count()
    (save / DATA / "format.json").write_text(advised_content(str(raised.value)))
    async with FileGameMemoryStore(save) as store:
        assert await store.count() == 11
        assert [m.memory_id for m in await store.enumerate("slot-2")] == before
        assert (await store.check()).ok


# -- packs ----------------------------------------------------------------------------------

_PACK_DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "header": lambda data: bytes([data[0] ^ 0x10]) + data[1:],
    "record": lambda data: data[:8] + bytes([data[8] ^ 0x10]) + data[9:],
    "index": lambda data: data[:-34] + bytes([data[-34] ^ 0x10]) + data[-33:],
    "footer": lambda data: data[:-1] + bytes([data[-1] ^ 0x10]),
    "cut short": lambda data: data[:10],
}


@pytest.mark.parametrize("where", sorted(_PACK_DAMAGE))
async def test_pack_damage_names_the_salvage_which_repairs_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, where: str
) -> None:
    save = tmp_path / "save"
    owners = ("guard", "guard", "guard", "bard")
    for number, owner in enumerate(owners):
        write_legacy(save, make_memory(f"m{number}", owner_id=owner, tick=number))
    store = make_store(save)
    assert (await store.migrate_legacy_layout()).migrated_entries == 4
    await store.aclose()
    pack = session_folder(save, "session") / "p-1.pack"
    pack.write_bytes(_PACK_DAMAGE[where](pack.read_bytes()))

    store = make_store(save)
    messages = []
    for owner in ("guard", "bard"):
        try:
            await store.enumerate("session", owner)
        except PersistenceError as exc:
            messages.append(str(exc))
    assert messages  # the damage is read by at least one owner
    for message in messages:
        assert message.startswith(f"{pack} is corrupt: ")
        assert salvage_command(save) in message

    await store.check(accept_loss=True)
    salvaged = make_store(save)
    assert (await salvaged.check()).ok
    await salvaged.enumerate("session")  # reads again


def test_a_pack_over_the_file_bound_names_the_bound_and_the_salvage(tmp_path: Path) -> None:
    folder = tmp_path / "save" / DATA / "s-x"
    folder.mkdir(parents=True)
    pack = folder / "p-1.pack"
    pack.write_bytes(bytes(200))
    with pytest.raises(PersistenceError) as raised:
        read_pack_index(str(pack), os.lstat(pack), 100)
    message = str(raised.value)
    assert "not a valid pack" in message and "maximum_file_bytes (100)" in message
    assert salvage_command(tmp_path / "save") in message


async def test_a_cut_segment_that_is_not_the_last_names_the_salvage_which_repairs_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """It said only "the save is corrupt"; the salvage repairs it, losing the cut record."""
    save = tmp_path / "save"
    store = make_store(save, maximum_file_bytes=1024)
    for number in range(6):
        await store.append(make_memory(f"b{number}", owner_id="bard", tick=number))
    await store.aclose()
    first = next(session_folder(save, "session").glob("o-*[0-9a-f].log"))
    assert first.with_name(first.name.replace(".log", ".1.log")).exists()
    os.truncate(first, first.stat().st_size - 10)

    store = make_store(save, maximum_file_bytes=1024)
    with pytest.raises(PersistenceError) as raised:
        await store.enumerate("session", "bard")
    assert "it is not the last segment" in str(raised.value)
    assert salvage_command(save) in str(raised.value)
    await store.check(accept_loss=True)
    salvaged = make_store(save, maximum_file_bytes=1024)
    assert (await salvaged.check()).ok
    assert 0 < len(await salvaged.enumerate("session", "bard")) < 6
