"""Spinning worker threads: what onnxruntime's idle spin costs a game, and what it buys.

onnxruntime lets the worker threads of a session spin between runs, waiting for the next
one (its own default); the providers turn that off (``allow_spinning=False``,
``game_memory.onnx.session``). This measures both, side by side: a child process per
setting and gap (alternating, ``--rounds`` times) opens a save of ``--memories`` memories
with the default model, then asks ``--questions`` questions it has not asked before (no
query cache), one every ``gap`` seconds (a game asking between frames), and reports:

- ``latencyMs``: the median recall, as the caller waits for it (embedding included);
- ``cpuPerQuestionMs``: the process's CPU time (every thread) over the questions and the
  gaps between them, per question: what the game's cores pay.

Prints one JSON object: per gap, both settings' medians over the rounds and the ratios
(spinning over not). The default model must be prepared (``game-memory models
prepare``) in ``--home`` or ``$GAME_MEMORY_HOME``.

Usage: ``python benchmarks/onnx_spinning.py [--gaps 0.002,0.05,0.2] [--questions 40]
[--rounds 3] [--memories 200] [--home H]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from script_support import float_list, float_range, int_range, worker_failed

Json = dict[str, Any]

WORDS = [
    "dragon",
    "bridge",
    "tavern",
    "guard",
    "thief",
    "mill",
    "river",
    "forest",
    "wolf",
    "merchant",
    "sword",
    "silver",
    "bard",
    "harvest",
    "storm",
    "tower",
    "witch",
    "market",
    "ship",
    "harbour",
    "king",
    "queen",
    "letter",
    "map",
    "lantern",
]


def memories(count: int) -> list[Any]:
    from game_memory import GameMemory, GameMoment

    return [
        GameMemory(
            memory_id=f"m{number}",
            session_id="session",
            owner_id="npc",
            scope="world",
            kind="event",
            payload_json="{}",
            moment=GameMoment(timeline_id="main", tick=number),
            searchable_text=" ".join(WORDS[(number * k) % len(WORDS)] for k in (1, 3, 7, 11)),
        )
        for number in range(count)
    ]


async def ask(memory: Any, questions: int, gap: float) -> Json:
    """Ask ``questions`` new questions of ``memory``, one every ``gap`` seconds: each
    recall's wall time and EMBEDDING stage (seconds, milliseconds), and the process's CPU
    and wall time over them."""
    from game_memory import GameMemoryQuery, GameMoment

    latencies: list[float] = []
    embeddings: list[float] = []
    started_cpu, started = time.process_time(), time.perf_counter()
    for number in range(questions):
        text = f"{WORDS[number % len(WORDS)]} {WORDS[(number * 5) % len(WORDS)]} q{number}"
        query = GameMemoryQuery(
            session_id="session",
            owner_id="npc",
            limit=8,
            text=text,
            at_or_before=GameMoment(timeline_id="main", tick=10**6),
        )
        asked = time.perf_counter()
        result = await memory.recall(query)
        latencies.append(time.perf_counter() - asked)
        if result.fallback:
            raise RuntimeError("the recall fell back to lexical: the model is not used")
        stages = {s.stage.name: s.duration_ms for s in result.snapshot.stages}
        embeddings.append(stages["EMBEDDING"])
        await asyncio.sleep(gap)
    return {
        "latencies": latencies,
        "embeddings": embeddings,
        "cpu": time.process_time() - started_cpu,
        "wall": time.perf_counter() - started,
    }


async def child(args: argparse.Namespace) -> Json:
    """One setting at one gap, in this fresh process."""
    from game_memory import open_memory
    from game_memory.onnx import load_named_provider

    home = Path(args.home) if args.home else None
    provider = await load_named_provider("default", home, allow_spinning=args.spin)
    memory = await open_memory(args.save, model=provider)
    try:
        asked = await ask(memory, args.questions, args.gap)
    finally:
        await memory.aclose()
    return {
        "latencyMs": round(statistics.median(asked["latencies"][1:]) * 1000, 3),
        "cpuPerQuestionMs": round(asked["cpu"] / args.questions * 1000, 3),
        "coresBusy": round(asked["cpu"] / asked["wall"], 3),
    }


def seed(save: Path, count: int, home: str | None) -> None:
    async def run() -> None:
        from game_memory import open_memory

        memory = await open_memory(save, model="default", home=home)
        async with memory:
            if memory.notice:
                # The message, not the Diagnostic's repr: it names the command (with
                # --home when one was given) that prepares the model where this run looks.
                raise SystemExit(f"the default model is not available: {memory.notice.message}")
            await memory.append_many(memories(count))

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gaps", type=float_list(0, 60), default="0.002,0.05,0.2")
    parser.add_argument("--questions", type=int_range(1, 100_000), default=40)
    parser.add_argument("--rounds", type=int_range(1, 1_000), default=3)
    parser.add_argument("--memories", type=int_range(1, 1_000_000), default=200)
    parser.add_argument("--home", default=os.environ.get("GAME_MEMORY_HOME"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--gap", type=float_range(0, 60), default=0.05, help=argparse.SUPPRESS)
    parser.add_argument("--spin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args))))
        return
    gaps: list[float] = args.gaps
    with tempfile.TemporaryDirectory(prefix="onnx-spinning-") as folder:
        save = Path(folder) / "save"
        seed(save, args.memories, args.home)
        runs: dict[str, dict[str, list[Json]]] = {}
        for _ in range(args.rounds):
            for gap in gaps:
                for spin in (False, True):
                    command = [sys.executable, __file__, "--child", "--save", str(save)]
                    command += ["--gap", str(gap), "--questions", str(args.questions)]
                    command += ["--home", args.home] if args.home else []
                    command += ["--spin"] if spin else []
                    output = subprocess.run(command, check=False, capture_output=True, text=True)
                    if output.returncode != 0:  # killed by a Ctrl-C: KeyboardInterrupt
                        worker_failed(output, f"the child of gap {gap} (spinning: {spin})")
                    setting = "spinning" if spin else "not_spinning"
                    runs.setdefault(str(gap), {}).setdefault(setting, []).append(
                        json.loads(output.stdout.splitlines()[-1])
                    )
    report: Json = {
        "benchmark": "onnx_spinning",
        "python": platform.python_version(),
        "questions": args.questions,
        "rounds": args.rounds,
        "memories": args.memories,
        "gaps": {},
    }
    for gap, settings in runs.items():
        medians = {
            setting: {
                key: round(statistics.median(run[key] for run in values), 3)
                for key in ("latencyMs", "cpuPerQuestionMs", "coresBusy")
            }
            for setting, values in settings.items()
        }
        spinning, still = medians["spinning"], medians["not_spinning"]
        report["gaps"][gap] = {
            **medians,
            "latency_spinning_over_not": round(spinning["latencyMs"] / still["latencyMs"], 3),
            "cpu_spinning_over_not": round(
                spinning["cpuPerQuestionMs"] / still["cpuPerQuestionMs"], 3
            ),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
