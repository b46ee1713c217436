"""Regression checks for the reranker's promises, through the real front door.

Usage: ``python benchmarks/reranker_promises.py [--home H] [--modes hybrid,lexical]
[--reranker JSON] [--fusion JSON] [--strict] [--out FILE]``. Prints one JSON object;
with ``--strict`` the exit status is 1 when a promise does not hold.

The cases are ``retrieval_data/reranker_promises.json``: "a fresh memory overtakes a
slightly more relevant old one" (``fresh_overtakes``, with the example of issue 11),
"importance breaks near-ties" (``importance_breaks_ties``) and, as a guard against
over-correcting, "recency and importance do not overturn a clear answer"
(``clear_answer_stands``). Each case is one NPC in one save, filled and asked through
``game_memory.open_memory`` (default model in hybrid mode, none in lexical mode) with the
default reranker unless ``--reranker`` gives other weights. Checked on load: every memory
exists before the question, a ``fresh_overtakes`` answer is the newest memory and the old
one shares at least as many content words with the question, an
``importance_breaks_ties`` answer shares the moment of its rival and is more important.
Each hit's evidence (channel scores, fused score, age) is in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from front_door_runs import MODES, FrontDoor, ask, fill
from report_out import emit
from retrieval_sets import DatasetError, MemoryRow, content_words
from script_support import json_options

from game_memory import FusionOptions, GameAwareMemoryRerankerOptions
from game_memory.onnx import prepare_default_model

CASES = Path(__file__).parent / "retrieval_data" / "reranker_promises.json"
SESSION = "promises"
PROMISES = ("fresh_overtakes", "importance_breaks_ties", "clear_answer_stands")


def load_cases(path: Path = CASES) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The cases and the SHA-256 of their file.

    Raises:
        DatasetError: the file is malformed or a case does not test what it claims.
    """
    try:
        raw = path.read_bytes()
        cases = list(json.loads(raw.decode("utf-8"))["cases"])
        for case in cases:
            _check(case)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(f"{path}: {exc}") from exc
    if len({c["id"] for c in cases}) != len(cases):
        raise DatasetError(f"{path}: duplicate case ids")
    return cases, {path.name: hashlib.sha256(raw).hexdigest()}


def _check(case: dict[str, Any]) -> None:
    memories = {m["id"]: m for m in case["memories"]}
    first = memories[case["first"]]
    if case["promise"] not in PROMISES or len(memories) != len(case["memories"]):
        raise ValueError(f"{case['id']}: unknown promise or duplicate memory ids")
    if any(int(m["tick"]) > int(case["asked_at"]) for m in memories.values()):
        raise ValueError(f"{case['id']}: a memory is later than the question")
    words = content_words(case["question"])
    if case["promise"] == "fresh_overtakes":
        rival = memories["old"]
        if first["tick"] <= rival["tick"] or len(words & content_words(rival["text"])) < len(
            words & content_words(first["text"])
        ):
            raise ValueError(f"{case['id']}: the answer is not fresher, or the old one not closer")
    if case["promise"] == "importance_breaks_ties":
        rival = memories["minor"]
        if first["tick"] != rival["tick"] or first["importance"] <= rival["importance"]:
            raise ValueError(f"{case['id']}: not a tie of moments won by importance")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(args.home) if args.home else None
    cases, files = load_cases()
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        raise SystemExit(f"--modes takes {','.join(MODES)}")
    reranker = args.reranker or GameAwareMemoryRerankerOptions()
    fusion = args.fusion or FusionOptions()
    if "hybrid" in modes:
        prepare_default_model(home)
    rows = [
        MemoryRow(
            f"{c['id']}.{m['id']}",
            c["id"],
            m["text"],
            importance=float(m["importance"]),
            tick=int(m["tick"]),
        )
        for c in cases
        for m in c["memories"]
    ]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="reranker-promises-") as folder:
        for mode in modes:
            door = FrontDoor(Path(folder) / mode / "save", mode, home)
            await fill(door, SESSION, rows)
            memory = await door.open(reranker, fusion)
            try:
                outcome = []
                for c in cases:
                    hits = await ask(memory, SESSION, c["id"], c["question"], int(c["asked_at"]))
                    ids = [h.memory.memory_id.split(".", 1)[1] for h in hits]
                    outcome.append(
                        {
                            "case": c["id"],
                            "promise": c["promise"],
                            "first_expected": c["first"],
                            "first": ids[0] if ids else None,
                            "holds": bool(ids) and ids[0] == c["first"],
                            "hits": [
                                {
                                    "memory": memory_id,
                                    "lexical_score": h.lexical_score,
                                    "vector_score": h.vector_score,
                                    "fused_score": round(h.fused_score, 6),
                                    "age_ticks": h.age_ticks,
                                }
                                for memory_id, h in zip(ids, hits, strict=True)
                            ],
                        }
                    )
            finally:
                await memory.aclose()
            results[mode] = {
                "holds": all(o["holds"] for o in outcome),
                "per_promise": {
                    p: f"{sum(o['holds'] for o in outcome if o['promise'] == p)}"
                    f"/{sum(o['promise'] == p for o in outcome)}"
                    for p in PROMISES
                },
                "cases": outcome,
            }
    return {
        "benchmark": "reranker_promises",
        "files_sha256": files,
        "reranker": reranker.model_dump(mode="json"),
        "fusion": fusion.model_dump(mode="json"),
        "holds": all(r["holds"] for r in results.values()),
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--modes", default=",".join(MODES), help="hybrid, lexical or both")
    parser.add_argument(
        "--reranker",
        type=json_options(GameAwareMemoryRerankerOptions),
        help="GameAwareMemoryRerankerOptions fields as JSON",
    )
    parser.add_argument(
        "--fusion", type=json_options(FusionOptions), help="FusionOptions fields as JSON"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 if a promise fails")
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    written = emit(report, args.out)  # printed first: an --out that fails loses nothing
    return written or (1 if args.strict and not report["holds"] else 0)


if __name__ == "__main__":
    sys.exit(main())
