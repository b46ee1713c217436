"""The demo's JSON document: the model used, every step, and a summary of the verdicts.

``game-memory demo --json`` prints :func:`build_report`'s document; the Godot demo's engine
test compares its own answers with the ``question`` steps in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from game_memory.demo.outcome import ModelChangeStep, QuestionStep, RebuildStep, Step
from game_memory.demo.scenario import Scenario

__all__ = ["REPORT_FORMAT_VERSION", "ModelReport", "build_report", "summarize"]

#: The version of the ``--json`` document's layout.
REPORT_FORMAT_VERSION = 1


@dataclass(frozen=True)
class ModelReport:
    """Which model the demo ran on, and why if it is not the one asked for.

    Attributes:
        requested: ``default``, ``lexical`` or ``hashing``.
        mode: ``hybrid`` or ``lexical``.
        identity: The embedding identity, or ``None`` in lexical mode.
        notice: Why recall is lexical although a model was asked for, or ``None``.
        prepared_now: The default model was prepared by this run.
    """

    requested: str
    mode: str
    identity: str | None
    notice: str | None
    prepared_now: bool = False

    def to_json(self) -> dict[str, Any]:
        """The model report as JSON-ready data."""
        return {
            "requested": self.requested,
            "mode": self.mode,
            "identity": self.identity,
            "notice": self.notice,
            "prepared_now": self.prepared_now,
        }


def summarize(steps: Sequence[Step]) -> dict[str, Any]:
    """Count the verdicts: correct answers, what lexical recall alone misses, the model change.

    ``semantic_wins`` lists the questions answered correctly that lexical recall alone gets
    wrong; ``future_recalled`` counts memories recalled from after their question's moment
    (0, always: a save never remembers its future).
    """
    questions = [step for step in steps if isinstance(step, QuestionStep)]
    compared = [step for step in questions if step.lexical_correct is not None]
    changed = [step for step in steps if isinstance(step, ModelChangeStep)]
    after_change = [step for step in questions if step.stage == "after_model_change"]
    after_rebuild = [step for step in questions if step.stage == "after_rebuild"]
    rebuilds = [step for step in steps if isinstance(step, RebuildStep)]
    model_change: dict[str, Any] | None = None
    if changed:
        model_change = {
            "rebuild_required": changed[0].status.state == "rebuild_required",
            "fell_back": bool(after_change) and all(step.fallback for step in after_change),
            "correct_before_rebuild": sum(step.correct for step in after_change),
            "rebuild_final_progress": list(rebuilds[-1].progress[-1])
            if rebuilds and rebuilds[-1].progress
            else None,
            "restored": bool(after_rebuild)
            and all(step.correct and not step.fallback for step in after_rebuild),
        }
    return {
        "questions": len(questions),
        "correct": sum(step.correct for step in questions),
        "incorrect_ids": [_key(step) for step in questions if not step.correct],
        "lexical_only_correct": sum(bool(step.lexical_correct) for step in compared),
        "lexical_misses": [_key(step) for step in compared if not step.lexical_correct],
        "semantic_wins": [
            _key(step) for step in compared if step.correct and not step.lexical_correct
        ],
        "future_recalled": sum(len(step.future_ids) for step in questions),
        "expired_recalled": sum(len(step.expired_ids) for step in questions),
        "retracted_recalled": sum(len(step.retracted_ids) for step in questions),
        "model_change": model_change,
    }


def _key(step: QuestionStep) -> str:
    if step.stage in ("play", "rewind"):
        return step.question.id
    return f"{step.question.id}@{step.stage}"


def build_report(
    scenario: Scenario, model: ModelReport, data_dir: str | None, steps: Sequence[Step]
) -> dict[str, Any]:
    """The whole ``--json`` document.

    Args:
        scenario: What was played.
        model: The model it ran on.
        data_dir: The ``--data`` folder, or ``None`` for a temporary one (deleted).
        steps: Every step, in order.
    """
    return {
        "format": "game-memory-demo-report",
        "format_version": REPORT_FORMAT_VERSION,
        "scenario": {
            "name": scenario.name,
            "session_id": scenario.session_id,
            "timeline_id": scenario.timeline_id,
            "npcs": [npc.id for npc in scenario.npcs],
            "events": len(scenario.events),
            "memories": scenario.memories,
            "summaries": scenario.summaries,
            "actions": len(scenario.actions),
            "recall_limit": scenario.recall_limit,
            "top_k": scenario.top_k,
        },
        "model": model.to_json(),
        "data_dir": data_dir,
        "steps": [step.to_json() for step in steps],
        "summary": summarize(steps),
    }
