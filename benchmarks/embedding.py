"""Embedding benchmark: per provider and model, latency, throughput and provider overhead.

Usage: ``python benchmarks/embedding.py [--home H] [--rounds N] [--bge-m3-shaped]``. Prints
one JSON object.

For each model (the prepared all-MiniLM-L6-v2 in INT8 and fp32; BGE-M3 when
``GAME_MEMORY_BGE_M3_DIR`` points to a folder; with ``--bge-m3-shaped``, the BGE-M3
provider on a graph of BGE-M3's shape with random weights, see ``bge_m3_shaped.py``) at
1 and 2 intra-op threads it measures:

- the median latency of ``await provider.embed_query(query)``;
- the median time of ``await provider.embed_documents(32 texts)`` and its throughput;
- the median time of bare ``InferenceSession.run`` calls of the same session on the same,
  already tokenized and padded inputs (the provider's own batches: 32 documents are two
  runs of 16 by default), in the same rounds (interleaved with the provider calls so both
  see the same machine state), and the ratio provider / bare;
- the same bare run handed to a worker thread from the event loop (what "inference off
  the event loop" costs by itself: two cross-thread wake-ups), and the ratio provider /
  that, which isolates the provider's own work (tokenization, batching, pooling, bounds).

The default model is prepared first if needed (``game-memory models prepare``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from bge_m3_shaped import ensure_bge_m3_shaped_folder

from game_memory.onnx import (
    OnnxEmbeddingProviderBase,
    load_provider_from_directory,
    prepare_default_model,
)
from game_memory.onnx.batching import pad_batch, plan_batches
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.session import OnnxSessionInference

QUERY = "What did the guard see near the old mill last night?"
DOCUMENTS = [
    "The guard saw a hooded thief slip past the old mill after midnight.",
    "Mira the innkeeper remembers the bard who never paid for his ale.",
    "A dragon flew over the northern village at dawn and burned two barns.",
    "The blacksmith sold a silver sword to a traveller from the coast.",
    "Wolves howled in the forest while the hunter slept beside the fire.",
    "The merchant lost his purse on the bridge and blamed the children.",
    "Children played by the river under the old willow tree all afternoon.",
    "The queen's letter arrived sealed with red wax and smelled of roses.",
    "Rain flooded the cellar of the tavern during the spring storm.",
    "The miller's daughter hid a map beneath the loose floorboard.",
    "An old soldier told stories of the siege to anyone who would listen.",
    "The priest rang the bell three times when the stranger entered town.",
    "A fox stole eggs from the farmer's coop two nights in a row.",
    "The alchemist's tower glowed green every full moon.",
    "Bandits ambushed the caravan on the mountain pass at dusk.",
    "The baker gives free bread to the orphans every Sunday morning.",
    "The ferryman refuses to cross the lake after sunset.",
    "A wounded knight rested at the inn and left without a word.",
    "The mayor promised to rebuild the bridge before winter.",
    "Someone painted strange runes on the chapel door overnight.",
    "The hunter traded three wolf pelts for a new bow.",
    "The well in the square has tasted of iron since the earthquake.",
    "Two guards argued about the missing key to the armory.",
    "The herbalist sells a tea that cures fever and bad dreams.",
    "A travelling circus camped in the meadow for a week.",
    "The lighthouse keeper saw a ship with black sails on the horizon.",
    "The tailor measured the prince for a wedding coat.",
    "Snow blocked the road to the capital for ten days.",
    "The old witch of the marsh knows the true name of the river.",
    "A child found a golden coin in the mud near the mill.",
    "The stable boy dreams of joining the king's cavalry.",
    "The fisherman caught an eel as long as a man.",
]


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000.0, 4)


def bare_feeds(
    provider: OnnxEmbeddingProviderBase, texts: list[str]
) -> list[dict[str, np.ndarray]]:
    """The inputs of the runs the provider makes for ``texts``: its batches, padded alike."""
    engine = provider.engine
    limits = engine.limits
    ids = [engine.tokenizer.tokenize(text).ids for text in texts]
    inference = engine.inference
    assert isinstance(inference, OnnxSessionInference)
    feeds = []
    for batch in plan_batches(
        [len(item) for item in ids], limits.maximum_batch_size, limits.maximum_batch_tokens
    ):
        input_ids, mask = pad_batch([ids[index] for index in batch], engine.tokenizer.pad_id)
        feeds.append(inference.feeds(input_ids, mask))
    return feeds


async def measure(provider: OnnxEmbeddingProviderBase, rounds: int) -> dict[str, Any]:
    inference = provider.engine.inference
    assert isinstance(inference, OnnxSessionInference)
    session = inference.session
    output = ["last_hidden_state"]
    query_feeds = bare_feeds(provider, [QUERY])
    batch_feeds = bare_feeds(provider, DOCUMENTS)

    def bare(feeds: list[dict[str, np.ndarray]]) -> None:
        for feed in feeds:
            session.run(output, feed)

    for _ in range(5):  # warm-up: allocator, thread pool, caches
        await provider.embed_query(QUERY)
        bare(query_feeds)
    await provider.embed_documents(DOCUMENTS)
    bare(batch_feeds)

    loop = asyncio.get_running_loop()
    worker = ThreadPoolExecutor(max_workers=1)

    async def interleaved(
        count: int, feeds: list[dict[str, np.ndarray]], call: Callable[[], Awaitable[object]]
    ) -> tuple[float, float, float]:
        """Median ms of the bare runs, the same runs on the worker, and the provider call."""
        samples: tuple[list[float], list[float], list[float]] = ([], [], [])
        for _ in range(count):
            started = time.perf_counter()
            bare(feeds)
            samples[0].append(time.perf_counter() - started)
            started = time.perf_counter()
            await loop.run_in_executor(worker, bare, feeds)
            samples[1].append(time.perf_counter() - started)
            started = time.perf_counter()
            await call()
            samples[2].append(time.perf_counter() - started)
        bare_ms, hop_ms, provider_ms = (median_ms(times) for times in samples)
        return bare_ms, hop_ms, provider_ms

    bare_query_ms, hop_query_ms, query_ms = await interleaved(
        rounds, query_feeds, lambda: provider.embed_query(QUERY)
    )
    bare_batch_ms, hop_batch_ms, batch_ms = await interleaved(
        max(5, rounds // 10), batch_feeds, lambda: provider.embed_documents(DOCUMENTS)
    )
    worker.shutdown()

    return {
        "query_tokens": int(query_feeds[0]["input_ids"].shape[1]),
        # The provider's batches (maximum_batch_size, maximum_batch_tokens), which the bare
        # runs use too: the same inputs, padded the same way.
        "batch_padded_shapes": [list(feed["input_ids"].shape) for feed in batch_feeds],
        "single_query_median_ms": query_ms,
        "bare_run_single_query_median_ms": bare_query_ms,
        "single_query_overhead_ratio": round(query_ms / bare_query_ms, 3),
        "bare_run_on_worker_thread_single_query_median_ms": hop_query_ms,
        "single_query_overhead_vs_worker_thread_ratio": round(query_ms / hop_query_ms, 3),
        # What keeping inference off the event loop costs by itself: the floor under
        # single_query_overhead_ratio for any provider that does so.
        "worker_thread_hand_off_single_query_ratio": round(hop_query_ms / bare_query_ms, 3),
        "batch32_median_ms": batch_ms,
        "batch32_texts_per_second": round(len(DOCUMENTS) / (batch_ms / 1000.0), 1),
        "bare_run_batch32_median_ms": bare_batch_ms,
        "batch32_overhead_ratio": round(batch_ms / bare_batch_ms, 3),
        "bare_run_on_worker_thread_batch32_median_ms": hop_batch_ms,
        "batch32_overhead_vs_worker_thread_ratio": round(batch_ms / hop_batch_ms, 3),
    }


async def run(home: Path | None, rounds: int, bge_m3_shaped: bool) -> dict[str, Any]:
    folder = prepare_default_model(home)
    # (folder, provider options, single-query rounds, what the JSON says about the model)
    models: list[tuple[Path, dict[str, Any], int, dict[str, Any]]] = [
        (folder, {"precision": "int8"}, rounds, {}),
        (folder, {"precision": "fp32"}, rounds, {}),
    ]
    skipped = []
    bge = os.environ.get("GAME_MEMORY_BGE_M3_DIR", "").strip()
    if bge:
        models.append((Path(bge), {}, max(10, rounds // 5), {}))
    else:
        skipped.append(
            {"model": "BAAI/bge-m3", "reason": "GAME_MEMORY_BGE_M3_DIR is not set (no weights)"}
        )
    if bge_m3_shaped:
        shaped = (home if home is not None else default_model_home()) / "benchmarks"
        shaped /= "bge-m3-shaped"
        described = ensure_bge_m3_shaped_folder(
            shaped, [QUERY, *DOCUMENTS], say=lambda line: print(line, file=sys.stderr)
        )
        models.append((shaped, {}, max(10, rounds // 5), {"stand_in": described}))
    load_before = _load_average()
    results = []
    for path, options, model_rounds, extra in models:
        for threads in (1, 2):
            provider = await load_provider_from_directory(path, intra_op_threads=threads, **options)
            try:
                figures = await measure(provider, model_rounds)
            finally:
                await provider.aclose()
            results.append(
                {
                    "provider": type(provider).__name__,
                    "model": provider.identity.model_id,
                    "identity": str(provider.identity),
                    "precision": options.get("precision", "int8"),
                    "threads": threads,
                    "rounds": model_rounds,
                    **figures,
                    **extra,
                }
            )
    return {
        "benchmark": "embedding",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "onnxruntime": ort.__version__,
            # Other processes on the machine inflate small-latency figures; judge by these.
            "load_average_before": load_before,
            "load_average_after": _load_average(),
        },
        "rounds": rounds,
        "results": results,
        "skipped": skipped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--rounds", type=int, default=200, help="single-query rounds (200)")
    parser.add_argument(
        "--bge-m3-shaped",
        action="store_true",
        help="also measure the BGE-M3 provider on a BGE-M3-shaped graph with random weights "
        "(built once into <home>/benchmarks/bge-m3-shaped: about a minute, 300 MB)",
    )
    args = parser.parse_args(argv)
    home = Path(args.home) if args.home else None
    result = asyncio.run(run(home, max(10, args.rounds), args.bge_m3_shaped))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
