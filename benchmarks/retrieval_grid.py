"""The candidate configurations cross-validation chooses among, built from option fields.

A *family* maps fields of the library's :class:`FusionOptions` (or
:class:`GameAwareMemoryRerankerOptions`) to the values to try and stands for every
combination of its values; the grid is the union over ``GRID``'s blocks of the product of a
block's fusion families with its reranker families (every fusion with the default reranker,
and the score-level fusions with the reranker settings being tuned).
Field names and values go through the options models themselves, so a misspelt field or an
out-of-range value fails at once, and a field the library adds later (a new
``normalization``, a calibration constant) becomes a candidate with one line here::

    FUSION_FAMILIES["convex_<new>"] = {"normalization": ("<new>",), "vector_weight": WEIGHTS}

Rules: ``lexical_weight`` is ``1 − vector_weight`` unless the family sets it; a field a
family does not name keeps the library's default (so the grid follows the defaults the lead
changes). A candidate's name lists its family and the values of the fields that vary.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from game_memory import FusionOptions, GameAwareMemoryRerankerOptions

__all__ = [
    "FUSION_FAMILIES",
    "GRID",
    "RERANKER_FAMILIES",
    "RERANKER_TUNING",
    "TUNED_FUSION_FAMILIES",
    "Candidate",
    "candidate_grid",
    "default_candidate",
    "expand",
]

Family = Mapping[str, Sequence[Any]]

#: Fusion families (the modes of today; add a line for a new field or value). Each is
#: sampled where the earlier runs found its best region, so that a full run stays near
#: twenty minutes on two cores.
FUSION_FAMILIES: dict[str, Family] = {
    "rrf": {"mode": ("rrf",), "rrf_k": (60,)},
    "wrrf": {"mode": ("weighted_rrf",), "vector_weight": (0.6, 0.7, 0.8, 0.9)},
    "convex_best_lexical": {
        "mode": ("convex",),
        "normalization": ("best_lexical",),
        "vector_weight": (0.6, 0.75, 0.9),
    },
    # "floor" with both minimum spreads 0 is plain min–max normalization.
    "convex_floor": {
        "mode": ("convex",),
        "normalization": ("floor",),
        "vector_weight": (0.5, 0.75, 0.9),
        "lexical_minimum_spread": (0.0, 8.0),
        "vector_minimum_spread": (0.0, 1.0),
    },
    "convex_absolute": {
        "mode": ("convex",),
        "normalization": ("absolute",),
        "vector_weight": (0.6, 0.75, 0.9),
        "lexical_scale": (8.0, 16.0),
    },
    # The confidence fusion with the vector channel's confidence measured in standard
    # deviations (the previous default, as it was: no floor shrink for few candidates).
    "convex_standing": {
        "mode": ("convex",),
        "normalization": ("confidence",),
        "vector_confidence_by": ("standing",),
        "vector_weight": (0.4, 0.5),
        "lexical_confidence": (16.0,),
        "lexical_contrast": (0.0,),
        "vector_confidence": (4.0,),
        "floor_candidates": (1,),
    },
    # ... and by the best cosine's contrast over the candidates' mean.
    "convex_contrast": {
        "mode": ("convex",),
        "normalization": ("confidence",),
        "vector_confidence_by": ("contrast",),
        "vector_weight": (0.4, 0.5, 0.6),
        "lexical_confidence": (24.0, 32.0, 48.0),
        "lexical_contrast": (0.0,),
        "vector_confidence": (0.8, 1.0),
        "floor_candidates": (1, 16),
    },
    # ... with the lexical channel's confidence also scaled by its own contrast (a flat
    # BM25 list, every candidate matching only common words, counts little).
    "convex_lexical_contrast": {
        "mode": ("convex",),
        "normalization": ("confidence",),
        "vector_confidence_by": ("contrast",),
        "vector_weight": (0.4, 0.5, 0.6),
        "lexical_confidence": (16.0, 24.0, 32.0, 48.0),
        "lexical_contrast": (0.5, 0.75, 1.0, 1.5),
        "vector_confidence": (0.8, 1.0),
        "floor_candidates": (16,),
    },
}

#: Reranker families crossed with every fusion (``None``: no reranker; ``{}``: defaults).
RERANKER_FAMILIES: dict[str, Family | None] = {"rerank": {}}

#: Fusions that are also tried with the reranker settings of ``RERANKER_TUNING`` (the
#: score-level families whose scales the reranker reads; a smaller cross keeps the run
#: short).
TUNED_FUSION_FAMILIES: dict[str, Family] = {
    "convex_contrast": {
        "mode": ("convex",),
        "normalization": ("confidence",),
        "vector_confidence_by": ("contrast",),
        "vector_weight": (0.5,),
        "lexical_confidence": (48.0,),
        "lexical_contrast": (0.0,),
        "vector_confidence": (1.0,),
        "floor_candidates": (16,),
    },
}

#: Reranker settings crossed with ``TUNED_FUSION_FAMILIES``: without the supersession of
#: older versions (belief updates without a key, ``belief_updates.py``), with a looser one,
#: and the absolute relevance.
RERANKER_TUNING: dict[str, Family | None] = {
    "rerank_no_supersession": {"supersession_penalty": (0.0,), "supersession_inherits": (False,)},
    "rerank_supersede_loose": {
        "supersession_similarity": (0.35,),
        "supersession_standing": (2.0,),
    },
    "rerank_absolute": {"relevance": ("absolute",)},
}

#: The grid: the union of these products (fusion families × reranker families).
GRID: tuple[tuple[Mapping[str, Family | None], Mapping[str, Family | None]], ...] = (
    (FUSION_FAMILIES, RERANKER_FAMILIES),
    (TUNED_FUSION_FAMILIES, RERANKER_TUNING),
)

_SHORT = {
    "vector_weight": "v",
    "lexical_weight": "l",
    "lexical_minimum_spread": "ls",
    "vector_minimum_spread": "vs",
    "rrf_k": "k",
    "recency_weight": "rec",
    "importance_weight": "imp",
    "relevance_weight": "rel",
    "diversity_penalty": "div",
    "recency_half_life_ticks": "half",
    "lexical_scale": "lscale",
    "supersession_penalty": "sup",
    "supersession_similarity": "sim",
    "lexical_minimum_gap": "lg",
    "vector_minimum_gap": "vg",
    "lexical_confidence": "lc",
    "lexical_contrast": "lx",
    "vector_confidence": "vc",
    "vector_confidence_by": "by",
    "floor_candidates": "fc",
    "supersession_standing": "z",
    "supersession_inherits": "inh",
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration of the recall front door: a fusion and a reranker (or none)."""

    name: str
    fusion: FusionOptions
    reranker: GameAwareMemoryRerankerOptions | None

    def describe(self) -> dict[str, Any]:
        """The options as JSON (defaults included, so a reader needs no source)."""
        return {
            "name": self.name,
            "fusion": self.fusion.model_dump(mode="json"),
            "reranker": None if self.reranker is None else self.reranker.model_dump(mode="json"),
        }


def _text(value: Any) -> str:
    return (
        f"{value:g}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else str(value)
    )


def expand(families: Mapping[str, Family | None], model: type[Any]) -> list[tuple[str, Any]]:
    """``(name, model(**fields))`` for every combination of every family (``None`` stays)."""
    out: list[tuple[str, Any]] = []
    for family, fields in families.items():
        if fields is None:
            out.append((family, None))
            continue
        names = list(fields)
        for values in itertools.product(*(fields[n] for n in names)):
            chosen = dict(zip(names, values, strict=True))
            if model is FusionOptions and "vector_weight" in chosen:
                chosen.setdefault("lexical_weight", round(1.0 - float(chosen["vector_weight"]), 6))
            varying = [n for n in names if len(fields[n]) > 1]
            label = "_".join(f"{_SHORT.get(n, n)}{_text(chosen[n])}" for n in varying)
            out.append((f"{family}_{label}" if label else family, model(**chosen)))
    return out


def candidate_grid(
    blocks: Sequence[tuple[Mapping[str, Family | None], Mapping[str, Family | None]]] = GRID,
) -> list[Candidate]:
    """Every fusion × reranker of every block (fusion families, reranker families).

    Duplicates (two families producing the same options) are kept once, under the first
    name. The library's defaults (``FusionOptions()`` with the default reranker) are always
    in the grid, named ``default`` if no family produced them.
    """
    seen: set[tuple[str, str]] = set()
    grid: list[Candidate] = []
    for fusion_families, reranker_families in blocks:
        fusions = expand(fusion_families, FusionOptions)
        rerankers = expand(reranker_families, GameAwareMemoryRerankerOptions)
        for (fusion_name, fusion), (reranker_name, reranker) in itertools.product(
            fusions, rerankers
        ):
            key = (fusion.model_dump_json(), "" if reranker is None else reranker.model_dump_json())
            if key not in seen:
                seen.add(key)
                grid.append(Candidate(f"{fusion_name}+{reranker_name}", fusion, reranker))
    default = (
        FusionOptions().model_dump_json(),
        GameAwareMemoryRerankerOptions().model_dump_json(),
    )
    if default not in seen:
        grid.append(Candidate("default", FusionOptions(), GameAwareMemoryRerankerOptions()))
    return grid


def default_candidate(grid: Sequence[Candidate]) -> Candidate:
    """The member of ``grid`` that is the library's default front door."""
    return next(
        c
        for c in grid
        if c.fusion == FusionOptions() and c.reranker == GameAwareMemoryRerankerOptions()
    )
