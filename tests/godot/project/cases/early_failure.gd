extends EngineTest
## A backend that fails as it starts: game code that connects backend_failed in its _ready,
## as docs/godot.md shows, still hears of it.
##
## A child's [code]_ready[/code] runs before its parent's, so an autostarted node that fails
## at once (no sidecar to launch, a malformed server_url) must announce the failure later,
## once the parent has connected, and only once.

## The docs' usage: a parent that connects backend_failed of its GameMemory child in _ready.
const PARENT_SOURCE: String = """extends Node

var failures: Array = []


func _ready() -> void:
	$GameMemory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
"""


func run() -> void:
	await _check_failure_reaches_the_parents_ready("launch_failure", {"server_url": ""},
			GameMemoryError.SIDECAR_FAILED)
	await _check_failure_reaches_the_parents_ready("malformed_url",
			{"server_url": "http://127.0.0.1:9"}, GameMemoryError.CONNECTION_FAILED)
	await _check_a_call_before_the_announcement()
	await _check_a_restart_drops_the_stale_announcement()


func _make_parent(settings: Dictionary) -> Node:
	var script: GDScript = GDScript.new()
	script.source_code = PARENT_SOURCE
	script.reload()
	var parent: Node = Node.new()
	parent.set_script(script)
	var memory: GameMemory = GameMemory.new()
	memory.name = "GameMemory"
	memory.session_id = case_name
	for key: String in settings:
		memory.set(key, settings[key])
	parent.add_child(memory)
	add_child(parent)
	return parent


func _check_failure_reaches_the_parents_ready(label: String, settings: Dictionary,
		code: int) -> void:
	var parent: Node = _make_parent(settings)
	var memory: GameMemory = parent.get_node("GameMemory")
	var failures: Array = parent.get("failures")
	var heard: bool = await wait_until(func() -> bool: return not failures.is_empty(), 2.0)
	await get_tree().process_frame
	check("%s_reaches_backend_failed_connected_in_ready" % label, heard
			and int(failures[0].get("code", 0)) == code, {"failures": failures})
	check("%s_is_announced_once" % label, failures.size() == 1, {"failures": failures})
	if code == GameMemoryError.CONNECTION_FAILED:
		check("a_url_that_is_not_ws_is_named_as_such", not failures.is_empty()
				and str(failures[0].get("message", "")).contains("not a WebSocket URL"),
				{"failures": failures})
	check("%s_leaves_the_node_failed" % label, memory.get_state() == GameMemory.State.FAILED
			and int(memory.get_last_error().get("code", 0)) == code,
			{"state": memory.get_state(), "last_error": memory.get_last_error()})
	parent.queue_free()


func _check_a_call_before_the_announcement() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory({"server_url": "", "autostart": false})
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	memory.start()
	var result: Dictionary = await memory.status()
	check("a_call_made_before_the_announcement_fails_with_the_cause", not result["ok"]
			and code_of(result) == GameMemoryError.SIDECAR_FAILED
			and message_of(result).contains("server_url"), {"result": result})
	check("it_resolves_after_backend_failed_like_a_pending_call", failures.size() == 1,
			{"failures": failures})
	var stopped: Array = []
	memory.start()
	_status_into(memory, stopped)
	memory.stop()
	check("stop_before_the_announcement_resolves_the_held_call", stopped.size() == 1
			and code_of(stopped[0]) == GameMemoryError.SIDECAR_FAILED, {"stopped": stopped})
	await wait_until(func() -> bool: return not failures.is_empty(), 2.0)
	await get_tree().process_frame
	check("backend_failed_still_fires_once_for_it", failures.size() == 1
			and int(failures[0].get("code", 0)) == GameMemoryError.SIDECAR_FAILED,
			{"failures": failures})
	memory.queue_free()


func _check_a_restart_drops_the_stale_announcement() -> void:
	var failures: Array = []
	var memory: GameMemory = make_memory({"server_url": "http://127.0.0.1:9"})
	memory.backend_failed.connect(func(error: Dictionary) -> void: failures.append(error))
	memory.server_url = str(arguments.get("ws-url", ""))
	memory.start()
	check("a_restart_right_after_the_failure_gets_ready", await wait_ready(memory),
			{"state": memory.get_state(), "last_error": memory.get_last_error()})
	await get_tree().process_frame
	check("the_stale_failure_is_not_announced_after_the_restart", failures.is_empty(),
			{"failures": failures})
	memory.queue_free()


func _status_into(memory: GameMemory, into: Array) -> void:
	into.append(await memory.status())
