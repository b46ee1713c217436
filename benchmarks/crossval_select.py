"""Leave-one-set-out selection of the recall configuration (pure functions over metrics).

Input: per set, the channel baselines and every candidate's R@1, R@5 and MRR. For each
rotation one set is held out; on the others (the *training* sets) every candidate gets

    margin_s = R@5_s − max(lexical R@5_s, vector R@5_s)

and the chosen candidate is the one with the largest **worst-case training margin**
``min_s margin_s``; ties go to the larger mean training margin, then the larger mean
training MRR, then the name (ordinal), so the choice is deterministic. Its figures on the
held-out set are what the rotation reports. The target (issue 11), on every held-out set:
``margin ≥ −TARGET_TOLERANCE``.

The same rule over all sets gives the configuration to ship (``all_sets``); its margins
there are in-sample and reported as such.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["TARGET_TOLERANCE", "SetMetrics", "cross_validate", "margin", "select"]

TARGET_TOLERANCE = 0.01

#: ``{"lexical": {...}, "vector": {...}, "candidates": {name: {"r1", "r5", "mrr"}}}``
SetMetrics = Mapping[str, Any]


def better_channel(data: SetMetrics) -> tuple[str, float]:
    """The stronger single channel of a set in R@5 (vector on a tie)."""
    lexical, vector = data["lexical"]["r5"], data["vector"]["r5"]
    return ("lexical", lexical) if lexical > vector else ("vector", vector)


def margin(data: SetMetrics, candidate: str) -> float:
    """R@5 of ``candidate`` minus the better channel's."""
    return round(float(data["candidates"][candidate]["r5"]) - better_channel(data)[1], 4)


def _key(sets: Mapping[str, SetMetrics], names: Sequence[str], candidate: str) -> tuple[Any, ...]:
    margins = [margin(sets[s], candidate) for s in names]
    mrr = [float(sets[s]["candidates"][candidate]["mrr"]) for s in names]
    return (
        -min(margins),
        -round(sum(margins) / len(margins), 6),
        -round(sum(mrr) / len(mrr), 6),
        candidate,
    )


def select(
    sets: Mapping[str, SetMetrics], training: Sequence[str], candidates: Sequence[str]
) -> list[dict[str, Any]]:
    """``candidates`` ranked by the selection rule on ``training`` (best first)."""
    ranked = sorted(candidates, key=lambda c: _key(sets, training, c))
    out = []
    for name in ranked:
        margins = [margin(sets[s], name) for s in training]
        out.append(
            {
                "candidate": name,
                "worst_training_margin": min(margins),
                "mean_training_margin": round(sum(margins) / len(margins), 4),
                "worst_training_set": training[margins.index(min(margins))],
            }
        )
    return out


def held_out(data: SetMetrics, candidate: str) -> dict[str, Any]:
    """The figures of ``candidate`` on one set, with the channels and the target."""
    channel, _best = better_channel(data)
    figures = data["candidates"][candidate]
    value = margin(data, candidate)
    return {
        "candidate": candidate,
        "r1": figures["r1"],
        "r5": figures["r5"],
        "mrr": figures["mrr"],
        "lexical_r5": data["lexical"]["r5"],
        "vector_r5": data["vector"]["r5"],
        "better_channel": channel,
        "margin": value,
        "meets_target": value >= -TARGET_TOLERANCE,
    }


def cross_validate(
    sets: Mapping[str, SetMetrics], candidates: Sequence[str], reference: str, top: int = 5
) -> dict[str, Any]:
    """Every rotation's choice and held-out figures, the all-sets choice, the reference.

    ``reference`` (the library's current default) is reported on every set as it is: it
    was not chosen by this procedure.
    """
    names = sorted(sets)
    rotations = []
    for out in names:
        training = [s for s in names if s != out]
        ranking = select(sets, training, candidates)
        chosen = ranking[0]
        rotations.append(
            {
                "held_out": out,
                "chosen": chosen["candidate"],
                "worst_training_margin": chosen["worst_training_margin"],
                "worst_training_set": chosen["worst_training_set"],
                "runners_up": [r["candidate"] for r in ranking[1:top]],
                "held_out_figures": held_out(sets[out], chosen["candidate"]),
                "reference_on_held_out": held_out(sets[out], reference),
            }
        )
    overall = select(sets, names, candidates)
    choice = overall[0]["candidate"]
    return {
        "rule": (
            "max over candidates of min over training sets of "
            "R@5 - max(lexical R@5, vector R@5); ties: mean training margin, "
            "mean training MRR, name"
        ),
        "target_tolerance": TARGET_TOLERANCE,
        "rotations": rotations,
        "every_held_out_meets_target": all(
            r["held_out_figures"]["meets_target"] for r in rotations
        ),
        "all_sets": {
            "chosen": choice,
            "ranking": overall[:top],
            "rotations_choosing_it": sum(r["chosen"] == choice for r in rotations),
            "per_set": {s: held_out(sets[s], choice) for s in names},
        },
        "reference": {
            "candidate": reference,
            "per_set": {s: held_out(sets[s], reference) for s in names},
            "meets_target_everywhere": all(
                held_out(sets[s], reference)["meets_target"] for s in names
            ),
        },
    }
