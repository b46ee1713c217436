"""The unsynced-intents marker: what it names, what a torn append leaves, what is corrupt."""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory import PersistenceError
from game_memory.store.unsynced import UnsyncedMarker

A = ("a" * 64, "b" * 64)
B = ("c" * 64, "d" * 64)


def test_the_marker_names_partitions_with_one_watermark_until_it_is_cleared(
    tmp_path: Path,
) -> None:
    marker = UnsyncedMarker(tmp_path / "unsynced.log")
    assert marker.read() is None
    marker.add(7, [A])
    marker.add(7, [B])
    found = marker.read()
    assert found is not None
    assert found.watermark == 7 and found.partitions == [A, B]
    marker.clear()
    assert marker.read() is None
    assert (tmp_path / "unsynced.log").stat().st_size == 0  # the file stays, emptied
    marker.add(9, [B])
    again = marker.read()
    assert again is not None and (again.watermark, again.partitions) == (9, [B])


@pytest.mark.parametrize("tail", [b"\0" * 96, b"GMU\x01" + b"\0" * 40, b"\xff" * 96])
def test_an_append_that_never_completed_is_ignored(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "unsynced.log"
    marker = UnsyncedMarker(path)
    marker.add(3, [A])
    with path.open("ab") as handle:
        handle.write(tail)
    found = marker.read()
    assert found is not None and found.partitions == [A]


def test_two_watermarks_are_corruption(tmp_path: Path) -> None:
    marker = UnsyncedMarker(tmp_path / "unsynced.log")
    marker.add(3, [A])
    marker.add(4, [B])
    with pytest.raises(PersistenceError, match="two watermarks"):
        marker.read()


@pytest.mark.parametrize(
    ("before", "tail"),
    [([], b"\0" * 96), ([A], b"\0" * 96), ([A], b"GMU\x01" + b"\0" * 40), ([], b"\xff" * 200)],
)
def test_an_append_after_one_that_never_completed_writes_over_its_remains(
    tmp_path: Path, before: list[tuple[str, str]], tail: bytes
) -> None:
    """A power loss can keep an unsynced append's bytes (zeros, a torn record): the next
    append must not land behind them, where ``read`` would never see it."""
    path = tmp_path / "unsynced.log"
    marker = UnsyncedMarker(path)
    if before:
        marker.add(3, before)
    with path.open("ab") as handle:
        handle.write(tail)
    marker.add(3, [B])
    found = marker.read()
    assert found is not None and (found.watermark, found.partitions) == (3, [*before, B])
    assert path.stat().st_size == 96 * (len(before) + 1)
