extends EngineTest
## Arguments of the wrong type from GDScript get a clear INVALID_PARAMS naming them, never a
## silently different memory or recall; Godot's whole floats (2.0) still work as ints.

const NPC: String = "guard_tomas"


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	var whole: Dictionary = await memory.remember(NPC, "The gate was left open.",
			{"timeline_id": "main", "tick": 20.0}, {"kind": "fact", "expires_at":
			{"timeline_id": "main", "tick": 90.0}})
	check("a_whole_float_tick_is_an_int_tick", whole["ok"]
			and whole["memory"]["moment"]["tick"] == 20 and whole["memory"]["moment"]["tick"] is int,
			{"result": whole})
	var limited: Dictionary = await memory.recall(NPC, "gate", moment(50), {"limit": 2.0})
	check("a_whole_float_limit_works", limited["ok"] and limited["memories"].size() == 1,
			{"result": limited})

	_refused("a_string_tick", await memory.remember(NPC, "x", {"timeline_id": "main",
			"tick": "5"}), ["moment.tick"])
	_refused("a_fractional_tick", await memory.remember(NPC, "x", {"timeline_id": "main",
			"tick": 2.5}), ["moment.tick"])
	_refused("a_tick_past_64_bits", await memory.recall(NPC, "gate", {"timeline_id": "main",
			"tick": 1e20}), ["at_or_before.tick"])
	_refused("a_huge_expiry_tick", await memory.remember(NPC, "x", moment(1),
			{"expires_at": {"timeline_id": "main", "tick": -1e30}}), ["expires_at.tick"])
	_refused("a_kind_given_as_an_int", await memory.remember(NPC, "x", moment(1), {"kind": 3}),
			["kind"])
	_refused("a_kinds_entry_given_as_an_int", await memory.recall(NPC, "gate", moment(50),
			{"kinds": [2]}), ["kinds"])
	_refused("a_forget_moment_with_a_string_tick", await memory.forget(NPC,
			str(whole.get("memory_id", "")), {"timeline_id": "main", "tick": "30"}), ["at.tick"])
	_refused("a_recall_many_moment_given_as_a_tick", await memory.recall_many([
		{"owner_id": NPC, "text": "gate", "at_or_before": moment(50)},
		{"owner_id": NPC, "text": "gate", "at_or_before": 10},
	]), ["query 1", "at_or_before"])
	_refused("a_recall_many_owner_given_as_an_int", await memory.recall_many([
		{"owner_id": 7, "text": "gate"},
	]), ["query 0", "owner_id"])
	_refused("a_remember_many_moment_given_as_a_tick", await memory.remember_many([
		{"owner_id": NPC, "text": "x", "moment": 12},
	]), ["entry 0", "moment"])
	_refused("a_remember_many_text_given_as_an_array", await memory.remember_many([
		{"owner_id": NPC, "text": ["x"], "moment": moment(1)},
	]), ["entry 0", "text"])
	var not_a_list: Variant = str(whole.get("memory_id", ""))
	_refused("an_erase_list_given_as_a_string", await memory.erase_owner(NPC, not_a_list),
			["memory_ids"])
	_refused("an_erase_list_entry_given_as_an_int", await memory.erase_owner(NPC, [3]),
			["memory_ids[0]"])

	var recalled: Dictionary = await memory.recall(NPC, "", {}, {"limit": 100})
	check("no_refused_call_stored_anything", recalled["ok"] and recalled["memories"].size() == 1,
			{"result": recalled})
	var forgotten: Dictionary = await memory.recall(NPC, "gate", moment(60))
	check("no_refused_forget_took_effect", forgotten["ok"] and forgotten["memories"].size() == 1,
			{"result": forgotten})


func _refused(label: String, result: Dictionary, names: Array) -> void:
	var named: bool = true
	for name: String in names:
		named = named and message_of(result).contains(name)
	check("%s_is_refused_and_named" % label, not result["ok"]
			and code_of(result) == GameMemoryError.INVALID_PARAMS and named, {"result": result})
