extends EngineTest
## A node that is stopped, leaves the tree or is freed emits nothing, not even
## rebuild_completed for a rebuild it fails; the rebuild's caller still gets STOPPED.
##
## The sidecar is frozen (SIGSTOP) so the rebuild is still pending when the node stops.

## Every signal of GameMemory.
const SIGNALS: Array[String] = ["backend_ready", "backend_failed", "memory_remembered",
		"memories_remembered", "memory_recalled", "rebuild_progressed", "rebuild_completed",
		"memory_forgotten", "memories_erased", "memories_consolidated", "diagnostic_emitted"]

var _heard: Array[String] = []


func run() -> void:
	await _check_quiet("stop", func(memory: GameMemory) -> void: memory.stop())
	await _check_quiet("leaving_the_tree", func(memory: GameMemory) -> void:
		remove_child(memory))
	await _check_quiet("being_freed", func(memory: GameMemory) -> void: memory.free())
	var memory: GameMemory = make_memory()
	_listen(memory)
	check("ready_again", await wait_ready(memory))
	_heard.clear()
	var rebuilt: Dictionary = await memory.rebuild()
	check("a_rebuild_that_finishes_still_emits_rebuild_completed", rebuilt["ok"]
			and _heard.count("rebuild_completed") == 1, {"heard": _heard, "result": rebuilt})


# Starts a node, leaves a rebuild and a remember pending on the frozen sidecar, then runs
# [param stop_it] on the node and checks nothing was emitted and both calls got STOPPED.
func _check_quiet(how: String, stop_it: Callable) -> void:
	var memory: GameMemory = make_memory()
	check("%s_ready" % how, await wait_ready(memory))
	_listen(memory)
	check("%s_frozen" % how, (await control("freeze"))["ok"])
	var results: Dictionary = {}
	_await_into(results, "rebuild", memory.rebuild)
	_await_into(results, "remember", func() -> Dictionary:
		return await memory.remember("warden", "The gate was left open.", moment(1)))
	await get_tree().process_frame
	_heard.clear()
	stop_it.call(memory)
	check("%s_emits_nothing" % how, _heard.is_empty(), {"heard": _heard})
	check("%s_resolves_the_pending_calls_with_stopped" % how, results.size() == 2
			and code_of(results.get("rebuild", {})) == GameMemoryError.STOPPED
			and code_of(results.get("remember", {})) == GameMemoryError.STOPPED,
			{"results": results})
	check("%s_thawed" % how, (await control("thaw"))["ok"])
	if is_instance_valid(memory):
		memory.free()
	_heard.clear()


func _listen(memory: GameMemory) -> void:
	for signal_name: String in SIGNALS:
		var heard: Callable = func(_a: Variant = null, _b: Variant = null,
				_c: Variant = null) -> void: _heard.append(signal_name)
		memory.connect(signal_name, heard)


# Calls [param call] without waiting, and stores what it resolves with under [param key].
func _await_into(results: Dictionary, key: String, call: Callable) -> void:
	results[key] = await call.call()
