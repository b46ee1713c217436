"""The store's digests of the memories it encoded equal what the index computes from them
(``store/digests.py``), and the cache keeps its bound."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from game_memory.index.entries import content_digest, memory_hash
from game_memory.model import GameMemory
from game_memory.store import digests as digests_module
from game_memory.store.digests import EncodedDigests
from game_memory.store.documents import encode_document

from .helpers import MemoryFactory


def test_the_digests_of_an_encoded_memory_are_the_index_s(make_memory: MemoryFactory) -> None:
    cache = EncodedDigests()
    memories = [
        make_memory("m1", text="plain"),
        make_memory("m2", text="ünïcödé 猫", belief_key="weather"),  # format 2 payload
        make_memory("m3", kind="reflection", consolidates=["m1"], payload_json='{"a": [1, 2]}'),
    ]
    for memory in memories:
        cache.remember(memory, encode_document(memory))
    assert cache.known(memories) == [
        (memory_hash(m.memory_id), content_digest(m)) for m in memories
    ]


def test_only_the_very_objects_encoded_are_known(make_memory: MemoryFactory) -> None:
    cache = EncodedDigests()
    memory = make_memory("m1")
    cache.remember(memory, encode_document(memory))
    equal = make_memory("m1")  # equal content, another object
    assert cache.known([equal]) == [None]

    class Special(GameMemory):
        pass

    special = Special(**memory.model_dump())
    cache.remember(special, encode_document(special))
    assert cache.known([special]) == [None]  # a subclass may serialize otherwise


def test_the_cache_keeps_its_bound(make_memory: MemoryFactory) -> None:
    cache = EncodedDigests(maximum=3)
    memories = [make_memory(f"m{n}") for n in range(5)]
    for memory in memories:
        cache.remember(memory, encode_document(memory))
    known = cache.known(memories)
    assert known[:2] == [None, None] and all(found is not None for found in known[2:])


async def test_an_append_leaves_the_digests_the_index_would_compute(
    make_store: Any, make_memory: MemoryFactory
) -> None:
    store = make_store()
    memory = make_memory("m1", text="a new memory")
    assert await store.append(memory)
    found = digests_module.encoded_digests.known([memory])
    assert found == [(memory_hash("m1"), content_digest(memory))]


async def test_closing_the_store_keeps_no_memory_alive_in_the_cache(
    make_store: Any, make_memory: MemoryFactory
) -> None:
    # The cache is the process's; a closed save's memories must not stay referenced by it
    # (a game loading one save slot after another would otherwise keep the old ones).
    store = make_store()
    memory = make_memory("m1", text="a new memory")
    assert await store.append(memory)
    assert digests_module.encoded_digests.known([memory]) != [None]
    await store.aclose()
    assert digests_module.encoded_digests.known([memory]) == [None]
    assert len(digests_module.encoded_digests) == 0


def test_the_cache_keeps_no_memory_alive(make_memory: MemoryFactory) -> None:
    # A partition that lets its memories go (evicted, or read again from its read file)
    # must not find them held here: entries refer to their memory weakly.
    cache = EncodedDigests()
    memory = make_memory("m1", text="a memory")
    cache.remember(memory, encode_document(memory))
    gone = weakref.ref(memory)
    del memory
    gc.collect()
    assert gone() is None


def test_a_dead_memory_s_entry_is_not_another_object_s(make_memory: MemoryFactory) -> None:
    # An id is reused once its object died: the entry of the dead memory, found under the
    # id a live object now has, is not that object's.
    cache = EncodedDigests()
    dead = make_memory("m1", text="first")
    live = make_memory("m2", text="second")
    cache.remember(dead, encode_document(dead))
    cache._cache[id(live)] = cache._cache.pop(id(dead))  # as if ``live`` took its id
    del dead
    gc.collect()
    assert cache.known([live]) == [None]
