extends EngineTest
## The node counts a timed-out request against the 64 on the wire for as long as the sidecar
## may still run it: the sidecar's own deadline, as its [code]initialize[/code] reports it, not
## a default. pytest starts the sidecar with a 1 s deadline, and freezes (SIGSTOP) and thaws
## (SIGCONT) it on "freeze" and "thaw".


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	var connection: GameMemoryConnection = memory._connection
	check("the_sidecars_deadline_is_taken_from_initialize",
			connection._request_deadline_msec == 1000,
			{"request_deadline_msec": connection._request_deadline_msec})
	var frozen: Dictionary = await control("freeze")
	check("frozen", frozen["ok"], {"control": frozen})
	memory.request_timeout = 0.5
	var results: Array = []
	for index: int in 8:
		_recall_into(memory, index, results)
	await wait_until(func() -> bool: return results.size() == 8, 5.0)
	check("the_requests_timed_out_here", results.size() == 8, {"count": results.size()})
	check("their_slots_are_kept_while_the_sidecar_may_run_them",
			connection._abandoned.size() == 8, {"abandoned": connection._abandoned.size()})
	# The sidecar's deadline (1 s) and the margin (5 s) pass, the sidecar still frozen: no
	# answer came, and the slots are given back all the same.
	await wait_seconds(6.6)
	check("their_slots_are_given_back_after_the_sidecars_own_deadline",
			connection._abandoned.is_empty(), {"abandoned": connection._abandoned.size()})
	var thawed: Dictionary = await control("thaw")
	check("thawed", thawed["ok"], {"control": thawed})
	memory.request_timeout = 10.0
	var after: Array = []
	_recall_into(memory, 99, after)
	await wait_until(func() -> bool: return after.size() == 1, 10.0)
	check("the_next_request_is_answered", after.size() == 1 and after[0]["ok"],
			{"result": after[0] if not after.is_empty() else {}})


func _recall_into(memory: GameMemory, index: int, into: Array) -> void:
	into.append(await memory.recall("listener", "bell %d" % index, moment(10)))
