"""The commit ledger: fixed-size checksummed intents, counted by file size."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, PersistenceError
from game_memory.durable.names import identity_hash
from game_memory.store.ledger import RECORD_BYTES, Ledger, LedgerEntry

from .helpers import MemoryFactory, StoreFactory


def entry(index: int) -> LedgerEntry:
    return LedgerEntry(
        identity_hash("s"), identity_hash(f"o{index % 2}"), identity_hash(str(index))
    )


def test_an_empty_ledger_counts_zero_and_reads_nothing(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.log", maximum_entries=10)
    assert (ledger.count(), ledger.read(), ledger.torn_bytes(), ledger.stat()) == (0, [], 0, None)


def test_intents_are_appended_counted_and_read_back_in_order(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.log", maximum_entries=10)
    ledger.append([entry(0)], first_index=0)
    ledger.append([entry(1), entry(2)], first_index=1)
    assert (tmp_path / "ledger.log").stat().st_size == 3 * RECORD_BYTES
    assert ledger.count() == 3
    assert ledger.read() == [entry(0), entry(1), entry(2)]
    assert ledger.read(1, 2) == [entry(1)]
    assert ledger.read(2) == [entry(2)]


def test_truncate_drops_the_newest_intents(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.log", maximum_entries=10)
    ledger.append([entry(i) for i in range(4)], first_index=0)
    ledger.truncate(2)
    assert ledger.read() == [entry(0), entry(1)]


def test_a_partial_final_record_is_torn_and_not_counted(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    ledger = Ledger(path, maximum_entries=10)
    ledger.append([entry(0), entry(1)], first_index=0)
    with path.open("r+b") as file:
        file.truncate(RECORD_BYTES + 50)
    assert (ledger.count(), ledger.torn_bytes()) == (1, 50)
    assert ledger.read() == [entry(0)]


@pytest.mark.parametrize("position", [0, 5, 9, 20, 60, 100, 113])
def test_a_flipped_byte_in_an_intent_fails_closed(tmp_path: Path, position: int) -> None:
    path = tmp_path / "ledger.log"
    ledger = Ledger(path, maximum_entries=10)
    ledger.append([entry(i) for i in range(3)], first_index=0)
    data = bytearray(path.read_bytes())
    data[RECORD_BYTES + position] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(PersistenceError, match="record 1"):
        ledger.read()


def test_intents_carry_their_sequence_so_a_reordered_ledger_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    ledger = Ledger(path, maximum_entries=10)
    ledger.append([entry(i) for i in range(2)], first_index=0)
    data = path.read_bytes()
    path.write_bytes(data[RECORD_BYTES:] + data[:RECORD_BYTES])
    with pytest.raises(PersistenceError, match="sequence"):
        ledger.read()


def test_a_ledger_far_larger_than_the_capacity_allows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.log"
    Ledger(path, maximum_entries=100).append([entry(i) for i in range(10)], first_index=0)
    with pytest.raises(PersistenceError, match="not a file this store wrote"):
        Ledger(path, maximum_entries=1).read()


async def test_a_ledger_grown_under_a_larger_bound_names_the_bound_that_opens_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    # Every path that reads the ledger whole (check among them) said only "it is not a
    # file this store wrote": true of damage, wrong of a save opened with a smaller bound.
    store = make_store()
    for number in range(6):
        await store.append(make_memory(f"m{number}", tick=number))
    await store.aclose()
    small = FileGameMemoryStore(tmp_path / "save", maximum_entries=1)
    report = await small.check()
    assert not report.ok
    assert any("--maximum-entries N" in str(problem) for problem in report.problems)
    await small.aclose()
