"""``--fusion``, ``--fusion-option`` and ``--reranker-option`` reach recall (CLI and serve)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from game_memory import FileGameMemoryStore, FusionMode, GameMemory, GameMoment
from game_memory.cli import build_parser, main
from game_memory.cli.options import FUSION_MODES, recall_settings
from game_memory.cli.serve import ServeSettings


def test_the_parser_knows_every_fusion_mode() -> None:
    assert tuple(mode.value for mode in FusionMode) == FUSION_MODES


@pytest.fixture
def save(tmp_path: Path) -> Path:
    folder = tmp_path / "save"

    async def seed() -> None:
        async with FileGameMemoryStore(folder) as store:
            for index, text in enumerate(("the mill wheel broke", "the mill pond froze")):
                await store.append(
                    GameMemory(
                        memory_id=f"m{index}",
                        session_id="slot",
                        owner_id="tess",
                        scope="village",
                        kind="event",
                        payload_json="{}",
                        moment=GameMoment(timeline_id="main", tick=index),
                        searchable_text=text,
                    )
                )

    asyncio.run(seed())
    return folder


def _search(save: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict[str, Any]]:
    code = main(
        [
            *("search", "--save-dir", str(save), "--model", "hashing", "--session", "slot"),
            *("--text", "mill wheel", "--json", *flags),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["memories"]
    return rows


def _rrf(rows: list[dict[str, Any]], lexical: float, vector: float) -> list[float]:
    """What weighted RRF (k = 60) gives each row from its ranks."""
    return [
        sum(
            weight / (60 + rank)
            for weight, rank in ((lexical, row["lexical_rank"]), (vector, row["vector_rank"]))
            if rank is not None
        )
        for row in rows
    ]


def test_search_fuses_with_the_mode_and_options_given(
    save: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rrf = _search(save, capsys, "--fusion", "rrf")
    assert [row["fused_score"] for row in rrf] == pytest.approx(_rrf(rrf, 1, 1))
    weighted = _search(
        save,
        capsys,
        *("--fusion", "weighted_rrf", "--fusion-option", "vector_weight=3"),
        *("--fusion-option", "lexical_weight=1"),
    )
    assert [row["fused_score"] for row in weighted] == pytest.approx(_rrf(weighted, 1, 3))
    default = _search(save, capsys)
    assert [row["fused_score"] for row in default] != pytest.approx(_rrf(default, 1, 1))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--fusion-option", "no_such_field=1"], "no_such_field"),
        (["--fusion-option", "vector_weight=-1"], "vector_weight"),
        (["--reranker-option", "recency_weight"], "NAME=VALUE"),
    ],
)
def test_a_bad_recall_option_is_a_usage_error_naming_it(
    save: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["search", "--save-dir", str(save), "--model", "lexical", "--session", "slot", *flags])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("usage: game-memory search ")
    assert f"game-memory search: error: argument {flags[0]}: " in err
    assert message in err and "Traceback" not in err


def test_serve_settings_carry_the_recall_options(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            *("serve", "--stdio", "--save-dir", str(tmp_path), "--fusion", "rrf"),
            *("--reranker-option", "supersession_penalty=0.3"),
        ]
    )
    settings = ServeSettings.from_args(args)
    assert settings.recall.options is not None
    assert settings.recall.options.fusion.mode is FusionMode.RRF
    assert settings.recall.reranker is not None
    assert settings.recall.reranker.supersession_penalty == 0.3
    plain = recall_settings(build_parser().parse_args(["serve", "--stdio", "--save-dir", "x"]))
    assert plain.options is None and plain.reranker is None
