extends EngineTest
## Memory over a whole game from GDScript: forget on game time, consolidate, erase for good.

const NPC: String = "tess"
const OTHER: String = "ole"


func run() -> void:
	var forgotten: Array = []
	var consolidated: Array = []
	var erased: Array = []
	var memory: GameMemory = make_memory()
	memory.memory_forgotten.connect(
			func(owner: String, memory_id: String, at: Dictionary) -> void:
				forgotten.append([owner, memory_id, at.get("tick")]))
	memory.memories_consolidated.connect(
			func(owner: String, summary: Dictionary) -> void:
				consolidated.append([owner, summary.get("memory_id")]))
	memory.memories_erased.connect(
			func(owner: String, count: int) -> void: erased.append([owner, count]))

	await _remember(memory, NPC, "rumour", "A dragon sleeps under the hill.", 100)
	await _remember(memory, NPC, "smoke", "Smoke rose over the mill at dawn.", 200)
	await _remember(memory, NPC, "wept", "The miller wept by the burned mill.", 210)
	await _remember(memory, OTHER, "ferry", "The ferry runs at dawn.", 50)

	var forgot: Dictionary = await memory.forget(NPC, "rumour", moment(400))
	check("forget_resolves_forgotten", forgot["ok"] and forgot.get("forgotten") == true,
			{"result": forgot})
	check("a_forgotten_memory_is_not_recalled_after_its_moment",
			not _ids(await memory.recall(NPC, "dragon under the hill", moment(500))).has("rumour"))
	check("an_earlier_save_still_recalls_it",
			_ids(await memory.recall(NPC, "dragon under the hill", moment(300))).has("rumour"))
	var again: Dictionary = await memory.forget(NPC, "rumour", moment(450))
	check("forgetting_again_changes_nothing", again["ok"] and again.get("forgotten") == false,
			{"result": again})
	var unknown: Dictionary = await memory.forget(NPC, "no-such-memory", moment(1))
	check("forgetting_an_unknown_memory_is_not_found",
			not unknown["ok"] and code_of(unknown) == GameMemoryError.NOT_FOUND,
			{"result": unknown})
	check("memory_forgotten_emitted_per_success",
			forgotten == [[NPC, "rumour", 400], [NPC, "rumour", 450]], {"emitted": forgotten})

	var summary: Dictionary = await memory.consolidate(NPC, ["smoke", "wept"],
			"What Tess makes of the fire: somebody burned the mill.", moment(600),
			{"memory_id": "fire", "importance": 0.9})
	check("consolidate_stores_a_reflection",
			summary["ok"] and summary["memory"].get("kind") == "reflection"
			and summary.get("created") == true, {"result": summary})
	check("the_summary_names_its_sources",
			summary.get("memory", {}).get("consolidates") == ["smoke", "wept"],
			{"memory": summary.get("memory")})
	check("after_the_summary_only_it_answers",
			_ids(await memory.recall(NPC, "the mill fire", moment(700))) == ["fire"])
	check("before_the_summary_the_sources_answer",
			_sorted(_ids(await memory.recall(NPC, "the mill fire", moment(550))))
			== ["smoke", "wept"])
	var refused: Dictionary = await memory.consolidate(NPC, ["ghost"], "x", moment(5))
	check("a_summary_of_an_unknown_memory_is_not_found",
			not refused["ok"] and code_of(refused) == GameMemoryError.NOT_FOUND,
			{"result": refused})
	check("memories_consolidated_emitted_once", consolidated == [[NPC, "fire"]],
			{"emitted": consolidated})

	var total: int = (await memory.status()).get("total_entries", -1)
	var empty_packed: Dictionary = await memory.erase_owner(NPC, PackedStringArray())
	var empty_array: Dictionary = await memory.erase_owner(NPC, [])
	check("erase_owner_of_an_empty_list_erases_nothing",
			empty_packed["ok"] and empty_packed.get("erased") == 0
			and empty_array["ok"] and empty_array.get("erased") == 0,
			{"packed": empty_packed, "array": empty_array})
	var kept: Dictionary = await memory.status()
	check("the_npc_keeps_every_memory_after_an_empty_list",
			total == 5 and kept.get("total_entries") == total
			and _ids(await memory.recall(NPC, "the mill fire", moment(700))) == ["fire"]
			and _sorted(_ids(await memory.recall(NPC, "the mill fire", moment(550))))
			== ["smoke", "wept"]
			and _ids(await memory.recall(NPC, "dragon under the hill", moment(300)))
			.has("rumour"), {"total_before": total, "status": kept})
	var listed: Dictionary = await memory.erase_owner(NPC, PackedStringArray(["smoke", "nope"]))
	check("erase_owner_of_listed_memories_counts_them",
			listed["ok"] and listed.get("erased") == 1, {"result": listed})
	var owner: Dictionary = await memory.erase_owner(OTHER)
	check("erase_owner_erases_every_memory_of_the_npc",
			owner["ok"] and owner.get("erased") == 1
			and _ids(await memory.recall(OTHER, "", {})).is_empty(), {"result": owner})
	var session: Dictionary = await memory.erase_session()
	check("erase_session_erases_the_rest", session["ok"] and session.get("erased") == 3,
			{"result": session})
	check("nothing_is_recalled_after_the_session_is_erased",
			_ids(await memory.recall(NPC, "", {})).is_empty())
	check("memories_erased_emitted_per_erase",
			erased == [[NPC, 0], [NPC, 0], [NPC, 1], [OTHER, 1], ["", 3]], {"emitted": erased})
	check("retention_arguments_name_the_bound",
			GameMemorySidecar.retention_arguments(50)
			== PackedStringArray(["--maximum-memories-per-owner", "50"])
			and GameMemorySidecar.retention_arguments(0).is_empty())


func _remember(memory: GameMemory, owner: String, memory_id: String, text: String,
		tick: int) -> void:
	var result: Dictionary = await memory.remember(owner, text, moment(tick),
			{"memory_id": memory_id})
	check("remembered_%s" % memory_id, result["ok"], {"result": result})


func _ids(result: Dictionary) -> Array:
	var found: Array = []
	for item: Dictionary in result.get("memories", []):
		found.append(item.get("memory_id"))
	return found


func _sorted(values: Array) -> Array:
	var copy: Array = values.duplicate()
	copy.sort()
	return copy
