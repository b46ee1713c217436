"""Belief updates: does the NPC answer with what it believes *as of* the moment asked?

Usage: ``python benchmarks/belief_updates.py [--home H] [--modes hybrid,lexical]
[--data FILE] [--fusion JSON] [--out FILE]``, or ``--markdown FILE`` for the tables of a
saved run. Prints one JSON object (and writes it to ``--out``).

The scenarios are ``retrieval_data/belief_updates.json`` (checked on load, see
``retrieval_handwritten``), or with ``--data heldout`` ``belief_updates_heldout.json``,
written blind after the reranker's settings were chosen on the first: an NPC learns
version 1 of a fact at tick t1 and version 2 at t2 > t1. Every question is asked after t2
(the newer version should rank first) and between t1 and t2 (the older one should rank
first; the newer is not visible then). All of it goes through the real front door: one
save per mode, filled with ``VectorMemoryStore.append`` from ``game_memory.open_memory``
(the prepared default model in hybrid mode, no model in lexical mode), then reopened with
each reranker setting (``open_memory(..., reranker=...)``) and asked with ``recall``
(limit 10).

Reported per mode and reranker setting: *after* (the new version is the first hit),
*after_above* (the new version ranks above the old one, whatever else ranks first),
*between* (the old version is first), and *leaks* (the new version recalled before it
existed: must be 0), overall and split by background memories (with/without), by which
version is lexically closer to the question, and by the gap t2 − t1. The *belief_key*
variant gives both versions the scenario's key (``GameMemory.belief_key``); it runs only
when the library has that field (it is reported as skipped otherwise).

A file's *sequels* (the held-out file has them; the development scenarios' are in
``belief_sequels_dev.json``) are the other side: a later memory on the
same topic that does not replace the earlier one, asked what only the earlier answers.
Reported as *earlier first* and *earlier above later*: what taking every newer memory on
a topic for an update would cost.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from front_door_runs import MODES, FrontDoor, ask, fill
from report_out import emit
from retrieval_grid import Family, expand
from retrieval_handwritten import (
    BELIEF_FILE,
    HELDOUT_BELIEF_FILE,
    SEQUELS_DEV_FILE,
    Scenario,
    Sequel,
    load_beliefs,
    load_sequels,
    scenario_memories,
    sequel_memories,
)
from retrieval_sets import DatasetError
from script_support import json_options

from game_memory import (
    FusionOptions,
    GameAwareMemoryRerankerOptions,
    GameMemory,
    GameMemoryKind,
)
from game_memory.onnx import prepare_named_model

SESSION = "beliefs"
TARGET = 0.95
DATA_FILES = {"development": BELIEF_FILE, "heldout": HELDOUT_BELIEF_FILE}

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
    # The version test as it was before it spared events: any kind can be outdated.
    "every_kind": {"supersession_kinds": (frozenset(GameMemoryKind),)},
    "no_supersession": {"supersession_penalty": (0.0,), "supersession_inherits": (False,)},
    "penalty_only": {"supersession_inherits": (False,)},
    "inherit_only": {"supersession_penalty": (0.0,)},
    "supersede": {"supersession_penalty": (0.1, 0.2, 0.3, 0.5)},
    "supersede_loose": {
        "supersession_penalty": (0.3, 0.5),
        "supersession_similarity": (0.5, 0.6),
    },
    "supersede_strict": {"supersession_similarity": (0.55, 0.6, 0.65, 0.7)},
}


def _gap(scenario: Scenario) -> str:
    days = (scenario.new.tick - scenario.old.tick) / 1440
    return "under 1 day" if days < 1 else "1 to 7 days" if days <= 7 else "over 7 days"


async def measure(
    door: FrontDoor,
    scenarios: tuple[Scenario, ...],
    reranker: GameAwareMemoryRerankerOptions,
    fusion: FusionOptions,
    sequels: tuple[Sequel, ...] = (),
) -> dict[str, Any]:
    """The rates for one reranker setting, overall and per split, and the failures."""
    counts: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    failures: list[dict[str, Any]] = []
    kept = {"earlier_first": [0, 0], "earlier_above": [0, 0]}
    memory = await door.open(reranker, fusion)
    try:
        for q in sequels:
            earlier, later = f"{q.sequel_id}.earlier", f"{q.sequel_id}.later"
            for text in q.questions:
                for tick in sorted(set(q.asked)):
                    ids = [
                        h.memory.memory_id
                        for h in await ask(memory, SESSION, q.sequel_id, text, tick)
                    ]
                    first = bool(ids) and ids[0] == earlier
                    above = earlier in ids and (
                        later not in ids or ids.index(earlier) < ids.index(later)
                    )
                    for name, value in (("earlier_first", first), ("earlier_above", above)):
                        kept[name][0] += value
                        kept[name][1] += 1
                    if not first:
                        failures.append(
                            {
                                "sequel": q.sequel_id,
                                "question": text,
                                "tick": tick,
                                "first": ids[0] if ids else None,
                            }
                        )
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
        "sequels": {
            name: {"hits": h, "of": n, "rate": round(h / n, 4) if n else None}
            for name, (h, n) in kept.items()
        },
        "meets_target": overall["after"]["rate"] >= TARGET
        and overall["between"]["rate"] >= TARGET
        and overall["leaks"]["hits"] == 0,
        "failures": failures,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    home = Path(args.home) if args.home else None
    path = DATA_FILES.get(args.data) or Path(args.data)
    scenarios, files = load_beliefs(path)
    # The development scenarios' sequels live beside them; another file holds its own.
    sequels = load_sequels(SEQUELS_DEV_FILE if path == BELIEF_FILE else path)
    if path == BELIEF_FILE:
        files.update(
            {SEQUELS_DEV_FILE.name: hashlib.sha256(SEQUELS_DEV_FILE.read_bytes()).hexdigest()}
        )
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        raise SystemExit(f"--modes takes {','.join(MODES)}")
    fusion = args.fusion or FusionOptions()
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
            rows += [row for q in sequels for row in sequel_memories(q)]
            for mode in modes:
                door = FrontDoor(
                    Path(folder) / f"{variant}-{mode}" / "save", mode, home, args.model
                )
                await fill(door, SESSION, rows)
                results.setdefault(variant, {})[mode] = {
                    name: await measure(door, scenarios, options, fusion, sequels)
                    for name, options in settings
                }
                print(
                    f"{variant} {mode}: done after {time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                )
    return {
        "benchmark": "belief_updates",
        "model": args.model,
        "data": path.name,
        "files_sha256": files,
        "scenarios": len(scenarios),
        "sequels": len(sequels),
        "questions_sequels": sum(len(q.questions) * len(set(q.asked)) for q in sequels),
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

    sequels = report.get("sequels", 0)
    lines = [
        f"`{report.get('data', 'belief_updates.json')}`: "
        f"{report['scenarios']} scenarios ({report['with_background']} with background "
        f"memories, {report['old_lexically_closer']} where the old version is lexically "
        f"closer); {report['questions_after']} questions after the update, "
        f"{report['questions_between']} between the versions; belief_key: "
        f"{report['belief_key']}."
        + (
            f" {sequels} sequels (a later memory on the same topic that does not replace the "
            f"earlier), {report['questions_sequels']} questions only the earlier answers."
            if sequels
            else ""
        ),
        "",
        "| variant | mode | reranker | new first (after) | new above old (after) "
        "| old first (between) | new leaked (between) | target |"
        + (" earlier first (sequels) | earlier above later |" if sequels else ""),
        "|---|---|---|---:|---:|---:|---:|---|" + ("---:|---:|" if sequels else ""),
    ]
    for variant, modes in report["results"].items():
        for mode, settings in modes.items():
            for name, result in settings.items():
                rates = result["rates"]["all"]
                lines.append(
                    f"| {variant} | {mode} | `{name}` | {cell(rates['after'])} | "
                    f"{cell(rates['after_above'])} | {cell(rates['between'])} | "
                    f"{rates['leaks']['hits']} | {'met' if result['meets_target'] else 'missed'} |"
                    + (
                        f" {cell(result['sequels']['earlier_first'])} | "
                        f"{cell(result['sequels']['earlier_above'])} |"
                        if sequels
                        else ""
                    )
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


def saved_tables(parser: argparse.ArgumentParser, path: str) -> str:
    """The tables of the run saved at ``path`` (``--markdown``); a file that cannot be read,
    or is not a belief_updates report, is a usage error naming it, not a traceback."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        if report.get("benchmark", "belief_updates") != "belief_updates":
            raise ValueError(f"it is the report of {report['benchmark']}")
        return markdown(report)
    except OSError as exc:
        parser.error(f"--markdown {path}: {exc.strerror or exc}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        parser.error(
            f"--markdown {path} is not the JSON of a belief_updates run ({type(exc).__name__}: "
            f"{exc}); give the file a run wrote with --out FILE"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--modes", default=",".join(MODES), help="hybrid, lexical or both")
    parser.add_argument(
        "--model", default="default", help="the hybrid mode's named model: default, multilingual"
    )
    parser.add_argument(
        "--fusion",
        type=json_options(FusionOptions),
        help="FusionOptions fields as JSON, e.g. '{\"vector_weight\": 0.9}'",
    )
    parser.add_argument(
        "--data",
        default="development",
        help="the scenarios: development (belief_updates.json), heldout "
        "(belief_updates_heldout.json, with sequels) or a file of that format",
    )
    parser.add_argument("--out", help="also write the JSON to this file")
    parser.add_argument("--markdown", metavar="FILE", help="print the tables of a saved run")
    args = parser.parse_args(argv)
    if args.markdown:
        print(saved_tables(parser, args.markdown))
        return 0
    try:
        result = asyncio.run(run(args))
    except DatasetError as exc:  # a --data file that is missing or breaks a rule
        raise SystemExit(f"belief_updates: {exc}") from None
    return emit(result, args.out)


if __name__ == "__main__":
    sys.exit(main())
