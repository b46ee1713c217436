extends EngineTest
## Belief versions from GDScript: a newer version answers after its moment, the older before.

const NPC: String = "ferryman_ole"
const KEY: String = "bridge.eastmarch"


func run() -> void:
	var memory: GameMemory = make_memory()
	var opened: Dictionary = await memory.remember(
		NPC, "The bridge to Eastmarch is open.", moment(100), {"belief_key": KEY}
	)
	var collapsed: Dictionary = await memory.remember(
		NPC, "The bridge to Eastmarch collapsed in the storm.", moment(500), {"belief_key": KEY}
	)
	check(
		"both_versions_are_remembered",
		opened["ok"] and collapsed["ok"] and opened.get("memory_id") != collapsed.get("memory_id"),
		{"opened": opened, "collapsed": collapsed}
	)
	check(
		"the_remembered_memory_carries_its_key",
		opened.get("memory", {}).get("belief_key") == KEY,
		{"memory": opened.get("memory")}
	)

	var before: Dictionary = await memory.recall(
		NPC, "Can I cross the bridge to Eastmarch?", moment(300)
	)
	var after: Dictionary = await memory.recall(
		NPC, "Can I cross the bridge to Eastmarch?", moment(900)
	)
	check(
		"before_the_update_the_old_belief_answers",
		before["ok"] and _texts(before) == ["The bridge to Eastmarch is open."],
		{"texts": _texts(before)}
	)
	check(
		"after_the_update_only_the_new_belief_answers",
		after["ok"] and _texts(after) == ["The bridge to Eastmarch collapsed in the storm."],
		{"texts": _texts(after)}
	)
	check(
		"recalled_memories_carry_their_key",
		(
			after["ok"]
			and not after["memories"].is_empty()
			and after["memories"][0].get("belief_key") == KEY
		),
		{"result": after}
	)
	var unknown: Dictionary = await memory.remember(NPC, "x", moment(1), {"belief": KEY})
	check(
		"a_misspelled_option_names_belief_key",
		not unknown["ok"] and message_of(unknown).contains("belief_key"),
		{"result": unknown}
	)
	_check_recall_arguments()


func _texts(result: Dictionary) -> Array:
	var texts: Array = []
	for item: Dictionary in result.get("memories", []):
		texts.append(item.get("text"))
	return texts


func _check_recall_arguments() -> void:
	var arguments: PackedStringArray = GameMemorySidecar.recall_arguments(
		"rrf",
		{
			"fusion": {"vector_weight": 0.8, "normalization": "absolute"},
			"reranker": {"recency_weight": 0.3}
		}
	)
	check(
		"recall_arguments_select_the_mode_and_name_every_option",
		(
			arguments
			== PackedStringArray(
				[
					"--fusion",
					"rrf",
					"--fusion-option",
					'normalization="absolute"',
					"--fusion-option",
					"vector_weight=0.8",
					"--reranker-option",
					"recency_weight=0.3",
				]
			)
		),
		{"arguments": arguments}
	)
	check("no_recall_arguments_by_default", GameMemorySidecar.recall_arguments("", {}).is_empty())
