extends EngineTest
## The node never puts more on the wire than the sidecar and the socket take.
##
## Big messages sent in one frame wait for room in the socket's outbound buffer. Requests that
## timed out keep their slot (the sidecar still runs them) until their late answers arrive, so
## a burst after timeouts is never refused as busy. A request's answer clock starts when it is
## sent, not while it waits for a slot. pytest freezes the real sidecar (SIGSTOP) on "freeze"
## and thaws it (SIGCONT) on "thaw".

const SLOTS: int = GameMemoryConnection.MAX_IN_FLIGHT
## About 700 KB of text: two such messages overflow the 1 MiB + 64 KiB outbound buffer.
const BIG_TEXT_WORDS: int = 140000


func run() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	await _check_big_messages_in_one_frame(memory)
	await _check_a_burst_after_timeouts(memory)
	await _check_the_answer_clock_starts_when_sent(memory)
	check("the_backend_never_failed", memory.is_backend_ready(),
			{"error": memory.get_last_error()})


func _check_big_messages_in_one_frame(memory: GameMemory) -> void:
	var results: Array = []
	for index: int in 2:
		_remember_big_into(memory, index, results)
	await wait_until(func() -> bool: return results.size() == 2, 20.0)
	var stored: bool = results.size() == 2
	for result: Dictionary in results:
		stored = stored and result["ok"]
	check("two_big_messages_sent_in_one_frame_are_both_stored", stored,
			{"codes": results.map(code_of)})


func _check_a_burst_after_timeouts(memory: GameMemory) -> void:
	var frozen: Dictionary = await control("freeze")
	check("frozen_for_the_timeouts", frozen["ok"], {"control": frozen})
	memory.request_timeout = 0.5
	var first: Array = []
	for index: int in SLOTS:
		_recall_into(memory, index, first)
	await wait_until(func() -> bool: return first.size() == SLOTS, 5.0)
	var timed_out: bool = first.size() == SLOTS
	for result: Dictionary in first:
		timed_out = timed_out and code_of(result) == GameMemoryError.REQUEST_TIMEOUT
	check("a_full_burst_times_out_while_frozen", timed_out, {"codes": _codes(first)})
	memory.request_timeout = 10.0
	var second: Array = []
	for index: int in SLOTS:
		_recall_into(memory, index, second)
	await wait_seconds(0.3)
	var thawed: Dictionary = await control("thaw")
	check("thawed_after_the_timeouts", thawed["ok"], {"control": thawed})
	await wait_until(func() -> bool: return second.size() == SLOTS, 15.0)
	var answered: bool = second.size() == SLOTS
	for result: Dictionary in second:
		answered = answered and result["ok"]
	check("the_next_burst_is_answered_not_refused_as_busy", answered, {"codes": _codes(second)})


func _check_the_answer_clock_starts_when_sent(memory: GameMemory) -> void:
	var frozen: Dictionary = await control("freeze")
	check("frozen_to_fill_the_slots", frozen["ok"], {"control": frozen})
	memory.request_timeout = 10.0
	var slow: Array = []
	for index: int in SLOTS:
		_recall_into(memory, index, slow)
	memory.request_timeout = 2.0
	var started: int = Time.get_ticks_msec()
	var queued: Array = []
	_recall_into(memory, SLOTS, queued)
	# Stop polling, let the sidecar answer the full slots, then freeze it again before the
	# node reads those answers: the queued request goes out only when polling resumes, to a
	# frozen sidecar, 1.2 s after it was made; its answer comes 1.4 s after that.
	memory.set_process(false)
	await control("thaw")
	await wait_seconds(0.8)
	await control("freeze")
	await _wait_until_msec(started + 1200)
	memory.set_process(true)
	await _wait_until_msec(started + 2600)
	var thawed: Dictionary = await control("thaw")
	check("thawed_for_the_queued_request", thawed["ok"], {"control": thawed})
	await wait_until(func() -> bool: return queued.size() == 1 and slow.size() == SLOTS, 10.0)
	check("the_full_slots_were_answered", slow.size() == SLOTS and _codes(slow).is_empty(),
			{"codes": _codes(slow)})
	check("a_request_that_waited_for_a_slot_gets_its_whole_timeout_once_sent",
			queued.size() == 1 and queued[0]["ok"],
			{"result": queued[0] if not queued.is_empty() else {},
			"msec": Time.get_ticks_msec() - started})


func _wait_until_msec(when: int) -> void:
	await wait_until(func() -> bool: return Time.get_ticks_msec() >= when, 10.0)


func _codes(results: Array) -> Dictionary:
	var counts: Dictionary = {}
	for result: Dictionary in results:
		if not result["ok"]:
			counts[code_of(result)] = int(counts.get(code_of(result), 0)) + 1
	return counts


func _remember_big_into(memory: GameMemory, index: int, into: Array) -> void:
	var text: String = "%d %s" % [index, "word ".repeat(BIG_TEXT_WORDS)]
	into.append(await memory.remember_many([{"owner_id": "scribe", "text": text,
			"moment": moment(1)}]))


func _recall_into(memory: GameMemory, index: int, into: Array) -> void:
	into.append(await memory.recall("listener", "bell %d" % index, moment(10)))
