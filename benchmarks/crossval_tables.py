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
    for title, block in (
        (
            f"Chosen on all sets: `{cv['all_sets']['chosen']}` (in-sample; chosen in "
            f"{cv['all_sets']['rotations_choosing_it']} of {len(cv['rotations'])} rotations)",
            cv["all_sets"]["per_set"],
        ),
        (
            f"The library's current default `{cv['reference']['candidate']}` (not chosen here)",
            cv["reference"]["per_set"],
        ),
    ):
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
    lines += ["", f"### R@5 of the {top} best candidates over all sets", ""]
    header = "| candidate | " + " | ".join(f"`{n}`" for n in names) + " | worst margin |"
    lines += [header, "|---|" + "---:|" * (len(names) + 1)]
    shown = [r["candidate"] for r in cv["all_sets"]["ranking"]]
    ranked = (
        [*shown, cv["reference"]["candidate"]]
        if cv["reference"]["candidate"] not in shown
        else shown
    )
    for name in ranked[:top]:
        row = [_f(sets[s]["candidates"][name]["r5"]) for s in names]
        worst = min(
            sets[s]["candidates"][name]["r5"]
            - max(sets[s]["lexical"]["r5"], sets[s]["vector"]["r5"])
            for s in names
        )
        lines.append(f"| `{name}` | " + " | ".join(row) + f" | {_signed(worst)} |")
    return "\n".join(lines)
