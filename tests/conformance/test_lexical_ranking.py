"""Every store ranks lexically by the one BM25 contract of ``store/lexical.py``.

The oracle below is written from that contract alone (one collection per query, statistics
over the visible memories of the query's partitions, score then newest tick then id then
owner), so a backend that ranks in its own engine (PostgreSQL) is held to the same numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from game_memory import GameMemory, GameMemoryQuery, GameMemoryStore, GameMoment
from game_memory.model import memory_matches_query, ordinal_key
from game_memory.store.tokenizer import folded, tokenize
from support.vectors import MemoryFactory

WORDS = ["sword", "dragon", "forge", "ale", "tom", "rusty", "猫", "一只", "屋顶"]
#: Written escaped by ``json.dumps`` (``\\ud83d\\udc09``, ``\\n``, ``\\"``): searched as characters.
MOODS = ["calm", "🐉", "wary\nangry", 'said "no"', "ready！"]


def payload_text(memory: GameMemory) -> str:
    """The payload's keys and values, one a line: strings as the characters they stand for
    (every escape decoded), numbers and literals as written; JSON's syntax is no text."""
    found: list[str] = []
    literals = {True: "true", False: "false", None: "null"}

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                found.append(key)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        else:
            found.append(value if isinstance(value, str) else literals[value])  # type: ignore[index]

    walk(json.loads(memory.payload_json, parse_int=str, parse_float=str))
    return "\n".join(found)


def searched(memory: GameMemory) -> str:
    return (memory.searchable_text or "") + "\n" + payload_text(memory)


def oracle(memories: Sequence[GameMemory], query: GameMemoryQuery) -> list[tuple[str, float]]:
    """``(memory id, score)`` of the lexical hits, best first, from the contract alone."""
    visible = [m for m in memories if memory_matches_query(m, query)]
    text = query.text
    terms = list(dict.fromkeys(tokenize(text))) if text is not None else []
    bonus = 0.1 * len(query.tags)
    scored: list[tuple[GameMemory, float]] = []
    if not terms:
        # Both sides folded as the tokenizer folds text (NFKC); JSON's syntax is no text.
        needle = folded(text).lower() if text and not text.isspace() else None
        for m in visible:
            haystacks = (folded(m.searchable_text or "").lower(), folded(payload_text(m)).lower())
            if needle is None or any(needle in h for h in haystacks):
                scored.append((m, m.importance + bonus))
    elif visible:
        # The searched text: the searchable text and the payload with its JSON \u escapes
        # read as characters (json.dumps writes every non-ASCII character escaped).
        documents = {m.key: tokenize(searched(m)) for m in visible}
        count = len(visible)
        average = sum(max(1, len(documents[m.key])) for m in visible) / count
        idf = {
            t: math.log(
                1 + (count - (df := sum(t in documents[m.key] for m in visible)) + 0.5) / (df + 0.5)
            )
            for t in terms
        }
        for m in visible:
            tokens = documents[m.key]
            present = [t for t in terms if t in tokens]
            if present:
                norm = 1.2 * (1 - 0.75 + 0.75 * len(tokens) / average)
                bm25 = sum(
                    idf[t] * tokens.count(t) * 2.2 / (tokens.count(t) + norm) for t in present
                )
                scored.append((m, m.importance + bonus + bm25))
    scored.sort(
        key=lambda row: (
            -row[1],
            -row[0].moment.tick,
            ordinal_key(row[0].memory_id),
            ordinal_key(row[0].owner_id),
        )
    )
    return [(m.memory_id + "@" + m.owner_id, score) for m, score in scored[: query.limit]]


async def ranking(store: GameMemoryStore, query: GameMemoryQuery) -> list[tuple[str, float]]:
    snapshot = await store.snapshot(query)
    return [
        (hit.memory.memory_id + "@" + hit.memory.owner_id, hit.score) for hit in snapshot.lexical
    ]


def assert_ranked_like(found: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    assert [key for key, _ in found] == [key for key, _ in expected]
    for (_, score), (_, wanted) in zip(found, expected, strict=True):
        assert math.isclose(score, wanted, rel_tol=0, abs_tol=1e-9)


def corpus(size: int) -> list[GameMemory]:
    return [
        GameMemory(
            memory_id=f"m{index:04d}",
            session_id="session",
            owner_id=f"npc-{index % 3}",
            scope="x" if index % 4 else "y",
            kind="event",
            payload_json=json.dumps(
                {"n": index, "note": WORDS[index % len(WORDS)], "mood": MOODS[index % len(MOODS)]}
            ),
            moment=GameMoment(timeline_id="world", tick=index % 17),
            importance=(index % 5) / 4,
            searchable_text=" ".join(
                WORDS[(index * k) % len(WORDS)] for k in range(1, 2 + index % 4)
            ),
            tags=["t1"] if index % 3 == 0 else [],
        )
        for index in range(size)
    ]


QUERIES = [
    {"text": "sword"},
    {"text": "dragon forge"},
    {"text": "SWORD sword Sword"},  # one term, however often and however spelled
    {"text": "猫"},
    {"text": "一只猫在屋顶上"},  # CJK unigrams and bigrams
    {"text": "zzz"},
    {"text": None},
    {"text": ""},
    {"text": '"note": "ale'},  # tokens of the payload count too
    {"text": '": "', "limit": 7},  # JSON's syntax is no text: found nowhere
    {"text": "🐉", "limit": 7},  # no tokens: a substring filter, the escaped emoji found
    {"text": '"', "limit": 7},  # a quote inside a value is text
    {"text": "!"},  # NFKC: found in "ready！"
    {"text": "angry"},  # a word after an escaped line break is a word
    {"text": "?!"},  # punctuation found nowhere
    {"text": "ale tom", "tags": ["t1"]},
    {"text": "rusty", "scopes": ["y"], "minimum_importance": 0.5},
    {"text": "forge", "at_or_before": GameMoment(timeline_id="world", tick=8)},
    {"text": "dragon ale", "owner_id": "npc-1"},  # statistics of that owner only
    {"text": "sword dragon", "limit": 3},
]


@pytest.mark.parametrize("size", [30, 150], ids=["small-snapshot", "large-snapshot"])
async def test_the_ranking_and_scores_follow_the_bm25_contract(
    store: GameMemoryStore, size: int
) -> None:
    memories = corpus(size)
    for memory in memories:
        await store.append(memory)
    for fields in QUERIES:
        query = GameMemoryQuery(**{"session_id": "session", "limit": 40, **fields})
        assert_ranked_like(await ranking(store, query), oracle(memories, query))


async def test_ties_go_to_the_newest_tick_then_the_ordinal_id_then_the_owner(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    same = {"text": "the same words", "importance": 0.5}
    for memory_id, owner, tick in (
        ("b", "npc-1", 3),
        ("a", "npc-1", 3),
        ("\uff5e", "npc-1", 3),
        ("\U0001f600", "npc-1", 3),  # a surrogate pair sorts before U+FF5E in UTF-16
        ("a", "npc-0", 3),
        ("old", "npc-0", 1),
        ("new", "npc-0", 9),
    ):
        await store.append(make_memory(memory_id, owner_id=owner, tick=tick, **same))
    for text in ("same words", None, "?"):
        found = [
            key
            for key, _ in await ranking(
                store, GameMemoryQuery(session_id="session", limit=10, text=text)
            )
        ]
        if text == "?":
            assert found == []
            continue
        assert found == [
            "new@npc-0",
            "a@npc-0",
            "a@npc-1",
            "b@npc-1",
            "\U0001f600@npc-1",
            "\uff5e@npc-1",
            "old@npc-0",
        ]


async def test_importance_and_the_tag_bonus_add_to_the_score(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("m", text="sword", importance=0.2, tags=["t1", "t2"]))
    ((_, score),) = await ranking(
        store, GameMemoryQuery(session_id="session", limit=1, tags=["t1", "t2"])
    )
    assert math.isclose(score, 0.2 + 0.2, abs_tol=1e-12)


async def test_statistics_are_summed_over_the_owners_a_query_reads(
    store: GameMemoryStore, make_memory: MemoryFactory
) -> None:
    await store.append(make_memory("a1", owner_id="a", text="sword sword", tick=1))
    for index in range(4):
        await store.append(make_memory(f"b{index}", owner_id="b", text="sword shield", tick=2))
    session_wide = dict(
        await ranking(store, GameMemoryQuery(session_id="session", limit=10, text="sword"))
    )
    one_owner = dict(
        await ranking(
            store, GameMemoryQuery(session_id="session", owner_id="a", limit=10, text="sword")
        )
    )
    assert session_wide["a1@a"] != one_owner["a1@a"]
    every = await store.enumerate("session")
    query = GameMemoryQuery(session_id="session", limit=10, text="sword")
    assert_ranked_like(list(session_wide.items()), oracle(every, query))
