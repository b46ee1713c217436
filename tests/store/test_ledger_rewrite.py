"""An erase's ledger rewrite on raw records is byte for byte the one on entry objects.

``_rewrite_ledgers`` (``rewriting.py``) once decoded every intent of the save to an entry
(hex hashes), filtered them and encoded the rest again: 250 ms per erase at 100k intents.
It now filters the verified 128-byte records (``Ledger.records``, ``rewrite_records``);
these tests compare it with that reference on random ledgers (group records, several
sessions and owners, repeated memory hashes, torn tails) and damaged ones (the same error).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from game_memory import PersistenceError
from game_memory.durable.names import identity_hash
from game_memory.store.ledger import KIND_ADD, KIND_RETRACT, RECORD_BYTES, Ledger, LedgerEntry

SESSIONS = [identity_hash(f"s{n}") for n in range(3)]
OWNERS = [identity_hash(f"o{n}") for n in range(4)]
MEMORIES = [identity_hash(f"m{n}") for n in range(12)]


def _ledger(path: Path, rng: random.Random, kind: int) -> tuple[Ledger, list[LedgerEntry]]:
    ledger = Ledger(path, maximum_entries=10_000, kind=kind)
    entries = [
        LedgerEntry(rng.choice(SESSIONS), rng.choice(OWNERS), rng.choice(MEMORIES))
        for _ in range(rng.randrange(0, 300))
    ]
    data = bytearray()
    written = 0
    while written < len(entries):  # groups as group commits write them, plain ones too
        size = rng.randrange(1, 9)
        group = entries[written : written + size]
        if rng.random() < 0.5:
            data += ledger.encode_group(group, written)
        else:
            data += ledger.encode(group, written)
        written += len(group)
    if rng.random() < 0.3:
        data += b"\x01" * rng.randrange(1, RECORD_BYTES)  # a torn tail
    path.write_bytes(bytes(data))
    return ledger, entries


def _reference_add(
    ledger: Ledger, session: str, owner: str | None, hashes: set[str] | None
) -> bytes | None:
    entries = ledger.read()
    kept = [
        e
        for e in entries
        if not (
            e.session_hash == session
            and (owner is None or e.owner_hash == owner)
            and (hashes is None or e.memory_hash in hashes)
        )
    ]
    return None if len(kept) == len(entries) else ledger.encode(kept, 0)


def _reference_retractions(
    ledger: Ledger, session: str, owner: str | None, remaining: dict[str, int]
) -> bytes | None:
    entries = ledger.read()
    kept = []
    for entry in entries:
        if entry.session_hash != session or (owner is not None and entry.owner_hash != owner):
            kept.append(entry)
        elif remaining.get(entry.memory_hash, 0) > 0:
            remaining[entry.memory_hash] -= 1
            kept.append(entry)
    return None if len(kept) == len(entries) else ledger.encode(kept, 0)


@pytest.mark.parametrize("seed", range(40))
def test_dropping_intents_on_records_equals_the_entries_reference(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for kind in (KIND_ADD, KIND_RETRACT):
        path = tmp_path / f"ledger-{kind}.log"
        ledger, _ = _ledger(path, rng, kind)
        session = rng.choice(SESSIONS)
        owner = rng.choice([None, *OWNERS])
        rows = ledger.records()
        if kind == KIND_ADD:
            hashes = None if rng.random() < 0.4 else set(rng.sample(MEMORIES, 3))
            expected = _reference_add(ledger, session, owner, hashes)
            drop = np.zeros(rows.shape[0], dtype=np.bool_)
            for position in ledger.partition_rows(rows, session, owner).tolist():
                drop[position] = hashes is None or ledger.memory_hash(rows, position) in hashes
        else:
            remaining = {memory: rng.randrange(0, 3) for memory in rng.sample(MEMORIES, 5)}
            expected = _reference_retractions(ledger, session, owner, dict(remaining))
            drop = np.zeros(rows.shape[0], dtype=np.bool_)
            for position in ledger.partition_rows(rows, session, owner).tolist():
                memory = ledger.memory_hash(rows, position)
                if remaining.get(memory, 0) > 0:
                    remaining[memory] -= 1
                else:
                    drop[position] = True
        assert (expected is None) == (not drop.any())
        if expected is not None:
            ledger.rewrite_records(rows, drop)
            assert path.read_bytes() == expected


@pytest.mark.parametrize("seed", range(20))
def test_a_damaged_record_raises_what_a_read_raises(tmp_path: Path, seed: int) -> None:
    rng = random.Random(1000 + seed)
    path = tmp_path / "ledger.log"
    ledger, entries = _ledger(path, rng, KIND_ADD)
    if not entries:
        return
    data = bytearray(path.read_bytes())
    record = rng.randrange(len(entries))
    if rng.random() < 0.3:  # two records swapped: sequences out of order
        other = rng.randrange(len(entries))
        a, b = record * RECORD_BYTES, other * RECORD_BYTES
        data[a : a + RECORD_BYTES], data[b : b + RECORD_BYTES] = (
            data[b : b + RECORD_BYTES],
            data[a : a + RECORD_BYTES],
        )
    else:
        data[record * RECORD_BYTES + rng.randrange(116)] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    try:
        ledger.read()
    except PersistenceError as exc:
        expected = str(exc)
    else:
        expected = None
    if expected is None:
        assert ledger.records().shape[0] == len(entries)
    else:
        with pytest.raises(PersistenceError) as raised:
            ledger.records()
        assert str(raised.value) == expected
