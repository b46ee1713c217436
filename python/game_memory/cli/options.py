"""Recall options from the command line: the fusion mode and any fusion or reranker field.

``--fusion MODE`` picks the fusion mode; ``--fusion-option NAME=VALUE`` and
``--reranker-option NAME=VALUE`` (repeatable) set any field of :class:`FusionOptions` and
:class:`GameAwareMemoryRerankerOptions` by name, so a new option needs no new flag. Values
are read as JSON when they parse (``0.5``, ``true``, ``"floor"``) and as text otherwise;
the option models validate them, and a mistake is a usage error (exit code 2) that names
the option and the field.

The parser imports nothing heavy (``game-memory --help`` stays fast); the option models are
imported when a command turns the flags into options.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from game_memory.cli.usage import UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from game_memory.recall.options import VectorMemoryStoreOptions
    from game_memory.recall.reranker import GameAwareMemoryRerankerOptions

__all__ = ["FUSION_MODES", "RecallSettings", "add_recall_arguments", "recall_settings"]

#: ``FusionMode``'s values (a test keeps them equal), without importing the recall package.
FUSION_MODES = ("rrf", "weighted_rrf", "convex")


@dataclass(frozen=True)
class RecallSettings:
    """The parsed recall options: ``None`` keeps the library's defaults."""

    options: VectorMemoryStoreOptions | None = None
    reranker: GameAwareMemoryRerankerOptions | None = None


def add_recall_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--fusion``, ``--fusion-option`` and ``--reranker-option`` to ``parser``."""
    parser.add_argument(
        "--fusion",
        choices=FUSION_MODES,
        help="how lexical and vector rankings are combined (default: the measured default)",
    )
    parser.add_argument(
        "--fusion-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a fusion option by name (repeatable), e.g. vector_weight=0.8",
    )
    parser.add_argument(
        "--reranker-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a game-time reranker option by name (repeatable), e.g. recency_weight=0.3",
    )


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in items:
        name, separator, text = item.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"argument {flag}: takes NAME=VALUE, not {item!r}")
        try:
            values[name.strip()] = json.loads(text)
        except ValueError:
            values[name.strip()] = text
    return values


def _build(model: type[BaseModel], values: dict[str, Any], flag: str) -> Any:
    from pydantic import ValidationError

    try:
        return model(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'value'}: "
            f"{error['msg'].removeprefix('Value error, ')}"
            for error in exc.errors()
        )
        raise UsageError(f"argument {flag}: {problems}") from None


def recall_settings(args: argparse.Namespace) -> RecallSettings:
    """Turn the parsed flags into options (``None`` where nothing was given).

    Raises:
        UsageError: a flag is malformed or names an unknown field or a bad value (a
            ``ValueError``: the command ends with its usage line and exit code 2).
    """
    from game_memory.recall.fusion import FusionOptions
    from game_memory.recall.options import VectorMemoryStoreOptions
    from game_memory.recall.reranker import GameAwareMemoryRerankerOptions

    fusion_values = _pairs(getattr(args, "fusion_option", []) or [], "--fusion-option")
    mode = getattr(args, "fusion", None)
    if mode:
        given = fusion_values.setdefault("mode", mode)
        if given != mode:  # two modes asked for: neither may win silently
            raise UsageError(
                f"--fusion {mode} and --fusion-option mode={given} disagree; give the mode once"
            )
    reranker_values = _pairs(getattr(args, "reranker_option", []) or [], "--reranker-option")
    options = None
    if fusion_values:
        fusion = _build(FusionOptions, fusion_values, "--fusion-option")
        options = VectorMemoryStoreOptions(fusion=fusion)
    bound = getattr(args, "maximum_memories_per_owner", None)
    if bound is not None:  # the retention policy (serve --maximum-memories-per-owner)
        values = {"maximum_memories_per_owner": bound}
        if options is not None:
            values["fusion"] = options.fusion
        options = _build(VectorMemoryStoreOptions, values, "--maximum-memories-per-owner")
    if getattr(args, "no_int8_copies", False):  # serve --no-int8-copies
        base = options if options is not None else VectorMemoryStoreOptions()
        options = base.model_copy(update={"int8_copies": False})
    reranker = (
        _build(GameAwareMemoryRerankerOptions, reranker_values, "--reranker-option")
        if reranker_values
        else None
    )
    return RecallSettings(options=options, reranker=reranker)
