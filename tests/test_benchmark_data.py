"""The hand-written belief sets the reranker is judged on load, and their loader refuses bad ones.

``benchmarks/retrieval_data``'s belief files (development scenarios, development sequels,
the held-out set) carry the kind a game would store each memory as: the reranker's version
test spares events, so a missing or misspelt kind would change what the benchmark measures
without any error. The loader's checks are what keeps a scenario honest (ticks in order,
questions asked at the right moments).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from game_memory import GameMemoryKind

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
DATA = BENCHMARKS / "retrieval_data"
FILES = ("belief_updates.json", "belief_updates_heldout.json", "belief_sequels_dev.json")


@pytest.fixture
def handwritten(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``benchmarks/retrieval_handwritten.py`` (the benchmarks are scripts, not a package)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    yield importlib.import_module("retrieval_handwritten")
    for name in ("retrieval_handwritten", "retrieval_sets"):
        sys.modules.pop(name, None)


def _memories(data: dict[str, Any]) -> list[dict[str, Any]]:
    found = [m for rows in data["backgrounds"].values() for m in rows]
    found += [s[side] for s in data["scenarios"] for side in ("old", "new")]
    found += [q[side] for q in data.get("sequels", ()) for side in ("earlier", "later")]
    return found


@pytest.mark.parametrize("name", FILES)
def test_every_memory_has_a_kind_the_library_knows(name: str) -> None:
    memories = _memories(json.loads((DATA / name).read_text(encoding="utf-8")))
    assert memories
    kinds = {GameMemoryKind(memory["kind"]) for memory in memories}
    assert GameMemoryKind.EVENT in kinds and GameMemoryKind.FACT in kinds


def test_the_sets_load_and_keep_their_sizes(handwritten: Any) -> None:
    scenarios, _ = handwritten.load_beliefs(handwritten.BELIEF_FILE)
    held_out, _ = handwritten.load_beliefs(handwritten.HELDOUT_BELIEF_FILE)
    assert (len(scenarios), len(held_out)) == (33, 34)
    assert len(handwritten.load_sequels(handwritten.SEQUELS_DEV_FILE)) == 30
    sequels = handwritten.load_sequels(handwritten.HELDOUT_BELIEF_FILE)
    assert len(sequels) == 18
    rows = handwritten.sequel_memories(sequels[0])
    assert [row.memory_id for row in rows[:2]] == [
        f"{sequels[0].sequel_id}.earlier",
        f"{sequels[0].sequel_id}.later",
    ]
    assert rows[0].kind == sequels[0].earlier.kind


def _write(tmp_path: Path, sequel: dict[str, Any]) -> Path:
    path = tmp_path / "sequels.json"
    data = {"ticks_per_day": 1440, "backgrounds": {}, "scenarios": [], "sequels": [sequel]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _sequel(**changes: Any) -> dict[str, Any]:
    sequel: dict[str, Any] = {
        "id": "smith",
        "npc": "smith",
        "background": None,
        "earlier": {"text": "I forged a sword.", "day": 1, "minute": 0, "importance": 0.5},
        "later": {"text": "I burned my hand.", "day": 2, "minute": 0, "importance": 0.5},
        "questions": ["What did you forge?", "Did you make a sword?"],
        "asked": [3000],
    }
    sequel.update(changes)
    return sequel


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"asked": [1500]}, "asked before the later memory"),
        ({"later": {"text": "x", "day": 0, "minute": 0, "importance": 0.5}}, "not later"),
        ({"questions": ["only one?"]}, "two questions"),
        ({"background": "nowhere"}, "not a valid belief-update file"),
    ],
)
def test_a_bad_sequel_is_refused(
    handwritten: Any, tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(handwritten.DatasetError, match=message):
        handwritten.load_sequels(_write(tmp_path, _sequel(**changes)))


def test_a_sequel_kind_defaults_to_fact_when_the_file_does_not_say(
    handwritten: Any, tmp_path: Path
) -> None:
    (sequel,) = handwritten.load_sequels(_write(tmp_path, _sequel()))
    assert (sequel.earlier.kind, sequel.later.kind) == ("fact", "fact")
