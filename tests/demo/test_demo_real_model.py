"""The demo on the real default model (all-MiniLM-L6-v2): every expected answer in the top 3.

The point of the scenario: the paraphrases share no content word with their memories, so
lexical recall alone misses them and semantic recall finds them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

import game_memory.onnx as onnx
from game_memory.cli import main
from game_memory.demo import SCENARIO

from .conftest import REPOSITORY, link_or_copy

pytestmark = pytest.mark.model


def _questions(report: dict[str, Any], stage: str) -> dict[str, dict[str, Any]]:
    return {
        step["id"]: step
        for step in report["steps"]
        if step["step"] == "question" and step["stage"] == stage
    }


def test_the_demo_runs_hybrid_on_the_default_model(real_report: dict[str, Any]) -> None:
    model = real_report["model"]
    assert model["mode"] == "hybrid" and model["notice"] is None
    assert "all-MiniLM-L6-v2" in model["identity"]


@pytest.mark.parametrize(
    "question",
    SCENARIO.questions_of("play") + SCENARIO.questions_of("rewind"),
    ids=lambda question: question.id,
)
def test_every_expected_answer_is_in_the_top_three(
    real_report: dict[str, Any], question: Any
) -> None:
    step = _questions(real_report, question.phase)[question.id]
    assert not step["fallback"]
    top = step["memory_ids"][: SCENARIO.top_k]
    if question.expected:
        assert set(top) & set(question.expected), (question.text, step["memory_ids"])
    assert step["correct"], step


def test_semantic_recall_answers_what_lexical_recall_alone_gets_wrong(
    real_report: dict[str, Any],
) -> None:
    summary = real_report["summary"]
    paraphrases = {q.id for q in SCENARIO.questions_of("play") if q.paraphrase}
    wins = set(summary["semantic_wins"])
    assert {"thief", "injury", "newcomer"} <= wins
    assert len(wins & paraphrases) >= 5
    played = _questions(real_report, "play")
    for question_id in wins & paraphrases:
        step = played[question_id]
        assert step["correct"] and step["lexical_only"]["correct"] is False
        first = next(m for m in step["memories"] if m["memory_id"] in _expected(question_id))
        assert first["why"]["vector_rank"] is not None


def _expected(question_id: str) -> tuple[str, ...]:
    return next(q.expected for q in SCENARIO.questions if q.id == question_id)


def test_after_the_model_change_recall_falls_back_until_the_rebuild_restores_it(
    real_report: dict[str, Any],
) -> None:
    change = next(step for step in real_report["steps"] if step["step"] == "model_change")
    assert change["status"]["state"] == "rebuild_required"
    assert change["identity"].endswith(f"-max{SCENARIO.changed_model_maximum_tokens}:384")
    before = _questions(real_report, "after_model_change")
    after = _questions(real_report, "after_rebuild")
    assert before and all(step["fallback"] and not step["correct"] for step in before.values())
    assert after.keys() == before.keys()
    assert all(step["correct"] and not step["fallback"] for step in after.values())
    rebuild = next(step for step in real_report["steps"] if step["step"] == "rebuild")
    assert rebuild["status"]["state"] == "ready"
    assert real_report["summary"]["model_change"]["restored"]


def test_the_readme_reports_what_lexical_recall_alone_gets_wrong(
    real_report: dict[str, Any],
) -> None:
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    claim = re.search(
        r"lexical recall alone gets (\d+) of the (\d+) questions wrong\s*\(([^)]*)\)", readme
    )
    assert claim, "README.md no longer states what lexical recall alone gets wrong"
    named = [name.strip() for name in re.sub(r"\s+", " ", claim.group(3)).split(",")]
    misses = [name for name in real_report["summary"]["lexical_misses"] if "@" not in name]
    asked = [
        s for s in real_report["steps"] if s["step"] == "question" and s["phase"] != "model_change"
    ]
    assert named == misses
    assert (int(claim.group(1)), int(claim.group(2))) == (len(misses), len(asked))


def test_first_use_prepares_the_model_with_a_progress_bar(
    model_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With an empty model cache, ``game-memory demo`` prepares the model, then runs hybrid.

    The download and build are the ONNX tests' business; here the preparation reports its
    stages and puts the already prepared folder in place.
    """
    prepared = onnx.default_model_directory(model_home)
    calls: list[Path | None] = []

    def prepare(home: Path | None = None, *, force: bool = False, progress: Any = None) -> Path:
        calls.append(home)
        for stage in ("download", "verify", "build", "quantize", "check", "write"):
            progress(stage, 0, 1)
            progress(stage, 1, 1)
        target = onnx.default_model_directory(home)
        shutil.copytree(prepared, target, copy_function=link_or_copy)
        return target

    monkeypatch.setattr(onnx, "prepare_default_model", prepare)
    monkeypatch.setenv("GAME_MEMORY_HOME", str(tmp_path / "empty-home"))
    assert main(["demo", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert calls == [None]  # the default home: $GAME_MEMORY_HOME
    assert report["model"]["prepared_now"] and report["model"]["mode"] == "hybrid"
    assert "Preparing the default embedding model" in captured.err
    assert "quantize to INT8" in captured.err
    assert not [
        step["id"]
        for step in report["steps"]
        if step["step"] == "question"
        and step["stage"] in ("play", "rewind")
        and not step["correct"]
    ]
