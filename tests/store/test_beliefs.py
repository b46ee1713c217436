"""Belief versions: memories of one owner sharing a ``belief_key`` are versions of one belief.

As of a moment only the newest time-visible version is recalled; older versions stay in the
save and are recalled as of earlier moments; the format moves to 2 only when a key is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from game_memory import (
    FileGameMemoryStore,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    MemoryConflictError,
    open_memory,
)
from game_memory.index.entries import content_digest
from game_memory.store.documents import DocumentError, decode_document, encode_document
from support.stores import search

FIXTURE = Path(__file__).parent / "fixtures" / "format1" / "save"


def belief(memory_id: str, text: str, tick: int, **fields: Any) -> GameMemory:
    values: dict[str, Any] = {
        "memory_id": memory_id,
        "session_id": "slot",
        "owner_id": "mira",
        "scope": "village",
        "kind": "fact",
        "payload_json": "{}",
        "moment": GameMoment(timeline_id="main", tick=tick),
        "searchable_text": text,
        "belief_key": "bridge.eastmarch",
    }
    values.update(fields)
    return GameMemory(**values)


def asked(at: int | None, text: str = "bridge Eastmarch", **fields: Any) -> GameMemoryQuery:
    moment = None if at is None else GameMoment(timeline_id=fields.pop("timeline", "main"), tick=at)
    return GameMemoryQuery(session_id="slot", limit=10, text=text, at_or_before=moment, **fields)


def ids(memories: list[GameMemory]) -> list[str]:
    return [memory.memory_id for memory in memories]


OPEN = belief("open", "The bridge to Eastmarch is open.", 100)
COLLAPSED = belief("collapsed", "The bridge to Eastmarch collapsed in the storm.", 500)


async def test_as_of_a_moment_only_the_newest_visible_version_is_recalled(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(OPEN)
        await store.append(COLLAPSED)
        await store.append(belief("rumour", "A bridge rumour from Eastmarch.", 50, belief_key=None))
        assert sorted(ids(await search(store, asked(300)))) == ["open", "rumour"]  # not later
        assert sorted(ids(await search(store, asked(900)))) == ["collapsed", "rumour"]
        assert sorted(ids(await search(store, asked(None)))) == ["collapsed", "rumour"]
        assert ids(await search(store, asked(900, timeline="other"))) == []
        # Both versions stay in the save.
        assert sorted(ids(await store.enumerate("slot"))) == ["collapsed", "open", "rumour"]


async def test_a_filter_never_brings_an_older_belief_back(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(belief("old", "The bridge to Eastmarch is open.", 100, importance=0.9))
        await store.append(belief("new", "The bridge to Eastmarch is gone.", 500, importance=0.1))
        assert ids(await search(store, asked(900, minimum_importance=0.5))) == []
        assert ids(await search(store, asked(300, minimum_importance=0.5))) == ["old"]


async def test_two_versions_at_one_tick_resolve_to_the_later_append(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(belief("z-first", "The bridge to Eastmarch is open.", 100))
        await store.append(belief("a-second", "The bridge to Eastmarch is shut.", 100))
        assert ids(await search(store, asked(100))) == ["a-second"]
        assert ids(await search(store, asked(None))) == ["a-second"]


async def test_an_expired_newer_version_gives_the_belief_back_to_the_older(tmp_path: Path) -> None:
    closed = belief(
        "repairs",
        "The bridge to Eastmarch is closed for repairs.",
        500,
        expires_at=GameMoment(timeline_id="main", tick=800),
    )
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(OPEN)
        await store.append(closed)
        assert ids(await search(store, asked(600))) == ["repairs"]
        assert ids(await search(store, asked(900))) == ["open"]


async def test_beliefs_are_per_owner(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(OPEN.model_copy(update={"owner_id": "tom"}))
        await store.append(COLLAPSED)
        assert sorted(ids(await search(store, asked(900)))) == ["collapsed", "open"]


async def test_the_numpy_and_the_small_lexical_paths_agree_on_versions(tmp_path: Path) -> None:
    # Over 64 memories the store ranks with numpy columns; below, memory by memory.
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(OPEN)
        await store.append(COLLAPSED)
        small = [ids(await search(store, asked(at))) for at in (300, 900, None)]
        for index in range(80):
            await store.append(belief(f"f{index:02d}", f"filler {index}", 10, belief_key=None))
        large = [ids(await search(store, asked(at))) for at in (300, 900, None)]
    assert small == large == [["open"], ["collapsed"], ["collapsed"]]


async def test_hybrid_recall_hides_older_versions_in_the_vector_channel_too(
    tmp_path: Path,
) -> None:
    async with await open_memory(tmp_path / "save", model="hashing") as memory:
        await memory.append(OPEN)
        await memory.append(COLLAPSED)
        later = await memory.recall(asked(900, text="Can I cross the bridge to Eastmarch?"))
        earlier = await memory.recall(asked(300, text="Can I cross the bridge to Eastmarch?"))
    assert [hit.memory.memory_id for hit in later.hits] == ["collapsed"]
    assert later.hits[0].vector_rank == 1 and not later.fallback
    assert [hit.memory.memory_id for hit in earlier.hits] == ["open"]


async def test_the_key_is_part_of_content_equivalence(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        assert await store.append(OPEN)
        assert not await store.append(OPEN)
        with pytest.raises(MemoryConflictError):
            await store.append(OPEN.model_copy(update={"belief_key": "bridge.westmarch"}))
        with pytest.raises(MemoryConflictError):
            await store.append(OPEN.model_copy(update={"belief_key": None}))


def test_a_memory_without_a_key_serializes_as_before_the_field_existed() -> None:
    plain = OPEN.model_copy(update={"belief_key": None})
    assert "belief_key" not in plain.model_dump_json()
    assert encode_document(plain).startswith(b'{"format_version":1,')
    assert encode_document(OPEN).startswith(b'{"format_version":2,')
    assert decode_document(encode_document(OPEN)) == OPEN
    assert content_digest(plain) != content_digest(OPEN)


def test_a_format_1_record_with_a_key_is_damage() -> None:
    forged = encode_document(OPEN).replace(b'"format_version":2', b'"format_version":1')
    with pytest.raises(DocumentError, match="format-1 record"):
        decode_document(forged)


def _format(save: Path) -> int:
    document = json.loads((save / ".game-memory" / "format.json").read_text())
    return int(document["format_version"])


async def test_a_save_written_before_the_bump_opens_and_is_upgraded_only_by_a_key(
    tmp_path: Path,
) -> None:
    save = tmp_path / "save"
    shutil.copytree(FIXTURE, save)
    assert _format(save) == 1
    async with FileGameMemoryStore(save) as store:
        assert await store.count() == 3
        memories = await store.enumerate("slot-1")
        assert [m.memory_id for m in memories] == ["m0", "m1", "m2"]
        assert all(m.belief_key is None for m in memories)
        assert ids(
            await search(
                store, asked(1000, text="thief well").model_copy(update={"session_id": "slot-1"})
            )
        ) == ["m1"]
        assert (await store.check()).ok
        await store.append(belief("plain", "no key here", 1, session_id="slot-1", belief_key=None))
        assert _format(save) == 1  # nothing needed the new format yet
        await store.append(
            belief("keyed", "The bridge to Eastmarch is open.", 2, session_id="slot-1")
        )
        assert _format(save) == 2
    async with FileGameMemoryStore(save) as reopened:
        assert await reopened.count() == 5
        assert (await reopened.check()).ok
        keyed = [m for m in await reopened.enumerate("slot-1") if m.memory_id == "keyed"]
        assert keyed[0].belief_key == "bridge.eastmarch"


async def test_a_new_save_starts_in_the_current_format_3(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(OPEN.model_copy(update={"belief_key": None}))
    assert _format(tmp_path / "save") == 3
