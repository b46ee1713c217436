class_name DemoScenario
extends RefCounted
## The village scenario the demo plays, read from [code]res://scenario.json[/code].
##
## The file is written by the Python package ([code]game_memory.demo.scenario_json()[/code])
## and checked by the tests to be exactly that text, so the Godot demo and the terminal demo
## play the same story: the villagers, the events each of them witnessed, and the questions
## with the memories that answer them. Ticks are in-game minutes; Day 1 starts at tick 0.

#region Constants
## Where the scenario is read from.
const DEFAULT_PATH: String = "res://scenario.json"
## In-game minutes per day.
const TICKS_PER_DAY: int = 1440
## The file format this script reads.
const FORMAT: String = "game-memory-demo-scenario"
#endregion


#region Variables
## The scenario's title.
var title: String = ""
## The save session every memory and question uses.
var session_id: String = ""
## The one timeline of the story.
var timeline_id: String = ""
## Where the clock stops before the player loads an earlier save.
var end_tick: int = 0
## How many memories each question recalls.
var recall_limit: int = 5
## How far down an expected memory may be and still count as a correct answer.
var top_k: int = 3
## The villagers: [code]{"id", "name", "role"}[/code].
var npcs: Array[Dictionary] = []
## The events in time order: [code]{"id", "tick", "text", "witnesses", "kind", "scope",
## "importance", "tags", "expires_at", "belief_key"}[/code] (ticks as ints;
## [code]expires_at[/code] and [code]belief_key[/code] may be null).
var events: Array[Dictionary] = []
## The questions in file order: [code]{"id", "phase", "npc", "tick", "text", "expected",
## "paraphrase", "note"}[/code].
var questions: Array[Dictionary] = []
## What the game does to its villagers' memories, in time order: [code]{"id", "kind"
## (forget or consolidate), "tick", "npc", "memory_ids", "text", "importance", "tags",
## "note"}[/code].
var actions: Array[Dictionary] = []

var _events_by_id: Dictionary = {}
#endregion


#region Static methods
## Reads the scenario at [param path]. Returns [code]{"ok": true, "scenario": DemoScenario}[/code]
## or [code]{"ok": false, "message": String}[/code] saying what is wrong with the file.
static func load_file(path: String = DEFAULT_PATH) -> Dictionary:
	if not FileAccess.file_exists(path):
		return {"ok": false, "message": "%s is missing; regenerate it with " % path
				+ "python -c \"from game_memory.demo import scenario_json; print(scenario_json())\""}
	var data: Variant = JSON.parse_string(FileAccess.get_file_as_string(path))
	if not data is Dictionary or data.get("format") != FORMAT:
		return {"ok": false, "message": "%s is not a %s file" % [path, FORMAT]}
	var scenario: DemoScenario = DemoScenario.new()
	scenario._read(data)
	return {"ok": true, "scenario": scenario}


## Returns [code]"Day D, HH:MM"[/code] for [param tick].
static func format_tick(tick: int) -> String:
	if tick < 0:
		return "before Day 1"
	var minutes: int = tick % TICKS_PER_DAY
	return "Day %d, %02d:%02d" % [tick / TICKS_PER_DAY + 1, minutes / 60, minutes % 60]


## Says how long before the question a memory happened, in game time.
static func describe_age(ticks: int) -> String:
	if ticks <= 0:
		return "just now"
	var days: int = ticks / TICKS_PER_DAY
	var hours: int = (ticks % TICKS_PER_DAY) / 60
	var minutes: int = ticks % 60
	var parts: PackedStringArray = PackedStringArray()
	if days > 0:
		parts.append("%d day%s" % [days, "s" if days > 1 else ""])
	if hours > 0:
		parts.append("%d h" % hours)
	if minutes > 0 and days == 0:
		parts.append("%d min" % minutes)
	return " ".join(parts) + " ago"
#endregion


#region Public methods
## Returns the game moment of [param tick] on the scenario's timeline.
func moment(tick: int) -> Dictionary:
	return {"timeline_id": timeline_id, "tick": tick}


## Returns the villager with [param npc_id] (empty when there is none).
func npc(npc_id: String) -> Dictionary:
	for villager: Dictionary in npcs:
		if villager["id"] == npc_id:
			return villager
	return {}


## Returns the event with [param event_id] (empty when there is none).
func event(event_id: String) -> Dictionary:
	return _events_by_id.get(event_id, {})


## Returns the questions of [param phase] ([code]play[/code], [code]rewind[/code] or
## [code]model_change[/code]) in the order they are asked; play questions by tick.
func questions_of(phase: String) -> Array[Dictionary]:
	var chosen: Array[Dictionary] = []
	for question: Dictionary in questions:
		if question["phase"] == phase:
			chosen.append(question)
	if phase == "play":
		# A stable sort by tick: equal ticks keep the file's order, as in the Python driver.
		var indexed: Array = []
		for index: int in chosen.size():
			indexed.append([chosen[index]["tick"], index, chosen[index]])
		indexed.sort()
		chosen.clear()
		for entry: Array in indexed:
			chosen.append(entry[2])
	return chosen


## Returns the remember options of [param item] for [method GameMemory.remember].
func remember_options(item: Dictionary) -> Dictionary:
	var options: Dictionary = {
		"memory_id": item["id"],
		"kind": item["kind"],
		"scope": item["scope"],
		"importance": item["importance"],
		"tags": item["tags"],
	}
	if item["expires_at"] != null:
		options["expires_at"] = moment(int(item["expires_at"]))
	if item.get("belief_key") != null:
		options["belief_key"] = item["belief_key"]
	return options


## Returns whether an action made [param npc_id] forget (or consolidate) [param memory_id]
## as of [param tick]: it must not be recalled then.
func retracted(npc_id: String, memory_id: String, tick: int) -> bool:
	for action: Dictionary in actions:
		if action["npc"] == npc_id and action["memory_ids"].has(memory_id) \
				and int(action["tick"]) <= tick:
			return true
	return false


## Returns the [method GameMemory.remember] options of a consolidation's summary.
func summary_options(action: Dictionary) -> Dictionary:
	return {"memory_id": action["id"], "scope": "personal", "importance": action["importance"],
			"tags": action["tags"]}


## Judges an answer to [param question]: [code]{"correct", "future_ids", "expired_ids",
## "retracted_ids"}[/code]. Correct means nothing from after the question's moment, nothing
## expired, forgotten or consolidated then, and (when the question has expected memories) one
## of them among the first [member top_k].
func judge(question: Dictionary, memories: Array) -> Dictionary:
	var tick: int = question["tick"]
	var future_ids: Array[String] = []
	var expired_ids: Array[String] = []
	var retracted_ids: Array[String] = []
	var found: bool = question["expected"].is_empty()
	for index: int in memories.size():
		var memory_id: String = memories[index]["memory_id"]
		if int(memories[index]["moment"]["tick"]) > tick:
			future_ids.append(memory_id)
		var source: Dictionary = event(memory_id)
		if not source.is_empty() and source["expires_at"] != null \
				and int(source["expires_at"]) <= tick:
			expired_ids.append(memory_id)
		if retracted(question["npc"], memory_id, tick):
			retracted_ids.append(memory_id)
		if index < top_k and question["expected"].has(memory_id):
			found = true
	return {"correct": found and future_ids.is_empty() and expired_ids.is_empty()
			and retracted_ids.is_empty(), "future_ids": future_ids, "expired_ids": expired_ids,
			"retracted_ids": retracted_ids}
#endregion


#region Private methods
func _read(data: Dictionary) -> void:
	title = str(data.get("name", ""))
	session_id = str(data.get("session_id", ""))
	timeline_id = str(data.get("timeline_id", ""))
	end_tick = int(data.get("end_tick", 0))
	recall_limit = int(data.get("recall_limit", 5))
	top_k = int(data.get("top_k", 3))
	for raw: Dictionary in data.get("npcs", []):
		npcs.append(raw)
	for raw: Dictionary in data.get("events", []):
		var item: Dictionary = raw.duplicate(true)
		item["tick"] = int(item["tick"])
		events.append(item)
		_events_by_id[item["id"]] = item
	events.sort_custom(func(a: Dictionary, b: Dictionary) -> bool: return a["tick"] < b["tick"])
	for raw: Dictionary in data.get("questions", []):
		var item: Dictionary = raw.duplicate(true)
		item["tick"] = int(item["tick"])
		questions.append(item)
	for raw: Dictionary in data.get("actions", []):
		var item: Dictionary = raw.duplicate(true)
		item["tick"] = int(item["tick"])
		actions.append(item)
	actions.sort_custom(func(a: Dictionary, b: Dictionary) -> bool: return a["tick"] < b["tick"])
#endregion
