"""Scoring every candidate on every recorded set, in worker processes.

Replaying a candidate is pure Python (the library's ``fuse`` and reranker), so the work is
spread over ``jobs`` processes (``spawn``: no model or event loop is inherited). Each
worker receives the recorded sets once; a task is one candidate on one set and returns its
metrics with its reranker and with none (one fusion serves both).
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from retrieval_grid import Candidate
from retrieval_record import RecordedSet, first_relevant, replay_both
from retrieval_report import metrics

from game_memory import GameAwareMemoryReranker

__all__ = ["Scores", "by_category", "channel", "score_all"]

#: ``(set, candidate) → (metrics with its reranker, metrics with no reranker)``
Scores = dict[tuple[str, str], tuple[dict[str, float], dict[str, float]]]

_RECORDED: dict[str, RecordedSet] = {}


def channel(recorded: RecordedSet, which: str, limit: int) -> dict[str, float]:
    """One channel's list alone (its own order, cut to ``limit``)."""
    ranks = [
        first_relevant(
            (m for m, _ in (q.lexical if which == "lexical" else q.vector)[:limit]),
            q.row.relevant,
        )
        for q in recorded.queries
    ]
    return metrics(ranks)


def by_category(recorded: RecordedSet, candidate: Candidate, limit: int) -> dict[str, Any]:
    """Per query category: the two channels and ``candidate`` (sets with categories only)."""
    categories = sorted({q.row.category for q in recorded.queries})
    if len(categories) < 2:
        return {}
    reranker = None if candidate.reranker is None else GameAwareMemoryReranker(candidate.reranker)
    out: dict[str, Any] = {}
    for category in categories:
        queries = [q for q in recorded.queries if q.row.category == category]
        subset = RecordedSet(recorded.dataset, tuple(queries), recorded.pool, {})
        ranks = [
            first_relevant(
                replay_both(q, candidate.fusion, reranker, recorded.pool)[1], q.row.relevant
            )
            for q in queries
        ]
        out[category] = {
            "queries": len(queries),
            "lexical": channel(subset, "lexical", limit),
            "vector": channel(subset, "vector", limit),
            candidate.name: metrics(ranks),
        }
    return out


def _score(
    recorded: RecordedSet, candidate: Candidate
) -> tuple[dict[str, float], dict[str, float]]:
    reranker = None if candidate.reranker is None else GameAwareMemoryReranker(candidate.reranker)
    plain: list[int | None] = []
    ranked: list[int | None] = []
    for query in recorded.queries:
        without, with_reranker = replay_both(query, candidate.fusion, reranker, recorded.pool)
        plain.append(first_relevant(without, query.row.relevant))
        ranked.append(first_relevant(with_reranker, query.row.relevant))
    return metrics(ranked), metrics(plain)


def _start(recorded: dict[str, RecordedSet]) -> None:
    _RECORDED.update(recorded)


def _task(
    task: tuple[str, Candidate],
) -> tuple[str, str, tuple[dict[str, float], dict[str, float]]]:
    name, candidate = task
    return name, candidate.name, _score(_RECORDED[name], candidate)


def score_all(
    recorded: dict[str, RecordedSet], grid: Sequence[Candidate], jobs: int, progress: bool = True
) -> Scores:
    """Every candidate of ``grid`` on every set of ``recorded``."""
    tasks = [(name, candidate) for name in recorded for candidate in grid]
    scores: Scores = {}
    if jobs <= 1:
        _start(recorded)
        results = map(_task, tasks)
        for done, (name, candidate, figures) in enumerate(results, 1):
            scores[(name, candidate)] = figures
            if progress and done % 100 == 0:
                print(f"  scored {done}/{len(tasks)}", file=sys.stderr)
        return scores
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, context, initializer=_start, initargs=(recorded,)) as pool:
        for done, (name, candidate, figures) in enumerate(pool.map(_task, tasks, chunksize=4), 1):
            scores[(name, candidate)] = figures
            if progress and done % 100 == 0:
                print(f"  scored {done}/{len(tasks)}", file=sys.stderr)
    return scores
