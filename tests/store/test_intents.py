"""The ledger index follows the ledger: intents a writer just appended are indexed from its
own bytes, exactly as a refresh would read them, and never when the file is not what the
index knew plus those bytes (``store/intents.py``, ``LedgerIndex.absorb``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from game_memory.durable.names import identity_hash
from game_memory.store.intents import LedgerIndex
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry


def _entries(owner: str, count: int, start: int = 0) -> list[LedgerEntry]:
    return [
        LedgerEntry(identity_hash("session"), identity_hash(owner), identity_hash(f"m{n}"))
        for n in range(start, start + count)
    ]


def _state(index: LedgerIndex) -> tuple[object, ...]:
    mark = index.refresh()
    session = identity_hash("session")
    return (
        mark,
        index.positions(session, identity_hash("npc"), mark),
        index.positions(session, identity_hash("guard"), mark),
        index.owner_hashes(session),
        index.damaged(),
    )


def _no_reads(index: LedgerIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(start: int, stop: int) -> bytes:
        raise AssertionError(f"the ledger was read ({start}..{stop})")

    monkeypatch.setattr(index, "_read", refused)


def test_intents_just_appended_are_indexed_as_a_refresh_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 1_000)
    ledger.append(_entries("npc", 5), first_index=0, durable=False)
    index = LedgerIndex(ledger)
    index.refresh()
    for number, owner in enumerate(("guard", "npc", "guard")):
        first = 5 + number * 2
        data = ledger.encode_group(_entries(owner, 2, first), first)
        ledger.append_encoded(data, durable=False)
        index.absorb(first, data, ledger.stat())
    with monkeypatch.context() as patched:
        _no_reads(index, patched)
        absorbed = _state(index)  # the refresh finds nothing new: no read at all
    fresh = LedgerIndex(ledger)
    assert absorbed == _state(fresh)
    assert absorbed[0].count == 11 and absorbed[0].pending_from == 9  # type: ignore[attr-defined]


def test_intents_are_not_absorbed_over_a_ledger_another_writer_changed(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 1_000)
    ledger.append(_entries("npc", 3), first_index=0, durable=False)
    index = LedgerIndex(ledger)
    index.refresh()
    # Another writer appended after the index's last look: the bytes after it are not ours.
    ledger.append(_entries("guard", 1, 3), first_index=3, durable=False)
    data = ledger.encode_group(_entries("npc", 1, 4), 4)
    ledger.append_encoded(data, durable=False)
    index.absorb(4, data, ledger.stat())
    assert _state(index) == _state(LedgerIndex(ledger))  # read from the file, both
    assert index.refresh().count == 5


def test_intents_are_not_absorbed_when_the_file_is_not_the_index_plus_them(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 1_000)
    ledger.append(_entries("npc", 3), first_index=0, durable=False)
    index = LedgerIndex(ledger)
    index.refresh()
    data = ledger.encode_group(_entries("npc", 1, 3), 3)
    ledger.append_encoded(data, durable=False)
    with open(ledger.path, "ab") as extra:  # zeros after them: what a power loss leaves
        extra.write(bytes(RECORD_BYTES))
    index.absorb(3, data, ledger.stat())
    assert index.refresh().count == 4  # the zeros are not counted, the intent is
    assert _state(index) == _state(LedgerIndex(ledger))


def test_a_replaced_ledger_is_never_absorbed_into(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 1_000)
    ledger.append(_entries("npc", 3), first_index=0, durable=False)
    index = LedgerIndex(ledger)
    index.refresh()
    ledger.rewrite(_entries("guard", 3))  # an erase's rewrite: another inode, same size
    data = ledger.encode_group(_entries("guard", 1, 3), 3)
    ledger.append_encoded(data, durable=False)
    index.absorb(3, data, ledger.stat())
    mark = index.refresh()
    session = identity_hash("session")
    assert index.positions(session, identity_hash("npc"), mark) == []
    assert index.positions(session, identity_hash("guard"), mark) == [0, 1, 2, 3]
    assert mark.inode == os.lstat(ledger.path).st_ino


def test_a_large_batch_of_intents_is_indexed_by_partition_as_a_refresh_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Ledger(tmp_path / "ledger.log", 10_000)
    ledger.append(_entries("npc", 3), first_index=0, durable=False)
    index = LedgerIndex(ledger)
    index.refresh()
    owners = ("npc", "guard", "smith")
    entries = [
        LedgerEntry(identity_hash("session"), identity_hash(owners[n % 3]), identity_hash(f"b{n}"))
        for n in range(500)
    ]
    data = ledger.encode(entries, 3)
    ledger.append_encoded(data, durable=False)
    index.absorb(3, data, ledger.stat())
    with monkeypatch.context() as patched:
        _no_reads(index, patched)
        absorbed = _state(index)
    assert absorbed == _state(LedgerIndex(ledger))
    mark = index.refresh()
    smith = index.positions(identity_hash("session"), identity_hash("smith"), mark)
    assert smith == [3 + n for n in range(2, 500, 3)]
