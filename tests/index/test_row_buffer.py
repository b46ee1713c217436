"""RowBuffer: a row file as first read is mapped; once it grows, only new rows are read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from game_memory.index.partition import RowBuffer


def _append(path: Path, rows: np.ndarray, torn: bytes = b"") -> None:
    with path.open("ab") as file:
        file.write(rows.astype("<f4").tobytes() + torn)


def test_a_grown_row_file_is_read_into_spare_room_not_mapped_again(tmp_path: Path) -> None:
    # Mapping the whole grown file again page-faults on every row at the next product (the
    # first recall after an append); the new rows are read into room after the held ones.
    path = tmp_path / "rows.f32"
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((10, 4)).astype(np.float32)
    _append(path, rows[:6])
    buffer = RowBuffer(tag=1, dimensions=4)
    first = buffer.load(str(path), 6).copy()
    handed = buffer.load(str(path), 6)
    _append(path, rows[6:8], torn=b"\x01\x02")  # a torn row being written is not read
    grown = buffer.load(str(path), 8)
    assert buffer.rows == 8 and np.array_equal(grown, rows[:8])
    spare = grown.base
    path.write_bytes(rows.astype("<f4").tobytes())  # the writer cut the torn row, appended
    again = buffer.load(str(path), 10)
    assert np.array_equal(again, rows) and again.base is spare  # no copy, no new map
    assert np.array_equal(handed, first)  # arrays handed out never change


def test_many_growths_copy_the_held_rows_rarely(tmp_path: Path) -> None:
    path = tmp_path / "rows.f32"
    _append(path, np.zeros((1, 2), np.float32))
    buffer = RowBuffer(tag=1, dimensions=2)
    buffer.load(str(path), 1)
    bases: list[object] = []
    for number in range(1, 3_000):
        _append(path, np.full((1, 2), number, np.float32))
        matrix = buffer.load(str(path), number + 1)
        assert float(matrix[number, 0]) == number
        if not any(matrix.base is base for base in bases):
            bases.append(matrix.base)
    assert len(bases) <= 3
    assert np.array_equal(buffer.array[:, 1], np.arange(3_000, dtype=np.float32))
