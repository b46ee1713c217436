"""The PCK v3 writer and reader: round trips, layout rules, and refusals of bad packs."""

from __future__ import annotations

import hashlib
import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .pck import FORMAT_VERSION, PackFormatError, read_pack, write_pack

FILES = {
    "project.godot": b"config_version=5\n",
    "addons/game_memory/game_memory.gd": b"extends Node\n" * 50,
    "empty.txt": b"",
    "caf\u00e9/\u00fcnicode.tres": b"[gd_resource]\n",
}


def test_round_trip_returns_every_file_byte_for_byte(tmp_path: Path) -> None:
    written = write_pack(tmp_path / "game.pck", FILES)
    index, contents = read_pack(tmp_path / "game.pck")
    assert contents == FILES
    assert index == written
    assert index.paths() == sorted(FILES)


def test_header_matches_the_v3_layout(tmp_path: Path) -> None:
    write_pack(tmp_path / "game.pck", FILES, engine_version=(4, 6, 0))
    blob = (tmp_path / "game.pck").read_bytes()
    magic, version, major, minor, patch, flags, file_base, dir_offset = struct.unpack_from(
        "<4sIIIIIQQ", blob
    )
    assert (magic, version, (major, minor, patch)) == (b"GDPC", FORMAT_VERSION, (4, 6, 0))
    assert flags == 2  # REL_FILEBASE, as the shipped packs use
    assert file_base == 0x70  # 0x68 header padded to 16
    assert blob[0x28:0x68] == b"\0" * 64
    assert dir_offset > file_base
    (count,) = struct.unpack_from("<I", blob, dir_offset)
    assert count == len(FILES)


def test_directory_offsets_sizes_and_md5s_point_at_the_data(tmp_path: Path) -> None:
    index = write_pack(tmp_path / "game.pck", FILES, alignment=32)
    blob = (tmp_path / "game.pck").read_bytes()
    for entry in index.entries:
        assert entry.offset % 32 == 0
        data = blob[entry.offset : entry.offset + entry.size]
        assert data == FILES[entry.path]
        assert entry.md5 == hashlib.md5(data).digest()
    ends = sorted((entry.offset, entry.offset + entry.size) for entry in index.entries)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(ends))
    assert ends[-1][1] <= index.dir_offset


def test_directory_paths_are_padded_to_four_bytes(tmp_path: Path) -> None:
    index = write_pack(tmp_path / "game.pck", {"abcde": b"x"})
    blob = (tmp_path / "game.pck").read_bytes()
    (path_len,) = struct.unpack_from("<I", blob, index.dir_offset + 4)
    assert path_len == 8
    assert blob[index.dir_offset + 8 : index.dir_offset + 16] == b"abcde\0\0\0"


def test_writing_twice_gives_identical_bytes(tmp_path: Path) -> None:
    write_pack(tmp_path / "a.pck", FILES)
    write_pack(tmp_path / "b.pck", dict(reversed(list(FILES.items()))))
    assert (tmp_path / "a.pck").read_bytes() == (tmp_path / "b.pck").read_bytes()


@pytest.mark.parametrize(
    "path", ["res://x.gd", "/abs.gd", "a/../b.gd", "a//b.gd", "./a.gd", "a\\b.gd", ""]
)
def test_bad_paths_are_refused_with_the_path_named(tmp_path: Path, path: str) -> None:
    with pytest.raises(PackFormatError, match="pack path"):
        write_pack(tmp_path / "game.pck", {path: b"x"})
    assert not (tmp_path / "game.pck").exists()


def test_alignment_must_be_a_power_of_two(tmp_path: Path) -> None:
    with pytest.raises(PackFormatError, match="alignment 24"):
        write_pack(tmp_path / "game.pck", FILES, alignment=24)


def test_reader_detects_a_flipped_data_byte(tmp_path: Path) -> None:
    index = write_pack(tmp_path / "game.pck", FILES)
    entry = next(entry for entry in index.entries if entry.size > 0)
    blob = bytearray((tmp_path / "game.pck").read_bytes())
    blob[entry.offset] ^= 0xFF
    (tmp_path / "game.pck").write_bytes(bytes(blob))
    with pytest.raises(PackFormatError, match=f"{entry.path} does not match its md5"):
        read_pack(tmp_path / "game.pck")
    _, contents = read_pack(tmp_path / "game.pck", verify=False)
    assert contents[entry.path] != FILES[entry.path]


def test_reader_refuses_wrong_magic_and_version(tmp_path: Path) -> None:
    write_pack(tmp_path / "game.pck", FILES)
    blob = bytearray((tmp_path / "game.pck").read_bytes())
    (tmp_path / "bad_magic.pck").write_bytes(b"XXXX" + bytes(blob[4:]))
    blob[4] = 2
    (tmp_path / "v2.pck").write_bytes(bytes(blob))
    with pytest.raises(PackFormatError, match="magic"):
        read_pack(tmp_path / "bad_magic.pck")
    with pytest.raises(PackFormatError, match="pack format 2"):
        read_pack(tmp_path / "v2.pck")


def test_reader_refuses_a_truncated_pack(tmp_path: Path) -> None:
    write_pack(tmp_path / "game.pck", FILES)
    blob = (tmp_path / "game.pck").read_bytes()
    (tmp_path / "short.pck").write_bytes(blob[:-10])
    (tmp_path / "tiny.pck").write_bytes(blob[:20])
    with pytest.raises(PackFormatError):
        read_pack(tmp_path / "short.pck")
    with pytest.raises(PackFormatError, match="too short"):
        read_pack(tmp_path / "tiny.pck")


def test_reader_refuses_an_entry_pointing_outside_the_data(tmp_path: Path) -> None:
    index = write_pack(tmp_path / "game.pck", {"a.gd": b"x" * 40})
    blob = bytearray((tmp_path / "game.pck").read_bytes())
    size_at = index.dir_offset + 4 + 4 + 4 + 8  # count, path_len, "a.gd", offset
    struct.pack_into("<Q", blob, size_at, 10_000)
    (tmp_path / "game.pck").write_bytes(bytes(blob))
    with pytest.raises(PackFormatError, match=r"a\.gd data"):
        read_pack(tmp_path / "game.pck")


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(
    files=st.dictionaries(
        st.lists(_names.filter(lambda name: name not in (".", "..")), min_size=1, max_size=3).map(
            "/".join
        ),
        st.binary(max_size=300),
        max_size=12,
    ),
    alignment=st.sampled_from([4, 16, 32, 64]),
)
def test_any_file_set_round_trips(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes], alignment: int
) -> None:
    pack = tmp_path_factory.mktemp("pck") / "game.pck"
    written = write_pack(pack, files, alignment=alignment)
    index, contents = read_pack(pack)
    assert contents == files
    assert index == written
