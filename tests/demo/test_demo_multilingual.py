"""``game-memory demo --model multilingual``: the village on multilingual-e5-small."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from game_memory.demo import run_demo

from .conftest import REPOSITORY

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def multilingual_report() -> dict[str, Any]:
    from game_memory.onnx import prepare_named_model

    configured = os.environ.get("GAME_MEMORY_HOME", "").strip()
    home = Path(configured) if configured else REPOSITORY / ".cache" / "pytest-game-memory-home"
    prepare_named_model("multilingual", home)
    return asyncio.run(run_demo("multilingual", None, home=home))


def test_the_demo_runs_hybrid_on_the_multilingual_model(
    multilingual_report: dict[str, Any],
) -> None:
    model = multilingual_report["model"]
    assert model["mode"] == "hybrid" and "multilingual-e5-small" in model["identity"]
    assert multilingual_report["summary"]["future_recalled"] == 0
    assert multilingual_report["summary"]["expired_recalled"] == 0


def test_a_chinese_question_recalls_a_japanese_memory(multilingual_report: dict[str, Any]) -> None:
    (step,) = [
        s
        for s in multilingual_report["steps"]
        if s["step"] == "question" and s["id"] == "eastern-merchant"
    ]
    assert step["memory_ids"][0] == "silk-merchant" and step["correct"]
    assert step["memories"][0]["why"]["vector_rank"] == 1


def test_the_belief_update_holds_on_the_multilingual_model(
    multilingual_report: dict[str, Any],
) -> None:
    asked = {
        s["id"]: s["memory_ids"] for s in multilingual_report["steps"] if s["step"] == "question"
    }
    assert "ford-flooded" in asked["ford-after"][:3] and "ford-passable" not in asked["ford-after"]
    assert "ford-passable" in asked["ford-before"][:3]
