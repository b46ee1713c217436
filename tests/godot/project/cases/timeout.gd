extends EngineTest
## Requests time out on their own clock, resolve once, and late answers are ignored.
##
## pytest freezes the real sidecar (SIGSTOP) on the "freeze" control and thaws it (SIGCONT)
## on "thaw", so requests sent in between get no answer until after their deadline.

const TIMEOUT_SECONDS: float = 0.5
const CONCURRENT: int = 3


func run() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory()
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	check("backend_ready", await wait_ready(memory))
	var stored: Dictionary = await memory.remember("npc", "The bell rang twice.", moment(5))
	check("answered_before_the_freeze", stored["ok"], {"result": stored})

	# Short timeouts only while the sidecar is frozen, so a slow machine cannot fail the rest.
	memory.request_timeout = TIMEOUT_SECONDS
	var frozen: Dictionary = await control("freeze")
	check("sidecar_frozen", frozen["ok"], {"control": frozen})
	var started: int = Time.get_ticks_msec()
	var late: Dictionary = await memory.status()
	var waited: int = Time.get_ticks_msec() - started
	check("unanswered_request_times_out", not late["ok"]
			and code_of(late) == GameMemoryError.REQUEST_TIMEOUT, {"result": late})
	check("timeout_message_names_the_method", message_of(late).contains("memory.status"),
			{"message": message_of(late)})
	check("timeout_waits_about_request_timeout", waited >= int(TIMEOUT_SECONDS * 1000.0) - 20
			and waited < 5000, {"msec": waited})

	var results: Array = []
	var resolutions: Array = []
	for index: int in CONCURRENT:
		_recall_into(memory, index, results, resolutions)
	var all_done: bool = await wait_until(func() -> bool: return results.size() == CONCURRENT,
			5.0)
	var each_timed_out: bool = all_done
	for result: Dictionary in results:
		each_timed_out = each_timed_out and code_of(result) == GameMemoryError.REQUEST_TIMEOUT
	check("concurrent_requests_each_time_out", each_timed_out, {"results": results})

	var thawed: Dictionary = await control("thaw")
	check("sidecar_thawed", thawed["ok"], {"control": thawed})
	memory.request_timeout = 10.0
	# The frozen sidecar now answers the timed-out requests; those answers must be dropped.
	var fresh: Dictionary = await memory.recall("npc", "bell", moment(10))
	check("the_connection_still_works_after_timeouts", fresh["ok"]
			and fresh["memories"].size() == 1, {"result": fresh})
	await wait_seconds(0.3)
	check("timed_out_requests_resolved_exactly_once", resolutions.size() == CONCURRENT,
			{"resolutions": resolutions.size()})
	check("timeouts_do_not_fail_the_backend", memory.is_backend_ready() and failures.is_empty(),
			{"failures": failures})


func _recall_into(memory: GameMemory, index: int, into: Array, resolutions: Array) -> void:
	var result: Dictionary = await memory.recall("npc", "bell %d" % index, moment(10))
	resolutions.append(index)
	into.append(result)
