"""Entry records: 128 bytes, checksummed, raw hashes; content digests and row checksums."""

from __future__ import annotations

import gc
import hashlib
import weakref

import numpy as np
import pytest

from game_memory import GameMoment
from game_memory.index.entries import (
    ENTRY_BYTES,
    NO_VALUE,
    EntryRecord,
    EntryState,
    MemoryDigests,
    content_digest,
    decode_entries,
    encode_entry,
    encode_ready,
    memory_hash,
    row_checksums,
)
from support.vectors import MemoryFactory


def record(memory: bytes = b"m" * 32, **fields: object) -> EntryRecord:
    values: dict[str, object] = {
        "state": EntryState.READY,
        "identity": 3,
        "row": 41,
        "memory_hash": memory,
        "digest": bytes(range(32)),
        "code": "",
        "checksum": 0xDEADBEEF,
    }
    values.update(fields)
    return EntryRecord(**values)  # type: ignore[arg-type]


def test_a_record_is_128_bytes_and_decodes_to_what_was_encoded() -> None:
    data = encode_entry(record(), tag=0x01020304) + encode_entry(
        record(state=EntryState.PENDING, identity=NO_VALUE, row=NO_VALUE, code="embedding_pending"),
        tag=0x01020304,
    )
    assert len(data) == 2 * ENTRY_BYTES
    records, torn = decode_entries(data)
    assert torn == 0 and records.size == 2
    assert records["state"].tolist() == [EntryState.READY, EntryState.PENDING]
    assert records["identity"].tolist() == [3, NO_VALUE]
    assert records["row"].tolist() == [41, NO_VALUE]
    assert records["tag"].tolist() == [0x01020304, 0x01020304]
    assert records["checksum"].tolist()[0] == 0xDEADBEEF
    assert records["memory"][0].tobytes() == b"m" * 32
    assert records["digest"][0].tobytes() == bytes(range(32))
    assert bytes(records["code"][1]) == b"embedding_pending"


def test_hashes_ending_in_zero_bytes_survive_the_round_trip() -> None:
    # A fixed-width string field would strip these: one memory in 128 would never match.
    hashed = b"\x07" * 30 + b"\x00\x00"
    digest = b"\x00" * 31 + b"\x01"
    records, _ = decode_entries(encode_entry(record(hashed, digest=digest), tag=9))
    assert records["memory"].tobytes() == hashed
    assert records["digest"].tobytes() == digest


def test_a_torn_tail_is_reported_and_the_whole_records_before_it_are_kept() -> None:
    data = encode_entry(record(), tag=1) + encode_entry(record(), tag=1)[:50]
    records, torn = decode_entries(data)
    assert (records.size, torn) == (1, 50)


@pytest.mark.parametrize("position", [8, 12, 20, 60, 90, 113, 118, 125])
def test_any_flipped_byte_of_a_record_fails_its_checksum(position: int) -> None:
    data = bytearray(encode_entry(record(), tag=1) * 2)
    data[ENTRY_BYTES + position] ^= 0x10
    with pytest.raises(ValueError, match="record 1 fails its checksum"):
        decode_entries(bytes(data))


@pytest.mark.parametrize(("position", "value"), [(0, 0x00), (3, 0x02), (4, 0), (4, 9)])
def test_a_bad_magic_or_state_is_malformed(position: int, value: int) -> None:
    data = bytearray(encode_entry(record(), tag=1))
    data[position] = value
    with pytest.raises(ValueError, match="record 0 is malformed"):
        decode_entries(bytes(data))


def test_the_content_digest_changes_with_any_field_of_the_memory(
    make_memory: MemoryFactory,
) -> None:
    base = make_memory("m1", tags=("a",), metadata={"k": "v"})
    assert content_digest(base) == content_digest(
        make_memory("m1", tags=("a",), metadata={"k": "v"})
    )
    variants = [
        make_memory("m2", tags=("a",), metadata={"k": "v"}),
        make_memory("m1", tags=("a", "b"), metadata={"k": "v"}),
        make_memory("m1", tags=("a",), metadata={"k": "w"}),
        make_memory("m1", tags=("a",), metadata={"k": "v"}, importance=0.6),
        make_memory("m1", tags=("a",), metadata={"k": "v"}, text="other"),
        make_memory(
            "m1",
            tags=("a",),
            metadata={"k": "v"},
            moment=GameMoment(timeline_id="world", tick=1, calendar_json='{"day":1}'),
        ),
    ]
    digests = {content_digest(variant) for variant in variants}
    assert len(digests) == len(variants) and content_digest(base) not in digests


def test_the_memory_hash_is_sha256_of_the_id() -> None:
    assert memory_hash("one") == hashlib.sha256(b"one").digest()


def test_cached_digests_equal_computed_ones_and_the_cache_stays_bounded(
    make_memory: MemoryFactory,
) -> None:
    cache = MemoryDigests(maximum=4)
    memories = [make_memory(f"m{index}") for index in range(10)]
    for memory in memories + memories[:3]:
        assert cache.get(memory) == (memory_hash(memory.memory_id), content_digest(memory))
    assert len(cache._cache) == 4


def test_the_digest_cache_keeps_no_memory_alive(make_memory: MemoryFactory) -> None:
    # Up to 300k memories (1.5-4 KB each) outlived the partition cache's bound when the
    # entries held them; they refer to their memory weakly, and a dead one's entry found
    # under a reused id is not the new object's.
    cache = MemoryDigests(maximum=4)
    memory, live = make_memory("m1"), make_memory("m2", text="another")
    expected = cache.get(memory)
    gone = weakref.ref(memory)
    cache._cache[id(live)] = cache._cache.pop(id(memory))  # as if ``live`` took its id
    del memory
    gc.collect()
    assert gone() is None
    assert cache.get(live) == (memory_hash("m2"), content_digest(live)) != expected


def test_entries_of_memories_that_died_leave_the_digest_cache(make_memory: MemoryFactory) -> None:
    # Every eviction reads an NPC's partition again as new objects: dead entries kept their
    # slots until the LRU bound (58k entries for 1.9k live memories in a soak, ~100 MB).
    cache = MemoryDigests(maximum=1_000)
    kept = [make_memory(f"k{index}") for index in range(5)]
    cache.get_many(kept)
    for round_ in range(20):
        cache.get_many([make_memory(f"r{round_}-{index}") for index in range(50)])
        gc.collect()
    cache.get_many(kept)
    assert len(cache._cache) <= len(kept) + 50
    assert cache.get(kept[0]) == (memory_hash("k0"), content_digest(kept[0]))


def test_a_row_checksum_changes_when_any_byte_of_the_row_changes() -> None:
    rows = np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)
    expected = row_checksums(rows)
    raw = bytearray(rows.tobytes())
    for position in range(32):
        damaged = bytearray(raw)
        damaged[position] ^= 0x80
        changed = row_checksums(np.frombuffer(bytes(damaged), dtype=np.float32).reshape(2, 8))
        assert changed[0] != expected[0] and changed[1] == expected[1]


def test_ready_records_framed_in_one_pass_are_the_bytes_of_each_framed_alone() -> None:
    rng = np.random.default_rng(3)
    hashes = [memory_hash(f"m{n}") for n in range(70)]
    digests = [rng.bytes(32) for _ in hashes]
    checksums = rng.integers(0, 2**32, len(hashes), dtype=np.uint64).astype(np.uint32)
    framed = encode_ready(2, 5, hashes, digests, checksums, 0xDEADBEEF)
    alone = b"".join(
        encode_entry(
            EntryRecord(EntryState.READY, 2, 5 + n, hashes[n], digests[n], "", int(checksums[n])),
            0xDEADBEEF,
        )
        for n in range(len(hashes))
    )
    assert framed == alone
    records, torn = decode_entries(framed)
    assert torn == 0 and records["row"].tolist() == list(range(5, 75))
