"""Packs: immutable bulk files with an owner index; each owner reads only its range."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from game_memory import PersistenceError
from game_memory.store.packs import encode_pack, read_pack_index, read_pack_range
from game_memory.store.partitions import identity_hash
from game_memory.store.records import encode_record

OWNERS = {name: identity_hash(name) for name in ("ann", "bob", "cyd")}


def write_pack(path: Path) -> bytes:
    groups = [
        (OWNERS[name], [encode_record(f'{{"{name}": {i}}}'.encode()) for i in range(count)])
        for name, count in (("bob", 2), ("ann", 3), ("cyd", 1))
    ]
    data = encode_pack(groups)
    path.write_bytes(data)
    return data


def test_each_owner_reads_exactly_its_own_records(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    write_pack(path)
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
    data = write_pack(path)
    index_start = len(data) - 24 - 3 * 52
    assert "index checksum" in str(damaged(path, index_start + 40))


@pytest.mark.parametrize("where", ["header", "record", "footer"])
def test_a_flipped_byte_anywhere_else_fails_closed(tmp_path: Path, where: str) -> None:
    path = tmp_path / "p-1.pack"
    data = write_pack(path)
    position = {"header": 2, "record": 30, "footer": len(data) - 3}[where]
    assert "corrupt" in str(damaged(path, position))


def test_a_truncated_pack_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    data = write_pack(path)
    path.write_bytes(data[:-10])
    with pytest.raises(PersistenceError):
        read_pack_index(str(path), os.lstat(path), 1 << 20)
    path.write_bytes(b"tiny")
    with pytest.raises(PersistenceError, match="not a valid pack"):
        read_pack_index(str(path), os.lstat(path), 1 << 20)


def test_a_pack_larger_than_the_file_bound_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p-1.pack"
    write_pack(path)
    with pytest.raises(PersistenceError, match="not a valid pack"):
        read_pack_index(str(path), os.lstat(path), 100)
