"""Threads of the ONNX providers: one thread a run and a call's batches side by side,
against onnxruntime's own choice (every core inside each run, batches one after another).

Measured side by side, a fresh child process per setting and round (alternating,
``--rounds`` times), with the default model:

- **questions**: the child opens a save of ``--memories`` memories and asks
  ``--questions`` questions it has not asked before (no query cache), one every ``--gap``
  seconds (a game asking between frames): the median recall as the caller waits for it
  (``latencyMs``, embedding included), the median query embedding alone
  (``embeddingMs``, the recall's EMBEDDING stage) and the process's CPU time per question
  (``cpuPerQuestionMs``: what the game's cores pay, the gaps included);
- **documents**: it then embeds ``--documents`` new texts of 14 words, 256 a call (what a
  bulk ``append_many`` asks of the model): wall and CPU time, and texts per second.

Settings: ``onnxruntime_threads`` (``intra_op_threads=0, batch_threads=1``: the defaults
before 7 December 2026) and ``one_thread_a_run`` (today's defaults: ``intra_op_threads=1``,
``batch_threads`` two where the process may use two cores). Prints one JSON object with
both settings' medians over the rounds and the ratios (today's over before).

Usage: ``python benchmarks/onnx_threads.py [--rounds 3] [--questions 40] [--gap 0.05]
[--documents 512] [--memories 200] [--home H]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from onnx_spinning import WORDS, ask, seed
from script_support import float_range, int_range, worker_failed

Json = dict[str, Any]
SETTINGS: dict[str, Json] = {
    "onnxruntime_threads": {"intra_op_threads": 0, "batch_threads": 1},
    "one_thread_a_run": {},
}
FIGURES = (
    "latencyMs",
    "embeddingMs",
    "cpuPerQuestionMs",
    "documentsWallMs",
    "documentsCpuMs",
    "documentsPerSecond",
)


async def child(args: argparse.Namespace) -> Json:
    """One setting, in this fresh process."""
    from game_memory import open_memory
    from game_memory.onnx import load_named_provider

    home = Path(args.home) if args.home else None
    provider = await load_named_provider("default", home, **SETTINGS[args.setting])
    memory = await open_memory(args.save, model=provider)
    try:
        asked = await ask(memory, args.questions, args.gap)
        rng = random.Random(args.documents)
        texts = [" ".join(rng.choice(WORDS) for _ in range(14)) for _ in range(args.documents)]
        documents_cpu, documents = time.process_time(), time.perf_counter()
        for first in range(0, len(texts), 256):
            await provider.embed_documents(texts[first : first + 256])
        documents_wall = time.perf_counter() - documents
        documents_cpu = time.process_time() - documents_cpu
    finally:
        await memory.aclose()
    return {
        "latencyMs": round(statistics.median(asked["latencies"][1:]) * 1000, 3),
        "embeddingMs": round(statistics.median(asked["embeddings"][1:]), 3),
        "cpuPerQuestionMs": round(asked["cpu"] / args.questions * 1000, 3),
        "documentsWallMs": round(documents_wall * 1000, 1),
        "documentsCpuMs": round(documents_cpu * 1000, 1),
        "documentsPerSecond": round(len(texts) / documents_wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int_range(1, 1_000), default=3)
    parser.add_argument("--questions", type=int_range(1, 100_000), default=40)
    parser.add_argument("--gap", type=float_range(0, 60), default=0.05)
    parser.add_argument("--documents", type=int_range(1, 1_000_000), default=512)
    parser.add_argument("--memories", type=int_range(1, 1_000_000), default=200)
    parser.add_argument("--home", default=os.environ.get("GAME_MEMORY_HOME"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    runs: dict[str, list[Json]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="onnx-threads-") as folder:
        save = Path(folder) / "save"
        seed(save, args.memories, args.home)
        for round_number in range(args.rounds):
            order = list(SETTINGS) if round_number % 2 == 0 else list(reversed(SETTINGS))
            for setting in order:
                command = [sys.executable, __file__, "--child", "--save", str(save)]
                command += ["--setting", setting, "--gap", str(args.gap)]
                command += ["--questions", str(args.questions)]
                command += ["--documents", str(args.documents)]
                command += ["--home", args.home] if args.home else []
                output = subprocess.run(command, check=False, capture_output=True, text=True)
                if output.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt
                    worker_failed(output, f"the child of setting {setting}")
                runs[setting].append(json.loads(output.stdout.splitlines()[-1]))
    medians = {
        setting: {key: round(statistics.median(run[key] for run in values), 3) for key in FIGURES}
        for setting, values in runs.items()
    }
    before, now = medians["onnxruntime_threads"], medians["one_thread_a_run"]
    print(
        json.dumps(
            {
                "benchmark": "onnx_threads",
                "python": platform.python_version(),
                "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
                "rounds": args.rounds,
                "questions": args.questions,
                "gap": args.gap,
                "documents": args.documents,
                "medians": medians,
                "now_over_before": {
                    key: round(now[key] / before[key], 3) for key in FIGURES if before[key]
                },
                "runs": runs,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
