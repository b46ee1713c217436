"""Cross-validated choice of the recall configuration: one development set held out at a time.

Usage: ``python benchmarks/crossval.py [--home H] [--data-cache D] [--datasets a,b]
[--max-queries N] [--quick] [--jobs N] [--limit N] [--out FILE]``, or
``python benchmarks/crossval.py --markdown FILE`` to print the tables of a saved run.
Prints one JSON object (and writes it to ``--out``); progress goes to stderr.

Per set (``retrieval_catalog.CROSSVAL_SETS``), every memory is appended through the real
front door and every query's lexical and vector candidate lists are recorded through
``VectorMemoryStore.recall``; each candidate configuration (``retrieval_grid``) is then
replayed with the library's own ``fuse`` and reranker over those lists, which the run checks
against ``recall`` itself for the default configuration (see ``retrieval_record``). The
selection rule and the rotations are in ``crossval_select``.

Reported: each set's channel baselines (R@1, R@5, MRR of the lexical and the vector list
alone), every candidate's figures on every set (with its reranker, and its fusion with no
reranker), per query category the channels and the library's default (sets with
categories), every rotation's choice and held-out figures, the choice over all sets, and
the library's current default on every set. A full run takes about 10 minutes on two
cores with the embedding cache warm (``<data cache>/embeddings``; about 15 cold, of which
recording is 5). ``--quick``: at most 60 queries per set and a reduced grid, for a smoke
run of a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from crossval_scoring import by_category, channel, score_all
from crossval_select import TARGET_TOLERANCE, cross_validate
from crossval_tables import markdown
from report_out import emit
from retrieval_catalog import CROSSVAL_SETS, LOADERS, SEED, sample
from retrieval_grid import (
    FUSION_FAMILIES,
    GRID,
    RERANKER_FAMILIES,
    Family,
    candidate_grid,
    default_candidate,
)
from retrieval_record import LIMIT, CachedEmbeddings, RecordedSet, record_dataset

from game_memory import VectorMemoryStoreOptions
from game_memory.onnx import load_default_provider, prepare_default_model
from game_memory.onnx.model_home import default_model_home

QUICK_QUERIES = 60
QUICK_FUSION: dict[str, Family | None] = {
    "rrf": FUSION_FAMILIES["rrf"],
    "convex_floor": {
        "mode": ("convex",),
        "normalization": ("floor",),
        "vector_weight": (0.6, 0.75, 0.9),
        "lexical_minimum_spread": (0.0, 8.0),
        "vector_minimum_spread": (0.0, 1.0),
    },
    "convex_absolute": {
        "mode": ("convex",),
        "normalization": ("absolute",),
        "vector_weight": (0.75, 0.9),
    },
}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    home = Path(args.home) if args.home else None
    cache = Path(args.data_cache) if args.data_cache else default_model_home() / "benchmark-data"
    names = args.datasets.split(",") if args.datasets else list(CROSSVAL_SETS)
    unknown = sorted(set(names) - set(LOADERS))
    if unknown:
        raise SystemExit(f"unknown datasets {unknown}; choose from {sorted(LOADERS)}")
    if len(names) < 2:
        raise SystemExit("cross-validation needs at least two sets")
    if args.limit < 5:
        raise SystemExit("--limit must be at least 5 (R@5 is measured)")
    maximum = QUICK_QUERIES if args.quick and not args.max_queries else args.max_queries
    grid = candidate_grid(((QUICK_FUSION, RERANKER_FAMILIES),) if args.quick else GRID)
    reference = default_candidate(grid)
    prepare_default_model(home)
    real = await load_default_provider(home)
    provider = CachedEmbeddings(real, cache / "embeddings")
    recorded: dict[str, RecordedSet] = {}
    sets: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            dataset = sample(LOADERS[name](cache), maximum)
            with tempfile.TemporaryDirectory(prefix=f"crossval-{name}-") as folder:
                recorded[name] = await record_dataset(dataset, provider, Path(folder), args.limit)
            provider.save()
            print(f"{name}: recorded after {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        provider.save()
        await real.aclose()
    recorded_at = time.perf_counter()
    scores = score_all(recorded, grid, args.jobs)
    for name, entry in recorded.items():
        dataset = entry.dataset
        sets[name] = {
            "source": dataset.source,
            "files_sha256": dataset.files,
            "memories": len(dataset.memories),
            "owners": len({m.owner_id for m in dataset.memories}),
            "queries": len(dataset.queries),
            "game_time": dataset.asked_at_tick is not None
            or any(q.asked_at_tick is not None for q in dataset.queries),
            "front_door_check": entry.front_door_check,
            "lexical": channel(entry, "lexical", args.limit),
            "vector": channel(entry, "vector", args.limit),
            "candidates": {c.name: scores[(name, c.name)][0] for c in grid},
            "categories": by_category(entry, reference, args.limit),
            "fusion_only": {
                f"{c.name.rsplit('+', 1)[0]}+no_reranker": scores[(name, c.name)][1] for c in grid
            },
        }
    return {
        "benchmark": "crossval",
        "model": str(real.identity),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "settings": {
            "limit": args.limit,
            "candidates_per_channel": VectorMemoryStoreOptions().candidate_limit(args.limit),
            "max_queries": maximum,
            "quick": args.quick,
            "seed": SEED,
            "target_tolerance": TARGET_TOLERANCE,
            "texts_embedded_this_run": provider.embedded,
            "jobs": args.jobs,
            "recording_seconds": round(recorded_at - started, 1),
        },
        "candidates": [c.describe() for c in grid],
        "sets": sets,
        "crossval": cross_validate(sets, [c.name for c in grid], reference.name),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument(
        "--data-cache", help="wheel and embedding cache (default: <model home>/benchmark-data)"
    )
    parser.add_argument(
        "--datasets", help=f"comma-separated sets (default: {','.join(CROSSVAL_SETS)})"
    )
    parser.add_argument(
        "--max-queries", type=int, default=0, help="seeded sample of at most N queries per set"
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_QUERIES} queries per set, a small grid"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes for scoring (default: up to 2)",
    )
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"recall limit (default {LIMIT})")
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--markdown", metavar="FILE", help="print the tables of a saved run")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text(encoding="utf-8"))))
        return 0
    return emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    sys.exit(main())
