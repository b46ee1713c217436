class_name GameMemorySidecar
extends RefCounted
## Launches and owns one [code]game-memory serve[/code] process (desktop only), polled.
##
## [method launch] starts the sidecar with [method OS.execute_with_pipe] in non-blocking mode.
## [method poll] reads its ready line ([code]{"event": "ready", "url", "token", ...}[/code])
## and emits [signal started], drains its stderr so it never stalls on a full pipe, and notices
## when it exits. The sidecar's stdin stays open while the game runs: if the game dies, the
## pipe closes and the sidecar exits on its own.
## [br][br]
## [method stop] closes stdin, which asks the sidecar to finish the requests it has and exit.
## From then on [GameMemorySidecarReaper] watches it every frame, whoever owned it (a node
## that left the tree or was freed polls nothing), and kills it if it still runs after
## [constant EXIT_GRACE_MSEC]. When the game quits, its last frame waits up to
## [constant GameMemorySidecarReaper.QUIT_WAIT_MSEC] for it, then kills it. The stores are
## crash-safe, so a kill never corrupts a save. Web exports cannot launch processes: there,
## connect to a running sidecar with [member GameMemory.server_url].
## [br][br]
## On Unix, Godot gives the stderr pipe the game's own stdin (descriptor 0) as its write end
## and closes both when the pipe is closed or freed, so the stderr pipe of every launch is
## kept open until the game exits instead (one descriptor per launch).

#region Signals
## Emitted once, when the sidecar printed a valid ready line.
signal started(url: String, token: String)
## Emitted once, when the sidecar could not be launched, was not ready in time, or exited
## while it was expected to run; [param error] is an error dictionary:
## [constant GameMemoryError.SIDECAR_FAILED] before its ready line,
## [constant GameMemoryError.CONNECTION_LOST] after it (the sidecar died while serving).
signal failed(error: Dictionary)
#endregion


#region Enums and constants
## Where the process is in its life; it only moves forward.
enum State {
	IDLE, ## Not launched.
	STARTING, ## Launched; waiting for the ready line.
	RUNNING, ## Ready and serving.
	STOPPING, ## Asked to exit (stdin closed); killed if it does not within the grace period.
	EXITED, ## Gone (exited, killed or never started).
}

## The bridge protocol version this addon speaks; a ready line with another is refused.
const PROTOCOL_VERSION: int = 1
## How long a stopped sidecar gets to exit cleanly before it is killed, in milliseconds.
const EXIT_GRACE_MSEC: int = 3000
## The most bytes of stdout read while waiting for the ready line.
const READY_OUTPUT_MAX_BYTES: int = 65536
## How much of the sidecar's stderr is kept for error messages, in bytes.
const STDERR_TAIL_BYTES: int = 4096
## Environment variables the sidecar is launched with, where the game's environment does not
## set them: numpy's BLAS runs one thread (a second one would spin between the recalls'
## products, taking a core from the game, for no faster answer). The frozen sidecar a game
## ships sets the same itself; this covers a [code]game-memory[/code] installed with pip.
const LAUNCH_ENVIRONMENT: Dictionary = {"OPENBLAS_NUM_THREADS": "1"}
#endregion


#region Static variables
# Every stderr pipe ever opened: freeing one would close the game's stdin (see the class doc).
static var _kept_pipes: Array[FileAccess] = []
#endregion


#region Private variables
var _state: State = State.IDLE
var _pid: int = -1
var _stdio: FileAccess = null
var _stderr: FileAccess = null
var _stdout_buffer: PackedByteArray = PackedByteArray()
var _stderr_tail: PackedByteArray = PackedByteArray()
var _command: String = ""
var _ready_deadline_msec: int = 0
var _ready_timeout_seconds: float = 0.0
var _kill_at_msec: int = 0
#endregion


#region Public methods
## Parses one line of the sidecar's stdout. Returns [code]{"ok": true, "url", "token"}[/code]
## for a valid ready line, else a failed result that says what is wrong with it.
static func parse_ready_line(line: String) -> Dictionary:
	var json: JSON = JSON.new()
	if json.parse(line.strip_edges()) != OK or not json.data is Dictionary:
		return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED,
				"the sidecar's first line is not JSON: %s" % line.strip_edges().left(200))
	var ready: Dictionary = json.data
	if ready.get("event") != "ready":
		return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED,
				"the sidecar printed %s instead of its ready line" % line.strip_edges().left(200))
	var version: Variant = ready.get("protocol_version")
	if not (version is int or version is float) or int(version) != PROTOCOL_VERSION:
		var shown: String = str(int(version)) if version is int or version is float \
				else JSON.stringify(version)
		return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED,
				"the sidecar speaks protocol version %s, this addon speaks %d; install the "
				% [shown, PROTOCOL_VERSION] + "game-memory version that matches the addon")
	var url: Variant = ready.get("url")
	var token: Variant = ready.get("token")
	if not url is String or not str(url).begins_with("ws://") or not token is String:
		return GameMemoryError.failure(GameMemoryError.SIDECAR_FAILED,
				"the sidecar's ready line has no ws:// url and token: %s" % line.left(200))
	return {"ok": true, "url": url, "token": token}


## Returns the command line arguments that start a WebSocket sidecar on a free loopback port.
## [param prefix] comes first (e.g. [code]["-m", "game_memory.cli"][/code] when the command
## is a Python interpreter); [param save_directory] and [param index_directory] may be
## [code]user://[/code] paths: they are passed as absolute paths.
static func build_arguments(prefix: PackedStringArray, save_directory: String,
		index_directory: String, model: String) -> PackedStringArray:
	var arguments: PackedStringArray = prefix.duplicate()
	arguments.append_array(PackedStringArray([
		"serve",
		"--websocket", "127.0.0.1:0",
		"--save-dir", ProjectSettings.globalize_path(save_directory),
		"--index-dir", ProjectSettings.globalize_path(index_directory),
		"--model", model,
	]))
	return arguments


## Returns the variables of [constant LAUNCH_ENVIRONMENT] this process's environment does
## not set, with their values: what [method launch] sets before it starts the sidecar (a
## child inherits the environment; Godot itself reads none of them).
static func missing_environment() -> Dictionary:
	var missing: Dictionary = {}
	for name: String in LAUNCH_ENVIRONMENT:
		if not OS.has_environment(name):
			missing[name] = LAUNCH_ENVIRONMENT[name]
	return missing


## Returns the sidecar arguments of the retention policy: at most [param bound] memories per
## NPC (none when [param bound] is 0 or less: the policy is off).
static func retention_arguments(bound: int) -> PackedStringArray:
	if bound <= 0:
		return PackedStringArray()
	return PackedStringArray(["--maximum-memories-per-owner", str(bound)])


## Returns the sidecar arguments of the save's store-wide bound: at most [param bound]
## memories in the whole save (none when [param bound] is 0 or less: the sidecar's default).
static func capacity_arguments(bound: int) -> PackedStringArray:
	if bound <= 0:
		return PackedStringArray()
	return PackedStringArray(["--maximum-entries", str(bound)])


## Returns the sidecar arguments that select the fusion [param mode] (empty: the default) and
## set the fusion and reranker options of [param options]
## ([code]{"fusion": {...}, "reranker": {...}}[/code]) by name.
static func recall_arguments(mode: String, options: Dictionary) -> PackedStringArray:
	var arguments: PackedStringArray = PackedStringArray()
	if not mode.is_empty():
		arguments.append_array(PackedStringArray(["--fusion", mode]))
	for group: String in ["fusion", "reranker"]:
		var values: Variant = options.get(group, {})
		if not values is Dictionary:
			continue
		var names: Array = values.keys()
		names.sort()
		for name: Variant in names:
			arguments.append_array(PackedStringArray([
				"--%s-option" % group, "%s=%s" % [name, JSON.stringify(values[name])],
			]))
	return arguments


## Returns where the process is in its life.
func get_state() -> State:
	return _state


## Returns the process id, or -1 when nothing was launched.
func get_pid() -> int:
	return _pid


## Returns the last few KiB the sidecar wrote to stderr, for error messages.
func get_stderr_tail() -> String:
	return _stderr_tail.get_string_from_utf8()


## Launches [param command] with [param arguments]. It must print its ready line within
## [param timeout_seconds]; [signal started] or [signal failed] follows from [method poll]
## (or at once, when the process cannot be started at all). The variables of
## [method missing_environment] are set first, so that the sidecar inherits them.
func launch(command: String, arguments: PackedStringArray, timeout_seconds: float) -> void:
	if _state != State.IDLE:
		return
	_command = command
	var problem: String = _start_process(command, arguments)
	if not problem.is_empty():
		_fail(GameMemoryError.SIDECAR_FAILED, problem)
		return
	_ready_timeout_seconds = timeout_seconds
	_ready_deadline_msec = Time.get_ticks_msec() + maxi(1, int(timeout_seconds * 1000.0))
	_state = State.STARTING


## Does the launcher's work for this frame: reads output, notices a ready line or an exit,
## and kills a stopping sidecar whose grace period is over. Never blocks.
func poll() -> void:
	if _state == State.IDLE or _state == State.EXITED:
		return
	# Check liveness first: once it is gone, everything it wrote is already in the pipes.
	var running: bool = _is_running()
	_drain_stderr()
	if _state == State.STARTING:
		_read_ready_line()
		if _state == State.STARTING and not running:
			_fail(GameMemoryError.SIDECAR_FAILED, "`%s` exited (status %d) before it was ready; "
					% [_command, _exit_code()] + "is game-memory installed? Set "
					+ "GameMemory.sidecar_command to its full path if it is not on the PATH. "
					+ "Its stderr: %s" % _stderr_summary())
		elif _state == State.STARTING and Time.get_ticks_msec() >= _ready_deadline_msec:
			_fail(GameMemoryError.SIDECAR_FAILED, "`%s` printed no ready line within %.1f s; "
					% [_command, _ready_timeout_seconds] + "raise GameMemory.startup_timeout or "
					+ "check: %s" % _stderr_summary())
	elif _state == State.RUNNING:
		_discard_stdout()
		if not running:
			# It died while serving: to its pending calls, the connection is lost.
			_fail(GameMemoryError.CONNECTION_LOST, "the game-memory sidecar exited (status %d) "
					% _exit_code() + "while serving; call GameMemory.start() to launch it "
					+ "again. Its stderr: %s" % _stderr_summary())
	elif _state == State.STOPPING:
		if not running:
			_release()
		elif Time.get_ticks_msec() >= _kill_at_msec:
			kill()


## Asks the sidecar to finish what it has and exit, by closing its stdin, and hands it to
## [GameMemorySidecarReaper], which polls it every frame from then on (its owner need not):
## it is killed if it still runs after [constant EXIT_GRACE_MSEC], or after
## [constant GameMemorySidecarReaper.QUIT_WAIT_MSEC] of the game's last frame when the game
## quits first. Does nothing unless it was launched and is not stopping or gone. Emits
## nothing.
func stop() -> void:
	if _state == State.IDLE or _state == State.EXITED or _state == State.STOPPING:
		return
	_state = State.STOPPING
	_kill_at_msec = Time.get_ticks_msec() + EXIT_GRACE_MSEC
	_close_stdin()
	GameMemorySidecarReaper.watch(self)


## Kills the sidecar at once if it is still running and releases its pipes. Emits nothing.
func kill() -> void:
	if _pid > 0 and _is_running():
		_kill_process()
	_release()
#endregion


#region Private methods
# The process operations below are the only ones that touch the OS, so that the engine tests
# can stand in a fake process (the web runtime launches none).

# Starts the process with its pipes; returns why it could not, or "".
func _start_process(command: String, arguments: PackedStringArray) -> String:
	if OS.has_feature("web"):
		return "a web export cannot launch the game-memory sidecar; run `game-memory serve " \
				+ "--websocket 127.0.0.1:PORT` yourself and set GameMemory.server_url and token"
	var missing: Dictionary = missing_environment()
	for name: String in missing:
		OS.set_environment(name, missing[name])
	# On Unix a missing command still forks (the child fails in execvp), so that case shows up
	# in poll() as an exit before the ready line; an empty result means no fork at all.
	var pipes: Dictionary = OS.execute_with_pipe(command, arguments, false)
	if pipes.is_empty():
		return "could not start `%s`: is game-memory installed? Set " % command \
				+ "GameMemory.sidecar_command to the full path of the game-memory executable"
	_pid = int(pipes.get("pid", -1))
	_stdio = pipes.get("stdio")
	_stderr = pipes.get("stderr")
	if _stderr != null:
		_kept_pipes.append(_stderr) # never closed nor freed: see the class doc
	return ""


func _is_running() -> bool:
	return OS.is_process_running(_pid)


func _exit_code() -> int:
	return OS.get_process_exit_code(_pid)


func _kill_process() -> void:
	OS.kill(_pid)


func _close_stdin() -> void:
	if _stdio != null:
		_stdio.close()
		_stdio = null


# Returns what the process wrote to stdout since the last call.
func _read_stdout() -> PackedByteArray:
	if _stdio == null:
		return PackedByteArray()
	var available: int = _stdio.get_length()
	return _stdio.get_buffer(available) if available > 0 else PackedByteArray()


func _read_ready_line() -> void:
	_stdout_buffer.append_array(_read_stdout())
	var newline: int = _stdout_buffer.find(10)
	while newline >= 0 and _state == State.STARTING:
		var line: String = _stdout_buffer.slice(0, newline).get_string_from_utf8()
		_stdout_buffer = _stdout_buffer.slice(newline + 1)
		newline = _stdout_buffer.find(10)
		if line.strip_edges().is_empty() or not line.strip_edges().begins_with("{"):
			continue # Tolerate stray output (a warning from the interpreter) before the line.
		var ready: Dictionary = parse_ready_line(line)
		if not ready["ok"]:
			_fail(GameMemoryError.SIDECAR_FAILED, str(ready["error"]["message"]))
			return
		_state = State.RUNNING
		_stdout_buffer.clear()
		started.emit(str(ready["url"]), str(ready["token"]))
		return
	if _stdout_buffer.size() > READY_OUTPUT_MAX_BYTES:
		_fail(GameMemoryError.SIDECAR_FAILED, "`%s` wrote %d bytes without a ready line; is "
				% [_command, _stdout_buffer.size()] + "sidecar_command really game-memory?")


func _discard_stdout() -> void:
	_read_stdout()


func _drain_stderr() -> void:
	if _stderr == null:
		return
	var available: int = _stderr.get_length()
	if available <= 0:
		return
	_stderr_tail.append_array(_stderr.get_buffer(available))
	if _stderr_tail.size() > STDERR_TAIL_BYTES:
		_stderr_tail = _stderr_tail.slice(_stderr_tail.size() - STDERR_TAIL_BYTES)


func _stderr_summary() -> String:
	var text: String = get_stderr_tail().strip_edges()
	return text.right(600) if not text.is_empty() else "it wrote nothing to stderr"


func _fail(code: int, message: String) -> void:
	kill()
	failed.emit(GameMemoryError.make(code, message))


func _release() -> void:
	_state = State.EXITED
	_close_stdin()
	_stderr = null # still open, in _kept_pipes
#endregion
