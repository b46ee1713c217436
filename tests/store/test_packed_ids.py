"""Ids kept packed as a read file stores them (``store/packed_ids.py``), and a view's
``IdList`` over them: every read gives what a list of the same ids gives."""

from __future__ import annotations

import random

import pytest

from game_memory.store.packed_ids import PackedIds, joined_ids, unpacked_ids
from game_memory.store.view import IdList


def blob_of(ids: list[str]) -> bytes:
    return "".join(f"{memory_id}\0" for memory_id in ids).encode("utf-8")


def packed(ids: list[str]) -> PackedIds:
    found = PackedIds.of_blob(blob_of(ids))
    assert found is not None
    return found


CASES = [[], [""], ["a"], ["a", "", "bc", ""], [f"memory-{i:06d}" for i in range(300)]]


@pytest.mark.parametrize("ids", CASES)
def test_packed_ids_read_as_the_list_they_were_made_of(ids: list[str]) -> None:
    found = packed(ids)
    assert len(found) == len(ids)
    assert list(found) == ids and found == ids and found == tuple(ids)
    assert [found[i] for i in range(len(ids))] == ids
    assert [found[-i] for i in range(1, len(ids) + 1)] == [ids[-i] for i in range(1, len(ids) + 1)]
    rng = random.Random(len(ids))
    for _ in range(50):
        start, stop = rng.randint(-5, len(ids) + 5), rng.randint(-5, len(ids) + 5)
        step = rng.choice([None, 1, 2, -1])
        assert found[start:stop:step] == ids[start:stop:step]
    for wrong in (len(ids), -len(ids) - 1):
        with pytest.raises(IndexError):
            found[wrong]
    assert found == unpacked_ids(blob_of(ids))
    if ids:
        positions = [rng.randrange(len(ids)) for _ in range(30)]
        assert found.picked(positions) == [ids[p] for p in positions]
    assert found.picked([]) == []


@pytest.mark.parametrize("ids", CASES)
def test_packed_ids_read_alike_before_and_after_their_cut_table(ids: list[str]) -> None:
    """A few ids are cut by the ends' items; a large pick makes the cut table first (0.7 ms
    per 100k ids, so not for the few ids a first recall reads); both read alike. A read
    file's map (a memoryview) gives the same ids as bytes."""
    found = PackedIds.of_blob(memoryview(blob_of(ids)))
    assert found is not None and found == ids
    rng = random.Random(7)
    few = [rng.randrange(len(ids)) for _ in range(20)] if ids else []
    assert found.picked(few) == [ids[p] for p in few]
    assert found[1:4] == ids[1:4] and found._bounds is None  # no table for these
    many = [rng.randrange(len(ids)) for _ in range(300)] if ids else []
    assert found.picked(many) == [ids[p] for p in many]
    assert (found._bounds is not None) == bool(ids)
    assert list(found) == ids and [found[i] for i in range(len(ids))] == ids
    assert found[2:-1] == ids[2:-1] and found.picked(few) == [ids[p] for p in few]


def test_packed_ids_are_only_kept_for_ascii_and_need_their_last_separator() -> None:
    assert PackedIds.of_blob(blob_of(["é", "a"])) is None
    assert unpacked_ids(blob_of(["é", "a"])) == ["é", "a"]
    with pytest.raises(ValueError, match="separator"):
        PackedIds.of_blob(b"a\0b")
    with pytest.raises(ValueError, match="separator"):
        unpacked_ids(b"a\0b")
    with pytest.raises(ValueError):
        unpacked_ids(b"\xff\0")  # not UTF-8


def test_joined_ids_keep_the_order_of_the_parts() -> None:
    parts = [["a", "bb"], [], ["c"], ["", "d"]]
    whole = [memory_id for part in parts for memory_id in part]
    joined = joined_ids([packed(part) for part in parts])
    assert isinstance(joined, PackedIds) and joined == whole
    assert joined[1:5] == whole[1:5]
    one = packed(["x"])
    assert joined_ids([one]) is one
    mixed = joined_ids([packed(["a"]), ["é"]])
    assert mixed == ["a", "é"] and isinstance(mixed, list)
    assert packed(["a"]) != packed(["b"]) and packed(["a", "b"]) != ["a"]


@pytest.mark.parametrize("restored", [[], ["r0", "r1", "r2"]])
def test_an_id_list_over_restored_ids_grows_and_reads_as_one_list(restored: list[str]) -> None:
    base = IdList([], None, packed(restored))
    assert list(base) == restored and len(base) == len(restored)
    grown = base.extended(["n0", "n1"])
    newer = grown.extended(["n2"])
    # A fork of ``grown`` (it was already extended): its own list, the first left alone.
    fork = grown.extended(["f0"])
    expected = {
        "base": restored,
        "grown": [*restored, "n0", "n1"],
        "newer": [*restored, "n0", "n1", "n2"],
        "fork": [*restored, "n0", "n1", "f0"],
    }
    for name, ids in (("base", base), ("grown", grown), ("newer", newer), ("fork", fork)):
        want = expected[name]
        assert list(ids) == want and ids == want and len(ids) == len(want), name
        assert [ids[i] for i in range(-len(want), len(want))] == want + want, name
        for cut in (slice(1, -1), slice(None, None, 2), slice(None, None, -1), slice(-2, 0, -2)):
            assert ids[cut] == want[cut], (name, cut)
        positions = list(range(len(want)))[::-1]
        assert ids.picked(positions) == [want[p] for p in positions], name
        restored_only = list(range(len(restored)))[::2]
        assert ids.picked(restored_only) == [want[p] for p in restored_only], name
        assert ids.picked([]) == []
        with pytest.raises(IndexError):
            ids.picked([len(want)])
        with pytest.raises(IndexError):
            ids[len(want)]
