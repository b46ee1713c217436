extends EngineTest
## A launched sidecar that dies while serving fails its pending calls with CONNECTION_LOST.
##
## The node launches a [FakeSidecar]: a pretend process whose ready line names the real
## sidecar. pytest freezes the real sidecar (SIGSTOP) on "freeze", so three calls stay
## pending, then the pretend process dies. The node notices the dead process before its
## socket closes (it polls the process first), which must still be CONNECTION_LOST, as
## documented: SIDECAR_FAILED is for a sidecar that never became ready.

const REQUEST_TIMEOUT_SECONDS: float = 20.0

var _failures: Array = []
var _failed_first: Array = []


func run() -> void:
	var launcher: FakeSidecar = FakeSidecar.new(str(arguments.get("ws-url", "")),
			str(arguments.get("token", "")))
	var memory: LaunchingMemory = LaunchingMemory.around(launcher, case_name)
	memory.request_timeout = REQUEST_TIMEOUT_SECONDS
	memory.backend_failed.connect(func(error: Dictionary) -> void: _failures.append(error))
	add_child(memory)
	check("the_launched_sidecar_gets_ready", await wait_ready(memory),
			{"error": memory.get_last_error()})
	check("its_process_is_running", launcher.get_state() == GameMemorySidecar.State.RUNNING)

	var frozen: Dictionary = await control("freeze")
	check("sidecar_frozen", frozen["ok"], {"control": frozen})
	var results: Dictionary = {}
	_remember_into(memory, results)
	_recall_into(memory, results)
	_status_into(memory, results)
	await wait_seconds(0.2)
	check("calls_are_pending_while_it_runs", results.is_empty(), {"results": results})

	launcher.die()
	var died_at: int = Time.get_ticks_msec()
	var all_failed: bool = await wait_until(func() -> bool: return results.size() == 3, 5.0)
	check("every_pending_call_resolves_soon_after", all_failed
			and Time.get_ticks_msec() - died_at < 2000, {"results": results})
	var lost: bool = results.size() == 3
	for method: String in results:
		lost = lost and code_of(results[method]) == GameMemoryError.CONNECTION_LOST
	check("pending_calls_fail_with_connection_lost", lost, {"results": results})
	check("the_message_says_the_sidecar_exited",
			results.size() == 3 and message_of(results["status"]).contains("exited"),
			{"results": results})
	check("backend_failed_fires_once_with_connection_lost", _failures.size() == 1
			and int(_failures[0].get("code", 0)) == GameMemoryError.CONNECTION_LOST,
			{"failures": _failures})
	check("backend_failed_precedes_the_failed_answers", _failed_first.size() == 3
			and not _failed_first.has(false), {"failed_first": _failed_first})
	var thawed: Dictionary = await control("thaw")
	check("sidecar_thawed", thawed["ok"], {"control": thawed})
	memory.queue_free()

	await _check_a_launch_failure_is_still_sidecar_failed()


func _check_a_launch_failure_is_still_sidecar_failed() -> void:
	var silent: FakeSidecar = FakeSidecar.new("", "")
	silent.prints_ready_line = false
	var memory: LaunchingMemory = LaunchingMemory.around(silent, case_name + "_silent")
	var failures: Array = []
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	add_child(memory)
	var results: Dictionary = {}
	_pending_status_into(memory, results)
	await wait_seconds(0.2)
	silent.die()
	await wait_until(func() -> bool: return results.has("status"), 5.0)
	check("a_sidecar_that_dies_before_its_ready_line_is_sidecar_failed",
			results.has("status") and code_of(results["status"]) == GameMemoryError.SIDECAR_FAILED
			and failures.size() == 1
			and int(failures[0].get("code", 0)) == GameMemoryError.SIDECAR_FAILED,
			{"results": results, "failures": failures})
	memory.queue_free()


func _remember_into(memory: GameMemory, into: Dictionary) -> void:
	into["remember"] = await memory.remember("npc", "The mill wheel stopped.", moment(7))
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)


func _recall_into(memory: GameMemory, into: Dictionary) -> void:
	into["recall"] = await memory.recall("npc", "mill", moment(9))
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)


func _status_into(memory: GameMemory, into: Dictionary) -> void:
	into["status"] = await memory.status()
	_failed_first.append(_failures.size() == 1 and memory.get_state() == GameMemory.State.FAILED)


func _pending_status_into(memory: GameMemory, into: Dictionary) -> void:
	into["status"] = await memory.status()
