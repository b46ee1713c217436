"""Packs: immutable bulk files with an owner index; each owner reads only its range."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from game_memory import PersistenceError
from game_memory.durable.names import identity_hash
from game_memory.store.packs import (
    PACK_OVERHEAD,
    encode_pack,
    plan_packs,
    read_pack_index,
    read_pack_range,
    write_pack,
)
from game_memory.store.records import encode_record

OWNERS = {name: identity_hash(name) for name in ("ann", "bob", "cyd")}


def store_pack(path: Path) -> bytes:
    groups = [
        (OWNERS[name], [encode_record(f'{{"{name}": {i}}}'.encode()) for i in range(count)])
        for name, count in (("bob", 2), ("ann", 3), ("cyd", 1))
    ]
    data = encode_pack(groups)
    path.write_bytes(data)
    return data


def test_each_owner_reads_exactly_its_own_records(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    store_pack(path)
    index = read_pack_index(str(path), os.lstat(path), 1 << 20)
    assert set(index.owners) == set(OWNERS.values())
    assert read_pack_range(index, OWNERS["ann"], 1 << 20) == [
        b'{"ann": 0}',
        b'{"ann": 1}',
        b'{"ann": 2}',
    ]
    assert read_pack_range(index, OWNERS["cyd"], 1 << 20) == [b'{"cyd": 0}']
    assert read_pack_range(index, identity_hash("nobody"), 1 << 20) == []


def damaged(path: Path, position: int) -> PersistenceError:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))
    info = os.lstat(path)
    with pytest.raises(PersistenceError) as raised:
        index = read_pack_index(str(path), info, 1 << 20)
        for owner in OWNERS.values():
            read_pack_range(index, owner, 1 << 20)
    return raised.value


def test_a_flipped_byte_in_the_owner_index_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    data = store_pack(path)
    index_start = len(data) - 24 - 3 * 52
    assert "index checksum" in str(damaged(path, index_start + 40))


@pytest.mark.parametrize("where", ["header", "record", "footer"])
def test_a_flipped_byte_anywhere_else_fails_closed(tmp_path: Path, where: str) -> None:
    path = tmp_path / "p-1.pack"
    data = store_pack(path)
    position = {"header": 2, "record": 30, "footer": len(data) - 3}[where]
    assert "corrupt" in str(damaged(path, position))


def test_a_truncated_pack_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    data = store_pack(path)
    path.write_bytes(data[:-10])
    with pytest.raises(PersistenceError):
        read_pack_index(str(path), os.lstat(path), 1 << 20)
    path.write_bytes(b"tiny")
    with pytest.raises(PersistenceError, match="not a valid pack"):
        read_pack_index(str(path), os.lstat(path), 1 << 20)


def test_a_pack_larger_than_the_file_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    store_pack(path)
    with pytest.raises(PersistenceError, match="not a valid pack"):
        read_pack_index(str(path), os.lstat(path), 100)


def test_planned_packs_stay_within_the_file_bound_and_keep_every_record(tmp_path: Path) -> None:
    groups = [
        (
            OWNERS[name],
            [encode_record(f'{{"{name}": "{"x" * (i * 37 % 300)}"}}'.encode()) for i in range(40)],
        )
        for name in OWNERS
    ]
    plans = plan_packs(tmp_path, 3, groups, 2_048)
    assert [Path(path).name for path, _ in plans][:2] == ["p-3.pack", "p-4.pack"]
    found: dict[str, list[bytes]] = {}
    for path, planned in plans:
        write_pack(path, planned)
        info = os.lstat(path)
        assert info.st_size <= 2_048
        index = read_pack_index(path, info, 2_048)
        for owner in index.owners:
            found.setdefault(owner, []).extend(read_pack_range(index, owner, 2_048))
    assert found == {owner: [record[16:] for record in records] for owner, records in groups}


def test_a_record_at_the_largest_size_fits_a_pack_alone(tmp_path: Path) -> None:
    record = encode_record(b'"' + b"y" * (1_024 - PACK_OVERHEAD - 18) + b'"')
    assert len(record) + PACK_OVERHEAD == 1_024
    ((path, planned),) = plan_packs(tmp_path, 1, [(OWNERS["ann"], [record])], 1_024)
    write_pack(path, planned)
    assert os.path.getsize(path) == 1_024


def test_a_pack_is_never_overwritten(tmp_path: Path) -> None:
    path = str(tmp_path / "p-1.pack")
    write_pack(path, [(OWNERS["ann"], [encode_record(b"{}")])])
    with pytest.raises(PersistenceError, match="refusing to overwrite"):
        write_pack(path, [(OWNERS["bob"], [encode_record(b"[]")])])
    assert sorted(os.listdir(tmp_path)) == ["p-1.pack"]
