"""Closing leaves a partition's read files as one part (``read_path.CLOSING_MERGE_MEMORIES``).

A load maps a lone part's arrays as they are and joins a chain's into copies (at 100k
memories a part of 5 memories after the rest cost a load 8 ms and 12 MB), so a closing
store merges the chain with what it does not cover, up to a bound; above it, closes add
parts as the binary counter of ``CLOSING_PARTS`` says. The merge itself
(``read_parts._merge_postings``, numpy inserts folded from the last part) must give exactly
what the general merge (``read_parts._general_merge``) gives.
"""

from __future__ import annotations

import bisect
import random
from pathlib import Path

import numpy as np
import pytest

from game_memory.durable import fs
from game_memory.store import read_parts, read_path
from game_memory.store.packed_ids import PackedIds, joined_ids
from game_memory.store.read_files import Part, encode_terms

from .helpers import MemoryFactory, StoreFactory
from .test_read_chains import answers, chain_counts, from_records, killed, memory, parts


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read files for partitions of a few dozen memories; appends write a part in the
    background from 8 memories (the defaults are 128 and 1,024)."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)


async def several_parts(
    save: Path, make_store: StoreFactory, make_memory: MemoryFactory, rng: random.Random
) -> int:
    """A save whose chain has several parts (closes that add parts, as above the bound);
    returns how many memories it holds."""
    bound = read_path.CLOSING_MERGE_MEMORIES
    read_path.CLOSING_MERGE_MEMORIES = 0
    try:
        number = 0
        for size in (40, 5, 3):
            store = make_store(save)
            batch = [memory(make_memory, number + n, rng) for n in range(size)]
            assert await store.append_many(batch) == [True] * size
            number += size
            await store.aclose()
    finally:
        read_path.CLOSING_MERGE_MEMORIES = bound
    assert len(chain_counts(save)) == 3
    return number


@pytest.mark.parametrize("appended", [4, 0])
async def test_a_close_leaves_one_part_that_reads_as_the_records(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, appended: int
) -> None:
    """With memories the chain does not cover (fewer than APPENDED_MINIMUM: only the close
    writes them), and without: a session that only asks still leaves one part."""
    rng = random.Random(5 + appended)
    save = tmp_path / "save"
    number = await several_parts(save, make_store, make_memory, rng) + appended
    store = make_store(save)
    for n in range(number - appended, number):
        await store.append(memory(make_memory, n, rng))
    expected = await answers(store)
    await store.aclose()
    assert chain_counts(save) == [number]
    assert len(parts(save)) == 1  # the parts after the first were removed
    reopened = make_store(save)
    assert await answers(reopened) == expected
    await reopened.aclose()
    assert chain_counts(save) == [number]  # one part already: nothing to merge
    assert await from_records(save, make_store) == expected


async def test_above_the_bound_a_close_adds_a_part(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    save = tmp_path / "save"
    store = make_store(save)
    assert await store.append_many([memory(make_memory, n, rng) for n in range(40)]) == [True] * 40
    await store.aclose()
    assert chain_counts(save) == [40]
    monkeypatch.setattr(read_path, "CLOSING_MERGE_MEMORIES", 40)  # 43 memories: above it
    store = make_store(save)
    for n in range(40, 43):
        await store.append(memory(make_memory, n, rng))
    expected = await answers(store)
    await store.aclose()
    assert chain_counts(save) == [40, 3]
    assert await from_records(save, make_store) == expected


_KILLED_MERGE = """
import asyncio, os, signal, sys
from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.store import read_path

read_path.LAZY_MINIMUM = 8
read_path.APPENDED_MINIMUM = 8

def dying(*arguments):  # the merged part was renamed in: killed before the old parts go
    os.kill(os.getpid(), signal.SIGKILL)

async def main():
    store = FileGameMemoryStore(sys.argv[1])
    read_path.remove_parts = dying
    await store.append(GameMemory(
        memory_id="m0999", session_id="session", owner_id="npc", scope="personal",
        kind="fact", payload_json="{}", moment=GameMoment(timeline_id="main", tick=999),
        searchable_text="dragon late"))
    await store.aclose()

asyncio.run(main())
"""


async def test_a_close_killed_after_the_merged_part_leaves_a_save_that_reads_right(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """Killed after the merged part replaced the first one and before the parts after it
    were removed: those no longer continue the chain (they name the old first part), so a
    load uses the merged part alone and reads as the records do."""
    rng = random.Random(8)
    save = tmp_path / "save"
    number = await several_parts(save, make_store, make_memory, rng)
    killed(_KILLED_MERGE, save)
    assert len(parts(save)) == 3  # the stale parts are still there
    assert chain_counts(save) == [number + 1]  # but a load uses the merged part alone
    store = make_store(save)
    found = await store.enumerate("session", "npc")
    assert len(found) == number + 1
    expected = await answers(store)
    await store.aclose()
    assert await from_records(save, make_store) == expected


def random_part(rng: random.Random, start: int, count: int, vocabulary: list[bytes]) -> Part:
    """A part's postings (the rest of it is not read by the postings merge)."""
    terms = sorted(rng.sample(vocabulary, rng.randint(0, min(len(vocabulary), 3 * count))))
    blob, term_offsets = encode_terms([term.decode() for term in terms])
    documents: list[int] = []
    frequencies: list[int] = []
    offsets = [0]
    for _ in terms:
        found = sorted(rng.sample(range(start, start + count), rng.randint(1, count)))
        documents += found
        frequencies += [rng.randint(1, 4) for _ in found]
        offsets.append(len(documents))
    return Part(
        start, count, (), [], *(np.empty(0, np.int64),) * 3, b"", b"", {}, {}, blob,
        term_offsets, np.asarray(offsets, np.int64), np.asarray(documents, np.int32),
        np.asarray(frequencies, np.int32), np.zeros(count, np.int64), {},
    )  # fmt: skip


@pytest.mark.parametrize("long_words", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_the_folded_merge_equals_the_general_merge(seed: int, long_words: bool) -> None:
    """Terms of the later parts before, between and after the first part's, shared with it
    or new, in one later part or several, or none at all; short words, and long ones
    sharing the bytes of a sort key or more (``_KEY_BYTES``), some not ASCII."""
    rng = random.Random(seed)
    if long_words:
        key = "k" * read_parts._KEY_BYTES
        stems = [key, key[:-1], key + "xy", "chérie-" + key[8:], "ü" * 12, "zz"]
        vocabulary = {rng.choice(stems) + rng.choice("aé") * rng.randint(0, 2) + str(n)
                      for n in range(60)} | set(stems)  # fmt: skip
    else:
        vocabulary = {rng.choice("abcdefgh") * rng.randint(1, 3) + str(n) for n in range(60)}
    words = sorted(word.encode() for word in vocabulary)
    parts, start = [], 0
    for number in range(rng.randint(2, 4)):
        count = rng.randint(1, 30) if number == 0 or rng.random() < 0.3 else rng.randint(1, 6)
        parts.append(random_part(rng, start, count, words))
        start += count
    folded = read_parts._merge_postings(parts)
    general = read_parts._general_merge(parts)
    assert folded[0] == general[0]
    for ours, theirs in zip(folded[1:], general[1:], strict=True):
        assert ours.dtype == theirs.dtype
        assert np.array_equal(ours, theirs)


def test_terms_sharing_one_key_are_placed_by_a_search_among_them() -> None:
    """Thousands of terms longer than a key with one key (a binary search among them each,
    not a list of them each: that was quadratic), placed where ``bisect`` puts them."""
    prefix = b"p" * (read_parts._KEY_BYTES + 6)
    first = sorted({prefix + str(number).encode() for number in range(0, 8_000, 2)})
    later = sorted({prefix + str(number).encode() for number in range(1, 2_000, 2)} | {first[7]})

    def arrays(terms: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        lengths = [len(term) for term in terms]
        return np.frombuffer(b"".join(terms), np.uint8), np.concatenate(([0], np.cumsum(lengths)))

    lows, present = read_parts._places(*arrays(first), *arrays(later))
    assert lows.tolist() == [bisect.bisect_left(first, term) for term in later]
    assert present.tolist() == [term == first[7] for term in later]


def test_a_term_with_a_zero_byte_takes_the_general_merge() -> None:
    """The sort keys order terms as bytes only without zero bytes (the tokenizer never
    makes one): parts that hold one are merged the general way, and rightly."""
    rng = random.Random(5)
    first = random_part(rng, 0, 6, [b"a", b"ab", b"b"])
    tail = random_part(rng, 6, 4, [b"a\x00b"])
    while not tail.term_blob:  # a part may draw no terms
        tail = random_part(rng, 6, 4, [b"a\x00b"])
    assert (
        read_parts._inserted(read_parts._postings_of(first), read_parts._postings_of(tail)) is None
    )
    merged = read_parts._merge_postings([first, tail])
    general = read_parts._general_merge([first, tail])
    assert merged[0] == general[0] and b"a\x00b" in merged[0]
    assert np.array_equal(merged[2], general[2]) and np.array_equal(merged[3], general[3])


def test_ids_are_packed_when_they_can_be() -> None:
    packed = PackedIds.of_ids(["m1", "m22", "m333"])
    assert packed is not None and list(packed) == ["m1", "m22", "m333"]
    assert packed.blob == b"m1\0m22\0m333\0"
    assert PackedIds.of_ids(packed) is packed
    assert PackedIds.of_ids([]) is not None and len(PackedIds.of_ids([]) or []) == 0
    assert PackedIds.of_ids(["é"]) is None  # not ASCII: a blob's byte is not a character
    assert PackedIds.of_ids(["a\0b"]) is None  # a NUL would split it in two
    joined = joined_ids([packed, ["m4"]], pack=True)
    assert isinstance(joined, PackedIds) and list(joined) == ["m1", "m22", "m333", "m4"]
    mixed = joined_ids([packed, ["é"]], pack=True)
    assert not isinstance(mixed, PackedIds) and list(mixed) == ["m1", "m22", "m333", "é"]
    assert joined_ids([packed, ["m4"]]) == ["m1", "m22", "m333", "m4"]  # a list unasked


def test_an_atomic_write_of_pieces_writes_them_in_order(tmp_path: Path) -> None:
    array = np.arange(5, dtype="<i8")
    target = tmp_path / "file"
    fs.atomic_write(target, [b"head", memoryview(array).cast("B"), b"", bytearray(b"end")])
    assert target.read_bytes() == b"head" + array.tobytes() + b"end"
    fs.atomic_write(target, b"bytes as before")
    assert target.read_bytes() == b"bytes as before"
    fs.atomic_write(target, memoryview(array).cast("B"))  # one buffer, not its items
    assert target.read_bytes() == array.tobytes()
