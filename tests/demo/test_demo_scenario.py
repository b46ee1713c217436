"""The scenario is a story the demo can tell: consistent, time-ordered, and shared as JSON."""

from __future__ import annotations

import json
from collections import Counter

from game_memory.demo import SCENARIO, scenario_json
from game_memory.demo.clock import describe_age, format_tick, tick_of
from game_memory.store.tokenizer import tokenize

from .conftest import DEMO_PROJECT, REPOSITORY

# Words that carry no content: a paraphrase may share these with its memory, nothing else.
_FUNCTION_WORDS = frozenset(
    " ".join(
        (
            "a an the at of to in on for and or but was were is are be been has have had did",
            "do does who what why how when where which that this any anybody anyone our my",
            "your his her their he she it they we you i s about there",
        )
    ).split(" ")
)


def test_the_village_has_at_least_four_villagers_and_forty_events() -> None:
    assert len(SCENARIO.npcs) >= 4
    assert len(SCENARIO.events) >= 40
    assert len({npc.id for npc in SCENARIO.npcs}) == len(SCENARIO.npcs)
    assert len({event.id for event in SCENARIO.events}) == len(SCENARIO.events)


def test_each_event_is_witnessed_by_known_villagers_and_most_by_only_some() -> None:
    villagers = {npc.id for npc in SCENARIO.npcs}
    for event in SCENARIO.events:
        assert event.witnesses, event.id
        assert set(event.witnesses) <= villagers, event.id
        assert len(set(event.witnesses)) == len(event.witnesses), event.id
    partial = [event for event in SCENARIO.events if set(event.witnesses) != villagers]
    assert len(partial) >= 0.8 * len(SCENARIO.events)


def test_events_carry_kind_scope_importance_and_tags_and_some_expire() -> None:
    kinds = Counter(event.kind for event in SCENARIO.events)
    assert {"event", "fact", "relationship", "goal"} <= set(kinds)
    assert {"village", "gossip", "personal"} <= {event.scope for event in SCENARIO.events}
    assert all(0.0 <= event.importance <= 1.0 for event in SCENARIO.events)
    assert sum(bool(event.tags) for event in SCENARIO.events) >= 30
    expiring = [event for event in SCENARIO.events if event.expires_at is not None]
    assert expiring and all(event.expires_at > event.tick for event in expiring)


def test_the_story_spans_several_days_on_one_timeline_with_distinct_moments() -> None:
    ticks = [event.tick for event in SCENARIO.events]
    assert len(set(ticks)) == len(ticks), "two events at one tick would make the order ambiguous"
    assert max(ticks) - min(ticks) >= 3 * 1440
    assert SCENARIO.end_tick >= max(ticks)


def test_questions_go_to_several_villagers_at_several_moments_in_every_phase() -> None:
    play = SCENARIO.questions_of("play")
    assert len({question.npc for question in play}) >= 4
    assert len({question.tick for question in play}) >= 6
    assert SCENARIO.questions_of("rewind") and SCENARIO.questions_of("model_change")
    assert len({(q.id, q.phase) for q in SCENARIO.questions}) == len(SCENARIO.questions)


def test_expected_answers_are_memories_the_villager_has_by_then() -> None:
    summaries = {a.id: a for a in SCENARIO.actions if a.kind == "consolidate"}
    for question in SCENARIO.questions:
        for memory_id in question.expected:
            assert not SCENARIO.retracted(question.npc, memory_id, question.tick), question.id
            if memory_id in summaries:  # a consolidation's summary, the NPC's own by then
                summary = summaries[memory_id]
                assert summary.npc == question.npc and summary.tick <= question.tick
                continue
            event = SCENARIO.event(memory_id)
            assert question.npc in event.witnesses, (question.id, memory_id)
            assert event.tick <= question.tick, (question.id, memory_id)
            assert event.expires_at is None or event.expires_at > question.tick


def test_the_game_forgets_and_consolidates_memories_its_villagers_have() -> None:
    kinds = {action.kind for action in SCENARIO.actions}
    assert kinds == {"forget", "consolidate"}
    for action in SCENARIO.actions:
        for memory_id in action.memory_ids:
            event = SCENARIO.event(memory_id)
            assert action.npc in event.witnesses and event.tick <= action.tick, action.id
        assert (action.kind == "forget") == (len(action.memory_ids) == 1 and not action.text)
    forgotten = next(action for action in SCENARIO.actions if action.kind == "forget")
    before_and_after = [
        q
        for q in SCENARIO.questions
        if forgotten.memory_ids[0] in q.expected and q.npc == forgotten.npc
    ]
    assert any(q.phase == "play" and q.tick < forgotten.tick for q in before_and_after)
    assert any(q.phase == "rewind" for q in before_and_after)  # an earlier save remembers


def test_paraphrases_share_no_content_word_with_their_answers() -> None:
    paraphrases = [question for question in SCENARIO.questions if question.paraphrase]
    assert len(paraphrases) >= 5
    for question in paraphrases:
        asked = set(tokenize(question.text)) - _FUNCTION_WORDS
        for memory_id in question.expected:
            shared = asked & set(tokenize(SCENARIO.event(memory_id).text))
            assert not shared, f"{question.id} shares {shared} with {memory_id}"


def test_a_rewind_question_comes_after_later_events_of_its_villager() -> None:
    """Loading an earlier save only means something if the save holds later memories."""
    for question in SCENARIO.questions_of("rewind"):
        later = [
            event
            for event in SCENARIO.events
            if question.npc in event.witnesses and event.tick > question.tick
        ]
        assert later, question.id


def test_the_game_clock_reads_days_and_minutes() -> None:
    assert tick_of(2, 6, 10) == 1440 + 370
    assert format_tick(1440 + 370) == "Day 2, 06:10"
    assert format_tick(-1) == "before Day 1"
    assert describe_age(50) == "50 min ago"
    assert describe_age(1440 + 125) == "1 day 2 h ago"
    assert describe_age(0) == "just now"
    assert describe_age(None) == "-"


def test_scenario_json_is_the_whole_scenario() -> None:
    data = json.loads(scenario_json())
    assert data["format"] == "game-memory-demo-scenario"
    assert [event["id"] for event in data["events"]] == [event.id for event in SCENARIO.events]
    assert [q["id"] for q in data["questions"]] == [q.id for q in SCENARIO.questions]
    assert data["events"][1]["witnesses"] == list(SCENARIO.events[1].witnesses)
    assert data["top_k"] == SCENARIO.top_k and data["recall_limit"] == SCENARIO.recall_limit


def test_the_godot_demo_plays_exactly_this_scenario() -> None:
    shipped = (DEMO_PROJECT / "scenario.json").read_text(encoding="utf-8")
    assert shipped == scenario_json(), (
        'demo_project/scenario.json is stale; regenerate it with: python -c "from '
        "game_memory.demo import scenario_json; open('demo_project/scenario.json', 'w')"
        '.write(scenario_json())"'
    )


def test_the_demo_project_ships_an_identical_copy_of_the_addon() -> None:
    addon = REPOSITORY / "godot_addon" / "addons" / "game_memory"
    copy = DEMO_PROJECT / "addons" / "game_memory"
    ours = {p.relative_to(addon): p.read_bytes() for p in addon.rglob("*") if p.is_file()}
    theirs = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    assert sorted(map(str, theirs)) == sorted(map(str, ours))
    changed = [str(path) for path in ours if ours[path] != theirs[path]]
    assert not changed, f"re-copy godot_addon/addons/game_memory into demo_project: {changed}"


def test_the_demo_project_is_typed_and_starts_on_the_village() -> None:
    project = (DEMO_PROJECT / "project.godot").read_text(encoding="utf-8")
    assert "gdscript/warnings/untyped_declaration=2" in project
    assert 'run/main_scene="res://village/village.tscn"' in project
    scene = (DEMO_PROJECT / "village" / "village.tscn").read_text(encoding="utf-8")
    for node in ("ClockLabel", "AdvanceButton", "QuestionEdit", "RecalledList", "RewindSlider"):
        assert f'[node name="{node}"' in scene
    assert 'path="res://addons/game_memory/game_memory.gd"' in scene


def test_the_readme_describes_this_scenario() -> None:
    readme = (REPOSITORY / "README.md").read_text(encoding="utf-8")
    assert f"{len(SCENARIO.events)} events each witnessed by only some of them" in readme
    assert "five villagers" in readme and len(SCENARIO.npcs) == 5
    rewind = SCENARIO.questions_of("rewind")[0]
    assert f"the save from {format_tick(rewind.tick)}" in readme
