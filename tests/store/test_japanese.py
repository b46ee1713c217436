"""Japanese lexical recall: a katakana word is found without the particle glued to it."""

from __future__ import annotations

from pathlib import Path

from game_memory import FileGameMemoryStore, GameMemory, GameMemoryQuery, GameMoment
from support.stores import search


def _memory(memory_id: str, text: str) -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id="s",
        owner_id="o",
        scope="village",
        kind="event",
        payload_json="{}",
        moment=GameMoment(timeline_id="main", tick=1),
        searchable_text=text,
    )


async def test_a_katakana_word_matches_where_a_particle_follows_it(tmp_path: Path) -> None:
    async with FileGameMemoryStore(tmp_path / "save") as store:
        await store.append(_memory("dragon", "ドラゴンは北の山に住んでいる。"))
        await store.append(_memory("ramen", "ラーメンを食べた。"))
        await store.append(_memory("apple", "きのうりんごを買った。"))

        def query(text: str) -> GameMemoryQuery:
            return GameMemoryQuery(session_id="s", limit=5, text=text)

        assert [m.memory_id for m in await search(store, query("ドラゴン"))] == ["dragon"]
        assert [m.memory_id for m in await search(store, query("ラーメン"))] == ["ramen"]
        assert [m.memory_id for m in await search(store, query("りんご"))][:1] == ["apple"]
