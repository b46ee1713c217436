"""Updates against sequels at rerank time: can a rule tell a newer version from a newer memory?

Usage: ``python benchmarks/belief_pairs.py [--home H] [--data development|heldout] [--out
FILE]``. Prints one JSON object (and writes it to ``--out``).

The reranker's implicit version test (``game_memory.recall.versions``) takes a newer memory
of the same NPC for a newer version of an older one when the two are alike. A belief
update should pass it; a *sequel* (a later memory on the same subject that does not replace
the earlier, ``retrieval_handwritten.Sequel``) should not. This records, through the real
front door (the prepared default model, no ``belief_key``), the reranker's candidates for
every question asked after an update and every sequel question, and reports for each
(older, newer) pair what a rule could look at: their cosine, its standing among the
candidates' pairs (in standard deviations), the overlap of their words, and the newer
one's cosine with the question over the older one's. Then, for a grid of thresholds on the
cosine and that ratio (the standing test of 3 deviations kept), how many update pairs and
how many sequel pairs a rule would take for versions: the two counts a version test trades.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from front_door_runs import FrontDoor, ask, fill
from report_out import emit
from retrieval_handwritten import (
    BELIEF_FILE,
    HELDOUT_BELIEF_FILE,
    SEQUELS_DEV_FILE,
    load_beliefs,
    load_sequels,
    scenario_memories,
    sequel_memories,
)

from game_memory.onnx import prepare_named_model
from game_memory.recall.fusion import FusedCandidate
from game_memory.recall.reranker import GameAwareMemoryReranker
from game_memory.store.tokenizer import tokenize

SESSION = "beliefs"
SIMILARITIES = (0.45, 0.5, 0.55, 0.6, 0.65, 0.7)
RATIOS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9)
STANDING = 3.0


@contextlib.contextmanager
def recording(last: list[FusedCandidate]) -> Iterator[None]:
    """While open, every rerank leaves its candidates (fusion's order) in ``last``: the
    reranker the front door built is the library's own, so its method is wrapped."""
    original = GameAwareMemoryReranker.rank

    def rank(
        self: GameAwareMemoryReranker, query: Any, candidates: Sequence[FusedCandidate]
    ) -> list[FusedCandidate]:
        last[:] = candidates
        return original(self, query, candidates)

    GameAwareMemoryReranker.rank = rank  # type: ignore[method-assign]
    try:
        yield
    finally:
        GameAwareMemoryReranker.rank = original  # type: ignore[method-assign]


def pair_features(candidates: Sequence[FusedCandidate], older: str, newer: str) -> dict[str, Any]:
    """What a version test could look at for ``older`` and ``newer`` among ``candidates``."""
    by_id = {c.memory.memory_id: c for c in candidates}
    a, b = by_id.get(older), by_id.get(newer)
    if a is None or b is None or a.vector is None or b.vector is None:
        return {"found": False}
    cosine = float(a.vector @ b.vector)
    vectors = np.array([c.vector for c in candidates if c.vector is not None], np.float64)
    upper = (vectors @ vectors.T)[np.triu_indices(len(vectors), 1)]
    standing = (
        float((cosine - upper.mean()) / upper.std()) if len(upper) > 2 and upper.std() else None
    )
    words_a, words_b = (
        set(tokenize(a.memory.searchable_text)),
        set(tokenize(b.memory.searchable_text)),
    )
    return {
        "found": True,
        "cosine": cosine,
        "standing": standing,
        "word_overlap": len(words_a & words_b) / max(1, len(words_a | words_b)),
        "query_ratio": (b.vector_score or 0.0) / max(a.vector_score or 0.0, 1e-9),
    }


def _quartiles(values: list[float]) -> list[float]:
    return [round(float(np.percentile(values, q)), 3) for q in (25, 50, 75)]


def taken(pair: dict[str, Any], similarity: float, ratio: float) -> bool:
    """Whether a rule of these thresholds takes the pair for versions."""
    standing = pair["standing"]
    return (
        pair["cosine"] >= similarity
        and (standing is None or standing >= STANDING)
        and pair["query_ratio"] >= ratio
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    home = Path(args.home) if args.home else None
    path = BELIEF_FILE if args.data == "development" else HELDOUT_BELIEF_FILE
    scenarios, _ = load_beliefs(path)
    sequels = load_sequels(SEQUELS_DEV_FILE if path == BELIEF_FILE else path)
    prepare_named_model("default", home)
    rows = [r for s in scenarios for r in scenario_memories(s, belief_key=False)]
    rows += [r for q in sequels for r in sequel_memories(q)]
    asked = [
        ("update", s.scenario_id, f"{s.scenario_id}.old", f"{s.scenario_id}.new", text, tick)
        for s in scenarios
        for text in s.questions
        for tick in sorted(set(s.after))
    ] + [
        ("sequel", q.sequel_id, f"{q.sequel_id}.earlier", f"{q.sequel_id}.later", text, tick)
        for q in sequels
        for text in q.questions
        for tick in sorted(set(q.asked))
    ]
    pairs: dict[str, list[dict[str, Any]]] = {"update": [], "sequel": []}
    with tempfile.TemporaryDirectory(prefix="belief-pairs-") as folder:
        door = FrontDoor(Path(folder) / "save", "hybrid", home)
        await fill(door, SESSION, rows)
        memory = await door.open()
        last: list[FusedCandidate] = []
        try:
            with recording(last):
                for kind, owner, older, newer, text, tick in asked:
                    await ask(memory, SESSION, owner, text, tick)
                    pairs[kind].append(pair_features(last, older, newer))
        finally:
            await memory.aclose()
    found = {kind: [p for p in found if p["found"]] for kind, found in pairs.items()}
    return {
        "benchmark": "belief_pairs",
        "data": path.name,
        "pairs": {kind: len(found[kind]) for kind in found},
        "not_both_candidates": {kind: len(pairs[kind]) - len(found[kind]) for kind in pairs},
        "quartiles": {
            kind: {
                name: _quartiles([p[name] for p in found[kind] if p[name] is not None])
                for name in ("cosine", "standing", "word_overlap", "query_ratio")
            }
            for kind in found
        },
        "rules": [
            {
                "similarity": similarity,
                "query_ratio": ratio,
                "standing": STANDING,
                "updates_taken": sum(taken(p, similarity, ratio) for p in found["update"]),
                "sequels_taken": sum(taken(p, similarity, ratio) for p in found["sequel"]),
            }
            for similarity in SIMILARITIES
            for ratio in RATIOS
        ],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--data", choices=("development", "heldout"), default="development")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    return emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    sys.exit(main())
