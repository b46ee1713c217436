"""Read-file chains: new memories cost a part of their own, never a rewrite of the partition's
read file, and a store opened from a chain reads exactly what its records say
(``store/read_files.py``, ``store/read_parts.py``, ``store/read_path.py``).
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from game_memory.durable.names import partition_hash
from game_memory.store import read_chain, read_path
from game_memory.store import read_files as read_file_module
from game_memory.store.lazy import LazyMemories
from game_memory.store.read_chain import load_chain
from game_memory.store.read_path import content_digests
from game_memory.store.records import HEADER_BYTES, MAGIC

from .helpers import DATA, MemoryFactory, StoreFactory

WORDS = ["sword", "river", "tavern", "dragon", "merchant", "storm", "harvest", "smith"]
TAGS = ["rumour", "quest", "secret"]
SESSION, OWNER = partition_hash("session"), partition_hash("npc")


@pytest.fixture(autouse=True)
def small_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give partitions of a few dozen memories read files, written after a few appends too
    (the defaults are 128 and 1,024)."""
    monkeypatch.setattr(read_path, "LAZY_MINIMUM", 8)
    monkeypatch.setattr(read_path, "APPENDED_MINIMUM", 8)
    # These tests build chains of several parts by closing the store: closing leaves a
    # partition of up to CLOSING_MERGE_MEMORIES as one part (tests/store/test_close_merge.py),
    # so here every partition is above it and closes add parts (the binary counter of
    # CLOSING_PARTS, which larger partitions keep).
    monkeypatch.setattr(read_path, "CLOSING_MERGE_MEMORIES", 0)


def folder(save: Path) -> str:
    return os.fspath(save / DATA / f"s-{SESSION}")


def parts(save: Path) -> list[Path]:
    """The partition's chain parts on disk, in number order (until one is missing)."""
    found = []
    while True:
        path = read_file_module.read_file_path(folder(save), OWNER, len(found))
        if not path.exists():
            return found
        found.append(path)


def chain_counts(save: Path) -> list[int]:
    """How many memories each part of the chain a load would use covers."""
    return [read.part.count for read in load_chain(folder(save), SESSION, OWNER)]


def rewritten_header(data: bytes, **changes: Any) -> bytes:
    """A read file's bytes with header fields changed (its header CRC made to hold)."""
    import json
    import zlib

    length = int.from_bytes(data[8:12], "little")
    header = json.loads(data[16 : 16 + length])
    header.update(changes)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    # The arrays' offsets count from the header's end: keep its length.
    encoded = encoded.ljust(length) if len(encoded) <= length else encoded
    assert len(encoded) == length
    head = b"GMREAD01" + length.to_bytes(4, "little") + zlib.crc32(encoded).to_bytes(4, "little")
    return head + encoded + data[16 + length :]


def query(text: str | None, tick: int | None = None, **fields: Any) -> GameMemoryQuery:
    at = GameMoment(timeline_id="main", tick=tick) if tick is not None else None
    return GameMemoryQuery(
        session_id="session", owner_id="npc", text=text, at_or_before=at, limit=12, **fields
    )


QUERIES = [
    query("dragon river"),
    query("storm", tick=40),
    query(None, tick=25),
    query("smith harvest", tags=["rumour"]),
    query("merchant tavern", minimum_importance=0.5),
    query("sword quest", tags=["quest", "secret"], tick=70),
]


async def answers(store: FileGameMemoryStore) -> list[list[tuple[str, float]]]:
    found = []
    for request in QUERIES:
        snapshot = await store.snapshot(request)
        found.append([(hit.memory.memory_id, hit.score) for hit in snapshot.lexical])
    return found


def memory(
    make_memory: MemoryFactory, number: int, rng: random.Random, **fields: Any
) -> GameMemory:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
    values: dict[str, Any] = {
        "owner_id": "npc",
        "text": f"{words} {number}",
        "moment": GameMoment(timeline_id=rng.choice(["main", "main", "dream"]), tick=number),
        "importance": round(rng.random(), 3),
        "tags": rng.sample(TAGS, rng.randint(0, 2)),
        "belief_key": rng.choice([None, None, None, "weather", "king"]),
    }
    values.update(fields)
    return make_memory(f"m{number:04d}", **values)


async def from_records(save: Path, make_store: StoreFactory) -> list[list[tuple[str, float]]]:
    """What a store reading the records alone answers (a copy without read files)."""
    bare = save.parent / f"{save.name}-bare"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(save, bare)
    shutil.rmtree(bare / DATA / "read", ignore_errors=True)
    store = make_store(bare)
    found = await answers(store)
    await store.aclose()
    return found


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_chain_reads_exactly_like_the_records_through_appends_batches_and_reopens(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, seed: int
) -> None:
    """Single appends, batches, retractions, consolidations (whose sources come before and
    after them), segments rolling over, and stores closed and opened again from their
    chains: every open answers as the records do, bit for bit."""
    rng = random.Random(seed)
    save = tmp_path / "save"
    store = make_store(save, maximum_file_bytes=4_096)
    number = 0
    ids: list[str] = []
    longest = 0
    for round_number in range(6):
        for _ in range(rng.randint(2, 4)):
            kind = rng.random()
            if kind < 0.4:
                batch = [memory(make_memory, number + n, rng) for n in range(rng.randint(2, 30))]
                number += len(batch)
                assert await store.append_many(batch) == [True] * len(batch)
                ids.extend(m.memory_id for m in batch)
            elif kind < 0.8:
                for _ in range(rng.randint(1, 12)):
                    fields: dict[str, Any] = {}
                    if rng.random() < 0.1:  # a summary naming a memory still to come
                        fields = {"kind": "reflection", "consolidates": [f"m{number + 3:04d}"]}
                    await store.append(memory(make_memory, number, rng, **fields))
                    ids.append(f"m{number:04d}")
                    number += 1
            elif kind < 0.9 and ids:
                moment = GameMoment(timeline_id="main", tick=rng.randint(0, number))
                await store.forget("session", "npc", rng.choice(ids), moment)
            elif len(ids) > 3:
                summary = make_memory(
                    f"s{number:04d}",
                    owner_id="npc",
                    kind="reflection",
                    text=f"summary of {rng.choice(WORDS)}",
                    moment=GameMoment(timeline_id="main", tick=number),
                )
                await store.consolidate("session", "npc", rng.sample(ids, 2), summary)
                number += 1
            await answers(store)  # reads in between, as a game's would
        expected = await answers(store)
        await store.aclose()
        longest = max(longest, len(parts(save)))
        held = len(await make_store(save).enumerate("session", "npc"))
        assert sum(chain_counts(save)) == (held if held >= 8 else 0)  # all covered at close
        store = make_store(save, maximum_file_bytes=4_096)
        assert await answers(store) == expected, f"round {round_number}"
        assert await from_records(save, make_store) == expected
    await store.aclose()
    assert longest > 1  # the chains had parts after the first


async def test_new_memories_cost_a_part_of_their_own_and_closing_merges_nothing(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A save reopened, given a few memories and closed again keeps its read files and
    adds a part for the new memories: only those are digested and tokenized, and no part
    is read back (closing never merges)."""
    from game_memory.store import read_parts

    rng = random.Random(7)
    save = tmp_path / "save"
    store = make_store(save)
    batch = [memory(make_memory, n, rng) for n in range(64)]
    assert await store.append_many(batch) == [True] * 64
    await store.aclose()
    (first,) = parts(save)
    before = first.read_bytes(), os.stat(first).st_ino
    digested: list[int] = []
    tokenized: list[int] = []
    merged: list[int] = []

    def counted_digests(memories: Any) -> list[tuple[bytes, bytes]]:
        digested.append(len(memories))
        return content_digests(memories)

    real_postings_of = read_parts.postings_of

    def counted_postings_of(memories: Any, start: int) -> Any:
        tokenized.extend([1] * len(memories))  # each memory's text tokenized once
        return real_postings_of(memories, start)

    real_merge = read_parts.merge
    monkeypatch.setattr(read_path, "merge", lambda found: merged.append(1) or real_merge(found))
    # A part's postings are built by ``postings_of``, one tokenization per memory.
    monkeypatch.setattr(read_parts, "postings_of", counted_postings_of)
    from game_memory.store import partitions

    monkeypatch.setattr(partitions, "content_digests", counted_digests)
    store = make_store(save)
    expected = None
    for number in range(64, 67):
        await store.append(memory(make_memory, number, rng))
    expected = await answers(store)
    await store.aclose()
    assert digested == [3] and len(tokenized) == 3 and merged == []
    assert (first.read_bytes(), os.stat(first).st_ino) == before  # untouched
    assert chain_counts(save) == [64, 3]
    reopened = make_store(save)
    assert await answers(reopened) == expected
    snapshot = await reopened.snapshot(query("dragon"))
    memories = snapshot.views[0].memories
    assert isinstance(memories, LazyMemories) and memories.lazy_count == 67
    await reopened.aclose()
    assert await from_records(save, make_store) == expected


async def test_the_background_merges_parts_so_a_chain_stays_short(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """Parts written while the store is open are merged with the parts before them while
    those are not larger (a binary counter), from their files: the chain of many batches
    keeps a few parts, and reads as the records do."""
    rng = random.Random(11)
    save = tmp_path / "save"
    store = make_store(save)
    store._engine.cache.background = None  # written in the caller: deterministic
    number = 0
    lengths = []
    for _ in range(40):
        batch = [memory(make_memory, number + n, rng) for n in range(10)]
        number += 10
        assert await store.append_many(batch) == [True] * 10
        lengths.append(len(chain_counts(save)))
    expected = await answers(store)
    await store.aclose()
    assert max(lengths) <= 7  # log2(400 / 8) + 1
    counts = chain_counts(save)
    assert sum(counts) == 400
    assert all(earlier > later for earlier, later in itertools.pairwise(counts))
    assert await answers(make_store(save)) == expected
    assert await from_records(save, make_store) == expected


@pytest.mark.parametrize("damage", ["flip", "foreign", "previous"])
async def test_a_part_that_does_not_continue_the_chain_is_ignored_and_rewritten(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    damage: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A damaged part, or one naming another part before it, ends the chain: the parts
    before it are used, the memories after them read from the records, and the next
    close writes a part that continues the chain again."""
    rng = random.Random(5)
    save = tmp_path / "save"
    store = make_store(save)
    for start in (0, 40, 45):
        batch = [memory(make_memory, start + n, rng) for n in range(40 if not start else 5)]
        assert await store.append_many(batch) == [True] * len(batch)
        await store.aclose()
        store = make_store(save)
        await store.snapshot(query("dragon"))
    expected = await answers(store)
    await store.aclose()
    assert chain_counts(save) == [40, 5, 5]
    second = parts(save)[1]
    data = bytearray(second.read_bytes())
    if damage == "flip":
        data[len(data) - 3] ^= 0x01  # inside its arrays
    elif damage == "foreign":
        data = bytearray(b"GMREAD01 not a part")
    else:  # a part of another chain: it names another part before it
        data = bytearray(rewritten_header(bytes(data), previous=12345))
    second.write_bytes(bytes(data))
    assert chain_counts(save) == [40]
    from game_memory.store import partitions

    seeded: list[int] = []
    real_seeded = partitions.seeded_state

    def recorded(*args: Any, **kwargs: Any) -> Any:
        state = real_seeded(*args, **kwargs)
        seeded.append(state.read_file_count if state is not None else 0)
        return state

    monkeypatch.setattr(partitions, "seeded_state", recorded)
    reopened = make_store(save)
    assert await answers(reopened) == expected
    assert seeded == [40]  # the first part; the other 10 read from the records
    await reopened.aclose()  # (or its read-file thread) writes the part for the other 10
    assert chain_counts(save) == [40, 10]
    assert len(parts(save)) == 2  # the stale third part is gone
    assert await answers(make_store(save)) == expected


async def test_a_copied_save_opens_from_its_chain_and_a_merge_names_the_copy_s_files(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A copy (other inodes) uses its chain once the covered bytes' CRCs hold; a merge in
    the copy refreshes the covered files' identities, so its later opens hash nothing."""
    rng = random.Random(3)
    save = tmp_path / "save"
    store = make_store(save)
    for start in (0, 40, 50):
        batch = [memory(make_memory, start + n, rng) for n in range(40 if not start else 10)]
        assert await store.append_many(batch) == [True] * len(batch)
        await store.aclose()
        store = make_store(save)
    expected = await answers(store)
    await store.aclose()
    assert sum(chain_counts(save)) == 60 and len(chain_counts(save)) >= 2
    copy = tmp_path / "copy"
    shutil.copytree(save, copy)
    copied = make_store(copy)
    snapshot = await copied.snapshot(query("dragon"))
    memories = snapshot.views[0].memories
    assert isinstance(memories, LazyMemories) and memories.lazy_count == 60
    assert await answers(copied) == expected
    copied._engine.cache.background = None
    batch = [memory(make_memory, 60 + n, rng) for n in range(40)]
    assert await copied.append_many(batch) == [True] * 40  # merged with the parts before
    expected = await answers(copied)
    await copied.aclose()
    assert chain_counts(copy) == [100]
    hashed: list[str] = []
    real_crc = read_chain.file_crc

    def counted(path: str, start: int, end: int, *, mapped: bool = False) -> int | None:
        hashed.append(os.path.basename(path))
        return real_crc(path, start, end, mapped=mapped)

    monkeypatch.setattr(read_chain, "file_crc", counted)
    again = make_store(copy)
    assert await answers(again) == expected
    assert hashed == []  # every covered file named as it is in the copy
    await again.aclose()


_KILLED_WRITER = """
import asyncio, os, signal, sys
from pathlib import Path
from game_memory import FileGameMemoryStore, GameMemory, GameMoment
from game_memory.store import read_files, read_path

read_path.LAZY_MINIMUM = 8
read_path.APPENDED_MINIMUM = 8
read_path.CLOSING_MERGE_MEMORIES = 0

keep = read_files.fs.atomic_write

def dying(path, data, *args, **kwargs):
    if not str(path).endswith(".read"):
        # Not a part: a stamp of the 40's part, which this load may write when the part is
        # over 2 s old (read_files.SETTLED_NS) on a busy machine, must not kill early.
        return keep(path, data, *args, **kwargs)
    if not isinstance(data, bytes):  # the pieces a read file is written from
        data = b"".join(bytes(memoryview(piece).cast("B")) for piece in data)
    temporary = path.with_name(path.name + ".0123.tmp")
    temporary.write_bytes(data[: len(data) // 2])  # half written, then killed
    os.kill(os.getpid(), signal.SIGKILL)

async def main():
    store = FileGameMemoryStore(sys.argv[1])
    read_files.fs.atomic_write = dying
    for number in range(40, 47):  # fewer than 8: only closing writes their part
        await store.append(GameMemory(
            memory_id=f"m{number:04d}", session_id="session", owner_id="npc",
            scope="personal", kind="fact", payload_json="{}",
            moment=GameMoment(timeline_id="main", tick=number),
            searchable_text=f"dragon late {number}"))
    await store.aclose()  # writes the part for the seven: killed while writing it

asyncio.run(main())
"""


def killed(script: str, save: Path) -> None:
    """Run ``script`` on ``save`` in a fresh interpreter, which must end killed (SIGKILL)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(save)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()


async def test_a_writer_killed_while_writing_a_part_leaves_the_chain_before_it(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    rng = random.Random(9)
    save = tmp_path / "save"
    store = make_store(save)
    batch = [memory(make_memory, n, rng) for n in range(40)]
    assert await store.append_many(batch) == [True] * 40
    await store.aclose()
    assert chain_counts(save) == [40]
    killed(_KILLED_WRITER, save)
    assert chain_counts(save) == [40]  # the half-written part is a .tmp nobody reads
    reopened = make_store(save)
    found = await reopened.enumerate("session", "npc")
    assert len(found) == 47
    expected = await answers(reopened)
    await reopened.aclose()
    assert chain_counts(save) == [40, 7]
    assert await from_records(save, make_store) == expected


async def test_a_read_that_began_before_a_part_was_written_keeps_the_newer_chain(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """A read builds its state from the version it found; if the read-file thread marked
    that version covered by a new part meanwhile, the state the read caches keeps the new
    chain (an older one would make the next part continue a part no longer on disk)."""
    import dataclasses

    rng = random.Random(13)
    save = tmp_path / "save"
    store = make_store(save)
    cache = store._engine.cache
    queued: list[Any] = []
    cache.background = queued.append
    batch = [memory(make_memory, n, rng) for n in range(40)]
    assert await store.append_many(batch) == [True] * 40
    found = store._engine.read_partition(SESSION, OWNER)  # a read begins: chain ()
    assert found.read_chain == () and len(queued) == 1
    queued.pop()()  # the part is written, the cached version marked
    assert store._engine.read_partition(SESSION, OWNER).read_file_count == 40
    rebuilt = dataclasses.replace(found, probes=tuple(found.probes))  # what the read caches
    kept = cache._remember((SESSION, OWNER), rebuilt)
    assert kept.read_file_count == 40
    assert store._engine.read_partition(SESSION, OWNER).read_file_count == 40
    more = [memory(make_memory, 40 + n, rng) for n in range(10)]
    assert await store.append_many(more) == [True] * 10
    while queued:
        queued.pop()()
    expected = await answers(store)
    await store.aclose()
    assert sum(chain_counts(save)) == 50
    assert await from_records(save, make_store) == expected


def reference_postings(memories: list[Any], start: int) -> tuple[Any, ...]:
    """Postings as the lexical index built them before 6 December 2026: a counter of each
    memory's tokens, then per term its documents and frequencies (terms sorted)."""
    from collections import Counter

    from game_memory.store.postings import document_text
    from game_memory.store.tokenizer import tokenize

    terms: dict[str, tuple[list[int], list[int]]] = {}
    lengths = []
    for number, memory in enumerate(memories):
        counts = Counter(tokenize(document_text(memory)))
        lengths.append(sum(counts.values()))
        for term, frequency in counts.items():
            documents, frequencies = terms.setdefault(term, ([], []))
            documents.append(number + start)
            frequencies.append(frequency)
    ordered = sorted(terms)
    offsets = [0]
    for term in ordered:
        offsets.append(offsets[-1] + len(terms[term][0]))
    documents = [d for term in ordered for d in terms[term][0]]
    frequencies = [f for term in ordered for f in terms[term][1]]
    return ordered, offsets, documents, frequencies, lengths


@pytest.mark.parametrize("start", [0, 7, 1_000])
def test_a_part_s_postings_and_the_lexical_index_s_equal_a_counter_s(
    make_memory: MemoryFactory, start: int
) -> None:
    """``postings_of`` builds a part's postings with numpy, and a lexical index built whole
    holds them as compressed rows; both are exactly what counting each memory's tokens
    gives (``reference_postings``), numbered from ``start`` (the index from 0), and the
    index answers every term's postings, and nothing for other words."""
    import numpy as np

    from game_memory.store.postings import LexicalIndex
    from game_memory.store.read_parts import postings_of

    rng = random.Random(start)
    alphabet = [*WORDS, "Sword", "猫", "一只猫", "ドラゴンは", "ǅ", "x_1", "42"]
    memories = [
        make_memory(
            f"m{n}",
            text=" ".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) or None,
            payload_json=f'{{"n": {n}}}' if n % 3 else "{}",
        )
        for n in range(60)
    ]
    for chosen in (memories, memories[:1], [], [make_memory("blank", text=None)]):
        terms, offsets, documents, frequencies, lengths = reference_postings(chosen, start)
        mine = postings_of(chosen, start)
        assert mine[0] == terms
        assert mine[1].tolist() == offsets
        assert mine[2].tolist() == documents
        assert mine[3].tolist() == frequencies
        assert mine[4].tolist() == lengths
        assert mine[2].dtype == np.int32 and mine[3].dtype == np.int32
        index = LexicalIndex(chosen)
        exported = index.export()
        assert list(exported[0]) == terms and exported[1].tolist() == offsets
        assert (exported[2] + start).tolist() == documents
        assert exported[3].tolist() == frequencies and index.lengths.tolist() == lengths
        for at, term in enumerate(terms):
            found, tf = index.postings(term)
            assert (found + start).tolist() == documents[offsets[at] : offsets[at + 1]]
            assert tf.tolist() == frequencies[offsets[at] : offsets[at + 1]]
            assert found.dtype == np.int64 and tf.dtype == np.float64
        for absent in ("absent", "swor", "猫猫", ""):
            assert index.postings(absent)[0].size == 0


def test_a_lexical_index_grown_from_one_built_whole_equals_one_built_whole(
    make_memory: MemoryFactory,
) -> None:
    """Appends extend an index built whole (compressed rows) with postings of their own:
    every term's postings are those of an index built whole from all the memories."""
    from game_memory.store.postings import LexicalIndex

    rng = random.Random(5)
    alphabet = [*WORDS, "Sword", "猫", "ドラゴン", "new", "words"]
    memories = [
        make_memory(f"m{n}", text=" ".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))))
        for n in range(120)
    ]
    index = LexicalIndex(memories[:50])
    for end in (51, 52, 80, 120):
        index = LexicalIndex(memories[:end], index)
        whole = LexicalIndex(memories[:end])
        assert index.lengths.tolist() == whole.lengths.tolist()
        for term in [*whole.export()[0], "absent"]:
            grown, built = index.postings(term), whole.postings(term)
            assert grown[0].tolist() == built[0].tolist()
            assert grown[1].tolist() == built[1].tolist()


async def copied_save(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path, count: int, seed: int
) -> tuple[Path, list[list[tuple[str, float]]]]:
    """A save of ``count`` memories in small record files, copied; the copy and its answers."""
    rng = random.Random(seed)
    save = tmp_path / "save"
    store = make_store(save, maximum_file_bytes=4_096)
    batch = [memory(make_memory, n, rng) for n in range(count)]
    assert await store.append_many(batch) == [True] * count
    expected = await answers(store)
    await store.aclose()
    copy = tmp_path / "copy"
    shutil.copytree(save, copy)
    return copy, expected


def counted_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the record files whose covered ranges opens hash from now on."""
    hashed: list[str] = []
    real_crc = read_chain.file_crc

    def counted(path: str, start: int, end: int, *, mapped: bool = False) -> int | None:
        hashed.append(os.path.basename(path))
        return real_crc(path, start, end, mapped=mapped)

    monkeypatch.setattr(read_chain, "file_crc", counted)
    return hashed


async def test_a_copy_hashes_its_covered_bytes_at_its_first_open_only(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ranges a copy's first open found holding their bytes by their CRCs are recorded
    in covered stamps under the copy's identities: later opens hash none of them, a stamp
    of another part or damaged is ignored, and a changed file is hashed (and found)."""
    from game_memory.store import covered_stamps

    monkeypatch.setattr(read_chain, "SETTLED_NS", 0)  # the copy's files count as settled
    copy, expected = await copied_save(make_store, make_memory, tmp_path, 60, seed=21)
    hashed = counted_hashes(monkeypatch)
    first = make_store(copy, maximum_file_bytes=4_096)
    assert await answers(first) == expected
    await first.aclose()
    assert len(hashed) > 1  # every covered range of the copy, once
    (stamp,) = list((copy / DATA / "read").glob("s-*/o-*.covered"))
    hashed.clear()
    second = make_store(copy, maximum_file_bytes=4_096)
    assert await answers(second) == expected
    await second.aclose()
    assert hashed == []
    stamp.write_bytes(b"GMRCOV01 damaged")  # ignored: hashed again, and recorded again
    third = make_store(copy, maximum_file_bytes=4_096)
    assert await answers(third) == expected
    await third.aclose()
    assert len(hashed) > 1
    part = parts(copy)[0]
    found = covered_stamps.read_covered(
        part, 0, len(load_chain(folder(copy), SESSION, OWNER)[0].part.files)
    )
    assert found is None  # it names its own part's header CRC, not another's
    log = copy / DATA / f"s-{SESSION}" / f"o-{OWNER}.log"
    data = bytearray(log.read_bytes())
    data[40] ^= 0x01  # inside the first record, in place: its identity moves
    log.write_bytes(bytes(data))
    from game_memory import PersistenceError

    damaged = make_store(copy, maximum_file_bytes=4_096)
    with pytest.raises(PersistenceError, match="checksum mismatch"):
        await damaged.snapshot(query("dragon"))


async def test_a_copy_opened_while_its_files_are_fresh_records_no_covered_stamp(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Files changed within ``SETTLED_NS`` cannot be named by their identity (a write in
    the same tick leaves it as it was), so a stamp would record nothing: none is written,
    and the next open hashes the ranges again (and records them once they settled)."""
    monkeypatch.setattr(read_chain, "SETTLED_NS", 10**15)
    copy, expected = await copied_save(make_store, make_memory, tmp_path, 40, seed=23)
    hashed = counted_hashes(monkeypatch)
    for _ in range(2):
        hashed.clear()
        opened = make_store(copy, maximum_file_bytes=4_096)
        assert await answers(opened) == expected
        await opened.aclose()
        assert len(hashed) > 1
        assert list((copy / DATA / "read").glob("s-*/o-*.covered")) == []
    monkeypatch.setattr(read_chain, "SETTLED_NS", 0)
    settled = make_store(copy, maximum_file_bytes=4_096)
    assert await answers(settled) == expected
    await settled.aclose()
    assert len(list((copy / DATA / "read").glob("s-*/o-*.covered"))) == 1


async def test_a_copy_s_first_open_writes_its_intent_file_anew(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An intent file accepted by the CRC of a copied ledger is written again naming the
    copy's ledger when the store closes (not during the first read, which it would slow),
    so later opens hash no ledger byte; a store that never closed leaves the old file, and
    the next open checks it by its CRC again."""
    from game_memory.store import intent_files, intents

    monkeypatch.setattr(intents, "PERSIST_MINIMUM", 8)
    rng = random.Random(22)
    save = tmp_path / "save"
    store = make_store(save)
    assert await store.append_many([memory(make_memory, n, rng) for n in range(20)]) == [True] * 20
    await store.aclose()
    copy = tmp_path / "copy"
    shutil.copytree(save, copy)
    hashed: list[int] = []
    real = intent_files.file_crc

    def counted(path: str, start: int, end: int) -> int | None:
        hashed.append(end)
        return real(path, start, end)

    monkeypatch.setattr(intent_files, "file_crc", counted)
    written = (copy / DATA / "read" / "ledger.intents").read_bytes()
    unclosed = make_store(copy)
    await unclosed.snapshot(query("dragon"))
    await unclosed.snapshot(query("dragon"))
    assert hashed == [20 * 128]
    assert (copy / DATA / "read" / "ledger.intents").read_bytes() == written  # not yet
    hashed.clear()
    first = make_store(copy)
    await first.snapshot(query("dragon"))
    assert hashed == [20 * 128]  # the unclosed store named nothing: checked again
    await first.aclose()
    assert (copy / DATA / "read" / "ledger.intents").read_bytes() != written
    hashed.clear()
    second = make_store(copy)
    await second.snapshot(query("dragon"))
    await second.aclose()
    assert hashed == []
    await unclosed.aclose()


@pytest.mark.parametrize(
    "odd",
    [None, "a \x00 b", "word " * 5_000, "x" * 100_001, "naïve"],
    ids=["all ascii", "a separator inside", "too many tokens", "too long", "not ascii"],
)
def test_a_part_s_postings_of_ascii_texts_scanned_at_once_equal_the_lexical_index_s(
    make_memory: MemoryFactory, odd: str | None
) -> None:
    """ASCII texts are tokenized in one scan (``tokenizer.tokenize_joined``); a text that
    the per-text tokenizer cuts or reads otherwise sends the batch through it instead."""
    import numpy as np

    from game_memory.store.postings import LexicalIndex
    from game_memory.store.read_parts import postings_of

    rng = random.Random(5)
    memories = [
        make_memory(
            f"m{n}",
            text=" ".join(rng.choice([*WORDS, "Sword", "x_1", "42", "A-b"]) for _ in range(9)),
            payload_json=f'{{"n": {n}}}',
        )
        for n in range(80)
    ]
    memories.insert(3, make_memory("blank", text=None, payload_json="{}"))
    if odd is not None:
        memories.insert(40, make_memory("odd", text=odd))
    terms, offsets, documents, frequencies, lengths = LexicalIndex(memories).export()
    mine = postings_of(memories, 11)
    assert mine[0] == list(terms)
    assert mine[1].tolist() == offsets.tolist()
    assert mine[2].tolist() == (documents.astype(np.int64) + 11).tolist()
    assert mine[3].tolist() == frequencies.tolist()
    assert mine[4].tolist() == lengths.tolist()


async def test_a_first_read_asks_for_its_records_at_once_then_reads_them(
    make_store: StoreFactory,
    make_memory: MemoryFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recall of a save opened from its read file reads its few dozen records; with the
    page cache cold each read would wait for the disk in turn, so the records not decoded
    yet are first hinted to the kernel together (``posix_fadvise``), each with its exact
    range, and only those. The hint changes nothing read: the answers are the records'."""
    from game_memory.store import lazy

    rng = random.Random(31)
    save = tmp_path / "save"
    store = make_store(save)
    assert await store.append_many([memory(make_memory, n, rng) for n in range(80)]) == [True] * 80
    expected = await answers(store)
    await store.aclose()
    hinted: list[tuple[int, int]] = []

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == lazy._WILLNEED
        os.fstat(fd)  # a descriptor still open
        hinted.append((offset, length))

    monkeypatch.setattr(lazy, "_ADVISE", advise)
    reopened = make_store(save)
    assert await answers(reopened) == expected
    assert hinted and len(set(hinted)) == len(hinted)  # each record hinted once
    log = (save / DATA / f"s-{SESSION}" / f"o-{OWNER}.log").read_bytes()
    for offset, length in hinted:  # a whole record's frame, header and payload
        frame = log[offset : offset + length]
        assert frame[:4] == MAGIC and len(frame) == length
        assert int.from_bytes(frame[4:8], "little") == length - HEADER_BYTES
    hinted.clear()
    assert await answers(reopened) == expected
    assert hinted == []  # every record decoded already: nothing to ask for
    await reopened.aclose()
    monkeypatch.setattr(lazy, "_ADVISE", None)  # no posix_fadvise (macOS): read as before
    bare = make_store(save)
    assert await answers(bare) == expected
    await bare.aclose()


async def test_short_sessions_closed_one_after_another_keep_a_short_chain(
    make_store: StoreFactory, make_memory: MemoryFactory, tmp_path: Path
) -> None:
    """A game that adds a few memories per session and closes the store each time gets a
    part per close, merged (binary counter) once the chain has ``CLOSING_PARTS`` parts:
    the chain stays short however many sessions there are, each close merges only parts
    not larger than what it writes, and the chain reads as the records do."""
    rng = random.Random(41)
    save = tmp_path / "save"
    store = make_store(save)
    assert await store.append_many([memory(make_memory, n, rng) for n in range(64)]) == [True] * 64
    await store.aclose()
    number, lengths = 64, []
    for _ in range(40):
        session = make_store(save)
        for _ in range(3):
            await session.append(memory(make_memory, number, rng))
            number += 1
        await session.aclose()
        counts = chain_counts(save)
        lengths.append(len(counts))
        assert sum(counts) == number
        assert all(earlier >= later for earlier, later in itertools.pairwise(counts[1:]))
    # Merged from the bound on: a few parts above it at most (40 closes of 3 memories:
    # between 1 and 6 parts, 3.6 on average; up to 16 with the bound of 16).
    assert max(lengths) <= 6
    assert sum(lengths) / len(lengths) <= 4.0
    reopened = make_store(save)
    expected = await answers(reopened)
    await reopened.aclose()
    assert await from_records(save, make_store) == expected
