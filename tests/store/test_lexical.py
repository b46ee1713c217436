"""Lexical recall: BM25 + importance + tag bonus against a plain reference (§2.4–2.5)."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from game_memory import GameMemory, GameMemoryQuery, GameMoment
from game_memory.model import memory_matches_query, ordinal_key
from game_memory.store import lexical
from game_memory.store.lexical import lexical_search
from game_memory.store.tokenizer import tokenize
from game_memory.store.view import PartitionView
from support.stores import search
from support.vectors import MemoryFactory

from .helpers import StoreFactory

K1, B = 1.2, 0.75
WORDS = ["sword", "dragon", "forge", "ale", "tom", "rusty", "猫", "一只"]


def _readable(memory: GameMemory) -> str:
    """The payload as searched: JSON's ``\\u`` escapes as the characters they stand for."""
    payload = memory.payload_json
    if "\\u" not in payload:
        return payload
    return json.dumps(json.loads(payload), ensure_ascii=False, separators=(",", ":"))


def reference_search(
    snapshot: Sequence[GameMemory], query: GameMemoryQuery
) -> list[tuple[GameMemory, float]]:
    """The reference lexical search over one collection, written from §2.4–2.5 alone."""
    ordered = sorted(snapshot, key=lambda m: (ordinal_key(m.owner_id), ordinal_key(m.memory_id)))
    visible = [m for m in ordered if memory_matches_query(m, query)]
    terms = list(dict.fromkeys(tokenize(query.text)))
    if query.text is not None and not terms and not query.text.isspace():
        needle = query.text.lower()
        visible = [
            m
            for m in visible
            if needle in (m.searchable_text or "").lower() or needle in m.payload_json.lower()
        ]
    scored: list[tuple[GameMemory, float]] = []
    documents = {m.key: tokenize((m.searchable_text or "") + "\n" + _readable(m)) for m in visible}
    if not terms:
        scored = [(m, m.importance + 0.1 * len(query.tags)) for m in visible]
    elif visible:
        count = len(visible)
        average = sum(max(1, len(documents[m.key])) for m in visible) / count
        idf = {}
        for term in terms:
            df = sum(1 for m in visible if term in documents[m.key])
            idf[term] = math.log(1 + (count - df + 0.5) / (df + 0.5))
        for m in visible:
            tokens = documents[m.key]
            present = [t for t in terms if t in tokens]
            if not present:
                continue
            bm25 = 0.0
            for term in present:
                tf = float(tokens.count(term))
                bm25 += idf[term] * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(tokens) / average))
            scored.append((m, m.importance + 0.1 * len(query.tags) + bm25))
    # Stable sort over the (owner, id) ordered snapshot: score, newest tick, id.
    scored.sort(key=lambda row: (-row[1], -row[0].moment.tick, ordinal_key(row[0].memory_id)))
    return scored[: query.limit]


def views_of(memories: Sequence[GameMemory]) -> list[PartitionView]:
    """One view per owner, in append order, sorted by owner (as the store builds them)."""
    owners: dict[str, list[GameMemory]] = {}
    for memory in memories:
        owners.setdefault(memory.owner_id, []).append(memory)
    return [
        PartitionView(
            group[0].session_id,
            owner,
            tuple(group),
            {memory.memory_id: index for index, memory in enumerate(group)},
        )
        for owner, group in sorted(owners.items(), key=lambda item: ordinal_key(item[0]))
    ]


def assert_same_ranking(
    hits: list[lexical.LexicalHit], expected: list[tuple[GameMemory, float]]
) -> None:
    assert [hit.memory.key for hit in hits] == [memory.key for memory, _ in expected]
    for hit, (_, score) in zip(hits, expected, strict=True):
        assert math.isclose(hit.score, score, rel_tol=0, abs_tol=1e-9)


@st.composite
def corpora(draw: st.DrawFn, maximum: int = 14) -> list[GameMemory]:
    size = draw(st.integers(0, maximum))
    memories = []
    for index in range(size):
        words = draw(st.lists(st.sampled_from(WORDS), max_size=6))
        payload_words = draw(st.lists(st.sampled_from(WORDS), max_size=3))
        memories.append(
            GameMemory(
                memory_id=draw(st.sampled_from(["m", "M", "é"])) + str(index),
                session_id="s",
                owner_id=draw(st.sampled_from(["npc-a", "npc-b", "npc-\U0001f600"])),
                scope=draw(st.sampled_from(["x", "y"])),
                kind="fact",
                payload_json=json.dumps({"note": " ".join(payload_words)}),
                moment=GameMoment(timeline_id="world", tick=draw(st.integers(0, 3))),
                importance=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
                searchable_text=draw(st.none() | st.just(" ".join(words))),
                tags=draw(st.lists(st.sampled_from(["t1", "t2"]), max_size=2)),
            )
        )
    return memories


query_texts = st.none() | st.lists(st.sampled_from([*WORDS, "zzz", "SWORD"]), max_size=3).map(
    " ".join
)
lexical_queries = st.builds(
    GameMemoryQuery,
    session_id=st.just("s"),
    limit=st.integers(1, 20),
    text=query_texts,
    tags=st.lists(st.sampled_from(["t1", "t2"]), max_size=1),
    scopes=st.lists(st.sampled_from(["x", "y"]), max_size=1),
    at_or_before=st.none() | st.builds(GameMoment, timeline_id=st.just("world"), tick=st.just(2)),
)


@settings(max_examples=150, deadline=None)
@given(corpora(), lexical_queries)
def test_bm25_ranking_matches_the_reference_on_random_corpora(
    memories: list[GameMemory], query: GameMemoryQuery
) -> None:
    hits, visible = lexical_search(views_of(memories), query, query.limit)
    assert visible == sum(memory_matches_query(m, query) for m in memories)
    assert_same_ranking(hits, reference_search(memories, query))


@settings(max_examples=60, deadline=None)
@given(corpora(), lexical_queries)
def test_the_small_path_and_the_numpy_path_give_identical_scores(
    memories: list[GameMemory], query: GameMemoryQuery
) -> None:
    views = views_of(memories)
    small = lexical._search_small(views, query, query.limit)
    columns = lexical._search_columns(views, query, query.limit)
    assert small[1] == columns[1]
    assert [(hit.memory.key, hit.score) for hit in small[0]] == [
        (hit.memory.key, hit.score) for hit in columns[0]
    ]


def big_corpus(size: int) -> list[GameMemory]:
    return [
        GameMemory(
            memory_id=f"m{index:05d}",
            session_id="s",
            owner_id=f"npc-{index % 3}",
            scope="x",
            kind="event",
            payload_json=json.dumps({"n": index}),
            moment=GameMoment(timeline_id="world", tick=index % 17),
            importance=(index % 5) / 4,
            searchable_text=" ".join(
                WORDS[(index * k) % len(WORDS)] for k in range(1, 1 + index % 4)
            ),
        )
        for index in range(size)
    ]


def test_a_large_snapshot_is_ranked_like_the_reference_including_the_partial_sort() -> None:
    memories = big_corpus(3_000)  # more candidates than the limit: the threshold cut applies
    for text, limit in (("sword dragon", 10), ("ale", 2_500), (None, 5), ("...", 7)):
        query = GameMemoryQuery(session_id="s", limit=limit, text=text)
        hits, visible = lexical_search(views_of(memories), query, limit)
        assert visible == 3_000
        assert_same_ranking(hits, reference_search(memories, query))


def test_a_view_grown_from_an_earlier_view_ranks_like_one_built_at_once() -> None:
    memories = big_corpus(200)
    early = views_of(memories[:120])[0]
    _ = early.columns, early.lexical  # build the indexes, as a search would
    owner_0 = [m for m in memories if m.owner_id == "npc-0"]
    grown = PartitionView(
        "s", "npc-0", tuple(owner_0), {m.memory_id: i for i, m in enumerate(owner_0)}, early
    )
    query = GameMemoryQuery(session_id="s", limit=50, text="forge tom")
    assert_same_ranking(lexical_search([grown], query, 50)[0], reference_search(owner_0, query))


def test_punctuation_only_text_keeps_memories_containing_it_as_a_substring() -> None:
    memories = [
        GameMemory(
            memory_id=f"m{i}",
            session_id="s",
            owner_id="o",
            scope="x",
            kind="fact",
            payload_json=payload,
            moment=GameMoment(timeline_id="w", tick=i),
            searchable_text=text,
        )
        for i, (text, payload) in enumerate(
            [("what?!", "{}"), ("calm", '{"mood": "?!"}'), ("calm", "{}"), (None, '"WHAT?!"')]
        )
    ]
    query = GameMemoryQuery(session_id="s", limit=10, text="?!")
    hits, _ = lexical_search(views_of(memories), query, 10)
    assert [hit.memory.memory_id for hit in hits] == ["m3", "m1", "m0"]  # newest first on ties
    assert all(hit.score == 0.5 for hit in hits)
    empty = GameMemoryQuery(session_id="s", limit=10, text="")
    assert len(lexical_search(views_of(memories), empty, 10)[0]) == 4


def test_tag_bonus_and_importance_are_added_to_the_score() -> None:
    tagged = GameMemory(
        memory_id="a",
        session_id="s",
        owner_id="o",
        scope="x",
        kind="fact",
        payload_json="{}",
        moment=GameMoment(timeline_id="w", tick=1),
        importance=0.2,
        tags=["t1", "t2"],
        searchable_text="sword",
    )
    query = GameMemoryQuery(session_id="s", limit=1, tags=["t1", "t2"])
    ((hit,), _) = lexical_search(views_of([tagged]), query, 1)
    assert math.isclose(hit.score, 0.2 + 0.2, abs_tol=1e-12)


def test_limit_zero_and_nothing_visible_return_no_hits() -> None:
    memories = big_corpus(5)
    assert lexical_search(views_of(memories), GameMemoryQuery(session_id="s", limit=1), 0)[0] == []
    hidden = GameMemoryQuery(session_id="s", limit=5, scopes=["nope"])
    assert lexical_search(views_of(memories), hidden, 5) == ([], 0)


async def test_a_session_wide_search_equals_the_ranking_of_one_collection(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store = make_store()
    memories = big_corpus(90)
    for memory in memories:
        await store.append(memory)
    for text in ("sword", "dragon forge", "猫", None):
        query = GameMemoryQuery(session_id="s", limit=40, text=text)
        results = await search(store, query)
        expected = reference_search(memories, query)
        assert [m.key for m in results] == [m.key for m, _ in expected]
    owner_query = GameMemoryQuery(session_id="s", owner_id="npc-1", limit=40, text="ale tom")
    owner_results = await search(store, owner_query)
    owned = [m for m in memories if m.owner_id == "npc-1"]
    assert [m.key for m in owner_results] == [
        m.key for m, _ in reference_search(owned, owner_query)
    ]


def test_the_sparse_and_dense_accumulations_give_bit_identical_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rare terms (a few dozen postings among thousands): the sparse path accumulates over
    # the documents holding a term; forced dense, over the whole column. Same floats.
    rng = random.Random(7)
    filler = [f"w{i}" for i in range(300)]
    rare = ["sword", "river", "tavern", "dragon"]
    memories = [
        GameMemory(
            memory_id=f"m{index:05d}",
            session_id="s",
            owner_id=f"npc-{index % 2}",
            scope="x",
            kind="event",
            payload_json="{}",
            moment=GameMoment(timeline_id="world", tick=index),
            importance=rng.choice([0.0, 0.3, 0.7]),
            searchable_text=" ".join(
                rng.choice(rare) if rng.random() < 0.01 else rng.choice(filler)
                for _ in range(rng.randint(0, 12))
            ),
        )
        for index in range(4_000)
    ]
    views = views_of(memories)
    queries = [
        GameMemoryQuery(
            session_id="s",
            limit=limit,
            text=text,
            at_or_before=None if tick is None else GameMoment(timeline_id="world", tick=tick),
        )
        for text in ("sword river w3", "dragon", "tavern w1 w2 w5", "zzz sword")
        for limit in (1, 32, 500)
        for tick in (None, 1_999)
    ]
    sparse = [lexical._search_columns(views, query, query.limit) for query in queries]
    monkeypatch.setattr(lexical, "_SPARSE_FACTOR", 10**9)  # every view: the dense path
    dense = [lexical._search_columns(views, query, query.limit) for query in queries]
    for query, (hits, visible), (expected, seen) in zip(queries, sparse, dense, strict=True):
        assert visible == seen
        assert [(h.memory.key, h.score) for h in hits] == [
            (h.memory.key, h.score) for h in expected
        ]
        assert_same_ranking(hits, reference_search(memories, query))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(min_value=0, max_value=40), max_size=30).map(sorted), max_size=6
    ).filter(bool)
)
def test_sorted_unique_equals_numpy_unique(parts: list[list[int]]) -> None:
    arrays = [np.asarray(part, np.int64) for part in parts]
    found = lexical.sorted_unique(arrays)
    expected = np.unique(np.concatenate(arrays))
    assert found.dtype == expected.dtype and found.tolist() == expected.tolist()


def test_the_first_sparse_search_of_a_process_does_not_import_numpy_ma() -> None:
    # numpy.ma costs about 28 ms to import: np.unique's first call pays it, the first
    # recall after opening a save must not.
    script = """
import sys
import unicodedata
from game_memory import GameMemory, GameMemoryQuery, GameMoment
from game_memory.store import lexical
from game_memory.store.view import PartitionView
memories = tuple(
    GameMemory(memory_id=f"m{i}", session_id="s", owner_id="npc", scope="x", kind="event",
               payload_json="{}", moment=GameMoment(timeline_id="world", tick=i),
               searchable_text="sword river" if i % 50 == 0 else f"w{i}")
    for i in range(1_000)
)
view = PartitionView("s", "npc", memories, {m.memory_id: i for i, m in enumerate(memories)})
hits, _ = lexical._search_columns([view], GameMemoryQuery(session_id="s", limit=4,
                                  text="sword river"), 4)
assert len(hits) == 4, hits
print("numpy.ma" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"


def test_composed_and_decomposed_forms_find_each_other(make_memory: MemoryFactory) -> None:
    composed = unicodedata.normalize("NFC", "crème brûlée at the café")
    written_decomposed = unicodedata.normalize("NFD", "a café on the square")
    texts = [composed, "plain cafe talk", "nothing related", written_decomposed]
    memories = [make_memory(f"m{i}", text=text, tick=i) for i, text in enumerate(texts)]
    decomposed = unicodedata.normalize("NFD", "café")
    assert decomposed != "café"
    for text in (decomposed, "café"):  # typed either way, both memories with café, only they
        query = GameMemoryQuery(session_id="s", limit=10, text=text)
        hits, _ = lexical_search(views_of(memories), query, 10)
        assert sorted(hit.memory.memory_id for hit in hits) == ["m0", "m3"]


def test_a_payload_written_with_ascii_escapes_is_searched_as_its_characters(
    make_memory: MemoryFactory,
) -> None:
    """``json.dumps`` escapes every non-ASCII character by default."""
    escaped = json.dumps({"item": "épée", "giver": "ドラゴン"})
    assert "\\u00e9" in escaped
    memories = [
        make_memory("m0", text=None, payload_json=escaped),
        make_memory("m1", text="a plain sword"),
    ]
    for text, found in (("épée", ["m0"]), ("ドラゴン", ["m0"]), ("u00e9p", [])):
        query = GameMemoryQuery(session_id="s", limit=10, text=text)
        hits, _ = lexical_search(views_of(memories), query, 10)
        assert [hit.memory.memory_id for hit in hits] == found, text


def test_white_space_alone_is_no_text(make_memory: MemoryFactory) -> None:
    memories = [make_memory(f"m{i}", text=f"word {i}  spaced") for i in range(3)]
    for text in ("", " ", "  ", "\t", "\n"):
        query = GameMemoryQuery(session_id="s", limit=10, text=text)
        hits, _ = lexical_search(views_of(memories), query, 10)
        assert len(hits) == 3, repr(text)
