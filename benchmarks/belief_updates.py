"""Belief updates: does the NPC answer with what it believes *as of* the moment asked?

Usage: ``python benchmarks/belief_updates.py [--home H] [--modes hybrid,lexical]
[--fusion JSON] [--out FILE]``, or ``--markdown FILE`` for the tables of a saved run.
Prints one JSON object (and writes it to ``--out``).

The scenarios are ``retrieval_data/belief_updates.json`` (checked on load, see
``retrieval_handwritten``): an NPC learns version 1 of a fact at tick t1 and version 2 at
t2 > t1. Every question is asked after t2 (the newer version should rank first) and
between t1 and t2 (the older one should rank first; the newer is not visible then). All of
it goes through the real front door: one save per mode, filled with
``VectorMemoryStore.append`` from ``game_memory.open_memory`` (the prepared default model in
hybrid mode, no model in lexical mode), then reopened with each reranker setting
(``open_memory(..., reranker=...)``) and asked with ``recall`` (limit 10).

Reported per mode and reranker setting: *after* (the new version is the first hit),
*after_above* (the new version ranks above the old one, whatever else ranks first),
*between* (the old version is first), and *leaks* (the new version recalled before it
existed: must be 0), overall and split by background memories (with/without), by which
version is lexically closer to the question, and by the gap t2 − t1. The *belief_key*
variant gives both versions the scenario's key (``GameMemory.belief_key``); it runs only
when the library has that field (it is reported as skipped otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from front_door_runs import MODES, FrontDoor, ask, fill
from retrieval_grid import Family, expand
from retrieval_handwritten import Scenario, load_beliefs, scenario_memories

from game_memory import FusionOptions, GameAwareMemoryRerankerOptions, GameMemory
from game_memory.onnx import prepare_named_model

SESSION = "beliefs"
TARGET = 0.95

#: Reranker settings measured (one line per family, as in ``retrieval_grid``).
RERANKER_FAMILIES: dict[str, Family | None] = {
    "default": {},
    "relevance_only": {
        "importance_weight": (0.0,),
        "recency_weight": (0.0,),
        "diversity_penalty": (0.0,),
    },
    "relative": {"relevance": ("relative",)},
    "recency": {"recency_weight": (0.5, 1.0)},
    "half_life": {"recency_half_life_ticks": (360.0, 10_080.0)},
    "supersede": {"supersession_penalty": (0.1, 0.2, 0.3, 0.5)},
    "supersede_loose": {
        "supersession_penalty": (0.3, 0.5),
        "supersession_similarity": (0.5, 0.6),
    },
}


def _gap(scenario: Scenario) -> str:
    days = (scenario.new.tick - scenario.old.tick) / 1440
    return "under 1 day" if days < 1 else "1 to 7 days" if days <= 7 else "over 7 days"


async def measure(
    door: FrontDoor,
    scenarios: tuple[Scenario, ...],
    reranker: GameAwareMemoryRerankerOptions,
    fusion: FusionOptions,
) -> dict[str, Any]:
    """The rates for one reranker setting, overall and per split, and the failures."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    failures: list[dict[str, Any]] = []
    memory = await door.open(reranker, fusion)
    try:
        for s in scenarios:
            groups = (
                "all",
                f"background: {'yes' if s.background else 'no'}",
                f"lexically closer: {'old' if s.old_closer else 'new or equal'}",
                f"gap: {_gap(s)}",
            )
            old, new = f"{s.scenario_id}.old", f"{s.scenario_id}.new"
            for text in s.questions:
                for when, ticks in (("after", s.after), ("between", s.between)):
                    for tick in sorted(set(ticks)):
                        ids = [
                            h.memory.memory_id
                            for h in await ask(memory, SESSION, s.scenario_id, text, tick)
                        ]
                        expected = new if when == "after" else old
                        outcomes = {when: bool(ids) and ids[0] == expected}
                        if when == "after":
                            outcomes["after_above"] = new in ids and (
                                old not in ids or ids.index(new) < ids.index(old)
                            )
                        else:
                            outcomes["leaks"] = new in ids
                        for group in groups:
                            for name, value in outcomes.items():
                                counts[group][name][0] += value
                                counts[group][name][1] += 1
                        if not outcomes[when]:
                            failures.append(
                                {
                                    "scenario": s.scenario_id,
                                    "question": text,
                                    "tick": tick,
                                    "asked": when,
                                    "first": ids[0] if ids else None,
                                }
                            )
    finally:
        await memory.aclose()
    rates = {
        group: {
            name: {"hits": h, "of": n, "rate": round(h / n, 4)}
            for name, (h, n) in sorted(kinds.items())
        }
        for group, kinds in sorted(counts.items())
    }
    overall = rates["all"]
    return {
        "reranker": reranker.model_dump(mode="json"),
        "rates": rates,
        "meets_target": overall["after"]["rate"] >= TARGET
        and overall["between"]["rate"] >= TARGET
        and overall["leaks"]["hits"] == 0,
        "failures": failures,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    home = Path(args.home) if args.home else None
    scenarios, files = load_beliefs()
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        raise SystemExit(f"--modes takes {','.join(MODES)}")
    fusion = FusionOptions(**json.loads(args.fusion)) if args.fusion else FusionOptions()
    if "hybrid" in modes:
        prepare_named_model(args.model, home)
    settings = expand(RERANKER_FAMILIES, GameAwareMemoryRerankerOptions)
    has_key = "belief_key" in GameMemory.model_fields
    variants = ["no_belief_key", *(["belief_key"] if has_key else [])]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="belief-updates-") as folder:
        for variant in variants:
            rows = [
                row
                for s in scenarios
                for row in scenario_memories(s, belief_key=variant == "belief_key")
            ]
            for mode in modes:
                door = FrontDoor(
                    Path(folder) / f"{variant}-{mode}" / "save", mode, home, args.model
                )
                await fill(door, SESSION, rows)
                results.setdefault(variant, {})[mode] = {
                    name: await measure(door, scenarios, options, fusion)
                    for name, options in settings
                }
                print(
                    f"{variant} {mode}: done after {time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                )
    return {
        "benchmark": "belief_updates",
        "model": args.model,
        "files_sha256": files,
        "scenarios": len(scenarios),
        "with_background": sum(bool(s.background) for s in scenarios),
        "old_lexically_closer": sum(s.old_closer for s in scenarios),
        "questions_after": sum(len(s.questions) * len(set(s.after)) for s in scenarios),
        "questions_between": sum(len(s.questions) * len(set(s.between)) for s in scenarios),
        "target": TARGET,
        "fusion": fusion.model_dump(mode="json"),
        "belief_key": "measured" if has_key else "skipped: GameMemory has no belief_key field yet",
        "results": results,
        "seconds": round(time.perf_counter() - started, 1),
    }


def markdown(report: dict[str, Any]) -> str:
    """The rates of a saved run as Markdown tables (for ``docs/retrieval.md``)."""

    def cell(rate: dict[str, Any]) -> str:
        return f"{rate['hits']}/{rate['of']} ({rate['rate']:.0%})"

    lines = [
        f"{report['scenarios']} scenarios ({report['with_background']} with background "
        f"memories, {report['old_lexically_closer']} where the old version is lexically "
        f"closer); {report['questions_after']} questions after the update, "
        f"{report['questions_between']} between the versions; belief_key: "
        f"{report['belief_key']}.",
        "",
        "| variant | mode | reranker | new first (after) | new above old (after) "
        "| old first (between) | new leaked (between) | target |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for variant, modes in report["results"].items():
        for mode, settings in modes.items():
            for name, result in settings.items():
                rates = result["rates"]["all"]
                lines.append(
                    f"| {variant} | {mode} | `{name}` | {cell(rates['after'])} | "
                    f"{cell(rates['after_above'])} | {cell(rates['between'])} | "
                    f"{rates['leaks']['hits']} | {'met' if result['meets_target'] else 'missed'} |"
                )
    lines += [
        "",
        "Default reranker, by split (new first after the update / old first between):",
        "",
        "| variant | mode | split | after | between |",
        "|---|---|---|---:|---:|",
    ]
    for variant, modes in report["results"].items():
        for mode, settings in modes.items():
            for group, rates in settings["default"]["rates"].items():
                if group != "all":
                    lines.append(
                        f"| {variant} | {mode} | {group} | {cell(rates['after'])} | "
                        f"{cell(rates['between'])} |"
                    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--modes", default=",".join(MODES), help="hybrid, lexical or both")
    parser.add_argument(
        "--model", default="default", help="the hybrid mode's named model: default, multilingual"
    )
    parser.add_argument(
        "--fusion", help="FusionOptions fields as JSON, e.g. '{\"vector_weight\": 0.9}'"
    )
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--markdown", metavar="FILE", help="print the tables of a saved run")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text(encoding="utf-8"))))
        return 0
    report = json.dumps(asyncio.run(run(args)), indent=2, ensure_ascii=False)
    if args.out:
        Path(args.out).write_text(report + "\n", encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
