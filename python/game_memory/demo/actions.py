"""The game's actions on its NPCs' memories in the demo: forgetting and consolidating.

:func:`perform` carries out one :class:`~game_memory.demo.scenario.DemoAction` on the front
door and returns its step; :func:`summary_of` is the summary a consolidation stores, exactly
what the Godot demo stores through ``GameMemory.consolidate`` (the bridge's default payload,
``{"text": text}``), so both front ends recall the same memory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from game_memory.demo.clock import format_tick
from game_memory.demo.scenario import DemoAction, Scenario
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMemory, GameMemoryKind, GameMoment

__all__ = ["ConsolidateStep", "ForgetStep", "perform", "summary_of"]


@dataclass(frozen=True)
class ForgetStep:
    """The game made an NPC forget a memory as of a moment (``forgotten``: it was not yet)."""

    action: DemoAction
    forgotten: bool

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        action = self.action
        return {
            "step": "forget",
            "id": action.id,
            "tick": action.tick,
            "clock": format_tick(action.tick),
            "npc": action.npc,
            "memory_id": action.memory_ids[0],
            "forgotten": self.forgotten,
            "note": action.note,
        }


@dataclass(frozen=True)
class ConsolidateStep:
    """The game replaced an NPC's memories with a summary (``created``: it was new)."""

    action: DemoAction
    created: bool

    def to_json(self) -> dict[str, Any]:
        """The step as JSON-ready data."""
        action = self.action
        return {
            "step": "consolidate",
            "id": action.id,
            "tick": action.tick,
            "clock": format_tick(action.tick),
            "npc": action.npc,
            "memory_ids": list(action.memory_ids),
            "text": action.text,
            "created": self.created,
            "note": action.note,
        }


def summary_of(scenario: Scenario, action: DemoAction) -> GameMemory:
    """The summary a consolidation stores (a reflection at the action's moment)."""
    return GameMemory(
        memory_id=action.id,
        session_id=scenario.session_id,
        owner_id=action.npc,
        scope="personal",
        kind=GameMemoryKind.REFLECTION,
        payload_json=json.dumps(
            {"text": action.text}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ),
        moment=GameMoment(timeline_id=scenario.timeline_id, tick=action.tick),
        importance=action.importance,
        searchable_text=action.text,
        tags=action.tags,
    )


async def perform(
    memory: VectorMemoryStore, scenario: Scenario, action: DemoAction
) -> ForgetStep | ConsolidateStep:
    """Carry out ``action`` on ``memory``; its step."""
    if action.kind == "forget":
        at = GameMoment(timeline_id=scenario.timeline_id, tick=action.tick)
        forgotten = await memory.forget(scenario.session_id, action.npc, action.memory_ids[0], at)
        return ForgetStep(action, forgotten)
    created = await memory.consolidate(
        scenario.session_id, action.npc, action.memory_ids, summary_of(scenario, action)
    )
    return ConsolidateStep(action, created)
