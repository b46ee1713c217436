extends EngineTest
## The sidecar dies with requests pending: each fails at once and backend_failed fires once.
##
## pytest freezes the real sidecar (SIGSTOP) on the "freeze" control, so the requests stay
## pending, then kills it (SIGKILL) on the "kill" control, closing its socket under the engine.

const REQUEST_TIMEOUT_SECONDS: float = 20.0

var _failures: Array = []
var _failed_first: Array = []


func run() -> void:
	var memory: GameMemory = make_memory({"request_timeout": REQUEST_TIMEOUT_SECONDS})
	memory.backend_failed.connect(func(error: Dictionary) -> void: _failures.append(error))
	check("backend_ready", await wait_ready(memory))

	var frozen: Dictionary = await control("freeze")
	check("sidecar_frozen", frozen["ok"], {"control": frozen})
	var results: Dictionary = {}
	_remember_into(memory, results)
	_recall_into(memory, results)
	_status_into(memory, results)
	await wait_seconds(0.2)
	check("requests_are_pending_while_frozen", results.is_empty(), {"results": results})

	var killed_at: int = Time.get_ticks_msec()
	var killed: Dictionary = await control("kill")
	check("sidecar_killed", killed["ok"], {"control": killed})
	var all_failed: bool = await wait_until(func() -> bool: return results.size() == 3, 8.0)
	var waited: int = Time.get_ticks_msec() - killed_at
	check("every_pending_request_resolves", all_failed, {"results": results})
	check("pending_requests_fail_long_before_their_timeout",
			waited < int(REQUEST_TIMEOUT_SECONDS * 1000.0) / 2, {"msec": waited})
	var lost: bool = results.size() == 3
	for method: String in results:
		lost = lost and not results[method]["ok"] \
				and code_of(results[method]) == GameMemoryError.CONNECTION_LOST
	check("pending_requests_fail_with_connection_lost", lost, {"results": results})
	check("backend_failed_precedes_the_failed_answers", _failed_first.size() == 3
			and not _failed_first.has(false), {"failed_first": _failed_first})
	check("backend_failed_emitted_once", _failures.size() == 1
			and int(_failures[0].get("code", 0)) == GameMemoryError.CONNECTION_LOST,
			{"failures": _failures})
	check("node_is_failed", memory.get_state() == GameMemory.State.FAILED)
	var started: int = Time.get_ticks_msec()
	var after: Dictionary = await memory.recall("npc", "well", moment(9))
	check("requests_after_death_fail_at_once", not after["ok"]
			and code_of(after) == GameMemoryError.CONNECTION_LOST
			and Time.get_ticks_msec() - started < 100, {"result": after})


func _remember_into(memory: GameMemory, into: Dictionary) -> void:
	into["remember"] = await memory.remember("npc", "The well ran dry.", moment(7))
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)


func _recall_into(memory: GameMemory, into: Dictionary) -> void:
	into["recall"] = await memory.recall("npc", "well", moment(9))
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)


func _status_into(memory: GameMemory, into: Dictionary) -> void:
	into["status"] = await memory.status()
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)
