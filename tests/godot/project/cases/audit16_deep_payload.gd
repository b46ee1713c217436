extends EngineTest
## A payload nested as deep as the sidecar stores (128 levels) comes back whole.
##
## Godot's [code]duplicate(true)[/code] stops copying at about 100 levels (printing "Max
## recursion reached"), which cut such a payload short in every result, to [code]{}[/code]
## below the 99th level of a remember's echo and the 98th of a recall.

## The deepest payload the sidecar stores.
const DEEPEST: int = 128


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	for levels: int in [100, DEEPEST]:
		var owner: String = "sage_%d" % levels
		var stored: Dictionary = await memory.remember(owner, "A riddle %d levels deep." % levels,
				moment(1), {"payload": _nested(levels)})
		check("a_payload_of_%d_levels_is_stored" % levels, stored["ok"], {"result": stored})
		if not stored["ok"]:
			continue
		var echoed: int = _depth(stored["memory"].get("payload"))
		check("the_remember_echo_holds_all_%d_levels" % levels, echoed == levels,
				{"levels": echoed})
		var found: Dictionary = await memory.recall(owner, "", moment(2))
		var recalled: int = _depth(found["memories"][0].get("payload")) \
				if found["ok"] and found["memories"].size() == 1 else -1
		check("the_recall_holds_all_%d_levels" % levels, recalled == levels,
				{"levels": recalled})


# Returns a payload of [param levels] dictionaries, each holding the next under "d", the
# innermost holding "leaf".
func _nested(levels: int) -> Dictionary:
	var root: Dictionary = {}
	var cursor: Dictionary = root
	for level: int in levels - 1:
		cursor["d"] = {}
		cursor = cursor["d"]
	cursor["leaf"] = "here"
	return root


# Returns how many levels of [method _nested] [param value] holds whole (to its leaf).
func _depth(value: Variant) -> int:
	var levels: int = 0
	while value is Dictionary and value.has("d"):
		value = value["d"]
		levels += 1
	return levels + 1 if value is Dictionary and value.get("leaf") == "here" else -1
