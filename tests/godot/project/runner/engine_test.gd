class_name EngineTest
extends Node
## Base of the engine test cases: explicit checks, printed as structured lines for pytest.
##
## A case overrides [method run] and calls [method check] for every expectation. Each check
## prints [code]GMTEST {"case", "check", "ok", ...details}[/code]; pytest parses those lines
## and asserts on them. Nothing here may wait without a timeout.

## The case's name (its file name under [code]res://cases/[/code]).
var case_name: String = ""
## The user arguments, [code]--key=value[/code] as [code]{"key": "value"}[/code].
var arguments: Dictionary = {}
## How many checks the case made.
var check_count: int = 0
## How many of them failed.
var failure_count: int = 0


## Parses [code]--key=value[/code] (and bare [code]--flag[/code], as "true") arguments.
static func parse_user_args(raw: PackedStringArray) -> Dictionary:
	var parsed: Dictionary = {}
	for argument: String in raw:
		var text: String = argument.trim_prefix("--")
		var equals: int = text.find("=")
		if equals < 0:
			parsed[text] = "true"
		else:
			parsed[text.left(equals)] = text.substr(equals + 1)
	return parsed


## Prints one structured line: [param tag], a space, then [param record] as JSON (valid JSON
## even when a value holds control characters).
static func emit_line(tag: String, record: Dictionary) -> void:
	print("%s %s" % [tag, GameMemoryJson.stringify(record)])


## Stores the case name and arguments; called by the runner before [method run].
func configure(name_of_case: String, user_arguments: Dictionary) -> void:
	case_name = name_of_case
	arguments = user_arguments


## Runs the case. Override it; it may await.
func run() -> void:
	pass


## Records a check named [param check_name] that passed when [param ok]; [param details]
## are printed with it to explain a failure. Returns [param ok].
func check(check_name: String, ok: bool, details: Dictionary = {}) -> bool:
	check_count += 1
	if not ok:
		failure_count += 1
	var record: Dictionary = {"case": case_name, "check": check_name, "ok": ok}
	for key: Variant in details:
		record[key] = details[key]
	emit_line("GMTEST", record)
	return ok


## Prints an informational line that is not a check (timings, values).
func note(event: String, details: Dictionary = {}) -> void:
	var record: Dictionary = {"case": case_name, "event": event}
	record.merge(details)
	emit_line("GMTEST_NOTE", record)


## Adds a [GameMemory] node connected to the sidecar named by [code]--ws-url[/code] and
## [code]--token[/code], with this case's session; [param settings] override its properties.
func make_memory(settings: Dictionary = {}) -> GameMemory:
	var memory: GameMemory = GameMemory.new()
	memory.server_url = str(arguments.get("ws-url", ""))
	memory.token = str(arguments.get("token", ""))
	memory.session_id = case_name
	memory.request_timeout = 10.0
	memory.startup_timeout = 10.0
	for key: String in settings:
		memory.set(key, settings[key])
	add_child(memory)
	return memory


## Waits until [param memory] is ready; false when it failed or [param seconds] passed.
func wait_ready(memory: GameMemory, seconds: float = 10.0) -> bool:
	var settled: Callable = func() -> bool:
		return memory.get_state() == GameMemory.State.READY \
				or memory.get_state() == GameMemory.State.FAILED
	await wait_until(settled, seconds)
	return memory.is_backend_ready()


## Waits, a frame at a time, until [param condition] returns true. Returns false when
## [param seconds] passed first.
func wait_until(condition: Callable, seconds: float) -> bool:
	var deadline: int = Time.get_ticks_msec() + int(seconds * 1000.0)
	while not condition.call():
		if Time.get_ticks_msec() >= deadline:
			return false
		await get_tree().process_frame
	return true


## Waits [param seconds] of game time.
func wait_seconds(seconds: float) -> void:
	await get_tree().create_timer(seconds, true, false, true).timeout


## Asks pytest to act on the sidecar ([code]GET <harness-url>/control/<action>[/code]) and
## waits for it to have acted. Returns [code]{"ok": bool, "status": int, "body": String}[/code].
func control(action: String) -> Dictionary:
	var http: HTTPRequest = HTTPRequest.new()
	http.timeout = 10.0
	add_child(http)
	var url: String = "%s/control/%s" % [str(arguments.get("harness-url", "")), action]
	var error: Error = http.request(url)
	if error != OK:
		http.queue_free()
		return {"ok": false, "status": 0, "body": "request failed: %s" % error_string(error)}
	var response: Array = await http.request_completed
	http.queue_free()
	var status: int = response[1]
	var body: PackedByteArray = response[3]
	return {"ok": response[0] == HTTPRequest.RESULT_SUCCESS and status == 200,
			"status": status, "body": body.get_string_from_utf8()}


## Returns a game moment on [param timeline].
func moment(tick: int, timeline: String = "main") -> Dictionary:
	return {"timeline_id": timeline, "tick": tick}


## Returns the error code of a failed result, or 0 when it has none.
func code_of(result: Dictionary) -> int:
	var error: Variant = result.get("error")
	return int(error.get("code", 0)) if error is Dictionary else 0


## Returns the error message of a failed result, or "" when it has none.
func message_of(result: Dictionary) -> String:
	var error: Variant = result.get("error")
	return str(error.get("message", "")) if error is Dictionary else ""
