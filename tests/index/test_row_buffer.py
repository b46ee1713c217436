"""RowBuffer and RowMap: a row file is mapped, and extended in place as it grows.

A grown file used to be copied into anonymous memory with room: at 100k × 384 the process
held the rows twice while copying (434 MB at its peak, 265 MB before) and the first recall
after the first append took 85 ms. Where a map cannot grow in place, it still copies, but
releases each window of the map it copied.

A small file (``SMALL_ROWS_BYTES``) is read into memory instead: a map per small NPC cost a
world of thousands of them thousands of address ranges. The tests of maps make every file
"large" (``_maps_only``); the small files' tests say so.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from game_memory.index import partition as partition_module
from game_memory.index import row_map
from game_memory.index.partition import SMALL_ROWS_BYTES, RowBuffer
from game_memory.index.row_map import RowMap
from support.maps import mapped_file, resident_bytes


@pytest.fixture(autouse=True)
def _maps_only(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "small" not in request.node.name:
        monkeypatch.setattr(partition_module, "SMALL_ROWS_BYTES", 0)


def _append(path: Path, rows: np.ndarray, torn: bytes = b"") -> None:
    with path.open("ab") as file:
        file.write(rows.astype("<f4").tobytes() + torn)


def _opened(path: Path) -> Callable[[Callable[[int], Any]], Any]:
    def use(action: Callable[[int], Any]) -> Any:
        fd = os.open(path, os.O_RDONLY)
        try:
            return action(fd)
        finally:
            os.close(fd)

    return use


def test_a_grown_row_file_is_mapped_in_place_and_arrays_handed_out_stay_valid(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.f32"
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((10, 4)).astype(np.float32)
    _append(path, rows[:6])
    buffer = RowBuffer(tag=1, dimensions=4)
    handed = buffer.load(str(path), 6)
    first = handed.copy()
    assert mapped_file(handed) == str(path)
    _append(path, rows[6:8], torn=b"\x01\x02")  # a torn row being written is not mapped
    grown = buffer.load(str(path), 8)
    assert buffer.rows == 8 and np.array_equal(grown, rows[:8])
    assert grown.ctypes.data == handed.ctypes.data  # the same map, extended in place
    assert mapped_file(grown) == str(path) and not grown.flags.writeable
    path.write_bytes(rows.astype("<f4").tobytes())  # the writer cut the torn row, appended
    again = buffer.load(str(path), 10)
    assert np.array_equal(again, rows) and again.ctypes.data == handed.ctypes.data
    assert np.array_equal(handed, first)  # arrays handed out never change


def test_many_growths_map_again_only_when_the_reservation_is_outgrown(tmp_path: Path) -> None:
    path = tmp_path / "rows.f32"
    dimensions = 256  # 1 KiB rows: 4 MiB of slack is 4,096 of them
    _append(path, np.zeros((1, dimensions), np.float32))
    buffer = RowBuffer(tag=1, dimensions=dimensions)
    buffer.load(str(path), 1)
    starts: list[int] = []
    kept = []
    for number in range(1, 12_000, 7):
        _append(path, np.full((7, dimensions), number, np.float32))
        matrix = buffer.load(str(path), number + 7)
        assert float(matrix[number, 0]) == number and float(matrix[-1, -1]) == number
        if matrix.ctypes.data not in starts:
            starts.append(matrix.ctypes.data)
            kept.append(matrix)
    assert 2 <= len(starts) <= 3  # 4 MiB of slack, then twice the file
    for matrix in kept:  # every map handed out still reads what the file held
        assert float(matrix[0, 0]) == 0.0 and float(matrix[-1, 0]) == matrix.shape[0] - 7


def test_a_map_that_cannot_grow_in_place_is_copied_and_its_pages_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(row_map, "_MMAP", None)  # as on Windows
    path = tmp_path / "rows.f32"
    rows = np.random.default_rng(3).standard_normal((12_000, 384)).astype(np.float32)
    _append(path, rows[:10_000])  # 15 MB
    buffer = RowBuffer(tag=1, dimensions=384)
    handed = buffer.load(str(path), 10_000)
    assert mapped_file(handed) == str(path)
    assert float(handed.sum()) == pytest.approx(float(rows[:10_000].sum()), rel=1e-3, abs=1.0)
    assert resident_bytes(handed) > 14 << 20  # every page read is held
    _append(path, rows[10_000:])
    grown = buffer.load(str(path), 12_000)
    assert np.array_equal(grown, rows) and mapped_file(grown) != str(path)  # a copy
    assert resident_bytes(handed) < 1 << 20  # the map's pages were released as copied
    assert np.array_equal(handed, rows[:10_000])  # and read back, the same, when touched


def test_a_failed_map_leaves_the_rows_mapped_and_the_buffer_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.f32"
    rows = np.random.default_rng(4).standard_normal((40, 256)).astype(np.float32)
    _append(path, rows[:20])  # 20 KiB: growing to 40 maps pages after the ones mapped
    buffer = RowBuffer(tag=1, dimensions=256)
    handed = buffer.load(str(path), 20)
    real = row_map._MMAP
    assert real is not None

    def failing(address: int, size: int, prot: int, flags: int, fd: int, offset: int) -> Any:
        if fd >= 0:
            return -1 & 0xFFFF_FFFF_FFFF_FFFF  # MAP_FAILED
        return real(address, size, prot, flags, fd, offset)  # the reservation restored

    monkeypatch.setattr(row_map, "_MMAP", failing)
    _append(path, rows[20:40])
    grown = buffer.load(str(path), 40)
    assert np.array_equal(grown, rows) and mapped_file(grown) != str(path)  # copied
    assert np.array_equal(handed, rows[:20])  # the rows mapped before are intact


def test_a_row_map_extends_only_over_the_file_it_maps_and_within_its_reservation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows.f32"
    _append(path, np.ones((4, 2), np.float32))
    use = _opened(path)
    mapped: RowMap = use(lambda fd: RowMap(fd, 4, 2))
    assert mapped.extendable and mapped.array().shape == (4, 2)
    assert use(lambda fd: mapped.extend(fd, 3))  # fewer rows than mapped: nothing to do
    _append(path, np.full((2, 2), 5, np.float32))
    assert use(lambda fd: mapped.extend(fd, 6))
    assert mapped.array()[4:].tolist() == [[5.0, 5.0], [5.0, 5.0]]
    past = (5 << 20) // 8  # rows past the reservation (4 MiB of slack)
    assert not use(lambda fd: mapped.extend(fd, past))
    assert mapped.extendable and mapped.rows == 6  # still grows, within it


def test_readers_of_handed_out_rows_see_them_unchanged_while_the_file_grows(
    tmp_path: Path,
) -> None:
    # A search thread reads arrays handed out while the writer's growth maps more of the
    # file in place, outgrows reservations and maps again: every array stays readable and
    # holds the rows it was handed with (a map released under a reader would crash here).
    import threading
    import time

    path = tmp_path / "rows.f32"
    dimensions = 512  # 2 KiB rows: a reservation is outgrown every few thousand rows
    _append(path, np.zeros((1, dimensions), np.float32))
    buffer = RowBuffer(tag=1, dimensions=dimensions)
    handed: list[np.ndarray] = [buffer.load(str(path), 1)]
    stop = threading.Event()
    problems: list[str] = []
    sweeps = [0]

    def read() -> None:
        while not stop.is_set():
            sweeps[0] += 1
            for matrix in list(handed):
                last = matrix.shape[0] - 1
                if float(matrix[last, 0]) != last or float(matrix[0, -1]) != 0.0:
                    problems.append(f"rows of {matrix.shape[0]} changed")
            time.sleep(0.000_2)  # lets the writer run (the GIL)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for number in range(1, 4_000):
            _append(path, np.full((1, dimensions), number, np.float32))
            with buffer.lock:
                matrix = buffer.load(str(path), number + 1)
            if number % 50 == 0:
                handed.append(matrix)
    finally:
        stop.set()
        reader.join()
    assert not problems and sweeps[0] > 100
    assert len({matrix[:1].ctypes.data for matrix in handed}) >= 2  # outgrown: mapped again
    assert float(buffer.array.sum(dtype=np.float64)) == dimensions * sum(range(4_000))


def test_a_small_row_file_is_read_not_mapped_and_grows_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "rows.f32"
    rng = np.random.default_rng(9)
    dimensions = 4
    rows = rng.standard_normal((SMALL_ROWS_BYTES // 16 + 50, dimensions)).astype(np.float32)
    _append(path, rows[:10], torn=b"\x01\x02")  # a row being written is not read
    buffer = RowBuffer(tag=1, dimensions=dimensions)
    handed = buffer.load(str(path), 10)
    first = handed.copy()
    assert mapped_file(handed) != str(path)  # held in memory
    assert np.array_equal(handed, rows[:10])
    with path.open("r+b") as file:  # complete the torn row, then append more
        file.truncate(10 * 16)
    _append(path, rows[10:40])
    grown = buffer.load(str(path), 40)
    assert np.array_equal(grown, rows[:40]) and mapped_file(grown) != str(path)
    assert np.array_equal(handed, first)  # arrays handed out are never written again
    # Past SMALL_ROWS_BYTES it is mapped like any large file; earlier arrays stay valid.
    _append(path, rows[40:])
    large = buffer.load(str(path), rows.shape[0])
    assert mapped_file(large) == str(path)
    assert np.array_equal(large, rows) and np.array_equal(handed, first)


def test_small_row_files_cost_no_address_range_of_their_own(tmp_path: Path) -> None:
    """A world of thousands of small NPCs: each NPC's row file mapped was two address ranges
    (its rows and the reserve after them) against the kernel's 65,530 by default; read into
    memory, 200 of them add none."""

    def ranges() -> int:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)

    rng = np.random.default_rng(3)
    paths = []
    for number in range(200):
        path = tmp_path / f"rows-{number}.f32"
        _append(path, rng.standard_normal((10, 384)).astype(np.float32))
        paths.append(path)
    before = ranges()
    buffers = [RowBuffer(tag=1, dimensions=384) for _ in paths]
    held = [buffer.load(str(path), 10) for buffer, path in zip(buffers, paths, strict=True)]
    assert ranges() - before < 20  # the heap may grow by an arena or two, not 400 ranges
    assert all(array.shape == (10, 384) for array in held)


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="POSIX only")
def test_the_first_map_of_a_row_file_asks_the_os_to_read_it_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the page cache evicted, a recall's product faulted the rows in page by page
    after the other stages; read ahead from the map on, the disk reads them meanwhile (the
    100k open + first recall, evicted: 126-154 -> 117 ms). Only the first map: a grown
    file's new rows were just written, and a small file is read whole anyway."""
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise

    def spy(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((offset, length, advice))
        real(fd, offset, length, advice)

    monkeypatch.setattr(partition_module.os, "posix_fadvise", spy)
    path = tmp_path / "rows.f32"
    rows = np.random.default_rng(3).standard_normal((12, 4)).astype(np.float32)
    _append(path, rows[:8])
    buffer = RowBuffer(tag=1, dimensions=4)
    assert np.array_equal(buffer.load(str(path), 8), rows[:8])
    assert advised == [(0, 8 * 4 * 4, os.POSIX_FADV_WILLNEED)]
    _append(path, rows[8:])
    assert np.array_equal(buffer.load(str(path), 12), rows)
    assert len(advised) == 1
