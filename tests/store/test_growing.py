"""Versions of a partition's sequences share one buffer and the newest grows in place; an
older version never sees what a newer one added (``store/growing.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from game_memory.store.growing import Appended, Growing, appended


def test_the_newest_version_is_extended_in_place_and_older_ones_keep_their_items() -> None:
    first = Appended(["a", "b"])
    second = first.extended(["c"])
    third = second.extended(["d", "e"])
    assert list(first) == ["a", "b"] and len(first) == 2
    assert list(second) == ["a", "b", "c"]
    assert list(third) == ["a", "b", "c", "d", "e"]
    assert third.starts(first) and third.starts(second) and not first.starts(third)
    with pytest.raises(IndexError):
        _ = first[2]  # the item a newer version added is not this one's


def test_extending_an_older_version_copies_so_versions_never_share_a_slot() -> None:
    first = Appended(["a"])
    newest = first.extended(["b"])
    fork = first.extended(["x"])  # not the newest: its own buffer
    assert list(newest) == ["a", "b"] and list(fork) == ["a", "x"]
    assert not newest.starts(fork) and not fork.starts(newest)
    assert list(newest.extended(["c"])) == ["a", "b", "c"]
    assert list(fork) == ["a", "x"]


def test_an_appended_sequence_compares_and_slices_like_the_tuple_it_replaces() -> None:
    items = appended(("a", "b"), ["c"])
    expected = ("a", "b", "c")
    assert items == expected and expected == items  # both directions
    assert items != ("a", "b") and items != ("a", "b", "x")
    assert items[1:] == ("b", "c") and isinstance(items[1:], tuple)
    assert items[-1] == "c"
    assert appended(items, ["d"]) == ["a", "b", "c", "d"]


def test_growing_offsets_are_read_only_prefixes_and_older_versions_never_change() -> None:
    start = np.array([0, 10], np.int64)
    first, room = Growing.extend(start, None, np.array([20], np.int64))
    second, same = Growing.extend(first, room, np.array([30, 40], np.int64))
    assert same is room  # extended in place
    assert first.tolist() == [0, 10, 20] and second.tolist() == [0, 10, 20, 30, 40]
    assert not first.flags.writeable and not second.flags.writeable
    fork, other = Growing.extend(first, room, np.array([99], np.int64))  # not the newest
    assert other is not room and fork.tolist() == [0, 10, 20, 99]
    assert second.tolist() == [0, 10, 20, 30, 40]
    big, _ = Growing.extend(second, room, np.arange(1_000, dtype=np.int64))  # past the room
    assert big[:5].tolist() == [0, 10, 20, 30, 40] and big.size == 1_005


def test_growing_keeps_the_dtype_of_what_it_extends() -> None:
    # A join's classes, a lexical index's float counts: not only int64 offsets.
    kinds, room = Growing.extend(np.array([1, 2], np.int8), None, np.array([3], np.int64))
    assert kinds.dtype == np.int8 and kinds.tolist() == [1, 2, 3]
    more, same = Growing.extend(kinds, room, np.array([4], np.int64))
    assert same is room and more.dtype == np.int8 and more.tolist() == [1, 2, 3, 4]
    scores, _ = Growing.extend(np.array([0.5]), None, np.array([1.5]))
    assert scores.dtype == np.float64 and scores.tolist() == [0.5, 1.5]
    other, fresh = Growing.extend(np.array([1.0], np.float32), room, np.array([2.0]))
    assert fresh is not room and other.dtype == np.float32  # another column: its own room
