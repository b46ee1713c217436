extends EngineTest
## Values that JSON cannot carry are refused before sending, naming where they are.
##
## Godot's JSON.stringify turns a Vector2 into the text "(1.0, 2.0)", an Object into
## "<Object#...>" and a dictionary that contains itself into "{...}" (with an engine error):
## stored like that, the game would get back something else than it gave.

const NPC: String = "smith_ilse"


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	var looped: Dictionary = {"name": "loop"}
	looped["self"] = looped
	var looped_list: Array = [1]
	looped_list.append(looped_list)
	var node: Node = Node.new()
	var cases: Dictionary = {
		"a_vector": [{"payload": {"at": Vector2(1, 2)}}, "params.payload.at", "Vector2"],
		"an_object": [{"payload": {"who": node}}, "params.payload.who", "Object"],
		"a_dictionary_that_contains_itself": [{"payload": looped}, "params.payload.self",
				"contains itself"],
		"an_array_that_contains_itself": [{"payload": {"list": looped_list}},
				"params.payload.list[1]", "contains itself"],
		"a_key_that_is_not_a_string": [{"payload": {3: "three"}}, "params.payload", "key"],
		"a_nan_in_a_packed_array": [{"payload": {"weights": PackedFloat32Array([1.0, NAN])}},
				"params.payload.weights[1]", "NaN"],
	}
	for label: String in cases:
		var options: Dictionary = cases[label][0]
		var result: Dictionary = await memory.remember(NPC, "a value JSON cannot carry", moment(1),
				options)
		check("%s_is_refused_and_named" % label, not result["ok"]
				and code_of(result) == GameMemoryError.INVALID_PARAMS
				and message_of(result).contains(cases[label][1])
				and message_of(result).contains(cases[label][2]), {"result": result})
	looped.erase("self")
	looped_list.clear()
	node.free()
	var recalled: Dictionary = await memory.recall(NPC, "value JSON cannot carry", {})
	check("nothing_was_stored", recalled["ok"] and recalled["memories"].is_empty(),
			{"result": recalled})
	var fine: Dictionary = await memory.remember(NPC, "what JSON carries", moment(2), {"payload": {
		"name": &"a string name",
		"count": 3,
		"ratio": 0.25,
		"flags": [true, false, null],
		"ids": PackedStringArray(["a", "b"]),
		"levels": PackedInt32Array([1, 2]),
		"nested": {"deeper": {"list": [[1], {"x": "y"}]}},
	}})
	check("json_values_are_sent_as_they_are", fine["ok"]
			and fine["memory"]["payload"]["name"] == "a string name"
			and fine["memory"]["payload"]["ids"] == ["a", "b"]
			and fine["memory"]["payload"]["nested"]["deeper"]["list"][1]["x"] == "y",
			{"result": fine})
	check("the_connection_still_answers", memory.is_backend_ready())
