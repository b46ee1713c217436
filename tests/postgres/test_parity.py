"""On random saves and queries, the PostgreSQL pair recalls exactly what the file pair recalls.

The same memories are appended to a file save and to PostgreSQL, in rounds (so both the
first read and the incremental refresh of cached partitions are exercised; some memories
are versions of one belief, which hide older ones in append order), and the same
queries are asked of both: lexical hits with their BM25 scores, and hybrid recall (ranks,
scores, fused scores, order) are compared for equality, bit for bit. Then the model changes
(another identity): both report the same status, recall lexically, and after a rebuild
recall identically again.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    GameAwareMemoryReranker,
    GameMemory,
    GameMemoryQuery,
    GameMoment,
    HashingEmbeddingProvider,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.postgres import PostgresGameMemoryStore, PostgresVectorIndex

WORDS = [
    "cat",
    "dog",
    "fire",
    "smithy",
    "well",
    "thief",
    "coin",
    "purse",
    "miller",
    "cart",
    "stranger",
    "inn",
    "rumour",
    "quarrel",
    "friend",
    "promise",
    "sword",
    "axe",
    "roof",
    "river",
    "bridge",
    "night",
    "dawn",
    "guard",
    "gate",
    "猫",
    "一只",
    "café",
    "Ärger",
]
OWNERS = ["ada", "bo", "cy", "dee", "eli", "fay", "gus"]
TIMELINES = ["world", "world", "world", "branch"]


def _memory(rng: random.Random, number: int) -> GameMemory:
    tick = rng.randrange(0, 500)
    timeline = rng.choice(TIMELINES)
    expires = (
        GameMoment(timeline_id=timeline, tick=tick + rng.randrange(1, 200))
        if rng.random() < 0.2
        else None
    )
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 12)))
    return GameMemory(
        memory_id=f"m-{number}",
        session_id=rng.choice(["s1", "s1", "s1", "s2"]),
        owner_id=rng.choice(OWNERS),
        scope=rng.choice(["personal", "village"]),
        kind=rng.choice(["event", "fact", "relationship"]),
        payload_json=f'{{"n": {number}}}',
        moment=GameMoment(timeline_id=timeline, tick=tick),
        importance=round(rng.random(), 2),
        searchable_text=text if rng.random() < 0.95 else None,
        tags=rng.sample(["gossip", "danger", "trade"], rng.randrange(0, 3)),
        expires_at=expires,
        belief_key=rng.choice([None, None, None, "mood", "where.is.the.key"]),
    )


def _query(rng: random.Random) -> GameMemoryQuery:
    fields: dict[str, Any] = {
        "session_id": rng.choice(["s1", "s1", "s2"]),
        "limit": rng.choice([1, 3, 8, 20]),
        "text": " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 4))),
    }
    if rng.random() < 0.6:
        fields["owner_id"] = rng.choice(OWNERS)
    if rng.random() < 0.5:
        fields["at_or_before"] = GameMoment(
            timeline_id=rng.choice(TIMELINES), tick=rng.randrange(0, 600)
        )
    if rng.random() < 0.2:
        fields["tags"] = [rng.choice(["gossip", "danger", "trade"])]
    if rng.random() < 0.2:
        fields["kinds"] = [rng.choice(["event", "fact"])]
    if rng.random() < 0.1:
        fields["text"] = "?!"
    return GameMemoryQuery(**fields)


def _hits(result: Any) -> list[tuple[object, ...]]:
    """Each hit's identity and evidence; the fused score to 1e-9 (``_Close``).

    The two backends compute cosines in different arithmetic (numpy here, pgvector there),
    so the near-zero cosines of unrelated memories differ by ~1e-9; the
    confidence fusion reads every candidate's cosine, so the fused score may differ that
    much. The ranks, memories and the hits' own scores are exact.
    """
    return [
        (
            hit.memory.owner_id,
            hit.memory.memory_id,
            hit.lexical_rank,
            hit.vector_rank,
            hit.lexical_score,
            hit.vector_score,
            _Close(hit.fused_score),
            hit.age_ticks,
        )
        for hit in result.hits
    ]


class _Close:
    """A float equal to another within 1e-9 (``pytest.approx`` does not nest in tuples)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Close) and abs(self.value - other.value) <= 1e-9

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return repr(self.value)


def _pair(
    tmp_path: Path, database: str, provider: HashingEmbeddingProvider
) -> tuple[VectorMemoryStore, VectorMemoryStore]:
    options = VectorMemoryStoreOptions(dispose_embedding_provider=False)
    files = VectorMemoryStore(
        FileGameMemoryStore(tmp_path / "save"),
        FileVectorMemoryIndex(tmp_path / "index"),
        provider,
        reranker=GameAwareMemoryReranker(),
        options=options,
    )
    postgres = VectorMemoryStore(
        PostgresGameMemoryStore(database),
        PostgresVectorIndex(database),
        provider,
        reranker=GameAwareMemoryReranker(),
        options=options,
    )
    return files, postgres


async def test_random_saves_recall_identically_on_files_and_on_postgres(
    tmp_path: Path, database: str
) -> None:
    rng = random.Random(14)
    provider = HashingEmbeddingProvider(64, synonyms={"feline": "cat", "blaze": "fire"})
    files, postgres = _pair(tmp_path, database, provider)
    compared = 0
    try:
        number = 0
        for _ in range(3):
            for _ in range(60):
                memory = _memory(rng, number)
                number += 1
                assert await files.append(memory) == await postgres.append(memory)
            # Re-appending is a no-op on both.
            again = _memory(random.Random(3), 0)
            assert await files.append(again) == await postgres.append(again)
            for _ in range(40):
                query = _query(rng)
                lexical_files = await files.authoritative.snapshot(query)
                lexical_postgres = await postgres.authoritative.snapshot(query)
                assert [(h.memory.key, h.score) for h in lexical_files.lexical] == [
                    (h.memory.key, h.score) for h in lexical_postgres.lexical
                ]
                assert lexical_files.visible == lexical_postgres.visible
                assert (
                    lexical_files.authoritative_memories == lexical_postgres.authoritative_memories
                )
                expected, actual = await files.recall(query), await postgres.recall(query)
                assert _hits(expected) == _hits(actual), query
                assert expected.fallback == actual.fallback
                compared += len(expected.hits)
        assert compared > 200  # the queries did recall things
        for session in ("s1", "s2"):
            assert await files.get_status(session) == await postgres.get_status(session)
            assert await files.enumerate(session) == await postgres.enumerate(session)
    finally:
        await files.aclose()
        await postgres.aclose()

    # The model changes: both see stale vectors, recall lexically, and rebuild alike.
    changed = HashingEmbeddingProvider(64, synonyms={"feline": "cat"}, version="v2")
    files, postgres = _pair(tmp_path, database, changed)
    try:
        query = GameMemoryQuery(session_id="s1", limit=8, text="feline by the fire")
        assert (await files.get_status("s1")) == (await postgres.get_status("s1"))
        expected, actual = await files.recall(query), await postgres.recall(query)
        assert expected.fallback and actual.fallback
        assert _hits(expected) == _hits(actual)
        for session in ("s1", "s2"):
            assert await files.rebuild(session) == await postgres.rebuild(session)
        for _ in range(30):
            query = _query(rng)
            assert _hits(await files.recall(query)) == _hits(await postgres.recall(query))
    finally:
        await files.aclose()
        await postgres.aclose()
