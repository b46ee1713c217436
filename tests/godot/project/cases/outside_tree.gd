extends EngineTest
## Calls on a GameMemory node outside the scene tree: never a silent hang.
##
## The node polls its WebSocket in [method Node._process], which only runs inside the tree. A
## call on a node that left the tree, or was never added, must resolve at once with
## [constant GameMemoryError.STOPPED], and one pending when the node leaves must fail too.

var _results: Dictionary = {}


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))

	_status_into(memory, "pending_at_removal")
	remove_child(memory)
	var pending: bool = await wait_until(func() -> bool:
		return _results.has("pending_at_removal"), 3.0)
	check("a_pending_call_fails_when_the_node_leaves_the_tree", pending
			and code_of(_results["pending_at_removal"]) == GameMemoryError.STOPPED,
			{"results": _results})

	_status_into(memory, "after_removal")
	var answered: bool = await wait_until(func() -> bool: return _results.has("after_removal"),
			3.0)
	check("a_call_after_the_node_left_the_tree_resolves_at_once", answered,
			{"state": memory.get_state()})
	check("it_fails_with_stopped_and_says_why", answered
			and code_of(_results["after_removal"]) == GameMemoryError.STOPPED
			and message_of(_results["after_removal"]).contains("scene tree")
			and message_of(_results["after_removal"]).contains("memory.status"),
			{"results": _results})
	check("a_refused_call_starts_nothing", memory.get_state() == GameMemory.State.IDLE,
			{"state": memory.get_state()})

	var never_added: GameMemory = GameMemory.new()
	never_added.server_url = str(arguments.get("ws-url", ""))
	never_added.token = str(arguments.get("token", ""))
	_remember_into(never_added, "never_added")
	var refused: bool = await wait_until(func() -> bool: return _results.has("never_added"),
			3.0)
	check("a_node_never_added_to_the_tree_refuses_calls_at_once", refused
			and code_of(_results["never_added"]) == GameMemoryError.STOPPED,
			{"results": _results})
	never_added.free()

	add_child(memory)
	var again: Dictionary = await memory.status()
	check("back_in_the_tree_it_answers_again", again["ok"], {"result": again})

	_status_into(memory, "pending_at_free")
	memory.queue_free()
	var freed: bool = await wait_until(func() -> bool: return _results.has("pending_at_free"),
			3.0)
	check("a_pending_call_fails_when_the_node_is_freed", freed
			and code_of(_results["pending_at_free"]) == GameMemoryError.STOPPED,
			{"results": _results})


func _status_into(memory: GameMemory, key: String) -> void:
	_results[key] = await memory.status()


func _remember_into(memory: GameMemory, key: String) -> void:
	_results[key] = await memory.remember("npc", "Nobody polls me.", moment(1))
