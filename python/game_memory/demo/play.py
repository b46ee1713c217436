"""Play the scenario against an opened memory, yielding one record per step.

The driver is the same whatever shows the result: the terminal demo renders the steps as
they come, ``--json`` collects them, and tests assert on them. The order of play:

1. If the save's index holds vectors of another model (a ``--data`` folder from an
   earlier run), rebuild it first.
2. ``play``: the clock moves forward; every event is remembered by its witnesses when the
   clock reaches it, every action of the game (an NPC forgets a memory, or its memories
   are consolidated into a summary) is carried out at its moment, after the events of that
   moment, and each ``play`` question is asked at its moment.
3. The story runs to ``end_tick`` (every event is remembered).
4. ``rewind``: the player loads an earlier save; the questions are asked as of earlier
   moments of the same timeline, with every later memory still in the save.
5. ``model_change`` (hybrid mode, when a ``switch_model`` is given): the save is re-opened
   with another embedding model; its status says a rebuild is required, the questions
   fall back to lexical recall; a rebuild with progress restores semantic recall and the
   questions are asked again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Awaitable, Callable

from game_memory.demo.actions import perform
from game_memory.demo.clock import format_tick
from game_memory.demo.outcome import (
    EventStep,
    ModelChangeStep,
    PhaseStep,
    QuestionStep,
    RebuildStep,
    Step,
)
from game_memory.demo.scenario import SCENARIO, DemoAction, DemoEvent, DemoQuestion, Scenario
from game_memory.memory import VectorMemoryStore
from game_memory.model import GameMemory, GameMemoryKind, GameMemoryQuery, GameMoment
from game_memory.model.results import RecallResult

__all__ = ["ModelSwitch", "ProgressSink", "memory_of", "play", "query_of"]

#: Closes nothing, opens the same save with the changed embedding model.
ModelSwitch = Callable[[], Awaitable[VectorMemoryStore]]
#: Receives ``(done, total)`` while a rebuild runs.
ProgressSink = Callable[[int, int], None]


def memory_of(scenario: Scenario, event: DemoEvent, owner_id: str) -> GameMemory:
    """The memory ``owner_id`` keeps of ``event``: exactly what the Godot demo stores.

    The payload is the bridge's default (``{"text": text}`` as canonical JSON), so a memory
    remembered through the sidecar is content-equal to this one.
    """
    moment = GameMoment(timeline_id=scenario.timeline_id, tick=event.tick)
    expires = (
        None
        if event.expires_at is None
        else GameMoment(timeline_id=scenario.timeline_id, tick=event.expires_at)
    )
    return GameMemory(
        memory_id=event.id,
        session_id=scenario.session_id,
        owner_id=owner_id,
        scope=event.scope,
        kind=GameMemoryKind(event.kind),
        payload_json=json.dumps(
            {"text": event.text}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ),
        moment=moment,
        importance=event.importance,
        searchable_text=event.text,
        tags=event.tags,
        expires_at=expires,
        belief_key=event.belief_key,
    )


def query_of(scenario: Scenario, question: DemoQuestion) -> GameMemoryQuery:
    """The recall a question makes: that NPC's memories, as of the question's moment."""
    return GameMemoryQuery(
        session_id=scenario.session_id,
        owner_id=question.npc,
        text=question.text,
        limit=scenario.recall_limit,
        at_or_before=GameMoment(timeline_id=scenario.timeline_id, tick=question.tick),
    )


async def _ask(
    memory: VectorMemoryStore,
    scenario: Scenario,
    question: DemoQuestion,
    stage: str,
    compare: VectorMemoryStore | None,
) -> QuestionStep:
    query = query_of(scenario, question)
    result: RecallResult = await memory.recall(query)
    lexical = None
    if memory.mode == "hybrid" and compare is not None:
        lexical = await compare.recall(query)
    return QuestionStep.judge(scenario, question, stage, result, lexical)


async def _remember(memory: VectorMemoryStore, scenario: Scenario, event: DemoEvent) -> EventStep:
    created = 0
    for owner in event.witnesses:
        if await memory.append(memory_of(scenario, event, owner)):
            created += 1
    return EventStep(event, created)


async def _advance(
    memory: VectorMemoryStore,
    scenario: Scenario,
    events: list[DemoEvent],
    actions: list[DemoAction],
    tick: int,
) -> AsyncGenerator[Step, None]:
    """Remember the events and carry out the actions up to ``tick``, in time order (the
    events of a moment before its actions); both lists are consumed."""
    while (events and events[0].tick <= tick) or (actions and actions[0].tick <= tick):
        if events and (not actions or events[0].tick <= actions[0].tick):
            yield await _remember(memory, scenario, events.pop(0))
        else:
            yield await perform(memory, scenario, actions.pop(0))


async def _rebuild(
    memory: VectorMemoryStore, scenario: Scenario, reason: str, progress: ProgressSink | None
) -> RebuildStep:
    seen: list[tuple[int, int]] = []

    def report(done: int, total: int) -> None:
        seen.append((done, total))
        if progress is not None:
            progress(done, total)

    status = await memory.rebuild(scenario.session_id, progress=report)
    return RebuildStep(reason, tuple(seen), status)


async def play(
    memory: VectorMemoryStore,
    scenario: Scenario = SCENARIO,
    *,
    switch_model: ModelSwitch | None = None,
    progress: ProgressSink | None = None,
    compare: VectorMemoryStore | None = None,
) -> AsyncGenerator[Step, None]:
    """Play ``scenario`` on ``memory`` and yield each step as it happens.

    Takes ownership of ``memory`` once iteration starts: it is closed when the iteration
    ends (also early, with ``contextlib.aclosing``), and so is the memory ``switch_model``
    returns. A generator that is never iterated closes nothing. Replaying on a
    save that already holds the scenario is an idempotent no-op for the remembering.

    Args:
        memory: The opened save (hybrid or lexical).
        scenario: What to play.
        switch_model: Opens the same save with a changed embedding model; called after
            ``memory`` is closed. ``None`` skips the model-change phase.
        progress: Receives ``(done, total)`` during every rebuild.
        compare: A lexical-mode memory over the same save: each hybrid answer is shown
            beside what lexical recall alone says. Closed with ``memory``.

    Raises:
        GameMemoryError: A store failure (nothing in the scenario itself fails).
    """
    current = memory
    try:
        status = await current.get_status(scenario.session_id)
        if status.requires_rebuild:
            yield await _rebuild(
                current,
                scenario,
                "the index in this folder holds vectors of another model",
                progress,
            )

        pending = sorted(scenario.events, key=lambda event: event.tick)
        actions = sorted(scenario.actions, key=lambda action: action.tick)
        for question in sorted(scenario.questions_of("play"), key=lambda item: item.tick):
            async for step in _advance(current, scenario, pending, actions, question.tick):
                yield step
            yield await _ask(current, scenario, question, "play", compare)
        async for step in _advance(current, scenario, pending, actions, scenario.end_tick):
            yield step

        rewinds = scenario.questions_of("rewind")
        if rewinds:
            loaded = min(question.tick for question in rewinds)
            yield PhaseStep(
                "rewind",
                loaded,
                f"The player loads the save from {format_tick(loaded)}: the clock goes back on "
                "the same timeline, and every later memory stays in the save.",
            )
            for question in rewinds:
                yield await _ask(current, scenario, question, "rewind", compare)

        changes = scenario.questions_of("model_change")
        if not changes:
            return
        at = max(question.tick for question in changes)
        if current.mode != "hybrid" or switch_model is None:
            yield PhaseStep(
                "model_change",
                at,
                "Skipped: recall is lexical only (no embedding model), so there is no model "
                "to change.",
            )
            return
        yield PhaseStep(
            "model_change",
            at,
            "The game ships with another embedding model setting: the save's vectors "
            "were made by the old one.",
        )
        previous = _identity(current)
        await current.aclose()
        current = await switch_model()
        status = await current.get_status(scenario.session_id)
        yield ModelChangeStep(previous, _identity(current), status)
        for question in changes:
            yield await _ask(current, scenario, question, "after_model_change", compare)
        yield await _rebuild(current, scenario, "the embedding model changed", progress)
        for question in changes:
            yield await _ask(current, scenario, question, "after_rebuild", compare)
    finally:
        try:
            await current.aclose()
        finally:
            if compare is not None:
                await compare.aclose()


def _identity(memory: VectorMemoryStore) -> str | None:
    identity = memory.active_identity
    return None if identity is None else str(identity)
