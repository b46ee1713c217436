extends EngineTest
## Remember, then recall as of a game moment: nothing from the moment's future comes back.

const GUARD: String = "guard_anna"
const MEMORY_KEYS: Array[String] = [
	"memory_id",
	"owner_id",
	"text",
	"kind",
	"scope",
	"moment",
	"importance",
	"tags",
	"payload",
]


func run() -> void:
	var remembered: Array = []
	var recalled: Array = []
	var ready_events: Array = []
	var memory: GameMemory = make_memory()
	memory.backend_ready.connect(func() -> void: ready_events.append(true))
	memory.memory_remembered.connect(func(item: Dictionary) -> void: remembered.append(item))
	memory.memory_recalled.connect(
			func(owner: String, items: Array) -> void: recalled.append([owner, items]))

	# Called before the backend is ready: the request waits in the queue and is sent later.
	var early: Dictionary = await memory.remember(GUARD, "The player stole bread at the market.",
			moment(100), {"tags": ["market"]})
	check("request_made_before_ready_is_answered", early["ok"], {"result": early})
	check("backend_ready_emitted_once", ready_events.size() == 1, {"count": ready_events.size()})
	check("server_info_reported", memory.get_server_info().get("protocol_version") == 1.0
			or memory.get_server_info().get("protocol_version") == 1,
			{"info": memory.get_server_info()})
	check("memory_id_is_a_content_digest", str(early.get("memory_id", "")).begins_with("gm-"),
			{"memory_id": early.get("memory_id")})
	check("first_remember_created", early.get("created") == true)

	var later: Dictionary = await memory.remember(GUARD, "The player paid for apples politely.",
			moment(200))
	var future: Dictionary = await memory.remember(GUARD,
			"The player burned the bread stall down.", moment(300), {"importance": 0.9})
	check("later_memories_stored", later["ok"] and future["ok"], {"later": later,
			"future": future})
	check("memory_remembered_emitted_per_memory", remembered.size() == 3
			and remembered[0].get("memory_id") == early.get("memory_id")
			and remembered[2].get("memory_id") == future.get("memory_id"),
			{"emitted": remembered.size()})

	var again: Dictionary = await memory.remember(GUARD, "The player stole bread at the market.",
			moment(100), {"tags": ["market"]})
	check("resending_a_memory_is_idempotent", again["ok"] and again.get("created") == false
			and again.get("memory_id") == early.get("memory_id"), {"result": again})

	var as_of_250: Dictionary = await memory.recall(GUARD, "player bread market", moment(250))
	var ticks: Array = _ticks(as_of_250)
	check("recall_succeeds", as_of_250["ok"], {"result": as_of_250})
	check("recall_finds_past_memories", ticks.has(100) and ticks.has(200), {"ticks": ticks})
	check("recall_hides_memories_after_at_or_before", not ticks.has(300), {"ticks": ticks})
	check("recalled_memories_have_the_documented_keys", _have_keys(as_of_250["memories"]))
	check("ticks_are_ints", not ticks.is_empty() and ticks.all(
			func(tick: Variant) -> bool: return typeof(tick) == TYPE_INT), {"ticks": ticks})
	check("stages_are_reported", as_of_250.get("stages") is Array
			and not as_of_250["stages"].is_empty(), {"stages": as_of_250.get("stages")})
	check("fallback_is_a_bool", typeof(as_of_250.get("fallback")) == TYPE_BOOL)
	check("memory_recalled_emitted_with_owner_and_memories", recalled.size() == 1
			and recalled[0][0] == GUARD
			and recalled[0][1].size() == as_of_250["memories"].size(),
			{"emitted": recalled.size()})

	var as_of_150: Dictionary = await memory.recall(GUARD, "player", moment(150))
	check("an_earlier_moment_sees_less", as_of_150["ok"] and _ticks(as_of_150) == [100],
			{"ticks": _ticks(as_of_150)})
	var stranger: Dictionary = await memory.recall("merchant_bo", "player bread", moment(1000))
	check("another_owner_remembers_nothing", stranger["ok"] and stranger["memories"].is_empty(),
			{"result": stranger})

	var fact: Dictionary = await memory.remember(GUARD, "The player's name is Rowan.",
			moment(120), {"kind": "fact", "importance": 0.8, "tags": ["name"],
			"payload": {"name": "Rowan", "count": 2}})
	var facts: Dictionary = await memory.recall(GUARD, "player name", moment(400),
			{"kinds": ["fact"], "limit": 5})
	var found: Dictionary = facts["memories"][0] if facts["ok"] and facts["memories"].size() == 1 \
			else {}
	check("kind_filter_returns_only_facts", fact["ok"] and not found.is_empty()
			and found.get("kind") == "fact", {"result": facts})
	check("payload_and_tags_survive_the_round_trip", found.get("payload", {}).get("name")
			== "Rowan" and int(found.get("payload", {}).get("count", 0)) == 2
			and found.get("tags", []) == ["name"], {"memory": found})

	var limited: Dictionary = await memory.recall(GUARD, "player", moment(400), {"limit": 2})
	check("limit_bounds_the_answer", limited["ok"] and limited["memories"].size() == 2,
			{"count": limited.get("memories", []).size()})

	var state: Dictionary = await memory.status()
	check("status_counts_every_memory", state["ok"] and state.get("total_entries") == 4
			and typeof(state.get("total_entries")) == TYPE_INT, {"status": state})
	var migrated: Dictionary = await memory.migrate()
	check("migrate_answers_with_int_counts", migrated["ok"]
			and typeof(migrated.get("migrated_entries")) == TYPE_INT, {"result": migrated})


func _ticks(result: Dictionary) -> Array:
	var ticks: Array = []
	if result.get("ok", false):
		for item: Dictionary in result["memories"]:
			ticks.append(item["moment"]["tick"])
	ticks.sort()
	return ticks


func _have_keys(memories: Array) -> bool:
	if memories.is_empty():
		return false
	for item: Dictionary in memories:
		for key: String in MEMORY_KEYS:
			if not item.has(key):
				return false
	return true
