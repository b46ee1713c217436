"""The growing entry columns: versions are prefixes, extended in place, forked when older."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from game_memory.index.columns import EntryColumns
from game_memory.index.entries import ENTRY_DTYPE, EntryState
from game_memory.index.partition import extend_partition


def records(start: int, count: int) -> np.ndarray:
    """``count`` entry records numbered from ``start`` (every field derived from it)."""
    found = np.zeros(count, ENTRY_DTYPE)
    for offset in range(count):
        number = start + offset
        found[offset]["state"] = EntryState.DELETED if number % 7 == 6 else EntryState.READY
        found[offset]["identity"] = number % 3
        found[offset]["row"] = number
        found[offset]["checksum"] = number * 31
        found[offset]["memory"] = number.to_bytes(4, "little") * 8
        found[offset]["digest"] = (number + 1).to_bytes(4, "big") * 8
        found[offset]["code"] = f"c{number}".encode()
        found[offset]["tag"] = 5
    return found


def expect(arrays: object, whole: np.ndarray) -> None:
    """The version's arrays hold exactly ``whole``'s fields."""
    assert np.array_equal(arrays.states, whole["state"])  # type: ignore[attr-defined]
    assert np.array_equal(arrays.identities, whole["identity"])  # type: ignore[attr-defined]
    assert np.array_equal(arrays.rows, whole["row"])  # type: ignore[attr-defined]
    assert np.array_equal(arrays.checksums, whole["checksum"])  # type: ignore[attr-defined]
    assert arrays.hashes == whole["memory"].tobytes()  # type: ignore[attr-defined]
    assert arrays.digests == whole["digest"].tobytes()  # type: ignore[attr-defined]
    assert np.array_equal(arrays.codes, whole["code"])  # type: ignore[attr-defined]


def test_a_newer_version_extends_the_buffers_in_place_and_older_versions_stay_as_they_were() -> (
    None
):
    columns, first = EntryColumns.of(records(0, 10))
    assert columns.capacity == 10  # an open's read allocates no spare room
    versions = [(first, records(0, 10))]
    lineage = columns
    for number in range(10, 400):
        lineage, arrays = lineage.extended(number, records(number, 1))
        versions.append((arrays, records(0, number + 1)))
    assert lineage is columns  # one lineage all along
    for arrays, whole in versions:
        expect(arrays, whole)
    # Spare room is bounded: grown by half (at least 256 records) only when full.
    assert 400 <= columns.capacity <= 400 + max(400 // 2, 256)


def test_a_large_read_has_room_so_its_first_appends_copy_nothing() -> None:
    columns, first = EntryColumns.of(records(0, 6_000))
    assert columns.capacity == 9_000  # half as many again, allocated, not written
    expect(first, records(0, 6_000))
    buffers = dict(columns._buffers)
    lineage, arrays = columns.extended(6_000, records(6_000, 3))
    assert lineage is columns and all(
        columns._buffers[name] is buffer for name, buffer in buffers.items()
    )  # written in place: no grown copy
    expect(arrays, records(0, 6_003))
    expect(first, records(0, 6_000))  # the read's version is unchanged


def test_extending_an_older_version_forks_so_neither_overwrites_the_other() -> None:
    columns, _ = EntryColumns.of(records(0, 5))
    _, newer = columns.extended(5, records(5, 3))
    other = records(100, 2)
    fork, forked = columns.extended(5, other)  # version 5 again, with other records
    assert fork is not columns
    expect(newer, records(0, 8))
    expect(forked, np.concatenate((records(0, 5), other)))
    # Both lineages go on growing independently.
    _, newest = columns.extended(8, records(8, 1))
    _, fork_next = fork.extended(7, records(7, 1))
    expect(newest, records(0, 9))
    expect(fork_next, np.concatenate((records(0, 5), other, records(7, 1))))


def test_a_versions_arrays_are_read_only() -> None:
    _, arrays = EntryColumns.of(records(0, 3))
    with pytest.raises(ValueError):
        arrays.states[0] = 1
    assert arrays.hashes.readonly and arrays.digests.readonly


def test_threads_extending_one_version_each_get_their_own_records() -> None:
    columns, _ = EntryColumns.of(records(0, 50))
    results: dict[int, object] = {}

    def extend(number: int) -> None:
        results[number] = columns.extended(50, records(1_000 * number, 20))[1]

    threads = [threading.Thread(target=extend, args=(number,)) for number in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for number, arrays in results.items():
        expect(arrays, np.concatenate((records(0, 50), records(1_000 * number, 20))))


def test_extend_partition_keeps_positions_and_records_of_every_version() -> None:
    info = os.stat(__file__)
    first = extend_partition(None, records(0, 20), "s" * 64, "o" * 64, info)
    second = extend_partition(first, records(20, 5), "s" * 64, "o" * 64, info)
    again = extend_partition(first, records(50, 5), "s" * 64, "o" * 64, info)  # a fork
    for partition, whole in ((first, records(0, 20)), (second, records(0, 25))):
        live = {
            bytes(r["memory"]): slot
            for slot, r in enumerate(whole)
            if r["state"] != EntryState.DELETED
        }
        assert dict(partition.position.items()) == live
        assert partition.memory_hash(3) == bytes(whole[3]["memory"])
        assert partition.digest(3) == bytes(whole[3]["digest"])
    assert again.memory_hash(20) == bytes(records(50, 1)[0]["memory"])
    assert second.memory_hash(20) == bytes(records(20, 1)[0]["memory"])
