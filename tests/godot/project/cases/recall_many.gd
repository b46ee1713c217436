extends EngineTest
## Several NPCs at once: concurrent requests never mix up, and recall_many keeps query order.

const NPCS: Array[String] = ["guard_anna", "merchant_bo", "priest_cai", "child_dee"]
const CONCURRENT_RECALLS: int = 24


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))

	# Fire every remember without awaiting in between; each must come back to its own caller.
	var remembers: Array = []
	for index: int in NPCS.size():
		for tick: int in [10, 20, 30]:
			_remember_into(memory, NPCS[index], tick, remembers)
	var all_remembered: bool = await wait_until(
			func() -> bool: return remembers.size() == NPCS.size() * 3, 10.0)
	check("concurrent_remembers_all_resolve", all_remembered, {"count": remembers.size()})
	var matched: bool = true
	for entry: Array in remembers:
		var result: Dictionary = entry[2]
		matched = matched and result["ok"] and result["memory"]["owner_id"] == entry[0] \
				and result["memory"]["moment"]["tick"] == entry[1] \
				and result["memory"]["text"] == _text(entry[0], entry[1])
	check("each_concurrent_answer_matches_its_request", matched)

	var recalled: Array = []
	memory.memory_recalled.connect(
			func(owner: String, _items: Array) -> void: recalled.append(owner))
	var queries: Array = []
	for index: int in NPCS.size():
		queries.append({"owner_id": NPCS[index], "text": "saw the player",
				"at_or_before": moment(10 + 10 * (index % 3)), "limit": 10})
	var batch: Dictionary = await memory.recall_many(queries)
	check("recall_many_succeeds", batch["ok"], {"result": batch})
	var results: Array = batch.get("results", [])
	check("recall_many_returns_one_result_per_query", results.size() == NPCS.size(),
			{"count": results.size()})
	for index: int in mini(results.size(), NPCS.size()):
		var entry: Dictionary = results[index]
		var limit_tick: int = 10 + 10 * (index % 3)
		var found: Array = entry.get("memories", [])
		var owners_ok: bool = entry.get("ok", false) and _owned_by(found, NPCS[index])
		var ticks_ok: bool = entry.get("ok", false) and found.size() == limit_tick / 10 \
				and _at_or_before(found, limit_tick)
		check("recall_many_result_%d_belongs_to_its_npc" % index, owners_ok, {"entry": entry})
		check("recall_many_result_%d_respects_its_moment" % index, ticks_ok,
				{"count": entry.get("memories", []).size(), "expected": limit_tick / 10})
	check("memory_recalled_emitted_per_query_in_order", recalled == NPCS, {"owners": recalled})

	var mixed: Dictionary = await memory.recall_many([
		{"owner_id": NPCS[0], "text": "player", "at_or_before": moment(100)},
		{"owner_id": NPCS[1], "text": "player", "at_or_before": moment(100), "limit": 1000},
		{"owner_id": NPCS[2], "text": "player", "at_or_before": moment(100)},
	])
	var mixed_results: Array = mixed.get("results", [])
	check("one_bad_query_fails_alone", mixed["ok"] and mixed_results.size() == 3
			and mixed_results[0]["ok"] and not mixed_results[1]["ok"] and mixed_results[2]["ok"]
			and code_of(mixed_results[1]) == GameMemoryError.INVALID_PARAMS,
			{"result": mixed})

	# Many NPCs recall at the same time; every answer must go back to the NPC that asked.
	var answers: Array = []
	for index: int in CONCURRENT_RECALLS:
		_recall_into(memory, NPCS[index % NPCS.size()], answers)
	var all_answered: bool = await wait_until(
			func() -> bool: return answers.size() == CONCURRENT_RECALLS, 10.0)
	check("concurrent_recalls_all_resolve", all_answered, {"count": answers.size()})
	var own_answers: bool = true
	for entry: Array in answers:
		var result: Dictionary = entry[1]
		own_answers = own_answers and result["ok"] and result["memories"].size() == 3 \
				and _owned_by(result["memories"], entry[0])
	check("each_concurrent_recall_gets_its_own_npc", own_answers)


func _text(npc: String, tick: int) -> String:
	return "%s saw the player at tick %d" % [npc, tick]


func _remember_into(memory: GameMemory, npc: String, tick: int, into: Array) -> void:
	var result: Dictionary = await memory.remember(npc, _text(npc, tick), moment(tick))
	into.append([npc, tick, result])


func _recall_into(memory: GameMemory, npc: String, into: Array) -> void:
	var result: Dictionary = await memory.recall(npc, "saw the player", moment(1000))
	into.append([npc, result])


func _owned_by(memories: Array, npc: String) -> bool:
	for item: Dictionary in memories:
		if item["owner_id"] != npc:
			return false
	return true


func _at_or_before(memories: Array, tick: int) -> bool:
	for item: Dictionary in memories:
		if item["moment"]["tick"] > tick:
			return false
	return true
