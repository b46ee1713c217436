"""Words a player would call the same find each other through the front door, whatever
keyboard typed them (lexical mode: the channel every save has, and the one a recall falls
back to when vectors cannot help).

Found by an audit (7 December 2026); each case missed before the tokenizer's changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from game_memory import GameMemory, GameMemoryQuery, GameMoment, open_memory

MEMORIES = {
    "inn": "Mira owns the Rusty Flagon inn",
    "potion": "ＨＰが１０回復するポーションを買った",  # full-width, as a Japanese IME types
    "dragon": "ﾄﾞﾗｺﾞﾝが村を襲った",  # half-width katakana
    "fire": "The ﬁre spread to the smithy",  # a ligature
    "street": "Der Brunnen steht in der Hauptstraße",
    "ship": "Das Dampf\u00adschiff legt morgen ab",  # a soft hyphen, as localized text has
    "hero": "ΟΔΥΣΣΕΥΣ came home",
    "king": "राजा आ गए",  # Hindi: vowel signs inside the words
    "korean": "용은 산에 산다",  # Korean: particles glued to the nouns
    "arabic": "المَلِك في القصر",  # Arabic with its optional vowel marks
}


def memory(memory_id: str, text: str | None, payload: str = "{}") -> GameMemory:
    return GameMemory(
        memory_id=memory_id,
        session_id="save",
        owner_id="npc",
        scope="personal",
        kind="event",
        payload_json=payload,
        moment=GameMoment(timeline_id="main", tick=1),
        searchable_text=text,
    )


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Ｍｉｒａ", "inn"),
        ("HP", "potion"),
        ("10", "potion"),
        ("ドラゴン", "dragon"),
        ("fire", "fire"),
        ("HAUPTSTRASSE", "street"),
        ("Dampfschiff", "ship"),
        ("Οδυσσευς", "hero"),
        ("राजा", "king"),
        ("용", "korean"),
        ("산", "korean"),
        ("الملك", "arabic"),
        ("épée", "sword"),
        ("ドラゴンの剣", "sword"),
    ],
)
async def test_a_word_typed_another_way_finds_its_memory(
    tmp_path: Path, question: str, expected: str
) -> None:
    async with await open_memory(tmp_path / "save", model="lexical") as store:
        await store.append_many([memory(key, text) for key, text in MEMORIES.items()])
        # A payload written by json.dumps, whose non-ASCII characters are \u escapes.
        sword = json.dumps({"item": "épée", "giver": "ドラゴンの剣"})
        await store.append(memory("sword", None, sword))
        for reopened in (False, True):  # from the records, then from the read files
            if reopened:
                await store.aclose()
                store = await open_memory(tmp_path / "save", model="lexical")
            query = GameMemoryQuery(session_id="save", text=question, limit=3)
            result = await store.recall(query)
            assert expected in [m.memory_id for m in result.memories], question
