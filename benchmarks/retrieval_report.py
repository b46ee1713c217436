"""Scoring for the retrieval benchmark: metrics, disagreement subsets, goal margins, ranking.

The goal (issue 3): hybrid R@5 never more than ``GOAL_TOLERANCE`` below the better single
channel on any set, and above both channels on the queries where exactly one channel has
a relevant memory in its top 5 (the *disagreement* subset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from retrieval_sets import Dataset, content_words

from game_memory import FusionOptions

__all__ = ["GOAL_TOLERANCE", "choose", "margins", "metrics", "summarize"]

GOAL_TOLERANCE = 0.01


def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    n = max(len(ranks), 1)
    return {
        "r1": round(sum(r == 1 for r in ranks) / n, 4),
        "r5": round(sum(r is not None and r <= 5 for r in ranks) / n, 4),
        "mrr": round(sum(1.0 / r for r in ranks if r is not None) / n, 4),
    }


def summarize(dataset: Dataset, ranks: dict[str, list[int | None]]) -> dict[str, Any]:
    """Metrics per method, on all queries, per category, and on the disagreement subset."""

    def top5(name: str) -> list[bool]:
        return [r is not None and r <= 5 for r in ranks[name]]

    lexical, vector = top5("lexical"), top5("vector")
    disagree = [i for i, (a, b) in enumerate(zip(lexical, vector, strict=True)) if a != b]
    categories = sorted({q.category for q in dataset.queries})
    out: dict[str, Any] = {
        "source": dataset.source,
        "files_sha256": dataset.files,
        "memories": len(dataset.memories),
        "owners": len({m.owner_id for m in dataset.memories}),
        "queries": len(dataset.queries),
        "game_time": dataset.asked_at_tick is not None,
        "methods": {name: metrics(r) for name, r in ranks.items()},
        "disagreement": {
            "queries": len(disagree),
            "lexical_only": sum(lexical[i] for i in disagree),
            "vector_only": sum(vector[i] for i in disagree),
            "r5": {name: metrics([r[i] for i in disagree])["r5"] for name, r in ranks.items()},
        },
    }
    if len(categories) > 1:
        out["categories"] = {
            c: {
                "queries": sum(q.category == c for q in dataset.queries),
                "r5": {
                    name: metrics([r[i] for i, q in enumerate(dataset.queries) if q.category == c])[
                        "r5"
                    ]
                    for name, r in ranks.items()
                },
            }
            for c in categories
        }
        out["no_shared_content_word"] = sum(
            not content_words(q.text)
            & set().union(
                *(content_words(m.text) for m in dataset.memories if m.memory_id in q.relevant)
            )
            for q in dataset.queries
        )
    return out


def margins(results: dict[str, Any], method: str) -> dict[str, Any]:
    """R@5 of ``method`` minus the better channel, overall and on the disagreement subset.

    The goal holds on a set when the margin is at least ``-GOAL_TOLERANCE`` and the
    disagreement margin is above 0, or at least 0 when one channel won every disagreement
    (nothing can beat a channel that found all of them).
    """
    per_set: dict[str, Any] = {}
    for name, data in results.items():
        best = max(data["methods"]["lexical"]["r5"], data["methods"]["vector"]["r5"])
        disagreement = data["disagreement"]
        dis = disagreement["r5"]
        dis_margin = round(dis[method] - max(dis["lexical"], dis["vector"]), 4)
        both_win = disagreement["lexical_only"] > 0 and disagreement["vector_only"] > 0
        margin = round(data["methods"][method]["r5"] - best, 4)
        per_set[name] = {
            "r5": data["methods"][method]["r5"],
            "better_channel_r5": best,
            "margin": margin,
            "disagreement_r5": dis[method],
            "disagreement_better_channel_r5": max(dis["lexical"], dis["vector"]),
            "disagreement_margin": dis_margin,
            "meets_goal": margin >= -GOAL_TOLERANCE
            and (dis_margin > 0.0 if both_win else dis_margin >= 0.0),
        }
    return {
        "method": method,
        "worst_margin": min(m["margin"] for m in per_set.values()),
        "worst_disagreement_margin": min(m["disagreement_margin"] for m in per_set.values()),
        "meets_goal": all(m["meets_goal"] for m in per_set.values()),
        "per_set": per_set,
    }


def choose(results: dict[str, Any], candidates: list[str], default: str) -> dict[str, Any]:
    """Rank ``candidates`` (hybrid methods, reranker off): the goal, then mean R@5, then MRR.

    Means are over the distinct sets (``npc_no_game_time`` repeats ``npc`` without the
    reranker, so it is left out of the means). ``default`` is the method run with
    ``FusionOptions()``; its margins are reported with and without ``+rerank``.
    """
    distinct = [name for name in results if name != "npc_no_game_time" or "npc" not in results]
    rows = []
    for method in candidates:
        row = margins(results, method)
        for metric in ("r5", "mrr"):
            values = [results[name]["methods"][method][metric] for name in distinct]
            row[f"mean_{metric}"] = round(sum(values) / len(values), 4)
        rows.append(row)
    rows.sort(key=lambda r: (-r["meets_goal"], -r["mean_r5"], -r["mean_mrr"], r["method"]))
    keys = (
        "method",
        "meets_goal",
        "worst_margin",
        "worst_disagreement_margin",
        "mean_r5",
        "mean_mrr",
    )
    return {
        "ranking": [{k: r[k] for k in keys} for r in rows],
        "default": {"fusion": FusionOptions().model_dump(mode="json"), **margins(results, default)},
        "default_with_reranker": margins(results, f"{default}+rerank"),
    }
