"""``fs.mapped_file``: what ``fs.read_file`` reads, mapped for the block and unmapped after,
with the same refusals (a link, not a regular file, too large)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from game_memory.durable import fs
from game_memory.errors import PersistenceError


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 70_000])
def test_a_mapped_file_holds_what_a_read_gives(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(size))
    read = fs.read_file(path, 1 << 20)
    assert read is not None
    with fs.mapped_file(path, 1 << 20) as mapped:
        assert mapped is not None
        data, info = mapped
        assert bytes(data) == read[0]
        assert (info.st_ino, info.st_size) == (read[1].st_ino, read[1].st_size)
        kept = data
    if size:  # the map was closed with the block: the view is released
        with pytest.raises(ValueError):
            bytes(kept)


def test_a_missing_file_maps_to_none(tmp_path: Path) -> None:
    with fs.mapped_file(tmp_path / "absent", 100) as mapped:
        assert mapped is None


def test_links_folders_and_large_files_are_refused_as_a_read_refuses_them(
    tmp_path: Path,
) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x" * 200)
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "folder").mkdir()
    for path, maximum, match in (
        (tmp_path / "link", 1000, "symbolic link"),
        (tmp_path / "folder", 1000, "regular file"),
        (target, 100, "more than the limit"),
    ):
        with pytest.raises(PersistenceError, match=match), fs.mapped_file(path, maximum):
            pytest.fail("nothing is mapped")


def test_a_view_kept_past_the_block_leaves_the_map_to_the_collector(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 64)
    with fs.mapped_file(path, 1 << 20) as mapped:
        assert mapped is not None
        array = np.frombuffer(mapped[0], np.uint8)
    assert int(array[255]) == 255 and int(array.sum()) == sum(range(256)) * 64


def test_a_file_that_cannot_be_mapped_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc" * 1000)

    def refuse(*args: object, **kwargs: object) -> mmap.mmap:
        raise OSError(19, "No such device")

    monkeypatch.setattr(fs.mmap, "mmap", refuse)
    with fs.mapped_file(path, 1 << 20) as mapped:
        assert mapped is not None and mapped[0] == b"abc" * 1000


@pytest.mark.parametrize("mapped", [False, True])
def test_a_file_crc_mapped_or_read_is_the_crc_of_the_range(tmp_path: Path, mapped: bool) -> None:
    import zlib

    from game_memory.store.read_files import file_crc

    path = tmp_path / "records.log"
    data = os.urandom(3 << 20)
    path.write_bytes(data)
    for start, end in ((0, len(data)), (5, 5), (100, 2_000_001), (len(data) - 1, len(data))):
        assert file_crc(str(path), start, end, mapped=mapped) == zlib.crc32(data[start:end])
    assert file_crc(str(path), 0, len(data) + 1, mapped=mapped) is None  # holds fewer bytes
    assert file_crc(str(tmp_path / "absent"), 0, 1, mapped=mapped) is None
    (tmp_path / "link").symlink_to(path)
    assert file_crc(str(tmp_path / "link"), 0, 1, mapped=mapped) is None
