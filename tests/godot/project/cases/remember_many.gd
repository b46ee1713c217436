extends EngineTest
## remember_many from GDScript: one atomic batch, results in order, recalled like remembers.

const NPCS: Array[String] = ["guard_anna", "merchant_bo"]
const PER_NPC: int = 20


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	var emitted: Array = []
	memory.memories_remembered.connect(func(results: Array) -> void: emitted.append(results))

	var entries: Array = []
	for npc: String in NPCS:
		for tick: int in PER_NPC:
			entries.append({"owner_id": npc, "text": "%s heard a bell at tick %d" % [npc, tick],
					"moment": moment(tick), "tags": ["bell"]})
	entries.append(entries[0].duplicate())
	var frames_before: int = Engine.get_process_frames()
	var batch: Dictionary = await memory.remember_many(entries)
	check("remember_many_succeeds", batch["ok"], {"result": batch})
	check("the_main_loop_kept_running_while_waiting",
			Engine.get_process_frames() > frames_before)
	var results: Array = batch.get("results", [])
	check("one_result_per_entry_in_order", results.size() == entries.size(),
			{"count": results.size()})
	var created: int = 0
	for item: Dictionary in results:
		created += 1 if item["created"] else 0
	check("a_repeat_in_the_batch_is_not_created",
			created == NPCS.size() * PER_NPC and results.size() > 0
			and not results[-1]["created"] and results[-1]["memory_id"] == results[0]["memory_id"],
			{"created": created})
	check("memories_remembered_emitted_once_with_the_results",
			emitted.size() == 1 and emitted[0] == results, {"emitted": emitted.size()})

	var recalled: Dictionary = await memory.recall(NPCS[1], "heard a bell", moment(9),
			{"limit": 100})
	check("the_batch_is_recalled_as_of_a_moment", recalled["ok"]
			and recalled["memories"].size() == 10, {"result": recalled})

	var conflicting: Dictionary = await memory.remember_many([
		{"owner_id": NPCS[0], "text": "a brand new memory", "moment": moment(50)},
		{"owner_id": NPCS[0], "text": "other content", "moment": moment(1),
				"memory_id": results[0]["memory_id"]},
	])
	check("a_conflict_fails_the_whole_batch",
			not conflicting["ok"] and code_of(conflicting) == GameMemoryError.CONFLICT,
			{"result": conflicting})
	var after: Dictionary = await memory.recall(NPCS[0], "brand new memory", moment(100))
	var texts: Array = []
	for item: Dictionary in after.get("memories", []):
		texts.append(item["text"])
	check("nothing_of_a_failed_batch_is_stored", after["ok"]
			and not texts.has("a brand new memory"), {"texts": texts})

	var empty: Dictionary = await memory.remember_many([])
	check("an_empty_batch_is_refused", not empty["ok"]
			and code_of(empty) == GameMemoryError.INVALID_PARAMS, {"result": empty})
	var bad: Dictionary = await memory.remember_many([{"owner_id": NPCS[0], "text": "x",
			"moment": moment(1), "colour": "red"}])
	check("an_unknown_option_names_its_entry", not bad["ok"]
			and message_of(bad).contains("entry 0"), {"result": bad})
