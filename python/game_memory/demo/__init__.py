"""The NPC village scenario shared by the terminal demo and the Godot demo's checks.

* :mod:`~game_memory.demo.scenario`: the data (villagers, events, questions) and
  :func:`scenario_json`, the JSON the Godot demo project plays;
* :mod:`~game_memory.demo.play`: the driver that plays it against an opened memory;
* :mod:`~game_memory.demo.outcome` and :mod:`~game_memory.demo.report`: the steps and the
  ``--json`` document;
* :mod:`~game_memory.demo.render` and :mod:`~game_memory.demo.command`: the ``rich``
  terminal front end, ``game-memory demo``.
"""

from game_memory.demo.command import run_demo
from game_memory.demo.outcome import QuestionStep, Step
from game_memory.demo.play import memory_of, play, query_of
from game_memory.demo.report import build_report, summarize
from game_memory.demo.scenario import (
    SCENARIO,
    DemoEvent,
    DemoQuestion,
    Npc,
    Scenario,
    scenario_json,
)

__all__ = [
    "SCENARIO",
    "DemoEvent",
    "DemoQuestion",
    "Npc",
    "QuestionStep",
    "Scenario",
    "Step",
    "build_report",
    "memory_of",
    "play",
    "query_of",
    "run_demo",
    "scenario_json",
    "summarize",
]
