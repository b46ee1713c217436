extends EngineTest
## Errors are values: every failure resolves with ok false, a code and a message to act on.


func run() -> void:
	await _check_refused_before_sending()
	await _check_refused_by_the_sidecar()
	await _check_wrong_token()
	await _check_unreachable_server()
	await _check_launching_is_refused_on_the_web()
	await _check_stop_and_restart()
	_check_ready_line_parsing()
	_check_launch_environment()


func _check_refused_before_sending() -> void:
	var memory: GameMemory = make_memory()
	check("backend_ready", await wait_ready(memory))
	var unknown: Dictionary = await memory.remember("npc", "text", moment(1), {"colour": "red"})
	check("unknown_option_is_refused", not unknown["ok"]
			and code_of(unknown) == GameMemoryError.INVALID_PARAMS
			and message_of(unknown).contains("colour"), {"result": unknown})
	var empty: Dictionary = await memory.recall_many([])
	check("empty_recall_many_is_refused", not empty["ok"]
			and code_of(empty) == GameMemoryError.INVALID_PARAMS, {"result": empty})
	var not_a_query: Dictionary = await memory.recall_many([{"owner_id": "npc"}, 42])
	check("a_query_that_is_not_a_dictionary_is_named", not not_a_query["ok"]
			and message_of(not_a_query).contains("query 1"), {"result": not_a_query})
	var not_a_number: Dictionary = await memory.remember("npc", "text", moment(1),
			{"importance": NAN})
	check("a_nan_option_is_refused_and_named", not not_a_number["ok"]
			and code_of(not_a_number) == GameMemoryError.INVALID_PARAMS
			and message_of(not_a_number).contains("params.importance"), {"result": not_a_number})
	var huge: Dictionary = await memory.remember("npc", "x".repeat(1100000), moment(1))
	check("a_message_over_1_mib_is_refused", not huge["ok"]
			and code_of(huge) == GameMemoryError.INVALID_PARAMS
			and message_of(huge).contains("limit"), {"code": code_of(huge)})
	check("client_side_refusals_keep_the_backend_ready", memory.is_backend_ready())
	memory.queue_free()


func _check_refused_by_the_sidecar() -> void:
	var memory: GameMemory = make_memory()
	var bad_kind: Dictionary = await memory.remember("npc", "text", moment(1), {"kind": "dance"})
	check("sidecar_refuses_an_invalid_kind", not bad_kind["ok"]
			and code_of(bad_kind) == GameMemoryError.INVALID_PARAMS
			and message_of(bad_kind).contains("kind"), {"result": bad_kind})
	var bad_limit: Dictionary = await memory.recall("npc", "text", moment(1), {"limit": 1000})
	check("sidecar_refuses_a_limit_over_100", not bad_limit["ok"]
			and code_of(bad_limit) == GameMemoryError.INVALID_PARAMS
			and message_of(bad_limit).contains("limit"), {"result": bad_limit})
	var bad_moment: Dictionary = await memory.remember("npc", "text", {"tick": 5})
	check("sidecar_refuses_a_moment_without_timeline", not bad_moment["ok"]
			and code_of(bad_moment) == GameMemoryError.INVALID_PARAMS, {"result": bad_moment})
	var fine: Dictionary = await memory.recall("npc", "text", moment(1))
	check("a_refused_request_does_not_break_the_connection", fine["ok"], {"result": fine})
	memory.queue_free()


func _check_wrong_token() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory({"token": "not-the-token"})
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	var refused: Dictionary = await memory.status()
	check("wrong_token_fails_the_pending_request", not refused["ok"]
			and code_of(refused) == GameMemoryError.UNAUTHORIZED, {"result": refused})
	check("wrong_token_emits_backend_failed_once", failures.size() == 1
			and int(failures[0].get("code", 0)) == GameMemoryError.UNAUTHORIZED,
			{"failures": failures})
	check("wrong_token_leaves_the_node_failed",
			memory.get_state() == GameMemory.State.FAILED)
	var after: Dictionary = await memory.status()
	check("requests_after_a_failure_fail_at_once", not after["ok"]
			and code_of(after) == GameMemoryError.UNAUTHORIZED
			and message_of(after).contains("memory.status"), {"result": after})
	memory.queue_free()


func _check_unreachable_server() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory({"server_url": "ws://127.0.0.1:9", "startup_timeout": 5.0})
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	var started: int = Time.get_ticks_msec()
	var result: Dictionary = await memory.recall("npc", "text", moment(1))
	check("unreachable_server_fails_the_request", not result["ok"]
			and code_of(result) == GameMemoryError.CONNECTION_FAILED, {"result": result})
	check("unreachable_server_fails_before_its_timeout",
			Time.get_ticks_msec() - started < 5000, {"msec": Time.get_ticks_msec() - started})
	check("unreachable_server_emits_backend_failed", failures.size() == 1)
	memory.queue_free()


func _check_launching_is_refused_on_the_web() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory({"server_url": "", "autostart": false})
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	var result: Dictionary = await memory.status()
	check("launching_on_the_web_fails_with_advice", not result["ok"]
			and code_of(result) == GameMemoryError.SIDECAR_FAILED
			and message_of(result).contains("server_url"), {"result": result})
	check("launching_on_the_web_emits_backend_failed", failures.size() == 1)
	var arguments: PackedStringArray = GameMemorySidecar.build_arguments(
			PackedStringArray(["-m", "game_memory.cli"]), "user://gm/save", "user://gm/index",
			"hashing")
	var save_at: int = arguments.find("--save-dir")
	check("sidecar_arguments_start_a_loopback_websocket_server", arguments.size() == 11
			and arguments[0] == "-m" and arguments[2] == "serve"
			and arguments[arguments.find("--websocket") + 1] == "127.0.0.1:0"
			and arguments[arguments.find("--model") + 1] == "hashing",
			{"arguments": arguments})
	check("sidecar_folders_are_absolute_paths", save_at > 0
			and not arguments[save_at + 1].begins_with("user://")
			and arguments[save_at + 1].ends_with("gm/save"), {"arguments": arguments})
	memory.queue_free()


func _check_stop_and_restart() -> void:
	var ready_count: Array = []
	var memory: GameMemory = make_memory()
	memory.backend_ready.connect(func() -> void: ready_count.append(true))
	check("backend_ready_before_stop", await wait_ready(memory))
	var pending: Array = []
	_status_into(memory, pending)
	memory.stop()
	check("stop_fails_pending_requests", pending.size() == 1 and not pending[0]["ok"]
			and code_of(pending[0]) == GameMemoryError.STOPPED, {"pending": pending})
	check("stop_leaves_the_node_idle", memory.get_state() == GameMemory.State.IDLE)
	var after: Dictionary = await memory.status()
	check("a_request_after_stop_restarts_the_backend", after["ok"]
			and ready_count.size() == 2, {"result": after, "ready": ready_count.size()})
	memory.queue_free()


func _check_ready_line_parsing() -> void:
	var good: Dictionary = GameMemorySidecar.parse_ready_line(
			'{"event":"ready","url":"ws://127.0.0.1:4321","token":"abc","protocol_version":1}\n')
	check("ready_line_gives_url_and_token", good["ok"] and good["url"] == "ws://127.0.0.1:4321"
			and good["token"] == "abc", {"result": good})
	var newer: Dictionary = GameMemorySidecar.parse_ready_line(
			'{"event":"ready","url":"ws://127.0.0.1:1","token":"a","protocol_version":2}')
	check("ready_line_with_another_protocol_is_refused", not newer["ok"]
			and message_of(newer).contains("protocol version"), {"result": newer})
	var garbage: Dictionary = GameMemorySidecar.parse_ready_line("Traceback (most recent call)")
	check("garbage_ready_line_is_refused", not garbage["ok"]
			and code_of(garbage) == GameMemoryError.SIDECAR_FAILED, {"result": garbage})


func _status_into(memory: GameMemory, into: Array) -> void:
	into.append(await memory.status())


func _check_launch_environment() -> void:
	var name: String = "OPENBLAS_NUM_THREADS"
	var before: String = OS.get_environment(name)
	OS.unset_environment(name)
	var unset: Dictionary = GameMemorySidecar.missing_environment()
	check("a_sidecar_gets_one_blas_thread_by_default", unset.get(name, "") == "1",
			{"missing": unset})
	OS.set_environment(name, "4")
	var chosen: Dictionary = GameMemorySidecar.missing_environment()
	check("a_sidecar_keeps_the_games_own_blas_setting", not chosen.has(name),
			{"missing": chosen})
	if before.is_empty():
		OS.unset_environment(name)
	else:
		OS.set_environment(name, before)
