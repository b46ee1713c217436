"""Markdown tables of a cross-validation run, for ``docs/retrieval.md``."""

from __future__ import annotations

from typing import Any

__all__ = ["markdown"]


def _f(value: float) -> str:
    return f"{value:.3f}"


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def markdown(report: dict[str, Any], top: int = 15) -> str:
    """The tables: sets, channel baselines, rotations, all-sets choice, reference, grid."""
    sets: dict[str, Any] = report["sets"]
    cv = report["crossval"]
    names = sorted(sets)
    lines = [
        f"Model `{report['model']}`, limit {report['settings']['limit']} "
        f"({report['settings']['candidates_per_channel']} candidates per channel), "
        f"{len(report['candidates'])} candidates, {report['seconds']:.0f} s.",
        "",
        "### Sets and channel baselines",
        "",
        "| set | memories | queries | owners | game time | lexical R@1 | R@5 | MRR "
        "| vector R@1 | R@5 | MRR | front-door check |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in names:
        s = sets[name]
        lex, vec = s["lexical"], s["vector"]
        check = s["front_door_check"]
        bad = sum(v for k, v in check.items() if k.endswith("_mismatches"))
        lines.append(
            f"| `{name}` | {s['memories']} | {s['queries']} | {s['owners']} | "
            f"{'yes' if s['game_time'] else 'no'} | {_f(lex['r1'])} | {_f(lex['r5'])} | "
            f"{_f(lex['mrr'])} | {_f(vec['r1'])} | {_f(vec['r5'])} | {_f(vec['mrr'])} | "
            f"{check['queries']} queries, {bad} mismatches |"
        )
    lines += [
        "",
        "### Rotations (one set held out; chosen on the others)",
        "",
        f"Rule: {cv['rule']}. Target: held-out margin ≥ −{cv['target_tolerance']}.",
        "",
        "| held out | chosen on the other sets | worst training margin (set) | held-out R@5 "
        "| lexical | vector | margin | R@1 | MRR | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in cv["rotations"]:
        h = r["held_out_figures"]
        lines.append(
            f"| `{r['held_out']}` | `{r['chosen']}` | {_signed(r['worst_training_margin'])} "
            f"(`{r['worst_training_set']}`) | {_f(h['r5'])} | {_f(h['lexical_r5'])} | "
            f"{_f(h['vector_r5'])} | **{_signed(h['margin'])}** | {_f(h['r1'])} | "
            f"{_f(h['mrr'])} | {'met' if h['meets_target'] else '**missed**'} |"
        )
    lines.append("")
    lines.append(f"Every held-out set meets the target: **{cv['every_held_out_meets_target']}**.")
    blocks = [
        (
            f"Chosen on all sets: `{cv['all_sets']['chosen']}` (in-sample; chosen in "
            f"{cv['all_sets']['rotations_choosing_it']} of {len(cv['rotations'])} rotations)",
            cv["all_sets"]["per_set"],
        )
    ]
    if cv["reference"]["candidate"] != cv["all_sets"]["chosen"]:
        blocks.append(
            (
                f"The library's current default `{cv['reference']['candidate']}` (not chosen here)",
                cv["reference"]["per_set"],
            )
        )
    else:
        lines += ["", "The all-sets choice is the library's current default."]
    for title, block in blocks:
        lines += [
            "",
            f"### {title}",
            "",
            "| set | R@1 | R@5 | MRR | better channel | margin | target |",
            "|---|---:|---:|---:|---|---:|---|",
        ]
        for name in names:
            h = block[name]
            channel = h["better_channel"]
            lines.append(
                f"| `{name}` | {_f(h['r1'])} | {_f(h['r5'])} | {_f(h['mrr'])} | {channel} "
                f"{_f(h[channel + '_r5'])} | {_signed(h['margin'])} | "
                f"{'met' if h['meets_target'] else '**missed**'} |"
            )
    lines += _categories(report, names)
    lines += _ranking(report, names, top)
    lines += _reranker_effect(report, names)
    return "\n".join(lines)


def _worst(sets: dict[str, Any], names: list[str], candidate: str, block: str) -> float:
    return min(
        float(sets[s][block][candidate]["r5"])
        - max(float(sets[s]["lexical"]["r5"]), float(sets[s]["vector"]["r5"]))
        for s in names
    )


def _ranking(report: dict[str, Any], names: list[str], top: int) -> list[str]:
    """R@5 of the best candidates by worst margin over all sets, plus the reference and RRF."""
    sets = report["sets"]
    cv = report["crossval"]
    every = [c["name"] for c in report["candidates"]]
    ranked = sorted(every, key=lambda c: (-_worst(sets, names, c, "candidates"), c))[:top]
    for extra in (cv["reference"]["candidate"], "rrf+rerank"):
        if extra in every and extra not in ranked:
            ranked.append(extra)
    lines = [
        "",
        f"### R@5 by candidate (the {top} best by worst margin over all sets, the default, RRF)",
        "",
        "| candidate | " + " | ".join(f"`{n}`" for n in names) + " | worst margin |",
        "|---|" + "---:|" * (len(names) + 1),
        "| lexical alone | " + " | ".join(_f(sets[n]["lexical"]["r5"]) for n in names) + " | |",
        "| vector alone | " + " | ".join(_f(sets[n]["vector"]["r5"]) for n in names) + " | |",
    ]
    for name in ranked:
        row = " | ".join(_f(sets[n]["candidates"][name]["r5"]) for n in names)
        lines.append(f"| `{name}` | {row} | {_signed(_worst(sets, names, name, 'candidates'))} |")
    return lines


def _reranker_effect(report: dict[str, Any], names: list[str]) -> list[str]:
    """R@5 and R@1 of the chosen and the default fusion with and without the reranker."""
    sets = report["sets"]
    cv = report["crossval"]
    rows = []
    for name in dict.fromkeys((cv["all_sets"]["chosen"], cv["reference"]["candidate"])):
        fusion_name = name.rsplit("+", 1)[0] + "+no_reranker"
        if all(fusion_name in sets[n]["fusion_only"] for n in names):
            rows.append((f"`{fusion_name}`", "fusion_only", fusion_name))
        rows.append((f"`{name}`", "candidates", name))
    lines = [
        "",
        "### With and without the reranker (R@1 / R@5)",
        "",
        "| configuration | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for label, block, name in rows:
        cells = " | ".join(
            f"{_f(sets[n][block][name]['r1'])} / {_f(sets[n][block][name]['r5'])}" for n in names
        )
        lines.append(f"| {label} | {cells} |")
    return lines


def _categories(report: dict[str, Any], names: list[str]) -> list[str]:
    """R@5 per query category of the sets that have them (channels and the default)."""
    reference = report["crossval"]["reference"]["candidate"]
    lines = [
        "",
        f"### R@5 per query category (channels alone and `{reference}`)",
        "",
        "| set | category | queries | lexical | vector | default |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in names:
        for category, data in report["sets"][name].get("categories", {}).items():
            lines.append(
                f"| `{name}` | {category} | {data['queries']} | {_f(data['lexical']['r5'])} | "
                f"{_f(data['vector']['r5'])} | {_f(data[reference]['r5'])} |"
            )
    return lines
