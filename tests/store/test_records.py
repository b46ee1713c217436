"""The record framing of partition logs: round trips, torn tails and corruption."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from game_memory.store.records import (
    HEADER_BYTES,
    RecordCorruption,
    encode_record,
    scan_records,
)

payloads = st.lists(
    st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3).map(
        lambda value: json.dumps(value).encode()
    ),
    min_size=1,
    max_size=6,
)


@given(payloads)
def test_records_round_trip_in_order(items: list[bytes]) -> None:
    data = b"".join(encode_record(item) for item in items)
    scan = scan_records(data, maximum_payload=1 << 20)
    assert scan.payloads == items
    assert (scan.end, scan.torn_bytes) == (len(data), 0)


@given(payloads, st.data())
def test_any_prefix_of_the_last_record_is_a_torn_tail(
    items: list[bytes], data: st.DataObject
) -> None:
    complete = b"".join(encode_record(item) for item in items[:-1])
    last = encode_record(items[-1])
    cut = data.draw(st.integers(1, len(last) - 1))
    scan = scan_records(complete + last[:cut], maximum_payload=1 << 20)
    assert scan.payloads == items[:-1]
    assert (scan.end, scan.torn_bytes) == (len(complete), cut)


def test_a_zero_filled_tail_is_torn_not_corrupt() -> None:
    record = encode_record(b"{}")
    for zeros in (1, HEADER_BYTES - 1, HEADER_BYTES, 4_096):
        scan = scan_records(record + bytes(zeros), maximum_payload=100)
        assert scan.payloads == [b"{}"] and scan.torn_bytes == zeros


def test_a_scan_can_start_at_a_later_record_boundary() -> None:
    first, second = encode_record(b"[1]"), encode_record(b"[2]")
    scan = scan_records(second, base_offset=len(first), maximum_payload=100)
    assert scan.payloads == [b"[2]"] and scan.end == len(first) + len(second)


@pytest.mark.parametrize("position", range(HEADER_BYTES + len(b'{"a": 1}')))
@pytest.mark.parametrize("which", ["middle", "last"])
def test_flipping_any_byte_of_a_complete_record_is_corruption(position: int, which: str) -> None:
    records = [encode_record(b'{"a": 1}') for _ in range(3)]
    target = 1 if which == "middle" else 2
    damaged = bytearray(records[target])
    damaged[position] ^= 0x40
    records[target] = bytes(damaged)
    with pytest.raises(RecordCorruption) as raised:
        scan_records(b"".join(records), maximum_payload=1 << 20)
    assert raised.value.offset == target * len(records[0])


def test_a_length_pointing_past_the_end_is_caught_by_its_checksum() -> None:
    # Without the length checksum this would read as a torn tail and later records would
    # be cut off by the next writer.
    first = bytearray(encode_record(b'{"a": 1}'))
    first[7] = 0x01  # length += 16 MiB
    with pytest.raises(RecordCorruption, match="length"):
        scan_records(bytes(first) + encode_record(b"{}"), maximum_payload=1 << 30)


def test_a_declared_length_above_the_bound_is_corruption() -> None:
    with pytest.raises(RecordCorruption, match="too large"):
        scan_records(encode_record(b"x" * 200), maximum_payload=100)


def test_garbage_after_the_records_is_corruption() -> None:
    with pytest.raises(RecordCorruption, match="bad magic"):
        scan_records(encode_record(b"{}") + b"junk", maximum_payload=100)
    with pytest.raises(RecordCorruption, match="bad magic"):
        scan_records(encode_record(b"{}") + b"not a record at all", maximum_payload=100)


def test_a_short_record_followed_by_another_header_is_corruption() -> None:
    # Bytes missing from the middle of a log (not a torn tail): a header follows.
    whole = encode_record(b'{"payload": "long enough to lose twenty bytes"}')
    following = encode_record(b"{}")[:-1]  # shorter than what is missing
    with pytest.raises(RecordCorruption, match="cut short"):
        scan_records(whole[:-20] + following, maximum_payload=1 << 20)
    with pytest.raises(RecordCorruption, match="checksum"):
        scan_records(whole[:-1] + following, maximum_payload=1 << 20)
